//! One-rank launches of vLLM 0.33.0 and later (the fake vLLM, installed
//! with its `vllm-0.33.0.dist-info` so keepwrap reads its version): their
//! tactics are in FlashInfer's managed store, which keepwrap keeps per
//! launch in a root of its own, set for the engine through
//! `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`.

use crate::common;
use serde_json::json;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::vllm::{kw_vllm, until_outcome, DEADLINE};
use common::{Finished, Running};
use nix::sys::signal::Signal;

/// `home/site`: the fake `vllm` package with the metadata of vLLM 0.33.0
/// beside it, as pip installs it; the PYTHONPATH that finds it first.
pub(crate) fn installed(home: &Path) -> String {
    let site = home.join("site");
    let info = site.join("vllm-0.33.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n",
    )
    .unwrap();
    let link = site.join("vllm");
    if !link.exists() {
        std::os::unix::fs::symlink(common::repo().join("tests/fixtures/engines/vllm"), &link)
            .unwrap();
    }
    format!(
        "{}:{}",
        site.display(),
        common::repo().join("tests/fixtures/engines").display()
    )
}

/// One server boot of `vllm serve /models/fake-moe ARGS` (one rank) on a
/// free port, with the fake installed: wait for the outcome line, then TERM.
pub(crate) fn serve(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    serve_kw(home, &[], args, env)
}

/// [`serve`] as `keepwrap KW -- vllm serve ...`.
pub(crate) fn serve_kw(home: &Path, kw: &[&str], args: &[&str], env: &[(&str, &str)]) -> Finished {
    serve_until(home, kw, args, env, &[])
}

/// [`serve_kw`], stopped only once one of `events` was logged too.
pub(crate) fn serve_until(
    home: &Path,
    kw: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    events: &[&str],
) -> Finished {
    let path = installed(home);
    let port = common::free_port().to_string();
    let mut all = vec!["--port", &port];
    all.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("PYTHONPATH", &path));
    let mut r = Running::spawn(&mut kw_vllm(home, kw, &all, &env));
    if !events.is_empty() {
        r.wait_any_event(events, DEADLINE);
    }
    until_outcome(r)
}

/// [`serve`] of a launch keepwrap only supervises, which logs no outcome:
/// until the engine is ready.
pub(crate) fn serve_supervised(home: &Path, env: &[(&str, &str)]) -> Finished {
    let path = installed(home);
    let port = common::free_port().to_string();
    let mut env = env.to_vec();
    env.push(("PYTHONPATH", &path));
    common::vllm::until_ready(Running::spawn(&mut kw_vllm(
        home,
        &[],
        &["--port", &port],
        &env,
    )))
}

/// A server boot of `vllm serve ... ARGS` under keepwrap, once the engine
/// has written its first entry (its path).
fn started(home: &Path, args: &[&str]) -> (Running, PathBuf) {
    let path = installed(home);
    let port = common::free_port().to_string();
    let mut all = vec!["--port", port.as_str()];
    all.extend_from_slice(args);
    let r = Running::spawn(&mut kw_vllm(home, &[], &all, &[("PYTHONPATH", &path)]));
    let root = store_root(home);
    let first = common::wait_for("the first entry in the store", DEADLINE, || {
        entries(&root).into_keys().next()
    });
    (r, first)
}

/// keepwrap's store root for one-rank launches under `home`.
pub(crate) fn store_root(home: &Path) -> PathBuf {
    home.join(".cache/vllm/keepwrap-flashinfer-store")
}

