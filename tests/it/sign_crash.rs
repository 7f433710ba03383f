//! A sign killed at each of its crash points, for sets that grow, change,
//! change back, mix sidecar formats 2 and 3, or have vLLM's flat layout: a
//! set's members are the files its manifest lists with the bytes their
//! sidecars record. Every case drives the built binary: a launch `sh -c SCRIPT` whose
//! "engine" copies `stage/` into the root (as an engine writes its rank
//! files), `--done exit` (sign at the engine's exit), keepwrap killed at
//! every crash point of the sign (`KEEPWRAP_FAILPOINT=sign:N`, the
//! `failpoints` feature), then a boot that writes nothing says what the
//! next launch keeps.
//!
//! The oracle after a kill: the launch's manifest on disk is the commit
//! point; when every file it lists holds the bytes it lists (read here,
//! independently of keepwrap's sidecars), the next boot keeps exactly those
//! files (nothing good lost); otherwise it keeps nothing (never a part).

use crate::common;
use crate::harden;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use harden::*;
use serde_json::{json, Value};

const D1: &str = "0.7.2/sm121/1111111111111111";
const D2: &str = "0.7.2/sm121/2222222222222222";
const D3: &str = "0.7.2/sm121/3333333333333333";

/// The engine: copy `stage/` (if any) into the root, then exit 0.
const SCRIPT: &str = "[ ! -d stage ] || cp -R stage/. root/";

fn rank(d: &str, r: u32) -> String {
    format!("{d}/rank_tp{r}_pp0_dp0.json")
}

fn body(tag: &str) -> Vec<u8> {
    format!("{{\"_metadata\": {{\"v\": \"1\"}}, \"k\": [\"{tag}\", 1]}}").into_bytes()
}

