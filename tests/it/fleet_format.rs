//! The fleet's format: a bucket written by a keepwrap of the format before
//! (format 1: a set object with a file list of its own) holds no set for
//! this keepwrap. Its first pod says so in one line, boots cold and
//! publishes its set in format 2 in HEAD's place; the pods after it boot
//! warm. Needs moto (`KEEPWRAP_TEST_S3`), as `fleet.rs`.
#![cfg_attr(not(feature = "failpoints"), allow(dead_code, unused_imports))]

use crate::common;
use crate::fleet::{assert_warm_from, first_pod, head_set, moto, pod, sha256};

use common::*;
use serde_json::json;

/// What a keepwrap of format 1 wrote for the set `v2` (an object of
/// format 2, as published now): its set object (compact, files sorted by
/// path) and its id.
fn format_1_of(v2: &serde_json::Value) -> (Vec<u8>, String) {
    let files: Vec<serde_json::Value> = v2["set"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"path": m["path"], "sha256": m["sha256"], "size": m["size"]}))
        .collect();
    // serde_json's map keeps the keys sorted: the fields are written by
    // hand, in format 1's order.
    let bytes = format!(
        r#"{{"format":1,"profile":{},"fingerprint":{},"files":{}}}"#,
        v2["profile"],
        v2["set"]["fingerprint"],
        serde_json::to_string(&files).unwrap()
    )
    .into_bytes();
    let id = sha256(&bytes);
    (bytes, id)
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_bucket_of_format_1_restores_nothing_says_so_and_its_next_set_is_of_format_2() {
    let Some(ep) = moto() else { return };
    let (b, _h1, _p1) = first_pod(&ep);
    let dir = b.launch_dir();
    // The bucket as a keepwrap of format 1 left it: its set object and
    // HEAD, over the same blobs; no object of format 2.
    let v2_id = head_set(&b, &dir);
    let v2: serde_json::Value =
        serde_json::from_slice(&b.get(&format!("{dir}sets/{v2_id}.json")).1).unwrap();
    assert_eq!(v2["format"], 2, "{v2}");
    let (v1, v1_id) = format_1_of(&v2);
    b.delete(&format!("{dir}sets/{v2_id}.json"));
    b.put(&format!("{dir}sets/{v1_id}.json"), &v1);
    let old_head = format!(r#"{{"format":1,"set":"{v1_id}"}}"#);
    b.put(&format!("{dir}HEAD"), old_head.as_bytes());

    // The first pod after the upgrade: no set, said once, a cold boot.
    let h2 = home();
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    let said: Vec<&str> = p2
        .stderr
        .lines()
        .filter(|l| l.contains("\"fleet_other_format\""))
        .collect();
    assert_eq!(said.len(), 1, "one line: {}", p2.stderr);
    assert!(
        p2.logged_with(
            "fleet_other_format",
            json!({"key": format!("{dir}HEAD"), "format": 1, "reads": 2})
        ),
        "{}",
        p2.stderr
    );
    assert!(!p2.has_event("fleet_restored"), "{}", p2.stderr);
    assert!(!p2.has_event("fleet_restore_failed"), "{}", p2.stderr);
    assert!(p2.tuned() > 0, "a cold boot: {}", p2.stderr);
    // It publishes its set in format 2 in HEAD's place.
    assert!(p2.has_event("fleet_published"), "{}", p2.stderr);
    let (s, head) = b.get(&format!("{dir}HEAD"));
    assert_eq!(s, 200);
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    assert_eq!(head["format"], 2, "{head}");
    let new = head_set(&b, &dir);
    assert_ne!(new, v1_id);
    let set = b.get(&format!("{dir}sets/{new}.json")).1;
    assert_eq!(sha256(&set), new, "content addressed");
    let set: serde_json::Value = serde_json::from_slice(&set).unwrap();
    assert_eq!(set["format"], 2, "{set}");
    assert_eq!(set["set"]["members"].as_array().unwrap().len(), 2, "{set}");
    assert!(
        p2.logged_with("fleet_published", json!({"set": new})),
        "{}",
        p2.stderr
    );

    // The next pod restores that set whole and tunes nothing.
    let h3 = home();
    let p3 = boot(&mut pod(h3.path(), &ep, &b.url(), &[]));
    assert_eq!(p3.code, 0, "{}", p3.stderr);
    assert!(
        p3.logged_with("fleet_restored", json!({"files": 2, "set": new})),
        "{}",
        p3.stderr
    );
    assert_warm_from(&p3, &p2);
    assert!(!p3.has_event("fleet_other_format"), "{}", p3.stderr);
}
