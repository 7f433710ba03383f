//! Attacks on the keeping of FlashInfer's managed store for one-rank vLLM
//! launches (the fake vLLM 0.33.0, one rank): a manifest keepwrap
//! distrusts, the maintenance commands on the store's root, a relative
//! `--cache-dir` under a launch that changes directory, keepwrap's own
//! root named by the user, a launch that goes on hands-off beside another,
//! a launch script.

use crate::common;
use crate::vllm_store::{entries, installed, serve, serve_supervised, store_root};
use serde_json::json;

use std::path::Path;

use common::vllm::{kw_cmd, kw_vllm, until_outcome, DEADLINE};
use common::{Finished, Running};
use nix::sys::signal::Signal;

/// The environment directory of the store below `root` (the one the fake
/// writes on this machine).
fn env_dir(root: &Path) -> std::path::PathBuf {
    entries(root)
        .keys()
        .next()
        .expect("an entry in the store")
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `keepwrap ARGS` (a maintenance command) in `home`, to its end.
fn maintenance(home: &Path, args: &[&str]) -> Finished {
    let mut cmd = common::vllm::hermetic(home);
    cmd.args(args);
    common::output(&mut cmd)
}

/// FlashInfer writes `manifest.json` only when it is missing and never
/// reads it back. keepwrap distrusts a set whose environment directory is
/// not named by the hash of its manifest and removes the entries: the
/// manifest must go too, or FlashInfer would never rewrite it, and every
/// later boot would find it again, remove what the last boot signed, and
/// tune again, for ever.
#[test]
fn a_manifest_once_distrusted_does_not_make_every_later_boot_cold() {
    let home = common::home();
    let root = store_root(home.path());
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let manifest = env_dir(&root).join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["gpu"] = json!("another GPU");
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let distrusted = serve(home.path(), &[], &[]);
    assert!(
        distrusted.has_event("untrusted_store_removed"),
        "{}",
        distrusted.stderr
    );
    assert!(distrusted.has_event("signed"), "{}", distrusted.stderr);
    // the set this boot signed is the engine's own: the next boot reuses it
    let third = serve(home.path(), &[], &[]);
    assert!(
        !third.has_event("untrusted_store_removed"),
        "the set signed by the last boot was thrown away again:\n{}",
        third.stderr
    );
    assert_eq!(third.tuned(), 0, "{:#?}", third.stdout);
    assert!(third.has_event("reused"), "{}", third.stderr);
}

/// `keepwrap status --cache-dir ROOT` (no command) lists every file of the
/// tree the root holds: on the store's root, its signed entries (the
/// default profile's tree is SGLang's, which has none of them).
#[test]
fn status_of_the_store_root_without_a_command_lists_its_signed_entries() {
    let home = common::home();
    let root = store_root(home.path());
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let signed = entries(&root);
    let status = maintenance(
        home.path(),
        &["status", "--cache-dir", root.to_str().unwrap()],
    );
    assert_eq!(status.code, 0, "{}", status.stderr);
    let text = status.stdout.join("\n");
    for path in signed.keys() {
        let rel = path.strip_prefix(&root).unwrap().to_str().unwrap();
        assert!(text.contains(rel), "{rel} not listed:\n{text}");
    }
}

/// `keepwrap evict --all --cache-dir ROOT` on the store's root: another
/// launch's stored set is evicted, and that launch tunes afresh (a stored
/// set is judged by the tree it is laid out for, whatever the default
/// engine's).
#[test]
fn evict_all_on_the_store_root_evicts_another_launchs_stored_set() {
    evict_all_evicts_another_launchs_stored_set(|root| {
        vec!["evict", "--all", "--cache-dir", root.to_str().unwrap()]
    });
}

/// `keepwrap evict --all` with no `--cache-dir` acts on the default roots,
/// keepwrap's root of the managed store among them: another launch's
/// stored set is evicted there.
#[test]
fn evict_all_without_a_cache_dir_sees_the_store_root() {
    evict_all_evicts_another_launchs_stored_set(|_| vec!["evict", "--all"]);
}

/// Launches A then B keep their stores; `keepwrap ARGS(store root)` evicts
/// A's stored set (one line says so), B's in place stays, and A tunes
/// afresh.
fn evict_all_evicts_another_launchs_stored_set(args: impl Fn(&Path) -> Vec<&str>) {
    let home = common::home();
    let root = store_root(home.path());
    let a = serve(home.path(), &[], &[]);
    assert!(a.has_event("signed"), "{}", a.stderr);
    let b = serve(home.path(), &["--max-model-len", "4096"], &[]);
    assert!(b.has_event("signed"), "{}", b.stderr);
    let evict = maintenance(home.path(), &args(&root));
    assert_eq!(evict.code, 0, "{}", evict.stderr);
    assert!(
        common::events_named(&evict.stderr, "state_file_ignored").is_empty(),
        "{}",
        evict.stderr
    );
    assert!(
        evict.stdout.join("\n").contains("evicted 1 stored set"),
        "{:#?}\n{}",
        evict.stdout,
        evict.stderr
    );
    assert!(!entries(&root).is_empty(), "the set in place (B's) is left");
    let again = serve(home.path(), &[], &[]);
    assert!(!again.has_event("restored"), "{}", again.stderr);
    assert_eq!(again.tuned(), a.tuned(), "{:#?}", again.stdout);
}

/// A relative `--cache-dir` is keepwrap's, relative to keepwrap's working
/// directory, for every launch: for a one-rank launch that changes
/// directory (`env -C DIR`) too, never below the engine's DIR (outside the
/// directory the user gave: a mounted volume, say).
#[test]
fn a_relative_cache_dir_is_keepwraps_own_when_the_launch_changes_directory() {
    let home = common::home();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let path = installed(home.path());
    let port = common::free_port().to_string();
    let mut cmd = kw_cmd(
        home.path(),
        &["--cache-dir", "kept"],
        &[
            "env",
            "-C",
            work.to_str().unwrap(),
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
    cmd.current_dir(home.path());
    let f = until_outcome(Running::spawn(&mut cmd));
    assert!(f.has_event("signed"), "{}", f.stderr);
    let want = home.path().join("kept");
    assert_eq!(f.event("launch")["root"], json!(want), "{}", f.stderr);
    assert!(!entries(&want).is_empty(), "the store is in ./kept");
    assert!(
        !work.join("kept").exists(),
        "nothing below the engine's DIR"
    );
}

/// A user who names keepwrap's own store root for the engine, spelled as
/// vLLM reads it (`~` expanded by the engine), gets it kept as if unset,
/// never "left alone" and then pruned as a rank-file tree with lines saying
/// the launch's files "were removed or are gone" while the engine reuses
/// all of them.
#[test]
fn keepwraps_own_root_named_with_a_tilde_is_kept_as_its_own() {
    let home = common::home();
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let warm = serve(
        home.path(),
        &[],
        &[(
            "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
            "~/.cache/vllm/keepwrap-flashinfer-store",
        )],
    );
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(!warm.has_event("no_cache"), "{}", warm.stderr);
    assert!(warm.has_event("managed_store_kept"), "{}", warm.stderr);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}

/// A store the user names is left alone: then keepwrap has nothing to say
/// of what the engine wrote there, least of all that it wrote nothing. The
/// launch is only supervised: no launch line, nothing pruned or watched.
#[test]
fn a_store_the_user_names_is_never_said_to_be_empty() {
    let home = common::home();
    let mine = home.path().join("mine");
    let cold = serve_supervised(
        home.path(),
        &[("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", mine.to_str().unwrap())],
    );
    assert!(cold.has_event("managed_store"), "{}", cold.stderr);
    assert!(!entries(&mine).is_empty(), "the engine wrote its store");
    for e in ["launch", "pruned", "nothing_to_keep"] {
        assert!(!cold.has_event(e), "{e}: {}", cold.stderr);
    }
}

/// Two different one-rank launches on one host share keepwrap's store
/// root. The second, once it gave up waiting for the first to finish
/// tuning, goes on hands-off: its engine must not be given that root, or
/// it would load the first launch's tactics, tuned for another launch and
/// still being written. (With rank files, another launch's files are in a
/// folder of their own, which its engine never reads.)
#[test]
fn a_hands_off_launch_never_loads_another_launchs_entries() {
    let home = common::home();
    let path = installed(home.path());
    let env = [("PYTHONPATH", path.as_str())];
    let port_a = common::free_port().to_string();
    let mut a = Running::spawn(&mut kw_vllm(
        home.path(),
        &[],
        &["--port", &port_a, "--tune-ms", "300"],
        &env,
    ));
    let root = store_root(home.path());
    common::wait_for("A's first entry", DEADLINE, || {
        entries(&root).into_keys().next()
    });
    let port_b = common::free_port().to_string();
    let mut b = Running::spawn(&mut kw_vllm(
        home.path(),
        &["--wait-for-tuning", "1s"],
        &["--port", &port_b, "--max-model-len", "4096"],
        &env,
    ));
    b.wait_event("gave_up_waiting", DEADLINE);
    let pass = b.wait_stdout("B's engine's autotune pass", DEADLINE, |l| {
        l.contains("\"event\": \"pass\"")
    });
    a.wait_any_event(&["signed", "not_signing_other_launch"], DEADLINE);
    b.guard.signal(Signal::SIGTERM);
    a.guard.signal(Signal::SIGTERM);
    let (b, _) = (b.finish(DEADLINE), a.finish(DEADLINE));
    let pass: serde_json::Value = serde_json::from_str(&pass).unwrap();
    assert_eq!(pass["hit"], 0, "B loaded A's entries: {pass}\n{}", b.stderr);
}

/// A launch script kept with `--keep always --profile vllm`: keepwrap
/// cannot read its world size, so it keeps vLLM's rank-file root. A
/// one-rank vLLM 0.33 in it writes FlashInfer's store instead, which
/// nothing keeps: one line says so at the launch (not `managed_store`,
/// which tells a boot only supervised: the script's rank files, if it
/// writes any, are kept and signed).
#[test]
fn a_launch_script_says_whether_its_managed_store_is_kept() {
    let home = common::home();
    let port = common::free_port().to_string();
    let script = home.path().join("serve.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec vllm serve /models/fake-moe --tune-ms 2 --port {port}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let health = format!("health=http://127.0.0.1:{port}/health");
    let path = installed(home.path());
    let mut cmd = kw_cmd(
        home.path(),
        &["--keep", "always", "--profile", "vllm", "--done", &health],
        &[script.to_str().unwrap()],
        &[("PYTHONPATH", &path)],
    );
    let f = until_outcome(Running::spawn(&mut cmd));
    assert!(f.tuned() > 0, "{:#?}", f.stdout);
    let line = f.event("managed_store_unread");
    let pass = f.events("pass");
    let store = line["store"].as_str().unwrap();
    assert!(
        pass[0]["file"].as_str().unwrap().starts_with(store),
        "the store the line names is the engine's: {line}\n{pass:?}"
    );
}

/// Held: `status -- COMMAND`, `explain -- COMMAND` and `forget -- COMMAND`
/// of a one-rank launch see the store's root; a shell-string launch keeps
/// its store like a direct one.
#[test]
fn maintenance_with_the_command_and_a_shell_launch_see_the_store() {
    let home = common::home();
    let root = store_root(home.path());
    let path = installed(home.path());
    let port = common::free_port().to_string();
    let line = format!("vllm serve /models/fake-moe --tune-ms 2 --port {port}");
    let boot = || {
        until_outcome(Running::spawn(&mut kw_cmd(
            home.path(),
            &[],
            &["bash", "-c", &line],
            &[("PYTHONPATH", &path)],
        )))
    };
    let cold = boot();
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let signed = entries(&root);
    let warm = boot();
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    let command = ["vllm", "serve", "/models/fake-moe", "--tune-ms", "2"];
    let with = |verb: &str| {
        let mut args = vec![verb, "--"];
        args.extend_from_slice(&command);
        let mut cmd = common::vllm::hermetic(home.path());
        cmd.args(&args).env("PYTHONPATH", &path);
        common::output(&mut cmd)
    };
    let status = with("status");
    let text = status.stdout.join("\n");
    assert!(text.contains(&root.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("this launch would keep {}", signed.len())),
        "{text}"
    );
    let explain = with("explain");
    assert!(
        explain
            .stdout
            .join("\n")
            .contains(&format!("({} files", signed.len())),
        "{:#?}",
        explain.stdout
    );
    let forget = with("forget");
    assert_eq!(forget.code, 0, "{}", forget.stderr);
    assert!(entries(&root).is_empty(), "{:?}", entries(&root).keys());
}

/// The engine keepwrap does not exec itself is checked as it runs: a
/// login shell whose profile unsets `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`
/// sends the engine to FlashInfer's shared default store. The engine seen
/// without the variable keepwrap set for it never writes keepwrap's root:
/// never a reuse (the engine tuned every shape elsewhere), and one line
/// says what happened.
#[test]
fn an_engine_whose_profile_drops_the_store_variable_is_never_reported_as_reusing() {
    let home = common::home();
    let cold = serve(home.path(), &[], &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    std::fs::write(
        home.path().join(".bash_profile"),
        format!(
            "export PATH={}:$PATH\nunset VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR\n",
            common::repo().join("tests/fixtures/engines/bin").display()
        ),
    )
    .unwrap();
    let path = installed(home.path());
    let port = common::free_port().to_string();
    let line = format!("vllm serve /models/fake-moe --tune-ms 2 --port {port}");
    let f = until_outcome(Running::spawn(&mut kw_cmd(
        home.path(),
        &[],
        &["bash", "-lc", &line],
        &[("PYTHONPATH", &path)],
    )));
    let pass = f.events("pass");
    assert!(
        pass[0]["file"]
            .as_str()
            .unwrap()
            .contains(".cache/flashinfer/autotune"),
        "the engine wrote FlashInfer's default store: {pass:?}"
    );
    assert!(f.tuned() > 0, "{:#?}", f.stdout);
    assert!(!f.has_event("reused"), "{}", f.stderr);
    let why = f.event("not_signing_unseen")["why"].clone();
    assert!(
        why.as_str().unwrap().starts_with(
            "the engine runs without VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR as keepwrap set it"
        ),
        "{why}"
    );
}

/// A pod restored from the bucket has the entries of the publisher's
/// environment directory but not its `manifest.json` (not part of the
/// set). When its own FlashInfer environment differs (another CUDA build
/// on the same GPU model: a driver or image upgrade), its engine tunes
/// into a directory of its own, and the set it signs holds both. The
/// fleet publishes the newest build of a set: the restored directory,
/// whose stamp it cannot read here, is left out rather than refusing the
/// whole publication (which would keep HEAD on the old build, and every new
/// pod of the upgraded fleet would restore entries it never reads).
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_pod_of_a_newer_build_publishes_after_restoring_an_older_one() {
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = crate::fleet::Bucket::new(&ep);
    let url = bucket.url();
    let pod = |home: &Path, cuda: &str| {
        let gpus = crate::fleet::gpus(home, "NVIDIA GB10");
        let gpus = gpus.to_str().unwrap().to_string();
        crate::vllm_store::serve_until(
            home,
            &["--fleet", &url, "--fleet-timeout", "10s"],
            &[],
            &[
                ("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", &gpus),
                ("FAKE_CUDA_VERSION", cuda),
                ("AWS_ENDPOINT_URL", &ep),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
            &["fleet_published", "fleet_publish_failed"],
        )
    };
    let (h1, h2) = (common::home(), common::home());
    let first = pod(h1.path(), "13.0");
    assert!(first.has_event("fleet_published"), "{}", first.stderr);
    let second = pod(h2.path(), "13.1");
    assert!(second.has_event("fleet_restored"), "{}", second.stderr);
    assert!(second.tuned() > 0, "{:#?}", second.stdout);
    assert!(
        !second.has_event("fleet_publish_failed"),
        "{}",
        second.stderr
    );
    assert!(second.has_event("fleet_published"), "{}", second.stderr);
}
