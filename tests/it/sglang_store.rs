//! SGLang's move to FlashInfer's managed store (written, not released):
//! the fake SGLang installed as a version after 0.5.23 whose
//! `flashinfer_autotune.py` imports FlashInfer's store module, which is
//! what keepwrap reads as that version. Its tactics are entry files of
//! `<root>/v2/<env16>/entries/`, and its entry gate deletes every entry of
//! the environment on any difference between ranks. keepwrap keeps the
//! store per launch in a root of its own (`FLASHINFER_AUTOTUNE_CACHE_DIR`
//! for the engine), and the share makes every node's store one set.

use crate::common;
use serde_json::json;

use common::Finished;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `dir/site`: the fake `sglang` package with the metadata of `version`
/// beside it, its `flashinfer_autotune.py` on FlashInfer's store when
/// `store`; the PYTHONPATH that finds it first.
pub(crate) fn installed(dir: &Path, version: &str, store: bool) -> String {
    let site = dir.join("site");
    let pkg = site.join("sglang");
    let fixture = common::repo().join("tests/fixtures/engines/sglang");
    std::fs::create_dir_all(&pkg).unwrap();
    for f in ["__init__.py", "launch_server.py", "bench_one_batch.py"] {
        std::fs::copy(fixture.join(f), pkg.join(f)).unwrap();
    }
    if store {
        let module = pkg.join("srt/model_executor/runner/flashinfer_autotune.py");
        std::fs::create_dir_all(module.parent().unwrap()).unwrap();
        std::fs::write(
            module,
            "from flashinfer.autotune_cache import ManagedAutotuneCache\n",
        )
        .unwrap();
    }
    let info = site.join(format!("sglang-{version}.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"),
    )
    .unwrap();
    format!(
        "{}:{}",
        site.display(),
        common::repo().join("tests/fixtures/engines").display()
    )
}

/// `keepwrap KW -- python3 -m sglang.bench_one_batch --model-path
/// /models/fake-moe --tune-ms 2 ARGS` (done at exit 0), SGLang's cache in
/// `home/sglang`, the package found through `path`.
pub(crate) fn bench(home: &Path, path: &str, kw: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new(common::BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("FLASHINFER_AUTOTUNE_CACHE_DIR")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .env("PYTHONPATH", path)
        .args(kw)
        .args(["--", "python3", "-m", "sglang.bench_one_batch"])
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(args);
    cmd
}

/// One boot of TP 2 with EP 2 under keepwrap, on the store version.
pub(crate) fn boot_tp2(home: &Path, path: &str) -> Finished {
    common::boot(&mut bench(home, path, &[], &["--tp", "2", "--ep", "2"]))
}

/// keepwrap's store root below `home`.
pub(crate) fn store_root(home: &Path) -> PathBuf {
    home.join("sglang/keepwrap-flashinfer-store")
}

/// Every entry file below the store `root`, by its path below the root,
/// with its bytes.
pub(crate) fn entries(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for env in std::fs::read_dir(root.join("v2"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(env.path().join("entries"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "json") {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), bytes);
            }
        }
    }
    out
}

/// Each node's store entries ([`entries`]), homes `<homes>/node<rank>`.
pub(crate) fn node_stores(homes: &Path) -> Vec<BTreeMap<PathBuf, Vec<u8>>> {
    (0..2)
        .map(|r| entries(&store_root(&homes.join(format!("node{r}")))))
        .collect()
}

/// Node `r`'s boot `b` was warm: every pass's gate kept the store, and
/// nothing was tuned.
pub(crate) fn assert_warm(b: &Finished, r: usize) {
    assert!(
        gates(b).iter().all(|g| g == "kept"),
        "node {r}: {:#?}",
        b.stdout
    );
    assert_eq!(b.tuned(), 0, "node {r}: {:#?}", b.stdout);
}

