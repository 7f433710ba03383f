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
