//! Multi-node launches: four launches of the fake engine on one machine act
//! as the four nodes of one engine (TP4 with EP4, one rank per node, the
//! stock gate, loopback rendezvous), each with its own cache root and one
//! share. Unifying one node's files cannot make the gate agree; the union
//! taken through the share does.

use crate::common;
use serde_json::json;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const NODES: u32 = 4;

/// The nodes of a launch whose share fails (missing, full, a node's
/// publication absent): two show that every node goes on, as four would.
const FEW: u32 = 2;

/// One node of `nodes`: `keepwrap [kw] -- fake_engine --tp N --ep N
/// --nnodes N --node-rank R --dist-init-addr 127.0.0.1:P --gate stock
/// --offline` (one rank a node), its cache under `<homes>/node<R>`.
fn node(homes: &Path, nodes: u32, rank: u32, port: u16, kw: &[&str]) -> Command {
    let rank_s = rank.to_string();
    let n = nodes.to_string();
    let addr = format!("127.0.0.1:{port}");
    let engine = [
        "--tp",
        &n,
        "--ep",
        &n,
        "--nnodes",
        &n,
        "--node-rank",
        &rank_s,
        "--dist-init-addr",
        &addr,
        "--gate",
        "stock",
        "--offline",
    ];
    keepwrap_engine(&homes.join(format!("node{rank}")), kw, &engine)
}

/// Start every node's command at once and collect each.
pub(crate) fn boot_all(cmds: Vec<Command>) -> Vec<Finished> {
    let running: Vec<Running> = cmds
        .into_iter()
        .map(|mut c| Running::spawn(&mut c))
        .collect();
    running
        .into_iter()
        .map(|r| r.finish(Duration::from_secs(60)))
        .collect()
}

/// The `nodes` nodes, each with `kw(rank)` as keepwrap's options.
fn boot_nodes(homes: &Path, nodes: u32, kw: impl Fn(u32) -> Vec<String>) -> Vec<Finished> {
    let port = free_port();
    boot_all(
        (0..nodes)
            .map(|r| {
                let kw = kw(r);
                let kw: Vec<&str> = kw.iter().map(String::as_str).collect();
                node(homes, nodes, r, port, &kw)
            })
            .collect(),
    )
}

/// Boot 1 of the four nodes with `<homes>/share` (each node tunes and
/// publishes its own file), made once per test process in a directory of
/// its own under the target directory (left there for `cargo clean`), then
/// copied whole (modes and times kept) into `homes` for each test that goes
/// on from it. The four boots, for what they logged.
fn booted_once(homes: &Path) -> &'static [Finished] {
    static MADE: std::sync::OnceLock<(tempfile::TempDir, Vec<Finished>)> =
        std::sync::OnceLock::new();
    let (made, b1) = MADE.get_or_init(|| {
        let made = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let share = made.path().join("share");
        std::fs::create_dir(&share).unwrap();
        let b1 = boot_nodes(made.path(), NODES, share_kw(&share));
        all_ok(&b1, "boot 1");
        (made, b1)
    });
    crate::harden::copy_tree(made.path(), homes);
    b1
}

fn share_kw(share: &Path) -> impl Fn(u32) -> Vec<String> + '_ {
    move |_| vec!["--share".to_string(), share.display().to_string()]
}

fn root_of(homes: &Path, rank: u32) -> PathBuf {
    cache_root(&homes.join(format!("node{rank}")))
}

/// Every node exited 0.
fn all_ok(boots: &[Finished], what: &str) {
    for (r, b) in boots.iter().enumerate() {
        assert_eq!(b.code, 0, "{what}: node {r}: {}", b.stderr);
    }
}

/// Shapes profiled by each node.
fn tuned(boots: &[Finished]) -> Vec<u64> {
    boots.iter().map(Finished::tuned).collect()
}

/// The digest of the tactics of the shapes every rank shares, per node: the
/// same on every node when the nodes agree.
fn shared_tactics(boots: &[Finished]) -> Vec<String> {
    boots
        .iter()
        .flat_map(|b| b.events("tactics"))
        .map(|t| t["shared_sha256"].as_str().unwrap().to_string())
        .collect()
}

/// Each global rank's tactics digest, over every node.
fn tactics(boots: &[Finished]) -> std::collections::BTreeMap<u64, String> {
    boots.iter().flat_map(|b| b.tactics()).collect()
}

