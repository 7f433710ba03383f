use super::*;
use std::time::Instant;

use crate::engine::fingerprint::Launch;

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn node_of_reads_both_spellings() {
    assert_eq!(node_of(&os(&["p"])), Ok(Node { nnodes: 1, rank: 0 }));
    assert_eq!(
        node_of(&os(&["p", "--nnodes", "4", "--node-rank=3"])),
        Ok(Node { nnodes: 4, rank: 3 })
    );
    let err = |v: &[&str]| node_of(&os(v)).unwrap_err().to_string();
    assert_eq!(
        err(&["p", "--nnodes", "2", "--node-rank", "2"]),
        "--node-rank 2 is out of range for --nnodes 2"
    );
    assert_eq!(err(&["p", "--nnodes", "x"]), "--nnodes x is not a number");
    assert_eq!(err(&["p", "--node-rank"]), "--node-rank has no value");
    assert_eq!(
        err(&["p", "--nnodes=0"]),
        "--node-rank 0 is out of range for --nnodes 0"
    );
    assert_eq!(
        node_of(&os(&["p", "--", "--nnodes", "4"])),
        Ok(Node { nnodes: 1, rank: 0 })
    );
}

#[test]
fn the_cluster_fingerprint_leaves_out_the_node_rank_and_node_local_env() {
    use crate::engine::fingerprint::{Options, ProfileName};
    let opts = Options {
        profile: ProfileName::Sglang,
        env_prefixes: vec![],
        volatile_env: vec![],
        ignored_args: vec![],
    };
    let node_local: Vec<String> = crate::engine::fingerprint::DEFAULT_NODE_LOCAL_ENV
        .iter()
        .map(|s| s.to_string())
        .collect();
    let launch = |argv: &[&str], cache: &str| {
        let env = vec![
            (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from(cache)),
            (OsString::from("SGLANG_X"), OsString::from("1")),
        ];
        Launch::new(&opts, &os(argv), &env)
    };
    let a = launch(&["p", "--nnodes", "4", "--node-rank", "0"], "/a");
    let b = launch(&["p", "--nnodes", "4", "--node-rank=3"], "/b");
    let c = launch(&["p", "--nnodes", "2", "--node-rank", "0"], "/a");
    assert_ne!(a.fingerprint(), b.fingerprint());
    assert_eq!(
        a.cluster_fingerprint(&node_local),
        b.cluster_fingerprint(&node_local)
    );
    assert_ne!(
        a.cluster_fingerprint(&node_local),
        c.cluster_fingerprint(&node_local)
    );
    assert_ne!(a.cluster_fingerprint(&[]), b.cluster_fingerprint(&[]));
    // Without node-rank nor node-local names it is the launch fingerprint.
    let d = launch(&["p", "--tp", "4"], "/a");
    assert_eq!(&d.cluster_fingerprint(&[]), d.fingerprint());
}

#[test]
fn publications_older_than_the_age_limit_are_removed() {
    let share = tempfile::tempdir().unwrap();
    for (cluster, rank) in [("old", 0), ("old", 1), ("new", 0)] {
        let p = Publication {
            cluster: cluster.into(),
            node: Node { nnodes: 2, rank },
            files: vec![(
                format!("0.7.2/sm121/0123456789abcdef/rank_tp{rank}_pp0_dp0.json"),
                b"{}".to_vec(),
            )],
        };
        publish_to(share.path(), &p, crate::engine::SGLANG).unwrap();
    }
    for rank in 0..2 {
        let path = share
            .path()
            .join(format!("keepwrap/old/node{rank}/{MANIFEST}"));
        let mut m: Manifest = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        m.set.signed_at -= 31 * 24 * 3600;
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    }
    assert_eq!(remove_old(share.path(), DEFAULT_MAX_AGE), 2);
    assert!(!share.path().join("keepwrap/old").exists());
    let left = status(share.path()).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(
        (left[0].cluster_fingerprint.as_str(), left[0].files),
        ("new", 1)
    );
}

