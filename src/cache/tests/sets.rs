//! Sets: trusted whole or not at all.

use super::*;

#[test]
fn set_with_a_member_missing_is_removed_whole() {
    let t = tree(3);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    fs::remove_file(t.path().join(rank(1))).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.said(
            "removed",
            &rank(0),
            &format!("set incomplete ({}: missing)", rank(1))
        ),
        "{logs}"
    );
    assert!(
        logs.said(
            "removed",
            &rank(2),
            &format!("set incomplete ({}: missing)", rank(1))
        ),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)) && !exists(t.path(), &rank(2)));
    // and its orphan sidecar goes as a leftover
    assert_eq!(r.leftovers, 1);
}

#[test]
fn set_with_a_member_changed_is_removed_whole() {
    let t = tree(3);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    put(t.path(), &rank(2), &body("changed"));
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 3), "{logs}");
    assert!(
        logs.said("removed", &rank(2), "changed after signing"),
        "{logs}"
    );
    assert!(
        logs.said(
            "removed",
            &rank(0),
            &format!("set incomplete ({}: not trusted)", rank(2))
        ),
        "{logs}"
    );
}

#[test]
fn set_across_directories_is_one_set() {
    let t = tree(2);
    let draft = "0.6.18/sm121/aaaaaaaaaaaaaaaa/rank_tp0_pp0_dp0.json";
    put(t.path(), draft, &body("d"));
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert_eq!(s.signed.len(), 3);
    fs::remove_file(t.path().join(draft)).unwrap();
    let (r, _) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2));
}

/// Save the sidecars of a tree.
fn sidecars(root: &Path, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| fs::read(root.join(sidecar_of(&rank(i)))).unwrap())
        .collect()
}

/// Where the set manifest of launch FP is.
fn manifest_path(root: &Path) -> std::path::PathBuf {
    root.join(".keepwrap/sets").join(format!("{FP}.json"))
}

#[test]
fn crash_mid_resign_trusts_nothing() {
    // Signed {r0, r1, r2}; the engine rewrites r0; the re-sign crashes after
    // writing some of the new sidecars, before the manifest. Whichever
    // ones: r0 no longer has the bytes the committed set records, so
    // nothing is trusted.
    for written in [vec![0], vec![1], vec![0, 1], vec![1, 2]] {
        let t = tree(3);
        sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
        let old = sidecars(t.path(), 3);
        let old_manifest = fs::read(manifest_path(t.path())).unwrap();
        put(t.path(), &rank(0), &body("retuned"));
        assert!(
            !sign(t.path(), crate::engine::SGLANG, &fingerprint(FP))
                .unwrap()
                .unchanged
        );
        for i in 0..3u32 {
            if !written.contains(&i) {
                fs::write(t.path().join(sidecar_of(&rank(i))), &old[i as usize]).unwrap();
            }
        }
        fs::write(manifest_path(t.path()), &old_manifest).unwrap();
        let (r, logs) = prune_logged(t.path(), FP);
        assert_eq!(
            (r.kept.len(), r.removed),
            (0, 3),
            "written {written:?}: {logs}"
        );
    }
}

#[test]
fn crash_mid_sign_of_a_grown_set_keeps_the_set_committed_before() {
    // Signed {r0, r1}; the engine adds r2; the re-sign crashes after
    // writing some of the new sidecars, before the manifest. r0 and r1
    // still hold the bytes the committed set records: it is kept whole;
    // r2 is in no committed set.
    for written in [vec![2], vec![0], vec![0, 1], vec![0, 2]] {
        let t = tree(2);
        sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
        let old = sidecars(t.path(), 2);
        let old_manifest = fs::read(manifest_path(t.path())).unwrap();
        put(t.path(), &rank(2), &body("r2"));
        sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
        for i in 0..2u32 {
            if !written.contains(&i) {
                fs::write(t.path().join(sidecar_of(&rank(i))), &old[i as usize]).unwrap();
            }
        }
        if !written.contains(&2) {
            fs::remove_file(t.path().join(sidecar_of(&rank(2)))).unwrap();
        }
        fs::write(manifest_path(t.path()), &old_manifest).unwrap();
        let (r, logs) = prune_logged(t.path(), FP);
        assert_eq!(
            (r.kept.len(), r.removed),
            (2, 1),
            "written {written:?}: {logs}"
        );
        assert!(
            !r.kept.contains(&std::path::PathBuf::from(rank(2))),
            "{logs}"
        );
    }
}

#[test]
fn a_grown_set_writes_the_sidecar_of_its_new_member_only() {
    // Signed {r0, r1}; the engine adds r2: the sign writes r2's sidecar and
    // the manifest, and leaves r0's and r1's as they are (the same inode:
    // not written again).
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let ino = |i: u32| {
        std::os::unix::fs::MetadataExt::ino(
            &fs::symlink_metadata(t.path().join(sidecar_of(&rank(i)))).unwrap(),
        )
    };
    let before = [ino(0), ino(1)];
    put(t.path(), &rank(2), &body("r2"));
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(!s.unchanged);
    assert_eq!(s.signed.len(), 3);
    assert_eq!([ino(0), ino(1)], before);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (3, 0), "{logs}");
}

