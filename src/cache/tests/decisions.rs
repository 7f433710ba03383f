//! Prune's decisions, file by file.

use super::*;
use serde_json::json;

#[test]
fn signed_for_this_launch_is_kept() {
    let t = tree(2);
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert_eq!(s.signed.len(), 2);
    assert!(!s.unchanged);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 2, "{logs}");
    assert_eq!(r.removed, 0);
    assert!(logs.has("kept", json!({"path": rank(0)})), "{logs}");
    assert!(
        logs.has("pruned", json!({"kept": 2, "removed": 0, "leftovers": 0})),
        "{logs}"
    );
    assert!(exists(t.path(), &rank(0)) && exists(t.path(), &sidecar_of(&rank(1))));
}

#[test]
fn no_sidecar_is_removed() {
    let t = tree(1);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 1));
    assert!(
        logs.said("removed", &rank(0), "no sidecar (unsigned)"),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)));
}

#[test]
fn other_fingerprint_is_removed_with_its_sidecar() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(OTHER)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.said(
            "removed",
            &rank(0),
            "signed for another launch (fingerprint 8c01d2e4...)"
        ),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)) && !exists(t.path(), &sidecar_of(&rank(0))));
    // the sidecar beside a removed file is not counted as a leftover
    assert_eq!(r.leftovers, 0);
}

#[test]
fn bytes_changed_after_signing_are_removed() {
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    // same size, other bytes
    let b0 = body("r0").replace("r0", "x0");
    put(t.path(), &rank(0), &b0);
    // other size
    put(t.path(), &rank(1), &body("longer"));
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2));
    assert!(
        logs.said("removed", &rank(0), "changed after signing (sha256 ")
            && logs.says("... != signed "),
        "{logs}"
    );
    assert!(
        logs.said("removed", &rank(1), "changed after signing (size "),
        "{logs}"
    );
}

#[test]
fn invalid_json_is_removed() {
    let t = TempDir::new().unwrap();
    put(t.path(), &rank(0), "{\"a\": ");
    forge(t.path(), &rank(0), FP);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.said("removed", &rank(0), "not valid JSON (EOF while parsing"),
        "{logs}"
    );
}

#[test]
fn not_an_object_is_removed() {
    let t = TempDir::new().unwrap();
    put(t.path(), &rank(0), "[1, 2]");
    forge(t.path(), &rank(0), FP);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.said("removed", &rank(0), "not a JSON object (an array)"),
        "{logs}"
    );
}

#[test]
fn garbage_sidecar_is_removed() {
    let t = tree(1);
    put(t.path(), &sidecar_of(&rank(0)), "1111\n");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.said("removed", &rank(0), "sidecar is not valid ("),
        "{logs}"
    );
    assert!(!exists(t.path(), &sidecar_of(&rank(0))));
}

#[test]
fn future_sidecar_format_is_removed() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let p = t.path().join(sidecar_of(&rank(0)));
    let s = fs::read_to_string(&p)
        .unwrap()
        .replacen("\"format\": 3", "\"format\": 4", 1);
    fs::write(&p, s).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.says("sidecar format 4 is newer than this keepwrap's (3)"),
        "{logs}"
    );
}

#[test]
fn old_sidecar_format_is_removed() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let p = t.path().join(sidecar_of(&rank(0)));
    let s = fs::read_to_string(&p)
        .unwrap()
        .replacen("\"format\": 3", "\"format\": 1", 1);
    fs::write(&p, s).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(logs.says("sidecar is not valid (format 1)"), "{logs}");
}

#[test]
fn tampered_set_manifest_is_not_trusted() {
    // fingerprint right, but the manifest's id does not hash its members
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let p = t.path().join(format!(".keepwrap/sets/{FP}.json"));
    let mut m: sidecar::SetManifest = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    m.members.pop();
    fs::write(&p, serde_json::to_vec(&m).unwrap()).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 2);
    assert!(
        logs.says("set incomplete (set manifest not valid (id does not match its members))"),
        "{logs}"
    );
}

#[test]
fn a_set_without_its_manifest_is_not_trusted() {
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    fs::remove_file(t.path().join(format!(".keepwrap/sets/{FP}.json"))).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(logs.says("set incomplete (set manifest missing)"), "{logs}");
}

#[test]
fn a_manifest_of_a_newer_set_breaks_the_older_one() {
    // The manifest is written last: a sign killed before it leaves the
    // sidecar of a changed member, recording its new bytes, beside the
    // manifest of the old set, which records the old ones.
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let m = t.path().join(format!(".keepwrap/sets/{FP}.json"));
    let old = fs::read(&m).unwrap();
    put(t.path(), &rank(1), &body("new"));
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    fs::write(&m, old).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.says("set incomplete (set manifest records other bytes for this file)"),
        "{logs}"
    );
}