#[test]
fn a_slow_share_is_given_up_on() {
    let t = Instant::now();
    let r = bounded(Duration::from_millis(20), || {
        std::thread::sleep(Duration::from_secs(2));
        1
    });
    assert_eq!(r, Ok(None));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(bounded(Duration::from_secs(5), || 7), Ok(Some(7)));
}

#[test]
fn checked_path_refuses_escapes() {
    assert!(checked_path(
        "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json",
        crate::engine::SGLANG
    )
    .is_some());
    assert!(checked_path("../x/rank_tp0_pp0_dp0.json", crate::engine::SGLANG).is_none());
    assert!(checked_path("/abs/rank_tp0_pp0_dp0.json", crate::engine::SGLANG).is_none());
    assert!(checked_path("a/.hidden/rank_tp0_pp0_dp0.json", crate::engine::SGLANG).is_none());
    assert!(checked_path("a/runs/rank_tp0_pp0_dp0.json", crate::engine::SGLANG).is_none());
    assert!(checked_path("a/manifest.json", crate::engine::SGLANG).is_none());
}

#[test]
fn a_file_that_does_not_match_its_manifest_is_not_published() {
    let share = tempfile::tempdir().unwrap();
    let node = |rank| Node { nnodes: 2, rank };
    let file = |r: u32| {
        (
            format!("0.7.2/sm121/0123456789abcdef/rank_tp{r}_pp0_dp0.json"),
            format!("{{\"a{r}\": [1, 2], \"_generation\": \"x\"}}").into_bytes(),
        )
    };
    for r in 0..2 {
        let p = Publication {
            cluster: "c".into(),
            node: node(r),
            files: vec![file(r)],
        };
        publish_to(share.path(), &p, crate::engine::SGLANG).unwrap();
    }
    assert!(matches!(
        gather(share.path(), "c", node(0), crate::engine::SGLANG).unwrap(),
        Gathered::Complete(ref d) if d.len() == 1
    ));
    // A file replaced under its manifest: node 1 is not published.
    std::fs::write(
        share
            .path()
            .join("keepwrap/c/node1/0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json"),
        b"{}",
    )
    .unwrap();
    match gather(share.path(), "c", node(0), crate::engine::SGLANG).unwrap() {
        Gathered::Incomplete(m) => {
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].0, 1);
            assert!(matches!(&m[0].1, NotPublished::Differs(_)), "{}", m[0].1);
            assert!(
                m[0].1.to_string().contains("differ from the manifest"),
                "{}",
                m[0].1
            );
        }
        g => panic!("{g:?}"),
    }
}

#[test]
fn a_manifest_that_lists_part_of_its_set_is_not_published() {
    let share = tempfile::tempdir().unwrap();
    let node = |rank| Node { nnodes: 2, rank };
    let file = |tp: u32| {
        (
            format!("0.7.2/sm121/0123456789abcdef/rank_tp{tp}_pp0_dp0.json"),
            format!("{{\"a{tp}\": [1, 2], \"_generation\": \"x\"}}").into_bytes(),
        )
    };
    for r in 0..2 {
        let p = Publication {
            cluster: "c".into(),
            node: node(r),
            files: vec![file(2 * r), file(2 * r + 1)],
        };
        publish_to(share.path(), &p, crate::engine::SGLANG).unwrap();
    }
    // Node 1's manifest edited to list one of its two files: a part of
    // what it published is never taken for the whole.
    let path = share.path().join(format!("keepwrap/c/node1/{MANIFEST}"));
    let mut m: Manifest = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(m.set.members.len(), 2);
    m.set.members.pop();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    match gather(share.path(), "c", node(0), crate::engine::SGLANG).unwrap() {
        Gathered::Incomplete(m) => {
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].0, 1);
            assert_eq!(
                m[0].1.to_string(),
                "its manifest's set is not valid (id does not match its members)"
            );
        }
        g => panic!("{g:?}"),
    }
}
