//! Attacks on how prune decides that this launch's set is doomed: a file of
//! this launch that fails its own check (bytes changed) and that the
//! launch's set manifest lists makes every later file of the launch go
//! unread (`set incomplete (<it>: not trusted)`). Whether the manifest lists
//! it is read without a copy of each member, with the same checks as the
//! set check's (its id among them): a manifest that fails them dooms
//! nothing, and the set check then says why the set goes. Each case plants a set signed for this launch
//! (forged sidecars and manifest), tampers with it, and checks exactly what
//! is kept and what is removed, and why: never a partial hit, nothing good
//! lost, nothing not this launch's removed, no panic.

use crate::common;
use crate::harden;

use std::path::{Path, PathBuf};

use common::*;
use harden::*;
use serde_json::{json, Value};

const R0: &str = "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json";
const R1: &str = "0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json";
const R2: &str = "0.7.2/sm121/0123456789abcdef/rank_tp2_pp0_dp0.json";
/// A directory of another launch's set (walked after DIR).
const F0: &str = "0.7.2/sm121/fedcba9876543210/rank_tp0_pp0_dp0.json";
const F1: &str = "0.7.2/sm121/fedcba9876543210/rank_tp1_pp0_dp0.json";

/// The launch every case runs: `sh -c 'exit 0'`.
const ARGV: [&str; 3] = ["sh", "-c", "exit 0"];

fn bytes_of(rel: &str) -> Vec<u8> {
    format!("{{\n  \"_metadata\": {{\"v\": \"1\"}},\n  \"k\": [\"{rel}\", 1]\n}}").into_bytes()
}

/// The same size as [`bytes_of`], other bytes.
fn tampered(rel: &str) -> Vec<u8> {
    let mut b = bytes_of(rel);
    let i = b.len() - 4;
    b[i] = b'2';
    b
}

/// The members of a set of `rels` (sorted), each holding [`bytes_of`].
fn members(rels: &[&str]) -> Vec<(String, String, u64)> {
    let mut m: Vec<_> = rels
        .iter()
        .map(|r| {
            let b = bytes_of(r);
            (r.to_string(), sha256_hex(&b), b.len() as u64)
        })
        .collect();
    m.sort();
    m
}

/// Plant the files of `rels` with sidecars signing them for launch `fp` as
/// one set; returns that set's id (its manifest is not written).
fn plant_set(root: &Path, fp: &str, rels: &[&str]) -> String {
    let id = set_id(fp, &members(rels));
    for r in rels {
        let b = bytes_of(r);
        put(root, r, &b);
        let sc = forged_sidecar(fp, r, &b);
        put(
            root,
            &sidecar_rel(r),
            &serde_json::to_vec_pretty(&sc).unwrap(),
        );
    }
    id
}

/// The valid manifest of the set of `rels` for launch `fp`.
fn manifest_of(fp: &str, rels: &[&str]) -> Value {
    let m = members(rels);
    json!({
        "format": 2,
        "keepwrap": "0.1.0",
        "fingerprint": fp,
        "id": set_id(fp, &m),
        "signed_at": 1,
        "members": m.iter().map(|(p, s, n)| json!({"path": p, "sha256": s, "size": n})).collect::<Vec<_>>(),
    })
}

fn manifest_path(root: &Path, fp: &str) -> std::path::PathBuf {
    root.join(format!(".keepwrap/sets/{fp}.json"))
}

fn put_manifest_bytes(root: &Path, fp: &str, bytes: &[u8]) {
    let p = manifest_path(root, fp);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// One launch on `root`: exits 0, no panic. At debug level: each file's
/// prune line is read.
fn run(root: &Path) -> Finished {
    let b = boot(
        keepwrap(root)
            .env("KEEPWRAP_LOG", "debug")
            .args(["--done", "exit", "--"])
            .args(ARGV),
    );
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert_no_panic(&b.stderr, "prune");
    b
}

/// The reason of the one `removed` event naming `rel`.
fn removed_why(b: &Finished, rel: &str) -> String {
    let e: Vec<Value> = b
        .events_named("removed")
        .into_iter()
        .filter(|e| e["path"] == rel)
        .collect();
    assert_eq!(e.len(), 1, "one removed line for {rel}: {}", b.stderr);
    e[0]["reason"].as_str().unwrap().to_string()
}

fn kept(b: &Finished) -> Vec<String> {
    let mut k: Vec<String> = b
        .events_named("kept")
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    k.sort();
    k
}

fn exists(root: &Path, rel: &str) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok()
}

