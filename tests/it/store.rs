//! Every launch keeps its own tactics: whole sets signed for other launches
//! go to the store and come back with their launch; eviction; `status`,
//! `explain` and statistics; secrets never written or logged. End to end
//! with the fake engine of `tests/fixtures/engines/` and with tiny Python "engines" that
//! write one file (fast, for eviction).

use crate::common;
use serde_json::json;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const EP4_FIXED: &[&str] = &["--tp", "4", "--ep", "4", "--gate", "fixed", "--offline"];

fn arm(prefill: &str) -> Vec<&str> {
    [EP4_FIXED, &["--chunked-prefill-size", prefill]].concat()
}

fn state(root: &Path) -> PathBuf {
    root.join(".keepwrap")
}

fn store_entries(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(state(root).join("store"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn fingerprint(args: &[&str], program: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("fingerprint")
        .args(args)
        .arg("--")
        .args(program)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn arms_a_b_a_the_third_boot_restores_a_and_tunes_nothing() {
    let h = tempfile::tempdir().unwrap();
    let root = cache_root(h.path());
    let b1 = boot_debug(&mut keepwrap_engine(h.path(), &[], &arm("2048")));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(b1.tuned() > 0);
    let b2 = boot_debug(&mut keepwrap_engine(h.path(), &[], &arm("4096")));
    assert_eq!((b2.code, b2.hit()), (0, 0), "{}", b2.stderr);
    let stored = b2.events_named("stored");
    assert_eq!(stored.len(), 4, "{}", b2.stderr);
    let fp_a = b1.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    for s in &stored {
        assert!(
            s["path"].as_str().unwrap().starts_with("0.7.2/sm121/"),
            "{s}"
        );
        assert_eq!(s["other_fingerprint"], fp_a.as_str(), "{s}");
    }
    assert!(
        b2.logged_with(
            "pruned",
            json!({"kept": 0, "stored": 4, "removed": 0, "leftovers": 0, "left": 0})
        ),
        "{}",
        b2.stderr
    );
    // The explanation an operator reads.
    let line = b2.event("no_cache")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        line.starts_with(&format!(
            "no cache for this launch; the nearest signed launch ({}..., ",
            &fp_a[..8]
        )) && line.ends_with(" ago) differs in: arg --chunked-prefill-size 2048 -> 4096"),
        "{line}"
    );
    assert_eq!(store_entries(&root).len(), 1);

    let b3 = boot_debug(&mut keepwrap_engine(h.path(), &[], &arm("2048")));
    assert_eq!(b3.code, 0, "{}", b3.stderr);
    assert!(
        b3.logged_with("restored", json!({"files": 4})),
        "{}",
        b3.stderr
    );
    assert_eq!(b3.tuned(), 0, "boot 3 tunes nothing: {}", b3.stderr);
    assert_eq!(b3.tactics(), b1.tactics(), "boot 3 uses boot 1's tactics");
    assert!(b3.logged_with("reused", json!({"files": 4})));
    // B is in the store now, A in place.
    let fp8 = |b: &Finished| b.event("launch")["fingerprint"].as_str().unwrap()[..8].to_string();
    let entries = store_entries(&root);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0][..8], fp8(&b2));
    let fp_b = entries[0].clone();

    // status --json: 4 files signed for A, one stored entry, the stats.
    let out = keepwrap(&root).args(["status", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 4);
    assert!(v["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["state"] == "signed"));
    assert_eq!(v["store"][0]["fingerprint"], fp_b.as_str());
    assert_eq!(v["store"][0]["files"], 4);
    let st = &v["stats"];
    assert_eq!(
        (
            st["launches"].as_u64(),
            st["tunes"].as_u64(),
            st["reuses"].as_u64(),
            st["stored"].as_u64(),
            st["restored"].as_u64()
        ),
        (Some(3), Some(2), Some(1), Some(8), Some(4)),
        "{st}"
    );
    // status -- B: would restore B's 4 files and store A's 4.
    let mut cmd = keepwrap(&root);
    cmd.env("SGLANG_CACHE_DIR", h.path().join("sglang"))
        .args(["status", "--", "python3"])
        .arg(common::fake_engine())
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(arm("4096"));
    let text = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    assert!(
        text.contains("this launch would keep 0, restore 4, store 4 and remove 0 cache files"),
        "{text}"
    );
    // explain -- B: A differs in the prefill size.
    let mut cmd = keepwrap(&root);
    cmd.env("SGLANG_CACHE_DIR", h.path().join("sglang"))
        .args(["explain", "--", "python3"])
        .arg(common::fake_engine())
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(arm("4096"));
    let text = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    assert!(
        text.contains("differs in: arg --chunked-prefill-size 2048 -> 4096"),
        "{text}"
    );
    // --zero resets.
    let out = keepwrap(&root)
        .args(["status", "--zero", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stats"]["launches"], 0);
}

/// Where the tiny engine writes its rank file.
const TINY_DIR: &str = "0.7.2/sm121/0123456789abcdef";
/// A tiny engine: writes one cache file of `size` bytes for arm `name`.
const SCRIPT: &str = "import json,os,sys\nd=os.path.join(os.environ['KEEPWRAP_CACHE_DIR'],'0.7.2/sm121/0123456789abcdef')\nos.makedirs(d,exist_ok=True)\nopen(d+'/rank_tp0_pp0_dp0.json','w').write(json.dumps({'pad':'x'*int(sys.argv[2])}))";

/// Run the tiny engine for arm `name`, `size` bytes.
fn tiny(root: &Path, name: &str, size: usize, extra: &[&str]) -> Finished {
    let mut cmd = keepwrap(root);
    cmd.args(extra)
        .args(["--", "python3", "-c", SCRIPT, name, &size.to_string()]);
    boot(&mut cmd)
}

fn fp8_of_tiny(name: &str, size: usize) -> String {
    fp_of_tiny(name, size)[..8].to_string()
}

fn fp_of_tiny(name: &str, size: usize) -> String {
    fingerprint(&[], &["python3", "-c", SCRIPT, name, &size.to_string()])
}

/// Move every launch record `secs` into the past (time passes).
fn age_records(root: &Path, secs: u64, only: Option<&str>) {
    for e in std::fs::read_dir(state(root).join("launches"))
        .unwrap()
        .flatten()
    {
        if let Some(o) = only {
            if !e.file_name().to_string_lossy().starts_with(o) {
                continue;
            }
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for k in ["last_used", "last_signed", "first_signed"] {
            v[k] = (v[k].as_u64().unwrap() - secs).into();
        }
        std::fs::write(e.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

#[test]
fn eviction_by_size_is_least_recently_used_first_and_a_restore_counts_as_a_use() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let size = 100_000;
    let limit = ["--store-max-size", "250k"];
    let mut evicted = Vec::new();
    for (i, name) in ["a", "b", "c", "a", "d", "e"].into_iter().enumerate() {
        let b = tiny(&root, name, size, &limit);
        assert_eq!(b.code, 0, "{}", b.stderr);
        if i == 3 {
            assert!(
                b.logged_with("restored", json!({"files": 1})),
                "{}",
                b.stderr
            );
        }
        for e in b.events_named("evicted") {
            assert_eq!(
                e["reason"], "the store is over --store-max-size 250.0 KiB",
                "{e}"
            );
            evicted.push(e["fingerprint"].as_str().unwrap()[..8].to_string());
        }
        age_records(&root, 10, None);
    }
    assert_eq!(
        evicted,
        vec![fp8_of_tiny("b", size), fp8_of_tiny("c", size)]
    );
    let left: Vec<String> = store_entries(&root)
        .iter()
        .map(|s| s[..8].to_string())
        .collect();
    let mut want = vec![fp8_of_tiny("a", size), fp8_of_tiny("d", size)];
    want.sort();
    assert_eq!(left, want, "the restored launch outlives older ones");
}

#[test]
fn eviction_by_age() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    assert_eq!(tiny(&root, "a", 10, &[]).code, 0);
    assert_eq!(tiny(&root, "b", 10, &[]).code, 0);
    let fa = fp8_of_tiny("a", 10);
    age_records(&root, 31 * 86400, Some(&fa));
    // 40 days: kept.
    let b = tiny(&root, "c", 10, &["--store-max-age", "40days"]);
    assert!(!b.has_event("evicted"), "{}", b.stderr);
    let b = tiny(&root, "d", 10, &[]);
    let e = b.event("evicted");
    assert!(
        e["fingerprint"].as_str().unwrap().starts_with(fa.as_str())
            && e["files"] == 1
            && e["reason"] == "unused for longer than --store-max-age 30days"
            && e["message"]
                .as_str()
                .unwrap()
                .contains(", last used 31 days ago): "),
        "{e}"
    );
    assert_eq!(store_entries(&root).len(), 2, "b and c stay");
    let records = std::fs::read_dir(state(&root).join("launches")).unwrap();
    assert!(!records
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(&fa)));
}

#[test]
fn unsigned_changed_or_corrupt_files_are_deleted_not_stored() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    assert_eq!(tiny(&root, "a", 10, &[]).code, 0);
    let f = root.join(format!("{TINY_DIR}/rank_tp0_pp0_dp0.json"));
    std::fs::write(&f, "{\"pad\": \"changed\"}").unwrap();
    let b = tiny(&root, "b", 10, &["-v"]);
    assert!(
        b.events_named("removed").iter().any(|e| e["path"]
            == format!("{TINY_DIR}/rank_tp0_pp0_dp0.json").as_str()
            && e["reason"]
                .as_str()
                .unwrap()
                .starts_with("signed for another launch (fingerprint ")),
        "{}",
        b.stderr
    );
    assert!(
        b.events_named("removed").iter().any(|e| e["reason"]
            .as_str()
            .unwrap()
            .contains("), changed after signing (size ")),
        "{}",
        b.stderr
    );
    assert!(
        store_entries(&root).is_empty(),
        "nothing untrusted enters the store"
    );
}

#[test]
fn a_canary_secret_never_reaches_a_file_under_the_root_or_a_log_line() {
    const CANARY: &str = "canary-5ecr3t-7f3a";
    let h = tempfile::tempdir().unwrap();
    let root = cache_root(h.path());
    let run = |prefill: &str| {
        let mut cmd = keepwrap_engine(
            h.path(),
            &[],
            &[
                &arm(prefill)[..],
                &["--api-key", CANARY, &format!("--hf-token={CANARY}x")],
            ]
            .concat(),
        );
        cmd.env("SGLANG_API_KEY", CANARY)
            .env("SGLANG_CANARY_SWITCH", CANARY);
        boot(&mut cmd)
    };
    let mut logs = String::new();
    for p in ["2048", "4096", "2048"] {
        let b = run(p);
        assert_eq!(b.code, 0, "{}", b.stderr);
        logs.push_str(&b.log().join("\n"));
    }
    for sub in [&["status", "--json"][..], &["status"][..]] {
        let out = keepwrap(&root).args(sub).output().unwrap();
        logs.push_str(&String::from_utf8_lossy(&out.stdout));
        logs.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    let mut cmd = keepwrap(&root);
    cmd.args(["explain", "--", "python3"])
        .arg(common::fake_engine())
        .args(["--api-key", CANARY, "--hf-token", "other"])
        .env("SGLANG_API_KEY", "other");
    let out = cmd.output().unwrap();
    logs.push_str(&String::from_utf8_lossy(&out.stdout));
    assert!(
        !logs.contains(CANARY),
        "a log line holds the canary:\n{logs}"
    );
    assert!(
        logs.contains("arg --hf-token changed") || logs.contains("arg --hf-token"),
        "{logs}"
    );
    fn walk(dir: &Path, hits: &mut Vec<PathBuf>, n: &mut usize) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(&p, hits, n);
            } else {
                *n += 1;
                let bytes = std::fs::read(&p).unwrap();
                if bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()) {
                    hits.push(p);
                }
            }
        }
    }
    let (mut hits, mut n) = (Vec::new(), 0);
    walk(&root, &mut hits, &mut n);
    assert!(n > 10, "launch records, store, stats were written");
    assert!(hits.is_empty(), "the canary is in {hits:?}");
}

#[test]
fn a_launch_waits_for_the_lock_then_goes_on_without_keeping_the_cache() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    assert_eq!(tiny(&root, "a", 10, &[]).code, 0, "creates .keepwrap/");
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(state(&root).join("lock"))
        .unwrap();
    lock.lock().unwrap();
    std::fs::write(state(&root).join("lock"), "the test (pid 1)\n").unwrap();
    let b = tiny(&root, "b", 10, &["--lock-timeout", "300ms"]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with(
            "lock_waiting",
            json!({"timeout_s": 0.3, "holder": "the test (pid 1)"})
        ),
        "{}",
        b.stderr
    );
    assert!(
        b.logged_with(
            "lock_gave_up",
            json!({"timeout_s": 0.3, "what": "launch", "holder": "the test (pid 1)"})
        ),
        "{}",
        b.stderr
    );
    assert!(
        !b.has_event("pruned"),
        "the cache is not touched: {}",
        b.stderr
    );
    assert!(store_entries(&root).is_empty(), "a's set was not stored");
    // A subcommand's lines name the root it works on, as a launch's do.
    let e = output(keepwrap(&root).args(["--lock-timeout", "300ms", "evict", "--all"]));
    assert_eq!(e.code, 1, "{}", e.stderr);
    assert!(
        e.logged_with(
            "lock_waiting",
            json!({"timeout_s": 0.3, "holder": "the test (pid 1)", "root": root.to_str().unwrap()})
        ),
        "{}",
        e.stderr
    );
    drop(lock);
    let b = tiny(&root, "b", 10, &[]);
    assert!(
        b.logged_with("pruned", json!({"kept": 0, "stored": 1})),
        "{}",
        b.stderr
    );
}

// ---- the store obeys the same trust as the live tree ----

/// Arm `a` tunes and signs, arm `b` stores it: `a`'s entry in the store.
fn a_stored(root: &Path) -> PathBuf {
    for name in ["a", "b"] {
        let b = tiny(root, name, 100, &[]);
        assert_eq!(b.code, 0, "{}", b.stderr);
    }
    let entry = state(root).join("store").join(fp_of_tiny("a", 100));
    assert!(entry.join("rank_tp0_pp0_dp0.json").is_file());
    entry
}

#[test]
fn a_stored_rank_file_edited_without_changing_its_size_is_not_restored() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let entry = a_stored(&root);
    let f = entry.join("rank_tp0_pp0_dp0.json");
    let before = std::fs::read(&f).unwrap();
    let after = String::from_utf8(before.clone())
        .unwrap()
        .replacen('x', "y", 1);
    assert_eq!(after.len(), before.len());
    std::fs::write(&f, &after).unwrap();
    let b = tiny(&root, "a", 100, &[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(!b.has_event("restored"), "{}", b.stderr);
    assert!(
        b.logged_with(
            "entry_not_intact",
            json!({"reason": format!("{TINY_DIR}/rank_tp0_pp0_dp0.json: changed after signing")})
        ),
        "{}",
        b.stderr
    );
    assert!(!entry.exists(), "the edited entry is gone");
}

#[test]
fn a_set_is_never_restored_from_a_store_directory_another_user_can_write() {
    // (what, directory below the entry, mode, owner)
    // (A set of one directory is stored flat: the entry is that directory.)
    let cases: [(&str, &str, u32, Option<u32>); 2] = [
        ("the entry world-writable", "", 0o777, None),
        ("the entry owned by another user", "", 0o755, Some(65534)),
    ];
    for (what, below, mode, owner) in cases {
        if owner.is_some() && !common::has_need(is_root(), &format!("root to chown ({what})")) {
            continue;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let entry = a_stored(&root);
        let dir = entry.join(below);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
        }
        let b = tiny(&root, "a", 100, &[]);
        assert_eq!(b.code, 0, "{what}: {}", b.stderr);
        assert!(!b.has_event("restored"), "{what}: {}", b.stderr);
        let warned = b.events_named("entry_untrusted");
        assert_eq!(warned.len(), 1, "{what}: {}", b.stderr);
        assert!(
            warned[0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("in a directory another user can write ("),
            "{what}: {}",
            b.stderr
        );
        assert!(!entry.exists(), "{what}: the entry is removed");
    }
}

#[test]
fn a_set_is_never_restored_into_a_directory_another_user_can_write() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let entry = a_stored(&root);
    // b's set is in place now; the directory above it is world-writable.
    let dir = root.join("0.7.2/sm121");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let b = tiny(&root, "a", 100, &[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(!b.has_event("restored"), "{}", b.stderr);
    assert!(
        b.logged_with(
            "restore_destination_untrusted",
            json!({
                "dir": TINY_DIR,
                "reason": "in a directory another user can write (0.7.2/sm121: world-writable without the sticky bit)"
            })
        ),
        "{}",
        b.stderr
    );
    assert!(entry.join("rank_tp0_pp0_dp0.json").is_file());
}

#[test]
fn a_store_another_user_can_write_is_not_used() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let entry = a_stored(&root);
    let store = state(&root).join("store");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o777)).unwrap();
    let b = tiny(&root, "a", 100, &[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(!b.has_event("restored"), "{}", b.stderr);
    assert!(
        b.events_named("store_unusable").iter().any(|e| e["error"]
            .as_str()
            .unwrap()
            .starts_with("store is a directory another user can write (world-writable without the sticky bit)")),
        "{}",
        b.stderr
    );
    assert!(entry.join("rank_tp0_pp0_dp0.json").is_file());
}

/// One launch of `tests/helpers/reads_at_start.py` (the defaults: unify
/// on, the store) on `root`, writing `write` rank files (8 a directory,
/// each rank with entries of its own); `variant`: another fingerprint.
fn ranks(root: &Path, ctl: &Path, write: usize, variant: bool, extra: &[&str]) -> Finished {
    std::fs::create_dir_all(ctl).unwrap();
    let b = boot(&mut reads_at_start(root, ctl, write, variant, extra));
    assert_eq!(b.code, 0, "{}", b.stderr);
    b
}

/// Unify leaves the 8 rank files of a directory hard links of one union:
/// the store counts that inode once against `--store-max-size`. Before:
/// once a member (16 unions for 2 directories), so a set of a fifth of the
/// limit on disk counted over it and was evicted at once.
#[test]
fn a_unified_set_counts_each_union_once_against_the_store_size() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let (root, ctl) = (t.path().join("root"), t.path().join("ctl"));
    let b = ranks(&root, &ctl, 16, false, &[]);
    assert!(
        b.logged_with("signed", json!({"files": 16})),
        "{}",
        b.stderr
    );
    let rank = root.join("0.7.2/sm121/0000000000000001/rank_tp0_pp0_dp0.json");
    let m = std::fs::metadata(&rank).unwrap();
    assert_eq!(m.nlink(), 8, "one union, 8 links");
    // 2 unions and 16 sidecars fit; 16 unions do not.
    let limit = (5 * m.len()).to_string();
    assert!(16 * m.len() > 3 * m.len() + 16 * 1024);
    let b = ranks(&root, &ctl, 0, true, &["-v", "--store-max-size", &limit]);
    assert_eq!(b.events_named("stored").len(), 16, "{}", b.stderr);
    assert!(!b.has_event("evicted"), "{}", b.stderr);
    let b = ranks(&root, &ctl, 0, false, &["--store-max-size", &limit]);
    assert!(
        b.logged_with("restored", json!({"files": 16})),
        "{}",
        b.stderr
    );
}

/// A launch whose store is over its limits evicts once its engine has
/// started, never before: with every store change slowed (a slow disk,
/// 1.5 s a rename), the engine's first instruction still sees the store
/// holding what is to be evicted, and the eviction is done while it runs.
/// Before: every eviction (28 s for 20,000 files in one run) ran before
/// the engine's start.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn eviction_runs_after_the_engine_has_started() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    assert_eq!(tiny(&root, "a", 100, &[]).code, 0);
    assert_eq!(tiny(&root, "b", 100, &[]).code, 0);
    assert_eq!(store_entries(&root), vec![fp_of_tiny("a", 100)]);
    let seen = t.path().join("seen");
    // At its first instruction: the store's entries; then wait (at most
    // 60 s) until the store holds none.
    let engine = "import os,sys,time\n\
        st=os.path.join(os.environ['KEEPWRAP_CACHE_DIR'],'.keepwrap','store')\n\
        ls=lambda:[n for n in os.listdir(st) if len(n)==64]\n\
        open(sys.argv[1],'w').write(' '.join(sorted(ls())))\n\
        end=time.time()+60\n\
        while ls() and time.time()<end: time.sleep(0.05)\n";
    let mut cmd = keepwrap(&root);
    cmd.env("KEEPWRAP_FAILPOINT_DELAY_MS", "1500")
        .args(["--store-max-size", "1"])
        .args(["--", "python3", "-c", engine])
        .arg(&seen);
    let c = boot_debug(&mut cmd);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(c.has_event("stored"), "{}", c.stderr);
    let at_start = std::fs::read_to_string(&seen).unwrap();
    assert!(
        at_start.contains(&fp_of_tiny("b", 100)),
        "the store at the engine's start: {at_start:?}\n{}",
        c.stderr
    );
    assert!(
        c.logged_with("evicted", json!({"fingerprint": fp_of_tiny("a", 100)})),
        "{}",
        c.stderr
    );
    assert_eq!(store_entries(&root), Vec::<String>::new(), "{}", c.stderr);
}

#[test]
fn evicting_a_stale_stored_set_keeps_the_newer_set_of_its_launch_in_the_tree() {
    // Launch a's set is stored by another launch; a's next boot cannot
    // restore it (a directory is in the way), tunes another directory and
    // signs that. Evicting a's stored set must not take the manifest of
    // the newer set with it: that set is a's, whole, in the tree.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    const D1: &str = "0.7.2/sm121/1111111111111111";
    const D2: &str = "0.7.2/sm121/2222222222222222";
    let script = format!(
        "d={D1}; [ -e second ] && d={D2}; mkdir -p root/$d && printf '{{\"k\": [\"T\", 1]}}' > root/$d/rank_tp0_pp0_dp0.json"
    );
    let launch = |script: &str| {
        let mut c = keepwrap(&root);
        c.current_dir(t.path())
            .args(["--done", "exit", "--", "sh", "-c", script]);
        let b = boot(&mut c);
        assert_eq!(b.code, 0, "{}", b.stderr);
        b
    };
    assert!(launch(&script).logged_with("signed", json!({"files": 1})));
    let other = launch("true");
    assert!(
        other.logged_with("pruned", json!({"stored": 1})),
        "{}",
        other.stderr
    );
    std::fs::create_dir_all(root.join(D1).join("rank_tp0_pp0_dp0.json")).unwrap();
    std::fs::write(t.path().join("second"), "").unwrap();
    let second = launch(&script);
    assert!(second.has_event("restore_in_the_way"), "{}", second.stderr);
    assert!(
        second.logged_with("signed", json!({"files": 1})),
        "{}",
        second.stderr
    );
    let evict = output(keepwrap(&root).args(["evict", "--all"]));
    assert_eq!(evict.code, 0, "{}", evict.stderr);
    assert!(evict.has_event("evicted"), "{}", evict.stderr);
    let third = launch(&script);
    assert!(
        third.logged_with("pruned", json!({"kept": 1, "removed": 0})),
        "the set a signed in the tree went with its stale stored set:\n{}",
        third.stderr
    );
}