/// A sidecar of format 2, as keepwrap wrote it before format 3: with the
/// set it was signed in and the set committed then.
fn as_format_2(root: &Path, rel: &str, set: &str) {
    let path = root.join(sidecar_of(rel));
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    v["format"] = 2.into();
    v["set"] = set.into();
    v["committed"] = "ab".repeat(32).into();
    fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn a_set_of_format_2_sidecars_is_kept_and_signed_again_in_format_3() {
    // An upgrade does not cost a tune: the set ids a format 2 sidecar
    // carries are not read (the manifest lists the set), whatever they
    // say; the next sign writes each sidecar again in format 3.
    let t = tree(2);
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    as_format_2(t.path(), &rank(0), &s.set_id);
    as_format_2(t.path(), &rank(1), &"cd".repeat(32));
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (2, 0), "{logs}");
    let again = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert!(again.unchanged);
    assert_eq!(again.set_id, s.set_id);
    for i in 0..2 {
        let v: serde_json::Value =
            serde_json::from_slice(&fs::read(t.path().join(sidecar_of(&rank(i)))).unwrap())
                .unwrap();
        assert_eq!(v["format"], 3, "{v}");
        assert!(
            v.get("set").is_none() && v.get("committed").is_none(),
            "{v}"
        );
    }
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (2, 0), "{logs}");
}

#[test]
fn a_format_2_sidecar_with_other_bytes_than_the_manifest_fails_the_set() {
    // The set ids of format 2 vouch for nothing: a sidecar naming the set
    // but recording other bytes than the manifest lists fails it.
    let t = tree(2);
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    put(t.path(), &rank(0), &body("other"));
    let bytes = fs::read(t.path().join(rank(0))).unwrap();
    let path = t.path().join(sidecar_of(&rank(0)));
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    v["sha256"] = crate::digest::sha256_hex(&bytes).into();
    v["size"] = bytes.len().into();
    v["stat"] = serde_json::Value::Null;
    fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    as_format_2(t.path(), &rank(0), &s.set_id);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.said(
            "removed",
            &rank(0),
            "set incomplete (set manifest records other bytes for this file)"
        ),
        "{logs}"
    );
}

#[test]
fn resolve_sets_cascades_through_other_sets() {
    // Launch A's set {x, y} whole; launch B's set {y, w, z} lists y but y
    // carries A's, and z is missing: B is incomplete, so y goes, so A is
    // incomplete too.
    const B: &str = OTHER;
    let manifest = |fp: &str, members: &[&str]| {
        let members: Vec<Member> = members
            .iter()
            .map(|p| Member {
                path: p.to_string(),
                sha256: "a".repeat(64),
                size: 1,
            })
            .collect();
        sidecar::SetManifest {
            format: crate::SET_FORMAT,
            keepwrap: "t".into(),
            fingerprint: fp.into(),
            id: sidecar::set_id(fp, &members),
            signed_at: 0,
            members,
        }
    };
    let a = manifest(FP, &["d/x.json", "d/y.json"]);
    let b = manifest(B, &["d/w.json", "d/y.json", "d/z.json"]);
    let mk = |path: &str, m: &sidecar::SetManifest| Sidecar {
        format: crate::SIDECAR_FORMAT,
        keepwrap: "t".into(),
        fingerprint: m.fingerprint.clone(),
        path: path.into(),
        sha256: "a".repeat(64),
        size: 1,
        signed_at: 0,
        signed_at_utc: String::new(),
        stat: None,
    };
    let x = mk("d/x.json", &a);
    let y = mk("d/y.json", &a);
    let w = mk("d/w.json", &b);
    let cands = [
        Candidate {
            path: "d/x.json",
            sidecar: &x,
        },
        Candidate {
            path: "d/y.json",
            sidecar: &y,
        },
        Candidate {
            path: "d/w.json",
            sidecar: &w,
        },
    ];
    let mut manifests = judge::Manifests::new();
    manifests.insert(FP.into(), Ok(a.clone()));
    manifests.insert(B.into(), Ok(b));
    let out = judge::resolve_sets(&cands, &manifests);
    assert!(
        out[0].is_some() && out[1].is_some() && out[2].is_some(),
        "{out:?}"
    );
    // only x, y: kept
    let out = judge::resolve_sets(&cands[..2], &manifests);
    assert_eq!(out, vec![None, None]);
    // y alone: x missing
    let out = judge::resolve_sets(&cands[1..2], &manifests);
    assert_eq!(
        out[0],
        Some(Reason::SetIncomplete {
            member: "d/x.json".into(),
            why: MemberWhy::NotTrusted
        })
    );
    // no manifest for A: nothing of A kept
    manifests.remove(FP);
    let out = judge::resolve_sets(&cands[..2], &manifests);
    assert_eq!(out[0], Some(Reason::SetManifest("missing".into())));
}
