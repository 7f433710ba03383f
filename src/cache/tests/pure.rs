//! The decisions without I/O.

use super::*;

#[test]
fn json_object_entries_counts_and_classifies() {
    assert_eq!(json::json_object_entries(body("x").as_bytes()), Ok(2));
    assert_eq!(json::json_object_entries(b"{}"), Ok(0));
    assert_eq!(
        json::json_object_entries(b"{\"_records\": {}, \"a\": 1}"),
        Ok(1)
    );
    assert_eq!(
        json::json_object_entries(b" [1]"),
        Err(JsonErr::NotObject("an array"))
    );
    assert_eq!(
        json::json_object_entries(b"null"),
        Err(JsonErr::NotObject("null"))
    );
    assert_eq!(
        json::json_object_entries(b"3"),
        Err(JsonErr::NotObject("a number"))
    );
    assert!(matches!(
        json::json_object_entries(b"{} {}"),
        Err(JsonErr::Invalid(_))
    ));
    assert!(matches!(
        json::json_object_entries(b""),
        Err(JsonErr::Invalid(_))
    ));
    assert!(matches!(
        json::json_object_entries(b"{\"a\": NaNa}"),
        Err(JsonErr::Invalid(_))
    ));
    // FlashInfer's loader reads _metadata and _records as dicts
    assert_eq!(
        json::json_object_entries(b"{\"_metadata\": 5, \"a\": [1]}"),
        Err(JsonErr::BadMeta("_metadata", "a number"))
    );
    assert_eq!(
        json::json_object_entries(b"{\"a\": [1], \"_records\": [1]}"),
        Err(JsonErr::BadMeta("_records", "an array"))
    );
    assert_eq!(
        json::json_object_entries(b"{\"a\": [1], \"_generation\": {}}"),
        Err(JsonErr::BadMeta("_generation", "an object"))
    );
    assert_eq!(
        json::json_object_entries(b"{\"_metadata\": {\"x\": 1.5e300}, \"_generation\": \"ab\"}"),
        Ok(0)
    );
    // Deeper than serde_json's limit (128): Python's loader raises
    // RecursionError on far less than this.
    let deep = [b"{\"k\": ".as_slice(), &[b'['; 5000], &[b']'; 5000], b"}"].concat();
    assert!(matches!(
        json::json_object_entries(&deep),
        Err(JsonErr::Invalid(e)) if e.contains("recursion limit")
    ));
    let ok = [b"{\"k\": ".as_slice(), &[b'['; 100], &[b']'; 100], b"}"].concat();
    assert_eq!(json::json_object_entries(&ok), Ok(1));
    // Python's json.dump writes these
    assert_eq!(
        json::json_object_entries(b"{\"a\": [NaN, Infinity, -Infinity], \"NaN\": \"Infinity\"}"),
        Ok(2)
    );
}

#[test]
fn entry_count_reads_a_file() {
    let t = tree(1);
    assert_eq!(entry_count(&t.path().join(rank(0))), Ok(2));
    assert!(entry_count(&t.path().join("missing.json")).is_err());
    let link = t.path().join("link.json");
    std::os::unix::fs::symlink(t.path().join(rank(0)), &link).unwrap();
    assert_eq!(
        entry_count(&link).map_err(|e| e.to_string()),
        Err("unreadable (a symlink)".to_string())
    );
}

/// A well-formed sidecar of launch `fp` for `rel`.
fn sidecar_bytes(fp: &str, rel: &str) -> Vec<u8> {
    sidecar::to_bytes(&Sidecar {
        format: crate::SIDECAR_FORMAT,
        keepwrap: "test".into(),
        fingerprint: fp.into(),
        path: rel.into(),
        sha256: "ab".repeat(32),
        size: 3,
        signed_at: 0,
        signed_at_utc: "1970-01-01T00:00:00Z".into(),
        stat: None,
    })
}