/// Bytes of every node's rank files, node by node.
fn rank_files(homes: &Path) -> Vec<Vec<u8>> {
    (0..NODES)
        .flat_map(|r| {
            let root = root_of(homes, r);
            cache_files(&root)
                .into_iter()
                .map(move |f| std::fs::read(root.join(f)).unwrap())
        })
        .collect()
}

fn all_equal(v: &[impl PartialEq]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

#[test]
fn four_nodes_tune_once_then_reuse_one_union_on_every_node() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    let b1 = booted_once(t.path());
    assert!(tuned(b1).iter().all(|&n| n > 0), "boot 1 tunes");
    for b in b1 {
        assert!(
            b.logged_with(
                "share_incomplete",
                json!({"missing": "0, 1, 2, 3", "nodes": 4})
            ),
            "{}",
            b.stderr
        );
        assert!(
            b.logged_with("share_published", json!({"files": 1, "nodes": 4})),
            "{}",
            b.stderr
        );
    }
    let files = rank_files(t.path());
    assert_eq!(files.len(), 4);
    assert!(!all_equal(&files), "one rank file per node, each its own");

    let mut runs = Vec::new();
    for n in [2, 3] {
        let b = boot_nodes(t.path(), NODES, share_kw(&share));
        all_ok(&b, &format!("boot {n}"));
        assert_eq!(
            tuned(&b),
            vec![0; 4],
            "boot {n} tunes 0 shapes on every node"
        );
        assert!(b
            .iter()
            .flat_map(|b| b.events("pass"))
            .all(|p| p["gate"] == "kept"));
        for (r, node) in b.iter().enumerate() {
            let event = if n == 2 {
                "share_union_written"
            } else {
                "share_already_union"
            };
            assert!(
                node.logged_with(event, json!({"files": 1, "nodes": 4})),
                "boot {n} node {r}: {}",
                node.stderr
            );
            assert!(
                node.logged_with("reused", json!({"files": 1})),
                "boot {n} node {r}: {}",
                node.stderr
            );
        }
        assert!(
            all_equal(&rank_files(t.path())),
            "boot {n}: every node holds the same bytes"
        );
        assert!(
            all_equal(&shared_tactics(&b)),
            "boot {n}: the nodes agree on the tactics"
        );
        runs.push(tactics(&b));
    }
    assert_eq!(runs[0], runs[1], "the tactics stay the same on boot 3");
    assert_eq!(runs[0], tactics(b1), "and they are boot 1's");

    // keepwrap status --share (and share-status) list what each node published.
    let mut status = Command::new(BIN);
    status
        .arg("status")
        .arg("--cache-dir")
        .arg(root_of(t.path(), 0));
    let mut share_status = Command::new(BIN);
    share_status.arg("share-status");
    for mut cmd in [status, share_status] {
        let out = cmd.arg("--share").arg(&share).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        for r in 0..NODES {
            assert!(
                text.lines()
                    .any(|l| l.contains(&format!(" node {r}/4 published "))
                        && l.contains(": 1 file, ")),
                "{text}"
            );
        }
    }
    let out = Command::new(BIN)
        .args(["share-status", "--json", "--share"])
        .arg(&share)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 1, "{v}");
    assert_eq!(clusters[0]["nnodes"], 4);
    let nodes = clusters[0]["nodes"].as_array().unwrap();
    for (r, node) in nodes.iter().enumerate() {
        assert_eq!(node["node_rank"], r as u64, "{v}");
        assert_eq!(node["state"], "published", "{v}");
        assert_eq!(node["files"], 1, "{v}");
    }
    assert_eq!(nodes.len(), 4, "{v}");
}

#[test]
fn a_node_whose_cache_was_wiped_gets_its_files_back_from_the_share() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    booted_once(t.path());
    std::fs::remove_dir_all(root_of(t.path(), 2)).unwrap();
    let b = boot_nodes(t.path(), NODES, share_kw(&share));
    all_ok(&b, "boot 2");
    assert_eq!(tuned(&b), vec![0; 4], "boot 2 tunes 0 shapes on every node");
    assert!(
        b[2].logged_with("share_union_written", json!({"files": 1, "nodes": 4})),
        "{}",
        b[2].stderr
    );
    assert!(all_equal(&rank_files(t.path())));
}