#[test]
fn sidecar_size_does_not_depend_on_the_set() {
    let sizes: Vec<u64> = [1u32, 40]
        .iter()
        .map(|&n| {
            let t = tree(n);
            sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
            fs::metadata(t.path().join(sidecar_of(&rank(0))))
                .unwrap()
                .len()
        })
        .collect();
    assert_eq!(sizes[0], sizes[1]);
}

#[test]
fn sidecar_copied_beside_another_file_is_not_trusted() {
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    fs::copy(
        t.path().join(sidecar_of(&rank(0))),
        t.path().join(sidecar_of(&rank(1))),
    )
    .unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 0, "{logs}");
    assert!(logs.said(
        "removed",
        &rank(1),
        "sidecar is not valid (signed for another file"
    ));
}

#[test]
fn leftovers_are_removed() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    put(t.path(), &format!("{DIR}/rank_tp9_pp0_dp0.launch"), "{}");
    put(t.path(), &format!("{DIR}/.autotuner_abc123.tmp"), "{");
    put(t.path(), &format!("{DIR}/.keepwrap-1-2-3.tmp"), "{");
    put(t.path(), &format!("{DIR}/notes.txt"), "mine");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed, r.leftovers), (1, 0, 3), "{logs}");
    assert!(logs.said(
        "removed",
        &format!("{DIR}/rank_tp9_pp0_dp0.launch"),
        "orphan sidecar (no cache file beside)"
    ));
    assert!(logs.said(
        "removed",
        &format!("{DIR}/.autotuner_abc123.tmp"),
        "FlashInfer temp file left by a crash"
    ));
    assert!(logs.said(
        "removed",
        &format!("{DIR}/.keepwrap-1-2-3.tmp"),
        "keepwrap temp file left by a crash"
    ));
    assert!(
        logs.has("pruned", json!({"kept": 1, "removed": 0, "leftovers": 3})),
        "{logs}"
    );
    assert!(exists(t.path(), &format!("{DIR}/notes.txt")));
}

#[test]
fn runs_and_hidden_dirs_are_untouched() {
    let t = TempDir::new().unwrap();
    let runs = format!("{DIR}/runs/rank_tp0_pp0_dp0.20261130_120000.ab.json");
    let hidden = ".keepwrap/store/x.json";
    let hidden2 = format!("{DIR}/.git/y.json");
    for p in [runs.as_str(), hidden, hidden2.as_str()] {
        put(t.path(), p, "garbage");
    }
    put(t.path(), ".keepwrap/.autotuner_1.tmp", "");
    let (r, _) = prune_logged(t.path(), FP);
    assert_eq!((r.removed, r.leftovers), (0, 0));
    for p in [
        runs.as_str(),
        hidden,
        hidden2.as_str(),
        ".keepwrap/.autotuner_1.tmp",
    ] {
        assert!(exists(t.path(), p), "{p}");
    }
    // sign does not sign them either
    assert!(sign(t.path(), crate::engine::SGLANG, &fingerprint(FP))
        .unwrap()
        .signed
        .is_empty());
}

#[test]
fn is_cache_file_rules() {
    assert!(is_cache_file(Path::new(&rank(0)), crate::engine::SGLANG));
    for ok in [
        "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0_gpuGPU-1234.json",
        "0.6.1.post2/sm90/0123456789abcdef/rank_tp3_pp0_dp1.json",
        "0.7.0rc1+cu130/sm100/ffffffffffffffff/rank_x.json",
        "unknown/sm89/0123456789abcdef/rank_tp0_pp0_dp0.json",
    ] {
        assert!(is_cache_file(Path::new(ok), crate::engine::SGLANG), "{ok}");
    }
    // Not the engine's shape: any other depth, directory or file name.
    for not in [
        "x.json",
        "rank_tp0_pp0_dp0.json",
        "config.json",
        "a/b/c/d/rank_tp0_pp0_dp0_gpuGPU-1234.json",
        "0.7.2/sm121/0123456789abcdef/config.json",
        "0.7.2/sm121/0123456789abcdef/x/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789ABCDEF/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789abcde/rank_tp0_pp0_dp0.json",
        "0.7.2/smx/0123456789abcdef/rank_tp0_pp0_dp0.json",
        "1_Pooling/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789abcdef/rank_.json",
        "0.7.2/sm121/0123456789abcdef/runs/rank_tp0_pp0_dp0.json",
    ] {
        assert!(
            !is_cache_file(Path::new(not), crate::engine::SGLANG),
            "{not}"
        );
    }
    assert!(!is_cache_file(
        Path::new("a/runs/x.json"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(
        Path::new(".keepwrap/x.json"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(
        Path::new("a/.autotuner_x.tmp"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(
        Path::new("a/x.launch"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(
        Path::new("../x.json"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(
        Path::new("/abs/x.json"),
        crate::engine::SGLANG
    ));
    assert!(!is_cache_file(Path::new(".json"), crate::engine::SGLANG));
    assert!(!is_cache_file(Path::new(""), crate::engine::SGLANG));
}
