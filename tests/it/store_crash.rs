//! The store under SIGKILL and under concurrent launches on one cache root.
//!
//! - SIGKILL of keepwrap at every crash point of store / restore / sign
//!   (the `failpoints` feature): every file of every signed set is, byte for byte,
//!   in place or in the store (or in a staging / restoring directory that
//!   the next launch's recovery finishes); after that recovery every set is
//!   whole where it belongs, and the next boot of an arm either reuses a
//!   whole set or tunes everything (never a partial hit: the fake engine
//!   exits 86 on one under `--gate fixed --ep 4`).
//! - Eight launches racing on one root: each logs its outcome, no file is
//!   torn, every stored set is intact, and the next boot of each arm reuses
//!   or tunes everything.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use sha2::{Digest, Sha256};

const ARMS: [&str; 3] = ["1024", "2048", "3072"];

/// `w.sh`: the fake engine, or with KW_NOOP=exit a command that exits 0 at
/// once, with KW_NOOP=hold one that exits 0 once `$SGLANG_CACHE_DIR/go`
/// exists, or with KW_NOOP=edit one that changes a rank file of the tree and
/// exits 0 (so that commit writes sidecars). KW_NOOP is not fingerprinted.
fn wrapper(dir: &Path) -> PathBuf {
    let p = dir.join("w.sh");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ncase \"$KW_NOOP\" in\n exit) exit 0;;\n hold) while [ ! -e \"$SGLANG_CACHE_DIR/go\" ]; do sleep 0.05; done; exit 0;;\n edit) f=$(find \"$SGLANG_CACHE_DIR\" -path '*/.keepwrap' -prune -o -name 'rank_tp0_*.json' -print | head -n1); [ -n \"$f\" ] && sed -i 's/\"_metadata\"/\"_edited\": 1, \"_metadata\"/' \"$f\"; exit 0;;\nesac\nexec python3 {} \"$@\"\n",
            fake_engine().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn launch(w: &Path, cache: &Path, prefill: &str, noop: Option<&str>, tp: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env("SGLANG_CACHE_DIR", cache)
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args([
            "--keep",
            "always",
            "--volatile-env",
            "SGLANG_CACHE_DIR",
            "--",
        ])
        .arg(w)
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(["--tp", tp, "--ep", tp, "--gate", "fixed", "--offline"])
        .args(["--chunked-prefill-size", prefill]);
    match noop {
        Some(m) => cmd.env("KW_NOOP", m),
        None => cmd.env_remove("KW_NOOP"),
    };
    cmd
}

/// The sha256 of a file; of a sidecar, without its `stat` (the identity
/// of the cache file, which a move changes: the next commit records the
/// new one, and the sidecar signs the same bytes in the same set).
fn sha(p: &Path) -> Option<String> {
    let b = std::fs::read(p).ok()?;
    if p.extension().is_some_and(|x| x == "launch") {
        if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&b) {
            if let Some(o) = v.as_object_mut() {
                o.remove("stat");
            }
            return Some(crate::common::hex(Sha256::digest(v.to_string())));
        }
    }
    Some(crate::common::hex(Sha256::digest(&b)))
}

