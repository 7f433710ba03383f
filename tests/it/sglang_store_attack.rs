//! SGLang on FlashInfer's managed store under attack: an install that only
//! looks like the store version, a share publication planted or edited, a
//! keepwrap killed while it writes the union, the user's own settings.

use crate::common;
use crate::sglang_store::{assert_warm, installed, node_stores, two_nodes};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Two nodes booted once with the share `<t>/share`: `(share, kw)`.
fn shared_cold(t: &Path, path: &str) -> (PathBuf, Vec<String>) {
    let share = t.join("share");
    std::fs::create_dir(&share).unwrap();
    let kw = vec!["--share".to_string(), share.to_str().unwrap().to_string()];
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    for (r, b) in two_nodes(t, path, &kwr).iter().enumerate() {
        assert_eq!(b.code, 0, "boot 1, node {r}: {}", b.stderr);
        assert!(b.has_event("share_published"), "node {r}: {}", b.stderr);
    }
    (share, kw)
}

/// Node `rank`'s publication directory in `share` (one launch there).
fn publication(share: &Path, rank: u32) -> PathBuf {
    let launches: Vec<PathBuf> = std::fs::read_dir(share.join("keepwrap"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(launches.len(), 1, "{launches:?}");
    launches[0].join(format!("node{rank}"))
}

/// Add `bytes` at `rel` to the publication `node` (its manifest's members
/// and set id recomputed, as anyone who can write the share can).
fn plant(node: &Path, rel: &str, bytes: &[u8]) {
    let at = node.join(rel);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::write(&at, bytes).unwrap();
    let mpath = node.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    let members = m["set"]["members"].as_array_mut().unwrap();
    members.push(
        json!({"path": rel, "sha256": crate::harden::sha256_hex(bytes), "size": bytes.len()}),
    );
    members.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    let list: Vec<(String, String, u64)> = members
        .iter()
        .map(|x| {
            (
                x["path"].as_str().unwrap().to_string(),
                x["sha256"].as_str().unwrap().to_string(),
                x["size"].as_u64().unwrap(),
            )
        })
        .collect();
    let fp = m["set"]["fingerprint"].as_str().unwrap().to_string();
    m["set"]["id"] = json!(crate::harden::set_id(&fp, &list));
    std::fs::write(&mpath, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

#[test]
fn a_planted_entry_in_a_share_publication_never_makes_the_union() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (share, kw) = shared_cold(t.path(), &path);
    let before = node_stores(t.path());
    let env = before[0]
        .keys()
        .next()
        .unwrap()
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string();
    // an entry whose stem is not the hash of its key
    let rel = format!("v2/{env}/entries/{}.json", "0".repeat(24));
    plant(
        &publication(&share, 1),
        &rel,
        br#"{"key": "planted", "runner": "r", "tactic": ["planted", 1]}"#,
    );
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    let next = two_nodes(t.path(), &path, &kwr);
    let stores = node_stores(t.path());
    for (r, b) in next.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(
            b.logged_with("share_file_refused", json!({"node": 1, "path": rel})),
            "node {r}: {}",
            b.stderr
        );
        // the rest of the union is taken and signed: nothing good lost
        assert!(
            b.logged_with("share_signed", json!({"files": stores[r].len()})),
            "node {r}: {}",
            b.stderr
        );
        assert_warm(b, r);
        assert!(
            !stores[r]
                .values()
                .any(|b| String::from_utf8_lossy(b).contains("planted")),
            "node {r}: {:?}",
            stores[r].keys()
        );
    }
    assert_eq!(stores[0], stores[1]);
    assert!(stores[0].len() > before[0].len());
}

/// keepwrap killed on node 0 while it writes the union into its store
/// (after the second file): the next boot of both nodes makes the stores
/// the same set again, the gate keeps them, and nothing is tuned.
#[cfg(feature = "failpoints")]
#[test]
fn a_node_killed_while_writing_the_union_boots_warm_and_the_same_next_time() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (_share, kw) = shared_cold(t.path(), &path);
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    let before = node_stores(t.path());
    let mut cmds = crate::sglang_store::node_commands(t.path(), &path, &kwr);
    let killed = common::boot(cmds[0].env("KEEPWRAP_FAILPOINT", "share-same:2"));
    assert_ne!(killed.code, 0, "{}", killed.stderr);
    let partial = node_stores(t.path());
    assert_eq!(
        partial[0].len(),
        before[0].len() + 2,
        "{:?}",
        partial[0].keys()
    );

    let next = two_nodes(t.path(), &path, &kwr);
    let stores = node_stores(t.path());
    for (r, b) in next.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 3, node {r}: {}", b.stderr);
        assert_warm(b, r);
    }
    assert_eq!(stores[0], stores[1]);
}