/// The bytes of `good` after `f` edited it.
fn edited(good: &Value, f: &dyn Fn(&mut Value)) -> Vec<u8> {
    let mut v = good.clone();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// A scratch directory whose `root` holds [`set_of_three_r0_tampered`].
fn tampered_root(fp: &str) -> (tempfile::TempDir, PathBuf) {
    let t = scratch();
    let root = t.path().join("root");
    set_of_three_r0_tampered(&root, fp);
    (t, root)
}

/// R0, R1, R2 signed as one set; R0 then tampered with (same size, other
/// bytes): the first judged, it fails its own check.
fn set_of_three_r0_tampered(root: &Path, fp: &str) {
    plant_set(root, fp, &[R0, R1, R2]);
    put(root, R0, &tampered(R0));
}

/// Nothing of the set is kept, R0 goes for its bytes, and R1, R2 as members
/// of an incomplete set (why: one of `says`, prefixes).
fn assert_all_gone(b: &Finished, root: &Path, says: &[&str], what: &str) {
    assert_eq!(kept(b), Vec::<String>::new(), "{what}: {}", b.stderr);
    assert!(
        b.logged_with("pruned", json!({"kept": 0, "removed": 3})),
        "{what}: {}",
        b.stderr
    );
    assert!(
        removed_why(b, R0).starts_with("changed after signing (sha256"),
        "{what}: {}",
        b.stderr
    );
    for r in [R1, R2] {
        let why = removed_why(b, r);
        assert!(
            says.iter().any(|s| why.starts_with(s)),
            "{what}: {r}: {why}"
        );
        assert!(!exists(root, r), "{what}: {r} removed");
    }
    assert!(!exists(root, R0), "{what}");
    assert!(whole_sets(root).is_empty(), "{what}: nothing trusted");
}

/// The reference: a valid manifest lists the tampered R0, so R1 and R2 go
/// unread, each naming R0.
#[test]
fn a_listed_member_that_fails_dooms_the_rest_of_its_set() {
    let fp = fingerprint_of(&ARGV);
    let (_t, root) = tampered_root(&fp);
    put_manifest(&root, &manifest_of(&fp, &[R0, R1, R2]));
    let b = run(&root);
    assert_all_gone(
        &b,
        &root,
        &[&format!("set incomplete ({R0}: not trusted)")],
        "valid",
    );
}

/// A file of this launch from an older set, that the manifest does not
/// list, fails its check: the whole set the manifest lists stays. Its path
/// written anywhere in the manifest but among its members (an extra field,
/// a `members` key nested in another object) does not doom it; nor do
/// escapes in the members' paths and keys hide or change a member, nor
/// fields the light read does not know.
#[test]
fn a_failing_file_the_manifest_does_not_list_loses_nothing() {
    let fp = fingerprint_of(&ARGV);
    let m = members(&[R1, R2]);
    let id = set_id(&fp, &m);
    let escaped = |p: &str| p.replace("rank_", "\\u0072ank_");
    let plain = manifest_of(&fp, &[R1, R2]);
    let texts: Vec<(&str, Vec<u8>)> = vec![
        ("plain", serde_json::to_vec(&plain).unwrap()),
        ("R0 in extra fields", {
            let mut v = plain.clone();
            v["note"] = json!({"members": [{"path": R0}]});
            v["members_old"] = json!([{"path": R0, "sha256": "0".repeat(64), "size": 1}]);
            v["members"][0]["also"] = json!({"path": R0});
            serde_json::to_vec(&v).unwrap()
        }),
        (
            "escaped paths and keys",
            format!(
                r#"{{"format":2,"keepwrap":"0.1.0","fingerprint":"{fp}","id":"{id}","signed_at":1,"members":[{{"\u0070ath":"{}","sha256":"{}","size":{}}},{{"path":"{}","sha256":"{}","size":{}}}]}}"#,
                escaped(&m[0].0),
                m[0].1,
                m[0].2,
                escaped(&m[1].0),
                m[1].1,
                m[1].2
            )
            .into_bytes(),
        ),
    ];
    for (what, text) in texts {
        let t = scratch();
        let root = t.path().join("root");
        plant_set(&root, &fp, &[R1, R2]);
        // R0: signed alone in an older set, then changed.
        plant_set(&root, &fp, &[R0]);
        put(&root, R0, &tampered(R0));
        put_manifest_bytes(&root, &fp, &text);
        let b = run(&root);
        assert_eq!(
            kept(&b),
            vec![R1.to_string(), R2.to_string()],
            "{what}: {}",
            b.stderr
        );
        assert!(
            removed_why(&b, R0).starts_with("changed after signing (sha256"),
            "{what}: {}",
            b.stderr
        );
        assert!(
            b.logged_with("pruned", json!({"kept": 2, "removed": 1})),
            "{what}: {}",
            b.stderr
        );
        assert!(
            exists(&root, R1) && exists(&root, R2) && !exists(&root, R0),
            "{what}"
        );
    }
}

/// Manifests that fail the set check's checks but parse (a set that is
/// never kept): the tampered R0 dooms nothing, R1 and R2 go at the set
/// check, each with one line naming the manifest, and no panic on odd
/// paths.
#[test]
fn a_manifest_that_fails_its_checks_keeps_nothing_and_says_why() {
    let fp = fingerprint_of(&ARGV);
    let good = manifest_of(&fp, &[R0, R1, R2]);
    let good_text = serde_json::to_string(&good).unwrap();
    let with = |f: &dyn Fn(&mut Value)| edited(&good, f);
    let id = good["id"].as_str().unwrap().to_string();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a wrong id", with(&|v| v["id"] = json!("0".repeat(64)))),
        (
            "no id",
            with(&|v| {
                v.as_object_mut().unwrap().remove("id");
            }),
        ),
        (
            "the id twice",
            good_text
                .replacen("\"id\":", &format!("\"id\":\"{id}\",\"id\":"), 1)
                .into_bytes(),
        ),
        ("invalid UTF-8 in keepwrap", {
            let (a, b) = good_text.split_once("0.1.0").unwrap();
            [a.as_bytes(), b"0.1.0\xff\xfe", b.as_bytes()].concat()
        }),
        (
            "a member sha256 not hex",
            with(&|v| v["members"][1]["sha256"] = json!("ZZ")),
        ),
        (
            "a member size a float",
            with(&|v| v["members"][2]["size"] = json!(1.5)),
        ),
        (
            "a member of a path alone",
            with(&|v| v["members"][2] = json!({"path": R2})),
        ),
        (
            "a member an array of one path",
            with(&|v| v["members"][2] = json!([R2])),
        ),
        (
            "an empty path first",
            with(&|v| {
                v["members"]
                    .as_array_mut()
                    .unwrap()
                    .insert(0, json!({"path": "", "sha256": "0".repeat(64), "size": 1}));
            }),
        ),
        (
            "a path escaping the root first",
            with(&|v| {
                v["members"].as_array_mut().unwrap().insert(
                    0,
                    json!({"path": "../../etc/x.json", "sha256": "0".repeat(64), "size": 1}),
                );
            }),
        ),
        (
            "non-ASCII paths around R0",
            with(&|v| {
                let a = v["members"].as_array_mut().unwrap();
                a.insert(0, json!({"path": "0.7.2/sm121/0123456789abcdef/rank_tp\u{e9}.json", "sha256": "0".repeat(64), "size": 1}));
                a.insert(0, json!({"path": "0.7.2/sm121/0123456789abcdef/rank_\u{1f600}.json", "sha256": "0".repeat(64), "size": 1}));
                a.sort_by(|x, y| x["path"].as_str().cmp(&y["path"].as_str()));
            }),
        ),
    ];
    for (what, text) in cases {
        let (_t, root) = tampered_root(&fp);
        put_manifest_bytes(&root, &fp, &text);
        let b = run(&root);
        assert_all_gone(
            &b,
            &root,
            &["set incomplete (set manifest not valid ("],
            what,
        );
    }
}