/// The gate's verdict of every pass of every rank.
pub(crate) fn gates(f: &Finished) -> Vec<String> {
    f.events("pass")
        .iter()
        .map(|p| p["gate"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_store_version_keeps_its_store_per_launch_and_boot_two_tunes_nothing() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", true);
    let cold = boot_tp2(home.path(), &path);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    let root = store_root(home.path());
    assert!(
        cold.logged_with(
            "sglang_store_kept",
            json!({"store": root.join("v2"), "var": "FLASHINFER_AUTOTUNE_CACHE_DIR", "version": "0.5.24"})
        ),
        "{}",
        cold.stderr
    );
    let tuned = entries(&root);
    common::assert_cold_store(&cold, &root, tuned.len());
    // SGLang's own store, shared by every launch of the environment, is untouched
    assert!(!home.path().join("sglang/flashinfer/autotune/v2").exists());

    let warm = boot_tp2(home.path(), &path);
    assert_eq!(warm.code, 0, "{}", warm.stderr);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(
        gates(&warm).iter().all(|g| g == "kept"),
        "{:#?}",
        warm.stdout
    );
    assert!(
        warm.logged_with("reused", json!({"files": tuned.len()})),
        "{}",
        warm.stderr
    );
    assert_eq!(entries(&root), tuned);
    // its fingerprint is the launch's own: keepwrap's variable is not in it
    assert_eq!(
        warm.event("launch")["fingerprint"],
        cold.event("launch")["fingerprint"]
    );
}

#[test]
fn an_edited_or_planted_entry_is_never_loaded() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", true);
    let cold = boot_tp2(home.path(), &path);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let root = store_root(home.path());
    let tuned = entries(&root);
    let (edited, bytes) = tuned.iter().next().unwrap();
    let mut entry: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    entry["tactic"] = json!(["planted", 0]);
    std::fs::write(
        root.join(edited),
        serde_json::to_vec_pretty(&entry).unwrap(),
    )
    .unwrap();
    // a file the engine would read as an entry, under the name of its key
    let key = "planted";
    let stem = &common::hex(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()))[..24];
    let planted = root
        .join(edited.parent().unwrap())
        .join(format!("{stem}.json"));
    std::fs::write(
        &planted,
        format!(r#"{{"key": "{key}", "runner": "r", "tactic": ["planted", 1]}}"#),
    )
    .unwrap();

    let next = boot_tp2(home.path(), &path);
    assert_eq!(next.code, 0, "{}", next.stderr);
    let name = edited.file_name().unwrap().to_str().unwrap();
    assert!(common::removed_as_changed(&next, name), "{}", next.stderr);
    assert!(
        !planted.exists(),
        "the planted entry was removed before the start"
    );
    // the whole set is distrusted: every shape tuned afresh, nothing planted kept
    assert_eq!(next.tuned(), cold.tuned(), "{:#?}", next.stdout);
    assert!(
        !entries(&root)
            .values()
            .any(|b| String::from_utf8_lossy(b).contains("planted")),
        "{:?}",
        entries(&root)
    );
    let warm = boot_tp2(home.path(), &path);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}

#[test]
fn released_sglang_and_installs_without_the_store_module_keep_rank_files_as_before() {
    for (version, store) in [("0.5.23", true), ("0.5.24", false)] {
        let home = common::home();
        let path = installed(home.path(), version, store);
        let f = common::boot(&mut bench(home.path(), &path, &[], &["--tp", "2"]));
        assert_eq!(f.code, 0, "{version}: {}", f.stderr);
        assert!(!f.has_event("sglang_store_kept"), "{version}: {}", f.stderr);
        assert!(!f.has_event("sglang_store_left"), "{version}: {}", f.stderr);
        assert_eq!(
            f.event("launch")["root"],
            json!(common::cache_root(home.path())),
            "{version}: {}",
            f.stderr
        );
        assert!(!store_root(home.path()).exists(), "{version}");
    }
}

#[test]
fn a_store_the_user_names_is_kept_as_theirs_and_a_line_says_so() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", true);
    let mine = home.path().join("mine");
    let f = common::boot(
        bench(home.path(), &path, &[], &["--tp", "2"]).env("FLASHINFER_AUTOTUNE_CACHE_DIR", &mine),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    let line = f.event("sglang_store_left");
    assert_eq!(line["store"], json!(mine), "{}", f.stderr);
    assert!(
        line["why"]
            .as_str()
            .unwrap()
            .starts_with("FLASHINFER_AUTOTUNE_CACHE_DIR is set for the engine"),
        "{}",
        f.stderr
    );
    assert!(
        !entries(&mine).is_empty(),
        "the engine wrote where the user said"
    );
    assert!(common::sidecars(&mine).is_empty());
    assert!(!store_root(home.path()).exists());
}

/// Two nodes of one launch (TP 2 with EP 2, one rank a node, loopback
/// rendezvous), each with its own SGLang cache directory: `keepwrap KW` in
/// front of each; both run to their end.
pub(crate) fn two_nodes(homes: &Path, path: &str, kw: &[&str]) -> Vec<Finished> {
    crate::multi_node::boot_all(node_commands(homes, path, kw))
}

/// The commands of [`two_nodes`], each node's home `<homes>/node<rank>`.
pub(crate) fn node_commands(homes: &Path, path: &str, kw: &[&str]) -> Vec<Command> {
    let addr = format!("127.0.0.1:{}", common::free_port());
    let node = |r: u32| {
        let rank = r.to_string();
        let args = [
            "--tp",
            "2",
            "--ep",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            &rank,
            "--dist-init-addr",
            &addr,
        ];
        bench(&homes.join(format!("node{r}")), path, kw, &args)
    };
    (0..2).map(node).collect()
}

#[test]
fn across_nodes_the_share_makes_every_store_one_set_so_the_gate_never_deletes_it() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let kw = ["--share", share.to_str().unwrap()];
    let cold = two_nodes(t.path(), &path, &kw);
    for (r, b) in cold.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 1, node {r}: {}", b.stderr);
        assert!(b.has_event("share_published"), "node {r}: {}", b.stderr);
    }
    // each node tuned its own experts' shapes: the stores differ
    let after = node_stores(t.path());
    assert_ne!(after[0], after[1]);

    let warm = two_nodes(t.path(), &path, &kw);
    for (r, b) in warm.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(b.has_event("share_same_set"), "node {r}: {}", b.stderr);
        assert_warm(b, r);
    }
    let same = node_stores(t.path());
    assert_eq!(same[0], same[1], "every node holds the same set");
    assert!(same[0].len() > after[0].len());

    let third = two_nodes(t.path(), &path, &kw);
    for (r, b) in third.iter().enumerate() {
        assert_warm(b, r);
    }
    assert_eq!(node_stores(t.path()), same);
}