/// A launch of `path`'s SGLang (TP 2) under keepwrap: keepwrap reads it as
/// a released SGLang (no store line, the root SGLang's own cache, no store
/// root of keepwrap's, no variable set for the engine).
fn assert_rank_files(home: &Path, path: &str, what: &str) {
    let f = common::boot(&mut crate::sglang_store::bench(
        home,
        path,
        &[],
        &["--tp", "2"],
    ));
    assert_eq!(f.code, 0, "{what}: {}", f.stderr);
    assert!(!f.has_event("sglang_store_kept"), "{what}: {}", f.stderr);
    assert!(!f.has_event("sglang_store_left"), "{what}: {}", f.stderr);
    assert_eq!(
        f.event("launch")["root"],
        json!(common::cache_root(home)),
        "{what}: {}",
        f.stderr
    );
    assert!(!crate::sglang_store::store_root(home).exists(), "{what}");
}

/// The store module of the install `installed` made below `home`.
fn module(home: &Path) -> PathBuf {
    home.join("site/sglang/srt/model_executor/runner/flashinfer_autotune.py")
}

#[test]
fn a_post_release_of_0_5_23_keeps_rank_files() {
    let home = common::home();
    let path = installed(home.path(), "0.5.23.post1", true);
    assert_rank_files(home.path(), &path, "0.5.23.post1");
    // the fake follows its module: its store is SGLang's own, where no
    // variable of keepwrap's moved it
    assert!(home.path().join("sglang/flashinfer/autotune/v2").is_dir());
}

#[test]
fn a_store_module_that_only_names_the_store_in_a_comment_keeps_rank_files() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", false);
    let m = module(home.path());
    std::fs::create_dir_all(m.parent().unwrap()).unwrap();
    std::fs::write(
        &m,
        "# flashinfer.autotune_cache is not used yet: rank files\n\
         MSG = \"see flashinfer.autotune_cache\"\nimport flashinfer\n",
    )
    .unwrap();
    assert_rank_files(home.path(), &path, "a comment");
}

#[test]
fn two_dist_infos_of_two_versions_keep_rank_files() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", true);
    let other = home.path().join("site/sglang-0.5.23.dist-info");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("METADATA"),
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n",
    )
    .unwrap();
    assert_rank_files(home.path(), &path, "two dist-infos");
}

/// `keepwrap SUB` with no command, in the environment of the launches of
/// `home` (SGLang's cache directory `home/sglang`).
fn subcommand(home: &Path, sub: &[&str]) -> std::process::Output {
    std::process::Command::new(common::BIN)
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_LOG")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("HOME", home)
        .args(sub)
        .output()
        .unwrap()
}

/// Two launches (TP 2, then TP 2 with EP 2): the first one's set is moved
/// into the store of keepwrap's store root. A bare `evict --all` and
/// `clean` look at that root too, as they look at every default root.
#[test]
fn evict_and_clean_with_no_command_reach_the_store_of_the_store_root() {
    for sub in [&["evict", "--all"][..], &["clean"]] {
        let home = common::home();
        let path = installed(home.path(), "0.5.24", true);
        let bench = |args: &[&str]| {
            let f = common::boot(&mut crate::sglang_store::bench(
                home.path(),
                &path,
                &[],
                args,
            ));
            assert_eq!(f.code, 0, "{}", f.stderr);
        };
        bench(&["--tp", "2"]);
        bench(&["--tp", "2", "--ep", "2"]);
        let out = subcommand(home.path(), sub);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{sub:?}: {text}");
        assert!(text.contains("evicted 1 stored set"), "{sub:?}: {text}");
        let again = subcommand(home.path(), &["evict", "--all", "--dry-run"]);
        let text = String::from_utf8_lossy(&again.stdout).to_string()
            + &String::from_utf8_lossy(&again.stderr);
        assert!(
            text.contains("would evict 0 stored sets"),
            "{sub:?}: {text}"
        );
    }
}