#[test]
fn judge_sidecar_or_foreign_says_what_the_two_judgements_said() {
    let rel = rank(0);
    let is = |p: &str| p == rel;
    let mine = sidecar_bytes(FP, &rel);
    let theirs = sidecar_bytes(OTHER, &rel);
    // This launch's and another's, well formed: the sidecar, and whose.
    let (sc, foreign) = judge::judge_sidecar_or_foreign(&mine, &fingerprint(FP), is).unwrap();
    assert_eq!((sc.fingerprint.as_str(), foreign), (FP, false));
    assert_eq!(Ok(sc), judge::judge_sidecar(&mine, &fingerprint(FP), is));
    let (sc, foreign) = judge::judge_sidecar_or_foreign(&theirs, &fingerprint(FP), is).unwrap();
    assert_eq!((sc.fingerprint.as_str(), foreign), (OTHER, true));
    assert_eq!(Ok(sc), judge::judge_sidecar_for(&theirs, None, is));
    // Signed for another file: this launch's reason as is, another's
    // wrapped with its launch.
    let elsewhere = |_: &str| false;
    let why = judge::judge_sidecar(&mine, &fingerprint(FP), elsewhere).unwrap_err();
    assert!(matches!(&why, Reason::SidecarGarbage(w) if w.starts_with("signed for another file")));
    assert_eq!(
        judge::judge_sidecar_or_foreign(&mine, &fingerprint(FP), elsewhere),
        Err(why.clone())
    );
    assert_eq!(
        judge::judge_sidecar_or_foreign(&theirs, &fingerprint(FP), elsewhere),
        Err(Reason::OtherLaunchBad("8c01d2e4".into(), Box::new(why)))
    );
    // Not whole: the head says why (format, launch), else the parse.
    let head_only = format!("{{\"format\": 2, \"fingerprint\": \"{OTHER}\"}}");
    assert!(matches!(
        judge::judge_sidecar_or_foreign(head_only.as_bytes(), &fingerprint(FP), is),
        Err(Reason::OtherLaunchBad(fp8, why)) if fp8 == "8c01d2e4" && matches!(*why, Reason::SidecarGarbage(_))
    ));
    assert_eq!(
        judge::judge_sidecar_or_foreign(b"{\"format\": 7, \"whatever\": []}", &fingerprint(FP), is),
        Err(Reason::SidecarFuture(7))
    );
    let old =
        String::from_utf8(mine.clone())
            .unwrap()
            .replacen("\"format\": 3", "\"format\": 1", 1);
    assert_eq!(
        judge::judge_sidecar(old.as_bytes(), &fingerprint(FP), is),
        Err(Reason::SidecarGarbage("format 1".into()))
    );
    assert_eq!(
        judge::judge_sidecar_or_foreign(old.as_bytes(), &fingerprint(FP), is),
        Err(Reason::SidecarGarbage("format 1".into()))
    );
    assert!(matches!(
        judge::judge_sidecar_or_foreign(b"{\"format\": 2", &fingerprint(FP), is),
        Err(Reason::SidecarGarbage(_))
    ));
}

#[test]
fn judge_sidecar_order_of_checks() {
    let other = format!("{{\"format\": 2, \"fingerprint\": \"{OTHER}\"}}");
    assert_eq!(
        judge::judge_sidecar(other.as_bytes(), &fingerprint(FP), |_| true)
            .unwrap_err()
            .to_string(),
        "signed for another launch (fingerprint 8c01d2e4...)"
    );
    // a future format is judged before anything else in it
    assert_eq!(
        judge::judge_sidecar(
            b"{\"format\": 7, \"whatever\": []}",
            &fingerprint(FP),
            |_| true
        )
        .unwrap_err(),
        Reason::SidecarFuture(7)
    );
    assert!(matches!(
        judge::judge_sidecar(b"{\"format\": 2}", &fingerprint(FP), |_| true).unwrap_err(),
        Reason::SidecarGarbage(_)
    ));
}