/// Without the share, the same two nodes: the engine's gate finds the
/// stores different on every boot and deletes them (what the share is for).
#[test]
fn across_nodes_without_the_share_the_gate_deletes_the_stores() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let cold = two_nodes(t.path(), &path, &[]);
    for (r, b) in cold.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 1, node {r}: {}", b.stderr);
    }
    let warm = two_nodes(t.path(), &path, &[]);
    for (r, b) in warm.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(
            gates(b).iter().any(|g| g == "dropped"),
            "node {r}: {:#?}",
            b.stdout
        );
        assert!(b.tuned() > 0, "node {r}: {:#?}", b.stdout);
    }
}

/// Two nodes of one launch with the fleet's bucket `url` at moto's `ep`
/// (a GB10 as every node's GPU) and `env` on both, homes below `homes`.
#[cfg(feature = "failpoints")]
fn fleet_nodes(
    homes: &Path,
    path: &str,
    (ep, url): (&str, &str),
    env: &[(&str, &str)],
) -> Vec<Finished> {
    let kw = ["--fleet", url, "--fleet-timeout", "10s"];
    let mut cmds = node_commands(homes, path, &kw);
    for (r, cmd) in cmds.iter_mut().enumerate() {
        let gpus = crate::fleet::gpus(&homes.join(format!("node{r}")), "NVIDIA GB10");
        cmd.env("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", gpus)
            .env_remove("KEEPWRAP_BOOT_ID")
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_RESTART_COUNT")
            .envs(env.iter().copied());
        crate::fleet::to_moto(cmd, ep);
    }
    crate::multi_node::boot_all(cmds)
}