#[test]
fn no_node_trusts_a_partial_union() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    // Boot 1: node 1 runs without the share, so it publishes nothing.
    let b1 = boot_nodes(t.path(), FEW, |r| {
        if r == 1 {
            vec![]
        } else {
            vec!["--share".into(), share.display().to_string()]
        }
    });
    all_ok(&b1, "boot 1");

    let b = boot_nodes(t.path(), FEW, share_kw(&share));
    all_ok(&b, "boot 2");
    for (r, node) in b.iter().enumerate() {
        assert!(
            node.logged_with(
                "share_incomplete",
                json!({"missing": "1", "nodes": 2, "reason": "node 1: no manifest"})
            ),
            "node {r}: {}",
            node.stderr
        );
        assert!(
            !node.has_event("share_union_written"),
            "node {r}: {}",
            node.stderr
        );
        assert!(node.tuned() > 0, "node {r} tunes");
    }
    assert!(
        all_equal(&shared_tactics(&b)),
        "the boot is consistent across nodes"
    );
}

#[test]
fn every_node_launches_when_the_share_is_missing() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("not-mounted");
    let b = boot_nodes(t.path(), FEW, share_kw(&share));
    all_ok(&b, "missing share");
    for (r, node) in b.iter().enumerate() {
        assert!(node.tuned() > 0);
        assert!(
            node.logged_starting(
                "share_unreadable",
                "error",
                "the share directory does not exist (not mounted?)"
            ),
            "node {r}: {}",
            node.stderr
        );
        assert!(
            node.has_event("share_cannot_publish"),
            "node {r}: {}",
            node.stderr
        );
    }
    assert!(!share.exists(), "keepwrap does not create a missing share");
}