/// Every regular file below `dir`, relative, with its sha256.
fn files(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &p, out);
            } else if ft.is_file() {
                if let Some(h) = sha(&p) {
                    out.insert(p.strip_prefix(base).unwrap().display().to_string(), h);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn root_of(cache: &Path) -> PathBuf {
    cache.join("flashinfer/autotune")
}

/// A set: its fingerprint and its files (cache files and sidecars) by path.
struct Set {
    fp: String,
    files: BTreeMap<String, String>,
}

/// Where the files of `set` are: each must be, with its bytes, in exactly
/// one of the places a set can be. Returns the places used.
fn locate(root: &Path, set: &Set) -> Result<Vec<String>, String> {
    let ks = root.join(".keepwrap");
    let mut bases: Vec<(String, PathBuf)> = vec![
        ("place".into(), root.to_path_buf()),
        ("store".into(), ks.join("store").join(&set.fp)),
        ("restoring".into(), ks.join(format!("restoring-{}", set.fp))),
    ];
    for e in std::fs::read_dir(ks.join("store"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!("{}.in-", set.fp)) {
            bases.push(("staging".into(), e.path()));
        }
    }
    let mut used = Vec::new();
    for (rel, want) in &set.files {
        // In place at its path; out of place at its path (a tree entry) or
        // by its name (a flat entry: the set's one directory).
        let name = Path::new(rel).file_name().unwrap();
        let found: Vec<&String> = bases
            .iter()
            .filter(|(n, b)| {
                let at = |p: PathBuf| sha(&p).as_deref() == Some(want.as_str());
                at(b.join(rel)) || (n != "place" && at(b.join(name)))
            })
            .map(|(n, _)| n)
            .collect();
        match found.len() {
            1 => {
                if !used.contains(found[0]) {
                    used.push(found[0].clone());
                }
            }
            0 => return Err(format!("{rel} of {} is lost", &set.fp[..8])),
            _ => return Err(format!("{rel} of {} is in {found:?}", &set.fp[..8])),
        }
    }
    Ok(used)
}

fn fp_of(b: &Finished) -> String {
    b.event("launch")["fingerprint"].as_str().unwrap()[..8].to_string()
}

/// Arms 1, 2, 3 signed on one cache root (`tpl`): 1 and 2 in the store,
/// 3 in place. Returns the three sets.
fn signed_arms(w: &Path, tpl: &Path) -> Vec<Set> {
    let mut fps = Vec::new();
    for a in ARMS {
        let b = boot(&mut launch(w, tpl, a, None, "4"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        fps.push(fp_of(&b));
    }
    let root = root_of(tpl);
    let mut sets: Vec<Set> = Vec::new();
    for (i, fp8) in fps.iter().enumerate() {
        let (fp, base) = if i == 2 {
            let sc = files(&root)
                .into_keys()
                .find(|k| k.ends_with(".launch") && !k.starts_with(".keepwrap"))
                .unwrap();
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join(sc)).unwrap()).unwrap();
            (v["fingerprint"].as_str().unwrap().to_string(), root.clone())
        } else {
            let e = std::fs::read_dir(root.join(".keepwrap/store"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with(fp8.as_str()))
                .unwrap();
            (e.clone(), root.join(".keepwrap/store").join(e))
        };
        // A flat entry holds the files of its one directory by name.
        let prefix = if i == 2 {
            String::new()
        } else {
            let m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(base.join(".set.json")).unwrap()).unwrap();
            let first = m["members"][0]["path"].as_str().unwrap();
            if base.join(first).exists() {
                String::new()
            } else {
                format!("{}/", Path::new(first).parent().unwrap().display())
            }
        };
        let files: BTreeMap<String, String> = files(&base)
            .into_iter()
            .filter(|(k, _)| !k.starts_with(".keepwrap") && !k.starts_with(".set.json"))
            .map(|(k, v)| (format!("{prefix}{k}"), v))
            .collect();
        assert_eq!(files.len(), 8, "4 rank files and 4 sidecars");
        sets.push(Set { fp, files });
    }
    sets
}

/// Every crash point of the store (each rename of stash, install and
/// restore) and of sign (each sidecar, then the set manifest), for a
/// launch of each arm that exits at once or edits a rank file first:
/// keepwrap stops itself with SIGKILL right after the n-th change
/// (`KEEPWRAP_FAILPOINT=<step>:<n>`, the `failpoints` feature), for n = 1,
/// 2, ... until the launch runs to its end. After each crash, every file of
/// every set (but the one just edited) is, byte for byte, in exactly one
/// place a set can be; the next launch (of the arm n picks) recovers it all:
/// its own set in place, the others in the store, nothing left halfway;
/// and a real boot reuses a whole set or tunes everything.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_at_every_crash_point_of_store_and_sign_loses_no_file_and_trusts_nothing_wrongly() {
    let t = tempfile::tempdir().unwrap();
    let w = wrapper(t.path());
    let tpl = t.path().join("tpl");
    let sets = signed_arms(&w, &tpl);
    let started = Instant::now();
    let mut points: BTreeMap<&str, usize> = BTreeMap::new();
    // The crash points of each launch, by step, arm and mode, with what
    // the launch that ran to its end logged.
    let mut each: BTreeMap<(&str, usize, bool), (usize, Vec<String>)> = BTreeMap::new();
    let mut trial = 0;
    for step in ["store", "sign"] {
        for (x, arm) in ARMS.iter().enumerate() {
            for edit in [false, true] {
                for n in 1.. {
                    trial += 1;
                    let ctx = format!(
                        "arm {x}{}, crash after {step} change {n}",
                        if edit { " (edited)" } else { "" }
                    );
                    let dir = t.path().join(format!("t{trial}"));
                    copy_tree(&tpl, &dir);
                    let root = root_of(&dir);
                    let mode = if edit { "edit" } else { "exit" };
                    let mut cmd = launch(&w, &dir, arm, Some(mode), "4");
                    cmd.env("KEEPWRAP_FAILPOINT", format!("{step}:{n}"));
                    let killed = boot(&mut cmd);
                    if killed.code != 128 + 9 {
                        // The step has fewer than n points: the launch ran
                        // to its end.
                        assert_eq!(killed.code, 0, "{ctx}: {}", killed.stderr);
                        let events = killed.log_events().into_iter();
                        each.entry((step, x, edit)).or_default().1 = events
                            .filter_map(|e| e["code"].as_str().map(str::to_string))
                            .collect();
                        let _ = std::fs::remove_dir_all(&dir);
                        break;
                    }
                    *points.entry(step).or_default() += 1;
                    each.entry((step, x, edit)).or_default().0 += 1;
                    wait_until_nothing_holds(&dir, Duration::from_secs(30));
                    for (i, s) in sets.iter().enumerate() {
                        if edit && i == x {
                            continue;
                        }
                        if let Err(e) = locate(&root, s) {
                            panic!("{ctx}: {e}\n{}", killed.stderr);
                        }
                    }
                    // Recovery by the next launch of arm z, to the end.
                    let z = (x + n) % ARMS.len();
                    let b = boot(&mut launch(&w, &dir, ARMS[z], Some("exit"), "4"));
                    assert_eq!(b.code, 0, "{ctx}: {}", b.stderr);
                    for (i, s) in sets.iter().enumerate() {
                        if edit && i == x {
                            continue;
                        }
                        let used = locate(&root, s)
                            .unwrap_or_else(|e| panic!("{ctx}, after recovery by arm {z}: {e}"));
                        let want = if i == z { "place" } else { "store" };
                        assert_eq!(
                            used,
                            vec![want.to_string()],
                            "{ctx}, after recovery by arm {z}: {}\n{}",
                            killed.stderr,
                            b.stderr
                        );
                    }
                    let leftovers: Vec<String> = std::fs::read_dir(root.join(".keepwrap"))
                        .unwrap()
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with("restoring-") || n.starts_with("trash-"))
                        .collect();
                    assert!(leftovers.is_empty(), "{ctx}: {leftovers:?}");
                    // A real boot of the arm after: whole or nothing.
                    if n % 3 == 1 {
                        let y = (z + 1) % ARMS.len();
                        let b = boot(&mut launch(&w, &dir, ARMS[y], None, "4"));
                        assert_eq!(b.code, 0, "{ctx}: never a partial hit: {}", b.stderr);
                        assert!(
                            b.tuned() == 0 || b.hit() == 0,
                            "{ctx}: reuse whole or tune everything (tuned {}, hit {})",
                            b.tuned(),
                            b.hit()
                        );
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
    }
    eprintln!(
        "crash points: {points:?} in {trial} launches, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Arms 1 and 2 stash arm 3 (its directory into the store as its
    // entry, then the set manifest into it) and restore their own (the
    // entry to its restoring directory, its manifest back); arm 3 keeps its
    // set in place. Every launch of an arm, edited or not, crashes at
    // exactly these points.
    for x in 0..ARMS.len() {
        for edit in [false, true] {
            let (n, ran) = &each[&("store", x, edit)];
            let want = if x < 2 { 2 + 2 } else { 0 };
            assert_eq!(
                *n, want,
                "store crash points of arm {x} (edited: {edit}); the launch that ran to its end logged {ran:?}"
            );
        }
    }
    // An edited set is signed again (a sidecar each, then the manifest).
    assert!(points["sign"] >= 3 * 5, "{points:?}");
}

/// Why the crash tests wait for a killed keepwrap's engine to end before
/// the launch that recovers: beside that orphan (it holds the launch's
/// marker), the next launch runs hands-off and leaves every set where it
/// is; once the orphan ends, the launch after recovers.
#[test]
#[ignore = "slow: run by .ci/run"]
fn a_launch_beside_the_orphaned_engine_of_a_killed_keepwrap_leaves_every_set_where_it_is() {
    let t = tempfile::tempdir().unwrap();
    let w = wrapper(t.path());
    let cache = t.path().join("c");
    let sets = signed_arms(&w, &cache);
    let root = root_of(&cache);
    let kw = Running::spawn(&mut launch(&w, &cache, ARMS[0], Some("hold"), "4"));
    wait_for("arm 0 restored", Duration::from_secs(30), || {
        (locate(&root, &sets[0]).ok()? == ["place"]).then_some(())
    });
    // Restored and in place: the engine runs (it exits on `go`).
    wait_for("the engine", Duration::from_secs(30), || {
        children_of(kw.guard.pid().as_raw()).first().copied()
    });
    let _ = nix::sys::signal::kill(kw.guard.pid(), nix::sys::signal::Signal::SIGKILL);
    let killed = kw.finish(Duration::from_secs(30));
    assert_eq!(killed.code, 128 + 9);
    let b = boot(&mut launch(&w, &cache, ARMS[1], Some("exit"), "4"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.has_event("orphan_on_root"), "{}", b.stderr);
    for (s, want) in sets.iter().zip(["place", "store", "store"]) {
        assert_eq!(locate(&root, s).unwrap(), [want], "{}", b.stderr);
    }
    std::fs::write(cache.join("go"), "").unwrap();
    wait_until_nothing_holds(&cache, Duration::from_secs(30));
    let b = boot(&mut launch(&w, &cache, ARMS[1], Some("exit"), "4"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    for (s, want) in sets.iter().zip(["store", "place", "store"]) {
        assert_eq!(locate(&root, s).unwrap(), [want], "{}", b.stderr);
    }
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn eight_launches_racing_on_one_root_each_log_an_outcome_and_tear_nothing() {
    let t = tempfile::tempdir().unwrap();
    let w = wrapper(t.path());
    let cache = t.path().join("cache");
    let mut runs: Vec<Running> = (0..8)
        .map(|i| Running::spawn(&mut launch(&w, &cache, ARMS[i % 2], None, "2")))
        .collect();
    let mut outcomes = Vec::new();
    for r in runs.drain(..) {
        let b = r.finish(Duration::from_secs(120));
        let outcome = b
            .log_events()
            .into_iter()
            .map(|e| e["code"].as_str().unwrap().to_string())
            .find(|e| {
                [
                    "reused",
                    "signed",
                    "nothing_to_keep",
                    "not_signing_other_launch",
                    "not_signing_stopped",
                    "not_signing_early_exit",
                    "gave_up_waiting",
                    "lock_gave_up",
                    "other_on_root",
                    "peer_on_root",
                    "orphan_on_root",
                ]
                .contains(&e.as_str())
            });
        assert!(outcome.is_some(), "no outcome line: {}", b.stderr);
        outcomes.push((b.code, outcome.unwrap()));
    }
    eprintln!("{outcomes:#?}");
    let root = root_of(&cache);
    // No torn file: every JSON parses, in place and in the store.
    for (rel, _) in files(&root) {
        if rel.ends_with(".json") || rel.ends_with(".launch") {
            let bytes = std::fs::read(root.join(&rel)).unwrap();
            assert!(
                serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
                "{rel} is torn"
            );
        }
    }
    // Every stored set is intact: its bytes as its manifest says, each
    // sidecar signed for the entry's launch.
    for e in std::fs::read_dir(root.join(".keepwrap/store"))
        .unwrap()
        .flatten()
    {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.path().join(".set.json")).unwrap()).unwrap();
        let fp = e.file_name().to_string_lossy().into_owned();
        assert_eq!(m["fingerprint"], fp.as_str());
        assert_eq!(m["format"], 2, "the one set format");
        let first = m["members"][0]["path"].as_str().unwrap();
        let flat = e
            .path()
            .join(Path::new(first).file_name().unwrap())
            .exists();
        for mem in m["members"].as_array().unwrap() {
            let rel = Path::new(mem["path"].as_str().unwrap());
            // A flat entry holds them by name, a tree at their paths.
            let p = if flat {
                e.path().join(rel.file_name().unwrap())
            } else {
                e.path().join(rel)
            };
            assert_eq!(
                sha(&p).as_deref(),
                mem["sha256"].as_str(),
                "{}",
                p.display()
            );
            let sc = p.with_extension("launch");
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(sc).unwrap()).unwrap();
            assert_eq!(v["fingerprint"], fp.as_str());
        }
    }
    // And each arm's next boot reuses a whole set or tunes everything.
    for a in &ARMS[..2] {
        let b = boot(&mut launch(&w, &cache, a, None, "2"));
        assert_eq!(b.code, 0, "{}", b.stderr);
        assert!(b.tuned() == 0 || b.hit() == 0, "{}", b.stderr);
    }
}

/// One launch with the defaults of `tests/helpers/reads_at_start.py` on
/// `cache`, writing `write` rank files (8 a directory); `variant`: another
/// fingerprint; `failpoint`: `KEEPWRAP_FAILPOINT`.
fn helper_launch(
    cache: &Path,
    ctl: &Path,
    write: usize,
    variant: bool,
    failpoint: Option<String>,
) -> Finished {
    let mut cmd = reads_at_start(cache, ctl, write, variant, &[]);
    if let Some(f) = failpoint {
        cmd.env("KEEPWRAP_FAILPOINT", f);
    }
    boot(&mut cmd)
}

/// Every file under `root` (a path relative to it, sha256), the store's
/// staging and restoring directories included, with the entry's path
/// prefix (`.keepwrap/store/<name>/`, `.keepwrap/restoring-<fp>/`)
/// stripped: where each member's bytes are, by path.
fn placed(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in files(root) {
        let rel = if let Some(rest) = k.strip_prefix(".keepwrap/store/") {
            rest.split_once('/').map(|(_, p)| p.to_string())
        } else if let Some(rest) = k.strip_prefix(".keepwrap/restoring-") {
            rest.split_once('/').map(|(_, p)| p.to_string())
        } else if k.starts_with(".keepwrap/") {
            None
        } else {
            Some(k)
        };
        if let Some(rel) = rel {
            out.push((rel, v));
        }
    }
    out
}

/// A set of three directories (8, 8 and 4 rank files; the third also
/// holds a file that is not the engine's, so that its members move one by
/// one and the others' directories with one rename each), killed at every
/// crash point of its stash and then of its restore: after each kill every
/// rank file is, byte for byte, in its place or in the store (staging or
/// restoring included); the next launch of the set's own fingerprint
/// recovers and finds the set whole (reused, or restored whole), and the
/// file that is not the engine's is where it was, untouched.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_at_every_point_of_a_set_of_whole_directories_loses_nothing() {
    let points = killed_at_every_point_of_whole_directories(Some("mine"));
    // Two directories renamed, four files and their sidecars one by one,
    // the entry installed (stash); the entry out of the store, two
    // directories back, four files and their sidecars (restore). File by
    // file, each would be 40 renames.
    assert_eq!(points["stash"], 2 + 8 + 1, "{points:?}");
    assert_eq!(points["restore"], 1 + 2 + 8, "{points:?}");
}

/// [`sigkill_at_every_point_of_a_set_of_whole_directories_loses_nothing`]
/// without the file that is not the engine's: the directory above the
/// set's three (`0.7.2/sm121`) holds nothing else and moves into the
/// store with one rename; a kill at each point loses nothing either.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_at_every_point_of_a_set_moved_one_level_up_loses_nothing() {
    let points = killed_at_every_point_of_whole_directories(None);
    // The directory above renamed, the entry installed (stash).
    assert_eq!(points["stash"], 1 + 1, "{points:?}");
}

/// The trials of the two tests above: `notes`, the bytes of a file that
/// is not the engine's in the third directory. The crash points, by step.
fn killed_at_every_point_of_whole_directories(
    notes: Option<&str>,
) -> BTreeMap<&'static str, usize> {
    let files = 20;
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    std::fs::create_dir(&ctl).unwrap();
    let signed = t.path().join("signed");
    let b = helper_launch(&signed, &ctl, files, false, None);
    assert!(
        b.stderr
            .contains(&format!("tuned and signed {files} cache files")),
        "{}",
        b.stderr
    );
    if let Some(bytes) = notes {
        std::fs::write(signed.join("0.7.2/sm121/0000000000000003/notes.txt"), bytes).unwrap();
    }
    let want: BTreeMap<String, String> = files_of(&signed);
    assert_eq!(want.len(), files + usize::from(notes.is_some()));
    // The same root with the set stored by a launch of another fingerprint.
    let stored = t.path().join("stored");
    copy_tree(&signed, &stored);
    let b = helper_launch(&stored, &ctl, 0, true, None);
    assert!(
        b.stderr.contains(&format!("stored {files}")),
        "{}",
        b.stderr
    );
    let mut points = BTreeMap::new();
    for (step, from, variant) in [("stash", &signed, true), ("restore", &stored, false)] {
        for n in 1.. {
            let ctx = format!("{step}, killed after store change {n}");
            let dir = t.path().join(format!("{step}-{n}"));
            copy_tree(from, &dir);
            let killed = helper_launch(&dir, &ctl, 0, variant, Some(format!("store:{n}")));
            if killed.code != 128 + 9 {
                assert_eq!(killed.code, 0, "{ctx}: {}", killed.stderr);
                let _ = std::fs::remove_dir_all(&dir);
                break;
            }
            *points.entry(step).or_insert(0) += 1;
            let now = placed(&dir);
            for (path, sha) in &want {
                assert!(
                    now.iter().any(|(p, s)| p == path && s == sha),
                    "{ctx}: {path} is nowhere\n{}",
                    killed.stderr
                );
            }
            let b = helper_launch(&dir, &ctl, 0, false, None);
            assert_eq!(b.code, 0, "{ctx}: {}", b.stderr);
            assert!(
                b.stderr.contains(&format!("reused {files} cache files"))
                    || b.stderr.contains(&format!("restored {files} cache files")),
                "{ctx}: the set is not whole after recovery\n{}\n{}",
                killed.stderr,
                b.stderr
            );
            assert_eq!(files_of(&dir), want, "{ctx}: {}", b.stderr);
            let left: Vec<String> = std::fs::read_dir(dir.join(".keepwrap"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("restoring-"))
                .chain(
                    std::fs::read_dir(dir.join(".keepwrap/store"))
                        .unwrap()
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.contains(".in-")),
                )
                .collect();
            assert!(left.is_empty(), "{ctx}: {left:?}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    eprintln!("crash points: {points:?}");
    points
}

/// The rank files and other files of the cache tree (not `.keepwrap`),
/// each with its sha256.
fn files_of(root: &Path) -> BTreeMap<String, String> {
    files(root)
        .into_iter()
        .filter(|(k, _)| !k.starts_with(".keepwrap") && !k.ends_with(".launch"))
        .collect()
}