/// Manifests neither read takes, or that the light read refuses: nothing
/// dooms R1 and R2 early, they go at the set check, saying why.
#[test]
fn a_manifest_the_light_read_refuses_keeps_nothing_either() {
    let fp = fingerprint_of(&ARGV);
    let other = "ab".repeat(32);
    let good = manifest_of(&fp, &[R0, R1, R2]);
    let good_text = serde_json::to_string(&good).unwrap();
    let with = |f: &dyn Fn(&mut Value)| edited(&good, f);
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "another launch's manifest",
            serde_json::to_vec(&manifest_of(&other, &[R0, R1, R2])).unwrap(),
            "set incomplete (set manifest not valid (signed for another launch))".into(),
        ),
        (
            "members unsorted",
            with(&|v| v["members"].as_array_mut().unwrap().swap(0, 2)),
            "set incomplete (set manifest not valid (members are not sorted))".into(),
        ),
        (
            "a member twice",
            with(&|v| {
                let a = v["members"].as_array_mut().unwrap();
                let m = a[0].clone();
                a.insert(0, m);
            }),
            "set incomplete (set manifest not valid (members are not sorted))".into(),
        ),
        (
            "members twice",
            good_text
                .replacen("\"members\":", "\"members\":[],\"members\":", 1)
                .into_bytes(),
            "set incomplete (set manifest not valid (duplicate field `members`".into(),
        ),
        (
            "format 2.0",
            good_text
                .replacen("\"format\":2", "\"format\":2.0", 1)
                .into_bytes(),
            "set incomplete (set manifest not valid (invalid type: floating point".into(),
        ),
        (
            // Every member in the array form serde takes for a struct:
            // a valid manifest, so R0 dooms the rest.
            "members as arrays",
            with(&|v| {
                for m in v["members"].as_array_mut().unwrap() {
                    *m = json!([m["path"], m["sha256"], m["size"]]);
                }
            }),
            format!("set incomplete ({R0}: not trusted)"),
        ),
    ];
    for (what, text, says) in cases {
        let (_t, root) = tampered_root(&fp);
        put_manifest_bytes(&root, &fp, &text);
        let b = run(&root);
        assert_all_gone(&b, &root, &[&says], what);
    }
}