/// Every entry file of the store below `root` (its path absolute), with
/// its bytes.
pub(crate) fn entries(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(envs) = std::fs::read_dir(root.join("v2")) else {
        return out;
    };
    for env in envs.flatten() {
        let Ok(files) = std::fs::read_dir(env.path().join("entries")) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "json") {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_one_rank_launch_keeps_its_store_in_a_root_of_its_own_and_boot_two_tunes_nothing() {
    let home = common::home();
    let cold = serve(home.path(), &[], &[]);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    let root = store_root(home.path());
    assert!(
        cold.logged_with(
            "managed_store_kept",
            json!({"store": root.join("v2"), "var": "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"})
        ),
        "{}",
        cold.stderr
    );
    let tuned = entries(&root);
    common::assert_cold_store(&cold, &root, tuned.len());
    // FlashInfer's own default store, shared by every launch, is untouched
    assert!(!home.path().join(".cache/flashinfer").exists());

    let warm = serve(home.path(), &[], &[]);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(
        warm.logged_with("reused", json!({"files": tuned.len()})),
        "{}",
        warm.stderr
    );
    assert_eq!(entries(&root), tuned);
}

#[test]
fn a_b_a_gives_back_the_first_launchs_tactics_byte_for_byte() {
    let home = common::home();
    let root = store_root(home.path());
    let a = serve(home.path(), &[], &[]);
    assert!(a.has_event("signed"), "{}", a.stderr);
    let first = entries(&root);
    // another launch: same shapes, so the engine would rewrite the same
    // entries with its own tactics
    let b = serve(home.path(), &["--max-model-len", "4096"], &[]);
    assert!(b.has_event("signed"), "{}", b.stderr);
    assert_eq!(b.tuned(), a.tuned(), "{:#?}", b.stdout);
    assert_ne!(entries(&root), first, "B tuned its own tactics");
    let again = serve(home.path(), &[], &[]);
    assert_eq!(again.tuned(), 0, "{:#?}", again.stdout);
    assert!(again.has_event("reused"), "{}", again.stderr);
    assert_eq!(entries(&root), first);
}

#[test]
fn an_edited_entry_is_never_loaded_and_a_line_names_it() {
    let home = common::home();
    let root = store_root(home.path());
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let tuned = entries(&root);
    let (path, bytes) = tuned.iter().next().unwrap();
    let mut entry: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    entry["tactic"] = json!(["planted", 0]);
    std::fs::write(path, serde_json::to_vec_pretty(&entry).unwrap()).unwrap();
    let next = serve(home.path(), &[], &[]);
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(common::removed_as_changed(&next, name), "{}", next.stderr);
    // the whole set is distrusted: every shape tuned afresh
    assert_eq!(next.tuned(), cold.tuned(), "{:#?}", next.stdout);
    assert!(next.has_event("signed"), "{}", next.stderr);
    let after = entries(&root);
    assert!(
        !after
            .values()
            .any(|b| String::from_utf8_lossy(b).contains("planted")),
        "{after:?}"
    );
}

#[test]
fn an_environment_directory_whose_manifest_was_edited_is_never_trusted() {
    let home = common::home();
    let root = store_root(home.path());
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let env_dir = entries(&root)
        .keys()
        .next()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let manifest = env_dir.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["gpu"] = json!("another GPU");
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let next = serve(home.path(), &[], &[]);
    let untrusted = common::events_named(&next.stderr, "untrusted_store_entry");
    assert_eq!(untrusted.len(), 1, "{}", next.stderr);
    let env16 = env_dir.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        untrusted[0]["path"],
        format!("v2/{env16}/"),
        "{}",
        next.stderr
    );
    assert!(
        next.logged_with("untrusted_store_removed", json!({"files": cold.tuned()})),
        "{}",
        next.stderr
    );
    assert_eq!(next.tuned(), cold.tuned(), "{:#?}", next.stdout);
}

#[test]
fn sigkill_mid_tune_signs_nothing() {
    let home = common::home();
    let root = store_root(home.path());
    let (r, _) = started(home.path(), &["--tune-ms", "300"]);
    common::sigkill_with_children(r.guard.pid().as_raw());
    let f = r.finish(DEADLINE);
    assert_eq!(f.code, 128 + 9);
    common::wait_until_nothing_holds(&root, DEADLINE);
    assert!(common::sidecars(&root).is_empty());
    let next = serve(home.path(), &[], &[]);
    assert!(next.tuned() > 0, "{:#?}", next.stdout);
    assert!(next.has_event("signed"), "{}", next.stderr);
    let warm = serve(home.path(), &[], &[]);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}

/// The launch names its own store: left alone, and the launch only
/// supervised (its engine writes nothing else keepwrap keeps).
#[test]
fn a_store_the_user_names_is_left_alone_and_a_line_says_why() {
    let home = common::home();
    let mine = home.path().join("mine");
    let cold = serve_supervised(
        home.path(),
        &[("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", mine.to_str().unwrap())],
    );
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    let line = cold.event("managed_store");
    assert!(
        line["why"]
            .as_str()
            .unwrap()
            .starts_with("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR is set for the engine"),
        "{}",
        cold.stderr
    );
    assert!(
        !entries(&mine).is_empty(),
        "the engine wrote where the user said"
    );
    assert!(common::sidecars(&mine.join("v2")).is_empty());
    assert!(!store_root(home.path()).exists());
    for e in ["launch", "pruned", "signed", "reused"] {
        assert!(!cold.has_event(e), "{e}: {}", cold.stderr);
    }
    assert!(!mine.join(".keepwrap").exists(), "nothing of keepwrap's");
}

#[test]
fn a_launch_that_drops_the_variable_is_only_supervised() {
    let home = common::home();
    let path = installed(home.path());
    let port = common::free_port().to_string();
    let mut cmd = common::vllm::kw_cmd(
        home.path(),
        &[],
        &[
            "env",
            "-u",
            "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
            "vllm",
            "serve",
            "/models/fake-moe",
            "--tune-ms",
            "2",
            "--port",
            &port,
        ],
        &[("PYTHONPATH", &path)],
    );
    let r = Running::spawn(&mut cmd);
    common::wait_for("the supervising line", DEADLINE, || {
        r.log_events()
            .iter()
            .any(|e| e["code"] == "supervising_only")
            .then_some(())
    });
    r.guard.signal(Signal::SIGTERM);
    let f = r.finish(DEADLINE);
    let line = f.event("supervising_only");
    assert_eq!(line["reason"], "engine_variable", "{}", f.stderr);
    assert!(
        line["why"]
            .as_str()
            .unwrap()
            .contains("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"),
        "{}",
        f.stderr
    );
    assert!(!store_root(home.path()).exists());
}

/// Two pods with no file system in common, the fleet's bucket between
/// them: the second boots warm with the first one's entries, byte for byte.
/// The set names the GPU it was tuned on by its environment's
/// `manifest.json` (the entries carry no stamp of their own).
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_second_pod_with_no_shared_file_system_boots_warm_from_the_bucket() {
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = crate::fleet::Bucket::new(&ep);
    let url = bucket.url();
    // the first pod is stopped once its publication is done
    let pod = |home: &Path, until: &[&str]| fleet_pod(home, &ep, &url, &[], &[], until);
    let (h1, h2) = (common::home(), common::home());
    let first = pod(h1.path(), &["fleet_published", "fleet_publish_failed"]);
    assert!(first.tuned() > 0, "{:#?}", first.stdout);
    assert!(first.has_event("fleet_published"), "{}", first.stderr);
    let second = pod(h2.path(), &[]);
    assert!(second.has_event("fleet_restored"), "{}", second.stderr);
    assert_eq!(second.tuned(), 0, "{:#?}", second.stdout);
    assert!(second.has_event("reused"), "{}", second.stderr);
    assert_eq!(
        relative(store_root(h2.path())),
        relative(store_root(h1.path()))
    );
}

/// The entries of the store below `root`, by their path below it.
#[cfg(feature = "failpoints")]
pub(crate) fn relative(root: PathBuf) -> BTreeMap<PathBuf, Vec<u8>> {
    entries(&root)
        .into_iter()
        .map(|(p, b)| (p.strip_prefix(&root).unwrap().to_path_buf(), b))
        .collect()
}

/// One pod's boot ([`serve_until`]) with the fleet's bucket `url` at the
/// S3 endpoint `ep`, a GB10 as its GPU, `kw` and `env` beside.
#[cfg(feature = "failpoints")]
pub(crate) fn fleet_pod(
    home: &Path,
    ep: &str,
    url: &str,
    kw: &[&str],
    env: &[(&str, &str)],
    until: &[&str],
) -> common::Finished {
    let gpus = crate::fleet::gpus(home, "NVIDIA GB10");
    let gpus = gpus.to_str().unwrap().to_string();
    let mut all = vec!["--fleet", url, "--fleet-timeout", "10s"];
    all.extend_from_slice(kw);
    let mut env = env.to_vec();
    env.extend([
        ("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", gpus.as_str()),
        ("AWS_ENDPOINT_URL", ep),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]);
    serve_until(home, &all, &[], &env, until)
}

#[test]
fn an_entry_planted_during_the_boot_that_flashinfer_did_not_write_is_never_signed() {
    let home = common::home();
    let root = store_root(home.path());
    let (r, first) = started(home.path(), &["--ready-delay-ms", "1500"]);
    // a JSON object with a key, a runner and a tactic, under a name that
    // is not the hash of its key
    let planted = first.with_file_name("0123456789abcdef01234567.json");
    std::fs::write(
        &planted,
        r#"{"key": "planted", "runner": "r", "tactic": [0]}"#,
    )
    .unwrap();
    let f = until_outcome(r);
    assert!(!f.has_event("signed"), "{}", f.stderr);
    let line = f.event("not_signed");
    assert!(
        line["path"]
            .as_str()
            .unwrap()
            .ends_with("0123456789abcdef01234567.json"),
        "{}",
        f.stderr
    );
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .starts_with("named 0123456789abcdef01234567, not the hash of its key"),
        "{}",
        f.stderr
    );
    assert!(f.has_event("dir_not_signed"), "{}", f.stderr);
    assert!(common::sidecars(&root).is_empty());
}

