//! Signing.

use super::*;
use serde_json::json;

#[test]
fn sign_twice_without_change_writes_nothing() {
    let t = tree(3);
    let first = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(!first.unchanged);
    let ino = |i: u32| {
        fs::symlink_metadata(t.path().join(sidecar_of(&rank(i))))
            .unwrap()
            .ino()
    };
    let before: Vec<u64> = (0..3).map(ino).collect();
    let second = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(second.unchanged);
    assert_eq!(second.set_id, first.set_id);
    assert_eq!(second.signed, first.signed);
    assert_eq!((0..3).map(ino).collect::<Vec<_>>(), before);
    // a change re-signs the member changed, and the set (its manifest)
    put(t.path(), &rank(1), &body("new"));
    let third = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(!third.unchanged);
    assert_ne!(third.set_id, first.set_id);
    let after: Vec<u64> = (0..3).map(ino).collect();
    assert_eq!((after[0], after[2]), (before[0], before[2]));
    assert_ne!(after[1], before[1]);
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 3);
}

#[test]
fn sign_for_another_launch_rewrites() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(OTHER)).unwrap();
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(!s.unchanged);
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
}

#[test]
fn sign_skips_what_is_not_a_json_object() {
    let t = tree(1);
    put(t.path(), &format!("{DIR}/rank_bad.json"), "nope");
    put(t.path(), &format!("{DIR}/rank_list.json"), "[]");
    put(t.path(), OTHER_RANK, &body("o"));
    let (s, logs) = capture(|| sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap());
    // Nothing of a directory holding a file that cannot be signed (a
    // partial hit next boot otherwise); other directories are signed.
    assert_eq!(s.signed, vec![PathBuf::from(OTHER_RANK)], "{logs}");
    assert!(
        logs.has(
            "dir_not_signed",
            json!({"files": 1, "dir": format!("{DIR}/")})
        ),
        "{logs}"
    );
    assert!(
        logs.said(
            "not_signed",
            &format!("{DIR}/rank_bad.json"),
            "not valid JSON ("
        ),
        "{logs}"
    );
    assert!(
        logs.said(
            "not_signed",
            &format!("{DIR}/rank_list.json"),
            "not a JSON object (an array)"
        ),
        "{logs}"
    );
}

#[test]
fn sidecar_content() {
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(t.path().join(sidecar_of(&rank(1)))).unwrap()).unwrap();
    let bytes = fs::read(t.path().join(rank(1))).unwrap();
    assert_eq!(v["format"], 3);
    assert_eq!(v["fingerprint"], FP);
    assert_eq!(v["path"], rank(1));
    assert_eq!(v["sha256"], crate::digest::sha256_hex(&bytes));
    assert_eq!(v["size"].as_u64(), Some(bytes.len() as u64));
    assert_eq!(v["keepwrap"], env!("CARGO_PKG_VERSION"));
    assert!(v["signed_at"].as_u64().unwrap() > 1_700_000_000);
    assert!(v["signed_at_utc"].as_str().unwrap().ends_with('Z'));
    let m: serde_json::Value = serde_json::from_slice(
        &fs::read(t.path().join(format!(".keepwrap/sets/{FP}.json"))).unwrap(),
    )
    .unwrap();
    // the set is the manifest's: the sidecar names none
    assert!(
        v.get("set").is_none() && v.get("committed").is_none(),
        "{v}"
    );
    assert_eq!(m["format"], 2);
    assert_eq!(m["members"].as_array().unwrap().len(), 2);
    assert_eq!(m["members"][0]["path"], rank(0));
    // the file's identity when hashed, its change time settled
    let meta = fs::metadata(t.path().join(rank(1))).unwrap();
    assert_eq!(v["stat"]["ino"].as_u64(), Some(meta.ino()));
    assert_eq!(
        v["stat"]["ctime_ns"].as_i64(),
        Some(meta.ctime() * 1_000_000_000 + meta.ctime_nsec())
    );
    // no temp files left
    let names: Vec<_> = fs::read_dir(t.path().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
}

#[test]
fn missing_root_is_empty() {
    let t = TempDir::new().unwrap();
    let root = t.path().join("nope");
    let r = prune(&root, FP).unwrap();
    assert!(r.kept.is_empty() && r.removed == 0);
    let s = sign(&root, crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(s.signed.is_empty());
}

/// A publication reads the signed files with the sha256 their set
/// manifest lists: a file that is still the one hashed at signing is not
/// hashed again; one written since (or never signed) is.
#[test]
fn signed_files_are_read_with_their_signed_hashes_and_not_hashed_again() {
    let t = tree(3);
    let report = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert_eq!(report.signed.len(), 3);
    let hashed = || crate::digest::HASHED.with(|n| n.get());
    let before = hashed();
    let read = read_signed(t.path(), crate::engine::SGLANG, FP, &report.signed).unwrap();
    assert_eq!(hashed() - before, 0, "no file hashed again");
    for (f, rel) in read.iter().zip(&report.signed) {
        let bytes = fs::read(t.path().join(rel)).unwrap();
        assert_eq!(f.bytes, bytes);
        assert_eq!(f.member.path, rel.to_str().unwrap());
        assert_eq!(f.member.sha256, crate::digest::sha256_hex(&bytes));
        assert_eq!(f.member.size, bytes.len() as u64);
    }
    // Rewritten after the sign: its own bytes' hash, not the signed one.
    put(t.path(), &rank(1), &body("new"));
    let before = hashed();
    let read = read_signed(t.path(), crate::engine::SGLANG, FP, &report.signed).unwrap();
    assert_eq!(hashed() - before, 1, "the file written since, alone");
    let now = fs::read(t.path().join(rank(1))).unwrap();
    assert_eq!(read[1].member.sha256, crate::digest::sha256_hex(&now));
    // For another launch, nothing is taken from this one's manifest.
    let before = hashed();
    read_signed(t.path(), crate::engine::SGLANG, OTHER, &report.signed).unwrap();
    assert_eq!(hashed() - before, 3);
}