/// The manifest in the array form the full parse takes, the set whole: it
/// is kept (so the case above tests a manifest the light read refuses and
/// the set check takes).
#[test]
fn a_whole_set_whose_manifest_members_are_arrays_is_kept() {
    let fp = fingerprint_of(&ARGV);
    let t = scratch();
    let root = t.path().join("root");
    plant_set(&root, &fp, &[R0, R1, R2]);
    let mut v = manifest_of(&fp, &[R0, R1, R2]);
    for m in v["members"].as_array_mut().unwrap() {
        *m = json!([m["path"], m["sha256"], m["size"]]);
    }
    put_manifest(&root, &v);
    let b = run(&root);
    assert_eq!(kept(&b), vec![R0, R1, R2], "{}", b.stderr);
}

/// `.keepwrap/sets` a symlink to a directory holding a valid manifest of
/// the set, and a manifest larger than keepwrap reads: neither is read (no
/// early doom); the set is not kept, and the link's target is left alone.
#[test]
fn a_linked_sets_directory_or_a_huge_manifest_is_not_read() {
    let fp = fingerprint_of(&ARGV);
    // The link.
    let (t, root) = tampered_root(&fp);
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let text = serde_json::to_vec(&manifest_of(&fp, &[R0, R1, R2])).unwrap();
    std::fs::write(elsewhere.join(format!("{fp}.json")), &text).unwrap();
    std::fs::create_dir_all(root.join(".keepwrap")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join(".keepwrap/sets")).unwrap();
    let b = run(&root);
    assert_all_gone(
        &b,
        &root,
        &["set incomplete (set manifest missing)"],
        "sets a symlink",
    );
    assert_eq!(
        std::fs::read(elsewhere.join(format!("{fp}.json"))).unwrap(),
        text,
        "the link's target is left alone"
    );
    // A manifest of 256 MiB and a byte (sparse): not read.
    let (_t, root) = tampered_root(&fp);
    put_manifest_bytes(&root, &fp, b"");
    std::fs::File::options()
        .write(true)
        .open(manifest_path(&root, &fp))
        .unwrap()
        .set_len((256 << 20) + 1)
        .unwrap();
    let b = run(&root);
    assert_all_gone(
        &b,
        &root,
        &["set incomplete (set manifest unreadable ("],
        "huge manifest",
    );
}

/// This launch's manifest lists, beside its tampered R0, the files of a
/// whole set of another launch: the doom of this launch's set never
/// reaches them. They are stored whole (not removed), this launch's go.
#[test]
fn a_doom_never_reaches_files_of_another_launch_its_manifest_lists() {
    let fp = fingerprint_of(&ARGV);
    let other = "ab".repeat(32);
    let t = scratch();
    let root = t.path().join("root");
    plant_set(&root, &other, &[F0, F1]);
    put_manifest(&root, &manifest_of(&other, &[F0, F1]));
    set_of_three_r0_tampered(&root, &fp);
    // Listing F0, F1 as members of this launch's set (its sidecars do not
    // name it): a valid manifest all the same.
    put_manifest(&root, &manifest_of(&fp, &[R0, R1, R2, F0, F1]));
    let b = run(&root);
    assert_eq!(kept(&b), Vec::<String>::new(), "{}", b.stderr);
    assert!(
        removed_why(&b, R0).starts_with("changed after signing (sha256"),
        "{}",
        b.stderr
    );
    for r in [R1, R2] {
        assert_eq!(
            removed_why(&b, r),
            format!("set incomplete ({R0}: not trusted)"),
            "{}",
            b.stderr
        );
    }
    let stored: Vec<String> = b
        .events_named("stored")
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stored, vec![F0, F1], "{}", b.stderr);
    assert!(
        b.events_named("removed")
            .iter()
            .all(|e| e["path"] != F0 && e["path"] != F1),
        "{}",
        b.stderr
    );
    assert!(
        b.logged_with("pruned", json!({"kept": 0, "stored": 2, "removed": 3})),
        "{}",
        b.stderr
    );
}