/// A launch whose engine runs in a directory relative to keepwrap's (`env
/// -C sub`) with a relative `VLLM_CACHE_ROOT`: the store root keepwrap
/// gives the engine is the one it keeps (absolute, so the engine, which
/// reads it from its own directory, writes there), and boot 2 reuses it.
#[test]
fn a_relative_store_root_under_a_relative_engine_directory_is_the_one_kept() {
    let home = common::home();
    std::fs::create_dir(home.path().join("sub")).unwrap();
    let path = installed(home.path());
    let boot = || {
        let port = common::free_port().to_string();
        let command = [
            "env",
            "-C",
            "sub",
            "vllm",
            "serve",
            "/models/fake-moe",
            "--tune-ms",
            "2",
            "--port",
            &port,
        ];
        let env = [("PYTHONPATH", path.as_str()), ("VLLM_CACHE_ROOT", "rel")];
        let mut cmd = common::vllm::kw_cmd(home.path(), &[], &command, &env);
        cmd.current_dir(home.path());
        until_outcome(Running::spawn(&mut cmd))
    };
    let cold = boot();
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let kept = home.path().join("sub/rel/keepwrap-flashinfer-store");
    assert!(
        cold.logged_with("managed_store_kept", json!({"store": kept.join("v2")})),
        "{}",
        cold.stderr
    );
    assert!(!entries(&kept).is_empty());
    assert!(!home.path().join("sub/sub").exists());
    let warm = boot();
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}