/// A warm boot of the store version says nothing of unify: its entries
/// are one file per shape, never unified, so no `kept_not_unified` line
/// (which says they would be unified and signed again at done).
#[test]
fn a_warm_boot_on_the_store_says_nothing_of_unify() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", true);
    let cold = crate::sglang_store::boot_tp2(home.path(), &path);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    let warm = crate::sglang_store::boot_tp2(home.path(), &path);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
    assert!(!warm.has_event("kept_not_unified"), "{}", warm.stderr);
}

/// Node 1's publication replaced by another launch's node 1 (same share,
/// another environment: `SGLANG_FLASHINFER_AUTOTUNE_MEASURE=eager`): it
/// never makes the union; each node keeps its own set, said in one line.
#[test]
fn another_launchs_publication_never_makes_the_union() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (share, kw) = shared_cold(t.path(), &path);
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    let other = t.path().join("other");
    let mut cmds = crate::sglang_store::node_commands(&other, &path, &kwr);
    for c in &mut cmds {
        c.env("SGLANG_FLASHINFER_AUTOTUNE_MEASURE", "eager");
    }
    for (r, b) in crate::multi_node::boot_all(cmds).iter().enumerate() {
        assert_eq!(b.code, 0, "other, node {r}: {}", b.stderr);
    }
    let launches: Vec<PathBuf> = std::fs::read_dir(share.join("keepwrap"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(launches.len(), 2, "{launches:?}");
    let before = node_stores(t.path());
    let theirs = node_stores(&other);
    assert_ne!(before[1], theirs[1]);
    // ours is the one whose node 0 is also node 0 of `t`'s first boot:
    // swap node 1 of each launch's publication
    let (a, b) = (launches[0].join("node1"), launches[1].join("node1"));
    let tmp = t.path().join("swap");
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();

    let next = two_nodes(t.path(), &path, &kwr);
    for (r, b) in next.iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
        assert!(b.has_event("share_incomplete"), "node {r}: {}", b.stderr);
        assert!(!b.has_event("share_same_set"), "node {r}: {}", b.stderr);
    }
    let after = node_stores(t.path());
    for (r, s) in after.iter().enumerate() {
        assert!(
            s.keys()
                .all(|k| !theirs[1].contains_key(k) || before[r].contains_key(k)),
            "node {r}: another launch's entries were written here"
        );
    }
}