#[test]
fn every_node_launches_when_the_share_is_read_only_and_still_reads_it() {
    if !common::has_need(can_mount(), "root and unshare --mount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    booted_once(t.path());
    let s = share.display().to_string();
    let setup = "mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\"";
    let port = free_port();
    let kw = ["--share", s.as_str()];
    let b = boot_all(
        (0..NODES)
            .map(|r| in_mount_ns(setup, &share, &node(t.path(), NODES, r, port, &kw)))
            .collect(),
    );
    all_ok(&b, "read-only share");
    assert_eq!(
        tuned(&b),
        vec![0; 4],
        "the union is read from a read-only share"
    );
    for (r, node) in b.iter().enumerate() {
        assert!(
            node.events_named("share_cannot_publish")
                .iter()
                .any(|e| e["error"]
                    .as_str()
                    .unwrap()
                    .contains("Read-only file system")),
            "node {r}: {}",
            node.stderr
        );
    }
}

#[test]
fn every_node_launches_when_the_share_is_full() {
    if !common::has_need(can_mount(), "root and unshare --mount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let s = share.display().to_string();
    let setup = "mount -t tmpfs -o size=64k none \"$0\" && { head -c 1000000 /dev/zero > \"$0/fill\" 2>/dev/null; true; }";
    let port = free_port();
    let kw = ["--share", s.as_str()];
    let b = boot_all(
        (0..FEW)
            .map(|r| in_mount_ns(setup, &share, &node(t.path(), FEW, r, port, &kw)))
            .collect(),
    );
    all_ok(&b, "full share");
    for (r, node) in b.iter().enumerate() {
        assert!(node.tuned() > 0);
        assert!(
            node.events_named("share_cannot_publish")
                .iter()
                .any(|e| e["error"]
                    .as_str()
                    .unwrap()
                    .contains("No space left on device")),
            "node {r}: {}",
            node.stderr
        );
    }
}

/// One run of a node of the two-node concurrency test: keepwrap takes the
/// union (when both nodes' publications verify), the helper checks it, then
/// writes a fresh rank file, which keepwrap signs and publishes.
fn writer_run(share: &Path, root: &Path, rank: u32, entries: usize) -> Finished {
    let mut cmd = keepwrap(root);
    cmd.arg("--share")
        .arg(share)
        .arg("--")
        .arg("python3")
        .arg(helper("rank_writer.py"))
        .args(["--nnodes", "2", "--node-rank", &rank.to_string()])
        .args(["--entries", &entries.to_string()]);
    boot(&mut cmd)
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn concurrent_publishers_and_readers_never_accept_a_torn_file() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    const ENTRIES: usize = 800;
    let until = Instant::now() + Duration::from_secs(4);
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let share = share.clone();
            let root = t.path().join(format!("node{rank}"));
            std::thread::spawn(move || {
                let (mut runs, mut unions, mut fallbacks) = (0, 0, 0);
                while runs < 3 || Instant::now() < until {
                    let b = writer_run(&share, &root, rank, ENTRIES);
                    assert_eq!(b.code, 0, "node {rank}: {:?} {}", b.stdout, b.stderr);
                    let check: serde_json::Value = serde_json::from_str(&b.stdout[0]).unwrap();
                    assert_eq!(check["ok"], true, "node {rank}: {check}");
                    if b.logged_with("share_union_written", json!({"nodes": 2})) {
                        assert_eq!(check["checked"], true, "{check} {}", b.stderr);
                        unions += 1;
                    }
                    if b.events_named("share_incomplete").iter().any(|e| {
                        e["reason"]
                            .as_str()
                            .unwrap()
                            .contains("differ from the manifest")
                    }) {
                        fallbacks += 1;
                    }
                    runs += 1;
                }
                (runs, unions, fallbacks)
            })
        })
        .collect();
    // Meanwhile this process reads the share as fast as it can, through the
    // same code keepwrap reads it with: every union it accepts must hold
    // each node's entries complete and from one single publication.
    let (mut accepted, mut refused) = (0, 0);
    while handles.iter().any(|h| !h.is_finished()) {
        let Some(cluster) = std::fs::read_dir(share.join("keepwrap"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok()?.file_name().into_string().ok())
        else {
            continue;
        };
        let me = keepwrap::share::Node { nnodes: 2, rank: 0 };
        match keepwrap::share::gather(&share, &cluster, me, keepwrap::engine::SGLANG).unwrap() {
            keepwrap::share::Gathered::Incomplete(why) => {
                if why
                    .iter()
                    .any(|(_, w)| matches!(w, keepwrap::share::NotPublished::Differs(_)))
                {
                    refused += 1;
                }
            }
            keepwrap::share::Gathered::Complete(dirs) => {
                for d in dirs {
                    let keepwrap::unify::Outcome::Unified(u) = d.outcome else {
                        panic!("{:?}", d.outcome);
                    };
                    let obj: serde_json::Value = serde_json::from_slice(&u.bytes).unwrap();
                    for r in 0..2 {
                        let prefix = format!("('op', 'node{r}',");
                        let versions: Vec<&serde_json::Value> = obj
                            .as_object()
                            .unwrap()
                            .iter()
                            .filter(|(k, _)| k.starts_with(&prefix))
                            .map(|(_, v)| &v[1])
                            .collect();
                        assert_eq!(versions.len(), ENTRIES, "node {r} complete");
                        assert!(all_equal(&versions), "node {r}: one publication");
                    }
                    accepted += 1;
                }
            }
        }
    }
    let results: Vec<(u32, u32, u32)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("(runs, unions taken, publications refused mid-replace) per node: {results:?}");
    eprintln!("reader: {accepted} unions accepted, {refused} reads refused mid-replace");
    assert!(accepted > 0);
    assert!(
        results.iter().any(|r| r.1 > 0),
        "some boots took a union: {results:?}"
    );
}

/// `nnodes` and `node-rank` in the `--config` file of an SGLang server
/// launch: each node is its own node of two, and the share says so.
#[test]
fn nodes_named_in_the_config_file_are_each_a_node_of_the_share() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let port = free_port();
    let nodes: Vec<Running> = (0..2)
        .map(|rank| {
            let home = t.path().join(format!("node{rank}"));
            std::fs::create_dir_all(&home).unwrap();
            std::fs::write(
                home.join("c.yaml"),
                format!("nnodes: 2\nnode-rank: {rank}\ndist-init-addr: 127.0.0.1:{port}\n"),
            )
            .unwrap();
            let mut cmd = crate::fingerprint_e2e::kw(&home, &home);
            cmd.arg("--share")
                .arg(&share)
                .args([
                    "--done",
                    "exit",
                    "--",
                    "python3",
                    "-m",
                    "sglang.launch_server",
                ])
                .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
                .args(["--tp", "2", "--ep", "2", "--gate", "stock", "--offline"])
                .args(["--config", "c.yaml"]);
            Running::spawn(&mut cmd)
        })
        .collect();
    for node in nodes {
        let out = node.finish(Duration::from_secs(60));
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    let out = Command::new(BIN)
        .args(["share-status", "--json", "--share"])
        .arg(&share)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 1, "{v}");
    assert_eq!(clusters[0]["nnodes"], 2, "{v}");
    let ranks: Vec<u64> = clusters[0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1], "{v}");
}