/// A second cluster with no file system in common with the first boots
/// warm from the bucket: every node restores the union of every node's
/// entries (the lowest node's where two differ), so every node's store is
/// the same set and the engine's gate keeps it.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn across_nodes_the_fleet_restores_one_set_on_every_node_so_the_gate_keeps_it() {
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = crate::fleet::Bucket::new(&ep);
    let url = bucket.url();
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (first, second) = (t.path().join("first"), t.path().join("second"));
    let cold = fleet_nodes(
        &first,
        &path,
        (&ep, &url),
        &[("KEEPWRAP_BOOT_ID", "cluster-1-boot-1")],
    );
    for (r, b) in cold.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 1, node {r}: {}", b.stderr);
        assert!(b.tuned() > 0, "node {r} tunes cold");
    }
    assert!(
        cold.iter().any(|b| b.has_event("fleet_published")),
        "the last node names the set: {}\n{}",
        cold[0].stderr,
        cold[1].stderr
    );
    let tuned = node_stores(&first);
    assert_ne!(
        tuned[0], tuned[1],
        "each node tuned its own experts' shapes"
    );
    let mut union = tuned[1].clone();
    union.extend(tuned[0].clone());

    let warm = fleet_nodes(&second, &path, (&ep, &url), &[]);
    for (r, b) in warm.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(
            b.logged_with("fleet_restored", json!({"files": union.len()})),
            "node {r} restores every node's entries: {}",
            b.stderr
        );
        assert_warm(b, r);
    }
    let restored = node_stores(&second);
    assert_eq!(restored[0], union, "node 0 holds the union");
    assert_eq!(restored[1], union, "node 1 holds the same set");
}

/// `--pin` across nodes with the share: the set every node pins is the
/// one set the share made, so the pinned stores stay the same on every
/// node at every boot, and an entry the engine rewrote on one node while
/// keepwrap was down is put back before the gate compares them.
#[test]
fn pinned_across_nodes_every_node_keeps_the_same_set_byte_for_byte() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let kw = ["--share", share.to_str().unwrap(), "--pin"];
    let cold = two_nodes(t.path(), &path, &kw);
    for (r, b) in cold.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 1, node {r}: {}", b.stderr);
        assert!(!b.has_event("pin_not_applicable"), "node {r}: {}", b.stderr);
        assert!(b.has_event("pin_first"), "node {r}: {}", b.stderr);
    }

    let warm = two_nodes(t.path(), &path, &kw);
    let same = node_stores(t.path());
    assert_eq!(same[0], same[1], "every node holds the same set");
    for (r, b) in warm.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(b.has_event("share_same_set"), "node {r}: {}", b.stderr);
        assert_warm(b, r);
        assert!(
            b.logged_with(
                "pinned",
                json!({"files": same[0].len(), "missing": 0, "changed": 0})
            ),
            "node {r}: {}",
            b.stderr
        );
    }

    // what an engine left on node 1 when keepwrap was killed: an entry
    // replaced as FlashInfer publishes (a temp file renamed over it)
    let root1 = store_root(&t.path().join("node1"));
    let (rel, bytes) = same[1].iter().next().unwrap();
    let mut entry: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    entry["tactic"] = json!(["retuned", 1]);
    let at = root1.join(rel);
    let tmp = at.with_file_name(".autotune_x.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&entry).unwrap()).unwrap();
    std::fs::rename(&tmp, &at).unwrap();

    let third = two_nodes(t.path(), &path, &kw);
    assert!(
        third[1].logged_with("pin_put_back", json!({"restored": 1})),
        "{}",
        third[1].stderr
    );
    for (r, b) in third.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 3, node {r}: {}", b.stderr);
        assert_warm(b, r);
    }
    assert_eq!(node_stores(t.path()), same);
}