/// `keepwrap --done exit -- sh -c SCRIPT` in `base`, root `base/root`.
/// With a file `.vllm` in `base`: the vLLM profile, the flat layout
/// (`VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`).
fn launch(base: &Path) -> std::process::Command {
    let mut c = keepwrap(&base.join("root"));
    c.current_dir(base).env("KEEPWRAP_UNIFY", "off");
    if base.join(".vllm").exists() {
        c.env("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "root")
            .args(["--profile", "vllm"]);
    }
    c.args(["--done", "exit", "--", "sh", "-c", SCRIPT]);
    c
}

/// What the engine writes at its next boot (`stage/` replaced).
fn stage(base: &Path, files: &[(String, Vec<u8>)]) {
    let s = base.join("stage");
    let _ = std::fs::remove_dir_all(&s);
    std::fs::create_dir_all(&s).unwrap();
    for (rel, b) in files {
        put(&s, rel, b);
    }
}

fn kept(b: &Finished) -> BTreeSet<String> {
    b.events_named("kept")
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn fp() -> String {
    fingerprint_of(&["sh", "-c", SCRIPT])
}

/// The launch's fingerprint, as the last boot in `base` logged it.
fn fp_in(base: &Path) -> String {
    let b = boot(&mut launch(base));
    b.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The files the launch's manifest lists, when every one of them holds the
/// bytes it lists (read here); else empty: what the next boot must keep.
fn expected(root: &Path, fp: &str) -> BTreeSet<String> {
    let Some(m) = manifest(root, fp) else {
        return BTreeSet::new();
    };
    let mut out = BTreeSet::new();
    for x in m["members"].as_array().unwrap() {
        let rel = x["path"].as_str().unwrap();
        match std::fs::read(root.join(rel)) {
            Ok(b)
                if sha256_hex(&b) == x["sha256"].as_str().unwrap()
                    && b.len() as u64 == x["size"].as_u64().unwrap() =>
            {
                out.insert(rel.to_string());
            }
            _ => return BTreeSet::new(),
        }
    }
    out
}

/// A boot that writes nothing: what it keeps, which must be `expected`.
fn next_boot_keeps_what_the_manifest_commits(base: &Path, fp: &str, ctx: &str) {
    let root = base.join("root");
    let want = expected(&root, fp);
    let _ = std::fs::remove_dir_all(base.join("stage"));
    let b = boot_debug(&mut launch(base));
    assert_eq!(b.code, 0, "{ctx}: {}", b.stderr);
    assert_no_panic(&b.stderr, ctx);
    assert_eq!(
        kept(&b),
        want,
        "{ctx}: the next boot must keep exactly the set the manifest commits, whole, or nothing\n{}",
        b.stderr
    );
}

/// Every crash point of the sign of the boot whose engine writes `then`,
/// over the tree `template` (a base dir with `root/`): each from a fresh
/// copy, then the next boot. Returns the number of crash points.
fn every_sign_crash_point(
    template: &Path,
    then: &[(String, Vec<u8>)],
    fp: &str,
    ctx: &str,
) -> usize {
    for n in 1.. {
        let t = tempfile::tempdir().unwrap();
        let base = t.path();
        copy_tree(template, base);
        stage(base, then);
        let killed = boot(launch(base).env("KEEPWRAP_FAILPOINT", format!("sign:{n}")));
        if killed.code != 128 + 9 {
            assert_eq!(killed.code, 0, "{ctx} sign:{n}: {}", killed.stderr);
            eprintln!("{ctx}: {} crash points", n - 1);
            return n - 1;
        }
        next_boot_keeps_what_the_manifest_commits(base, fp, &format!("{ctx} sign:{n}"));
    }
    unreachable!()
}

/// A base dir whose launch signed `files` (the engine wrote them).
fn signed(files: &[(String, Vec<u8>)]) -> tempfile::TempDir {
    signed_as(files, false)
}

/// [`signed`], with the vLLM profile and flat layout when `vllm`.
fn signed_as(files: &[(String, Vec<u8>)], vllm: bool) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    if vllm {
        std::fs::write(t.path().join(".vllm"), "").unwrap();
    }
    stage(t.path(), files);
    let b = boot(&mut launch(t.path()));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with("signed", json!({"files": files.len()})),
        "{}",
        b.stderr
    );
    let _ = std::fs::remove_dir_all(t.path().join("stage"));
    t
}

fn f(rel: String, tag: &str) -> (String, Vec<u8>) {
    (rel, body(tag))
}

fn base_set() -> Vec<(String, Vec<u8>)> {
    vec![
        f(rank(D1, 0), "a0"),
        f(rank(D1, 1), "a1"),
        f(rank(D2, 0), "b0"),
        f(rank(D2, 1), "b1"),
    ]
}

/// Every crash point of the sign of the boot after [`base_set`] was
/// signed, whose engine writes `then`: how many.
fn after_base_set(then: &[(String, Vec<u8>)], ctx: &str) -> usize {
    let t = signed(&base_set());
    every_sign_crash_point(t.path(), then, &fp(), ctx)
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_set_grown_by_a_directory() {
    let then = [f(rank(D3, 0), "c0"), f(rank(D3, 1), "c1")];
    let n = after_base_set(&then, "grown by a directory");
    assert!(n >= 3, "{n}");
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_set_grown_inside_a_directory() {
    let then = [f(rank(D1, 2), "a2"), f(rank(D1, 3), "a3")];
    let n = after_base_set(&then, "grown inside a directory");
    assert!(n >= 3, "{n}");
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_changed_and_grown_set() {
    let then = [
        f(rank(D2, 1), "b1-retuned"),
        f(rank(D1, 0), "a0-retuned"),
        f(rank(D3, 0), "c0"),
    ];
    after_base_set(&then, "changed and grown");
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_member_changed_then_reverted() {
    // Signed {a0, a1, b0, b1}; the next boot changes a0 (signed whole);
    // the one after writes a0's first bytes back: its sign is killed at
    // every point.
    let fp = fp();
    let t = signed(&base_set());
    stage(t.path(), &[f(rank(D1, 0), "a0-changed")]);
    let b = boot(&mut launch(t.path()));
    assert!(b.logged_with("signed", json!({"files": 4})), "{}", b.stderr);
    let _ = std::fs::remove_dir_all(t.path().join("stage"));
    let then = vec![f(rank(D1, 0), "a0")];
    every_sign_crash_point(t.path(), &then, &fp, "changed then reverted");
}

/// Rewrite the sidecar of `rel` as keepwrap's format 2 wrote it: `set`
/// and `committed` added (any ids), format 2.
fn as_format_2(root: &Path, rel: &str, set: &str, committed: Option<&str>) {
    let p = root.join(sidecar_rel(rel));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["format"] = 2.into();
    v["set"] = set.into();
    if let Some(c) = committed {
        v["committed"] = c.into();
    }
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A base dir whose set's sidecars are of both formats: one of format 2
/// names the set, one names another set and a committed one, two stay 3.
fn signed_mixed(fp: &str) -> tempfile::TempDir {
    let t = signed(&base_set());
    let root = t.path().join("root");
    let id = manifest(&root, fp).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    as_format_2(&root, &rank(D1, 0), &id, None);
    as_format_2(
        &root,
        &rank(D2, 1),
        &"cd".repeat(32),
        Some(&"ef".repeat(32)),
    );
    t
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_grown_set_of_mixed_format_2_and_3_sidecars() {
    let fp = fp();
    let t = signed_mixed(&fp);
    let then = vec![f(rank(D3, 0), "c0"), f(rank(D1, 2), "a2")];
    every_sign_crash_point(t.path(), &then, &fp, "mixed formats, grown");
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_changed_set_of_mixed_format_2_and_3_sidecars() {
    let fp = fp();
    let t = signed_mixed(&fp);
    let then = vec![f(rank(D2, 0), "b0-retuned")];
    every_sign_crash_point(t.path(), &then, &fp, "mixed formats, changed");
}

const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn vrank(h: &str, r: u32) -> String {
    format!("{h}/autotune_configs_dp0_rank{r}.json")
}

/// A base dir whose vLLM flat set (two ranks and layout A's shared file
/// in one folder) is signed; its fingerprint.
fn signed_vllm() -> (tempfile::TempDir, String) {
    let base_files = vec![
        f(vrank(H1, 0), "v0"),
        f(vrank(H1, 1), "v1"),
        f(format!("{H1}/autotune_configs.json"), "shared"),
    ];
    let t = signed_as(&base_files, true);
    // (A boot that writes nothing: the set is kept, the fingerprint read.)
    let fp = fp_in(t.path());
    assert!(manifest(&t.path().join("root"), &fp).is_some());
    (t, fp)
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_grown_vllm_flat_set() {
    let (t, fp) = signed_vllm();
    let then = vec![f(vrank(H2, 0), "w0"), f(vrank(H1, 2), "v2")];
    every_sign_crash_point(t.path(), &then, &fp, "vllm grown");
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn every_crash_point_of_the_sign_of_a_changed_vllm_flat_set() {
    let (t, fp) = signed_vllm();
    let then = vec![f(vrank(H1, 1), "v1-retuned"), f(vrank(H2, 0), "w0")];
    every_sign_crash_point(t.path(), &then, &fp, "vllm changed");
}

/// Another launch on the same root (its engine writes nothing).
fn other_launch(base: &Path) -> Finished {
    let mut c = keepwrap(&base.join("root"));
    c.current_dir(base)
        .env("KEEPWRAP_UNIFY", "off")
        .args(["--done", "exit", "--", "sh", "-c", "true"]);
    boot(&mut c)
}

#[test]
fn a_set_of_format_2_sidecars_naming_other_sets_is_stored_and_restored_whole() {
    // A set signed before the upgrade (format 2 sidecars: one names the
    // set, one another set with a committed id, one a set that never
    // existed) spread over two directories, stored by another launch and
    // brought back: every byte as its manifest lists, so it comes back
    // whole and the launch's next boot keeps it whole.
    let fp = fp();
    let files = vec![
        f(rank(D1, 0), "a0"),
        f(rank(D1, 1), "a1"),
        f(rank(D2, 0), "b0"),
    ];
    let t = signed(&files);
    let root = t.path().join("root");
    let id = manifest(&root, &fp).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    as_format_2(&root, &rank(D1, 0), &id, None);
    as_format_2(&root, &rank(D1, 1), &"cd".repeat(32), Some(&id));
    as_format_2(&root, &rank(D2, 0), &"ef".repeat(32), None);
    let other = other_launch(t.path());
    assert!(
        other.logged_with("pruned", json!({"kept": 0, "stored": 3})),
        "{}",
        other.stderr
    );
    let back = boot_debug(&mut launch(t.path()));
    assert!(
        back.logged_with("restored", json!({"files": 3})),
        "{}",
        back.stderr
    );
    let again = boot_debug(&mut launch(t.path()));
    assert_eq!(
        kept(&again),
        files
            .iter()
            .map(|(r, _)| r.clone())
            .collect::<BTreeSet<_>>(),
        "{}",
        again.stderr
    );
}

#[test]
fn a_stored_set_whose_format_2_sidecar_records_other_bytes_is_not_restored() {
    // The same, but one stored sidecar (format 2, naming the set) records
    // other bytes than the manifest lists for its file: not restored.
    let fp = fp();
    let files = vec![f(rank(D1, 0), "a0"), f(rank(D2, 0), "b0")];
    let t = signed(&files);
    let root = t.path().join("root");
    let id = manifest(&root, &fp).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    as_format_2(&root, &rank(D1, 0), &id, None);
    let other = other_launch(t.path());
    assert!(
        other.logged_with("pruned", json!({"kept": 0, "stored": 2})),
        "{}",
        other.stderr
    );
    // Edit the stored sidecar: other bytes (a same-size file's), its set
    // id still the manifest's.
    let stored: Vec<_> = sidecar_paths(&root.join(".keepwrap/store"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("1111111111111111"))
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&stored[0]).unwrap()).unwrap();
    v["sha256"] = sha256_hex(&body("a9")).into();
    v["stat"] = Value::Null;
    std::fs::write(&stored[0], serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let back = boot(&mut launch(t.path()));
    assert!(!back.has_event("restored"), "{}", back.stderr);
    assert!(kept(&back).is_empty(), "{}", back.stderr);
}

#[test]
fn a_manifest_put_back_from_an_older_copy_keeps_the_older_set_whole() {
    // A set manifest put back from an older copy of `.keepwrap/`
    // (docs/reliability.md). Boot 1 signs the
    // directory D1 with rank 0 alone (rank 1 had not written yet); boot 2
    // adds rank 1; boot 3 retunes rank 1. The manifest of boot 1 is put
    // back: rank 0 still holds the bytes it lists, so that set is whole
    // and kept, and rank 1 goes ("does not list this file"): the state
    // boot 2 itself started from, never a mix of two signs (a whole
    // manifest is one sign's exact snapshot). (Sidecars of format 2 named
    // the set they were signed in, and the older manifest vouched for
    // nothing then.)
    let fp = fp();
    let t = signed(&[f(rank(D1, 0), "a0")]);
    let root = t.path().join("root");
    let older = std::fs::read(root.join(format!(".keepwrap/sets/{fp}.json"))).unwrap();
    stage(t.path(), &[f(rank(D1, 1), "a1")]);
    let b2 = boot_debug(&mut launch(t.path()));
    assert!(
        b2.logged_with("signed", json!({"files": 2})),
        "{}",
        b2.stderr
    );
    stage(t.path(), &[f(rank(D1, 1), "a1-retuned")]);
    let b3 = boot_debug(&mut launch(t.path()));
    assert!(
        b3.logged_with("signed", json!({"files": 2})),
        "{}",
        b3.stderr
    );
    let _ = std::fs::remove_dir_all(t.path().join("stage"));
    std::fs::write(root.join(format!(".keepwrap/sets/{fp}.json")), older).unwrap();
    let b4 = boot_debug(&mut launch(t.path()));
    assert_eq!(
        kept(&b4),
        [rank(D1, 0)].into_iter().collect::<BTreeSet<_>>(),
        "{}",
        b4.stderr
    );
    assert!(
        b4.logged_with(
            "removed",
            json!({"path": rank(D1, 1), "reason": "set incomplete (set manifest does not list this file)"})
        ),
        "{}",
        b4.stderr
    );
}

/// A first boot whose engine writes `files`, each sign step slowed down;
/// once the set manifest is written (the sign done, its stamps not yet
/// recorded: the files were written just now), `edit` runs on the root.
/// Then the next boot, against the manifest.
#[cfg(feature = "failpoints")]
fn restamp_after(files: &[(String, Vec<u8>)], edit: impl FnOnce(&Path), ctx: &str) {
    let fp = fp();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    stage(t.path(), files);
    let mut c = launch(t.path());
    c.env("KEEPWRAP_FAILPOINT_DELAY_MS", "150");
    let r = Running::spawn(&mut c);
    let m = root.join(format!(".keepwrap/sets/{fp}.json"));
    wait_for(
        "the set manifest",
        std::time::Duration::from_secs(10),
        || m.exists().then_some(()),
    );
    edit(&root);
    let b = r.finish(std::time::Duration::from_secs(30));
    assert_eq!(b.code, 0, "{ctx}: {}", b.stderr);
    next_boot_keeps_what_the_manifest_commits(t.path(), &fp, ctx);
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_member_changed_between_the_sign_and_its_restamp_is_not_stamped() {
    #[cfg(feature = "failpoints")]
    {
        let files = vec![f(rank(D1, 0), "a0"), f(rank(D1, 1), "a1")];
        // Same size, other bytes.
        restamp_after(
            &files,
            |root| std::fs::write(root.join(rank(D1, 0)), body("z0")).unwrap(),
            "changed before the restamp",
        );
        // Changed and written back: the bytes signed, a new change time.
        restamp_after(
            &files,
            |root| {
                std::fs::write(root.join(rank(D1, 0)), body("z0")).unwrap();
                std::fs::write(root.join(rank(D1, 0)), body("a0")).unwrap();
            },
            "changed and reverted before the restamp",
        );
    }
}