/// Another environment's `manifest.json` planted in node 1's publication
/// under this environment's directory: it never replaces a node's own, so
/// the next boot still trusts the set and tunes nothing.
#[test]
fn another_environments_manifest_in_a_publication_never_replaces_a_nodes_own() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (share, kw) = shared_cold(t.path(), &path);
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    let root0 = crate::sglang_store::store_root(&t.path().join("node0"));
    let env_dir = std::fs::read_dir(root0.join("v2"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    let env = env_dir.to_str().unwrap();
    let own = std::fs::read(root0.join(format!("v2/{env}/manifest.json"))).unwrap();
    let mut m: Value = serde_json::from_slice(&own).unwrap();
    m["gpu"] = json!("another GPU");
    plant(
        &publication(&share, 1),
        &format!("v2/{env}/manifest.json"),
        &serde_json::to_vec_pretty(&m).unwrap(),
    );
    for (r, b) in two_nodes(t.path(), &path, &kwr).iter().enumerate() {
        assert_eq!(b.code, 0, "boot 2, node {r}: {}", b.stderr);
    }
    for r in 0..2 {
        let root = crate::sglang_store::store_root(&t.path().join(format!("node{r}")));
        assert_eq!(
            std::fs::read(root.join(format!("v2/{env}/manifest.json"))).unwrap(),
            own,
            "node {r}"
        );
    }
    for (r, b) in two_nodes(t.path(), &path, &kwr).iter().enumerate() {
        assert_eq!(b.code, 0, "boot 3, node {r}: {}", b.stderr);
        assert!(
            !b.has_event("untrusted_store_entry"),
            "node {r}: {}",
            b.stderr
        );
        assert_warm(b, r);
    }
}

/// The store module as a FIFO (nothing ever writes it) or a symlink to a
/// directory: never waited on, never read as the store version (`status`
/// of the launch: the engine itself would wait on the FIFO).
#[test]
fn a_store_module_that_is_not_a_regular_file_keeps_rank_files_without_waiting() {
    for kind in ["fifo", "dir-link"] {
        let home = common::home();
        let path = installed(home.path(), "0.5.24", false);
        let m = module(home.path());
        std::fs::create_dir_all(m.parent().unwrap()).unwrap();
        match kind {
            "fifo" => {
                let st = std::process::Command::new("mkfifo")
                    .arg(&m)
                    .status()
                    .unwrap();
                assert!(st.success());
            }
            _ => std::os::unix::fs::symlink(home.path(), &m).unwrap(),
        }
        let f = common::boot(&mut crate::sglang_store::bench(
            home.path(),
            &path,
            &["status"],
            &["--tp", "2"],
        ));
        assert_eq!(f.code, 0, "{kind}: {}", f.stderr);
        let root = common::cache_root(home.path());
        assert!(
            f.stdout
                .first()
                .is_some_and(|l| l.starts_with(&format!("cache root {}", root.display()))),
            "{kind}: {:?}",
            f.stdout
        );
    }
}

/// The `sglang` package a symlink to a released package (no store module)
/// beside a `*.dist-info` of 0.5.24: what Python imports is the release,
/// and keepwrap reads it so.
#[test]
fn a_symlinked_package_is_read_where_it_points() {
    let home = common::home();
    let path = installed(home.path(), "0.5.24", false);
    let site = home.path().join("site");
    let released = home.path().join("released-sglang");
    std::fs::rename(site.join("sglang"), &released).unwrap();
    std::os::unix::fs::symlink(&released, site.join("sglang")).unwrap();
    assert_rank_files(home.path(), &path, "symlinked release");
    // and the same link to a package whose module imports the store
    let m = released.join("srt/model_executor/runner/flashinfer_autotune.py");
    std::fs::create_dir_all(m.parent().unwrap()).unwrap();
    std::fs::write(&m, "from flashinfer.autotune_cache import X\n").unwrap();
    let f = crate::sglang_store::boot_tp2(home.path(), &path);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(f.has_event("sglang_store_kept"), "{}", f.stderr);
}

/// `--start-cold` on every node of a shared launch: each node tunes
/// afresh (no union before the start), and the boot after makes every
/// store one set again, warm.
#[test]
fn start_cold_across_nodes_tunes_afresh_then_the_next_boot_is_one_set_and_warm() {
    let t = common::home();
    let path = installed(t.path(), "0.5.24", true);
    let (_share, kw) = shared_cold(t.path(), &path);
    let mut cold_kw: Vec<&str> = kw.iter().map(String::as_str).collect();
    cold_kw.push("--start-cold");
    for (r, b) in two_nodes(t.path(), &path, &cold_kw).iter().enumerate() {
        assert_eq!(b.code, 0, "cold, node {r}: {}", b.stderr);
        assert!(b.has_event("start_cold"), "node {r}: {}", b.stderr);
        assert!(!b.has_event("share_same_set"), "node {r}: {}", b.stderr);
        assert!(b.tuned() > 0, "node {r}: {:#?}", b.stdout);
    }
    let kwr: Vec<&str> = kw.iter().map(String::as_str).collect();
    for (r, b) in two_nodes(t.path(), &path, &kwr).iter().enumerate() {
        assert_eq!(b.code, 0, "boot 3, node {r}: {}", b.stderr);
        assert!(b.has_event("share_same_set"), "node {r}: {}", b.stderr);
        assert_warm(b, r);
    }
    let stores = node_stores(t.path());
    assert_eq!(stores[0], stores[1]);
}
