//! `keepwrap status` as `ccache -s`: launches, reuses, tunes, the hit rate,
//! the store against its limit and the tuning time the cache saved; and
//! `status --verify` failing on a file whose bytes changed.

use crate::common;
use serde_json::json;

use std::path::Path;
use std::process::Command;

use common::*;

/// The fake engine's launch (TP2 with EP2, offline: done at a clean exit),
/// with `extra` engine arguments.
fn engine(home: &Path, extra: &[&str]) -> Command {
    let mut args = vec!["--tp", "2", "--ep", "2", "--gate", "stock", "--offline"];
    args.extend_from_slice(extra);
    keepwrap_engine(home, &[], &args)
}

/// 80 ms per tuned shape, so a tuning boot is two seconds longer than a reuse.
fn launch(home: &Path) -> Command {
    engine(home, &["--tune-ms", "80"])
}

fn status(home: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_STORE_MAX_SIZE")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .arg("status")
        .args(args);
    output(&mut cmd)
}

#[test]
fn status_says_what_the_cache_saved() {
    let h = tempfile::tempdir().unwrap();
    let b1 = boot(&mut launch(h.path()));
    assert!(
        b1.logged_with("signed", json!({"files": 2})),
        "{}",
        b1.stderr
    );
    let b2 = boot(&mut launch(h.path()));
    assert!(
        b2.logged_with("reused", json!({"files": 2})),
        "{}",
        b2.stderr
    );
    assert_eq!(b2.tuned(), 0);

    let f = status(h.path(), &["--json"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    let st = &v["stats"];
    assert_eq!(
        (
            st["launches"].as_u64(),
            st["reuses"].as_u64(),
            st["tunes"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{st}"
    );
    assert_eq!(st["hit_rate"].as_f64(), Some(50.0), "{st}");
    // Boot 1 tuned 27 shapes per rank at 80 ms each: more than two seconds.
    let tuning = st["tuning_ms"].as_u64().unwrap();
    let saved = st["saved_ms"].as_u64().unwrap();
    assert!(tuning >= 2000, "{st}");
    assert!(saved > 0 && saved <= tuning, "{st}");
    assert_eq!(v["store_max_size"], 1u64 << 30);

    let f = status(h.path(), &[]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let text = f.stdout.join("\n");
    assert!(
        text.contains("\nstore: 0 B of 1.0 GiB (--store-max-size), 0% used"),
        "{text}"
    );
    assert!(
        text.contains("\nwhat the cache saved: hit rate 50% (1 reuse of 2 launches that reused or tuned); tuning time saved "),
        "{text}"
    );
    // --zero resets the counters, not what a tuning boot of a launch took:
    // the next reuse is credited all the same.
    let f = status(h.path(), &["--zero", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    assert_eq!(
        (
            v["stats"]["reuses"].as_u64(),
            v["stats"]["saved_ms"].as_u64()
        ),
        (Some(0), Some(0))
    );
    let b3 = boot(&mut launch(h.path()));
    assert!(
        b3.logged_with("reused", json!({"files": 2})),
        "{}",
        b3.stderr
    );
    let f = status(h.path(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    assert_eq!(
        (v["stats"]["reuses"].as_u64(), v["stats"]["tunes"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(
        v["stats"]["saved_ms"].as_u64().unwrap() > 0,
        "{}",
        v["stats"]
    );

    let f = status(h.path(), &["--store-max-size", "10MiB"]);
    assert!(
        f.stdout
            .iter()
            .any(|l| l.starts_with("store: 0 B of 10.0 MiB")),
        "{:?}",
        f.stdout
    );
}

/// Change one digit of `file` (same size: only hashing finds it); `status`
/// still exits 0, `status --verify` exits 1: its output.
fn change_a_digit_then_verify(home: &Path, file: &Path) -> Finished {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.iter().position(|b| b.is_ascii_digit()).unwrap();
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(file, &bytes).unwrap();
    let f = status(home, &[]);
    assert_eq!(
        f.code, 0,
        "without --verify the bytes are not read: {}",
        f.stderr
    );
    let f = status(home, &["--verify"]);
    assert_eq!(f.code, 1, "{}", f.stderr);
    f
}

#[test]
fn status_verify_fails_on_a_changed_file() {
    let h = tempfile::tempdir().unwrap();
    let b1 = boot(&mut launch(h.path()));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    let f = status(h.path(), &["--verify"]);
    assert_eq!(f.code, 0, "a clean tree verifies: {}", f.stderr);

    // Same size, different bytes: only hashing finds it.
    let root = cache_root(h.path());
    let file = root.join(&cache_files(&root)[0]);
    let f = change_a_digit_then_verify(h.path(), &file);
    // The changed file, and the other member of its set, which is no longer whole.
    assert!(
        f.stderr
            .contains("status --verify: 2 corrupt or mismatched cache files"),
        "{}",
        f.stderr
    );
    assert!(
        f.stdout.iter().any(|l| l.starts_with("corrupt")),
        "{:?}",
        f.stdout
    );
}

/// Two other launches' sets in the store: A (prefill 1024) and B (2048),
/// then C (4096) in place. Returns the stored fingerprints, A's first.
fn two_stored_sets(home: &Path) -> Vec<String> {
    // Made once per test process by three boots in a home of its own under
    // the target directory, then copied whole (modes and times kept) into
    // each test's home: the tests that take it only read or evict it.
    // (The made home stays there, for `cargo clean`.)
    static MADE: std::sync::OnceLock<(tempfile::TempDir, Vec<String>)> = std::sync::OnceLock::new();
    let (made, fps) = MADE.get_or_init(|| {
        let made = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let fps = make_two_stored_sets(made.path());
        (made, fps)
    });
    crate::harden::copy_tree(made.path(), home);
    assert_eq!(stored(home).len(), 2);
    fps.clone()
}

fn make_two_stored_sets(home: &Path) -> Vec<String> {
    let mut fps = Vec::new();
    for chunked in ["1024", "2048", "4096"] {
        let b = boot(&mut engine(home, &["--chunked-prefill-size", chunked]));
        assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
        let fp = b.event("launch")["fingerprint"].as_str().unwrap()[..8].to_string();
        fps.push(fp);
    }
    let stored = stored(home);
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored[0].starts_with(&fps[0]) || stored[1].starts_with(&fps[0]));
    fps.truncate(2);
    fps
}

/// The fingerprints of the store's sets.
fn stored(home: &Path) -> Vec<String> {
    let f = status(home, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    v["store"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["fingerprint"].as_str().unwrap().to_string())
        .collect()
}

fn maintenance(home: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_CACHE_DIR")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .args(args);
    output(&mut cmd)
}

#[test]
fn evict_and_clean_remove_stored_sets_with_a_summary() {
    let h = tempfile::tempdir().unwrap();
    let fps = two_stored_sets(h.path());
    let files_before = cache_files(&cache_root(h.path()));

    // Usage: one of --all, --older-than, FINGERPRINT; a prefix of 8 digits.
    assert_eq!(maintenance(h.path(), &["evict"]).code, 2);
    assert_eq!(maintenance(h.path(), &["evict", "ab12"]).code, 2);
    let f = maintenance(h.path(), &["evict", "00000000"]);
    assert_eq!(f.code, 1, "{}", f.stderr);
    assert!(
        f.stderr.contains("0 stored sets match 00000000"),
        "{}",
        f.stderr
    );

    // Nothing is older than an hour.
    let f = maintenance(h.path(), &["evict", "--older-than", "1h"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 0 stored sets (0 files, 0 B); 2 left in the store ("),
        "{:?}",
        f.stdout
    );

    // One launch's set, by its prefix.
    let f = maintenance(h.path(), &["evict", &fps[0]]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 1 stored set (2 files, "),
        "{:?}",
        f.stdout
    );
    assert!(
        f.stdout[0].contains("); 1 left in the store ("),
        "{:?}",
        f.stdout
    );
    assert!(
        f.stderr.contains(&format!(
            "keepwrap: evicted the stored set of launch {}...",
            fps[0]
        )) && f.stderr.contains(": keepwrap evict FINGERPRINT"),
        "{}",
        f.stderr
    );
    let left = stored(h.path());
    assert_eq!(left.len(), 1);
    assert!(left[0].starts_with(&fps[1]));

    // clean: the rest; the root's own cache files stay.
    let f = maintenance(h.path(), &["clean"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("evicted 1 stored set (2 files, ")
            && f.stdout[0].contains("); 0 left in the store (0 B)"),
        "{:?}",
        f.stdout
    );
    assert!(stored(h.path()).is_empty());
    assert_eq!(cache_files(&cache_root(h.path())), files_before);
    let f = status(h.path(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    assert_eq!(v["stats"]["evicted"], 2, "{}", v["stats"]);
}

#[test]
fn evict_works_under_the_lock() {
    let h = tempfile::tempdir().unwrap();
    two_stored_sets(h.path());
    let lock = h.path().join("sglang/flashinfer/autotune/.keepwrap/lock");
    // Another process holds the lock.
    let mut holder = Guard::spawn(
        Command::new("python3")
            .args(["-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"])
            .arg(&lock)
            .stdout(std::process::Stdio::piped()),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let f = maintenance(h.path(), &["evict", "--all", "--lock-timeout", "300ms"]);
    assert_eq!(f.code, 1, "{}", f.stderr);
    assert!(
        f.stderr.contains("cannot take the cache lock"),
        "{}",
        f.stderr
    );
    assert_eq!(
        stored(h.path()).len(),
        2,
        "nothing evicted without the lock"
    );
    drop(holder);
    let f = maintenance(h.path(), &["evict", "--all"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(stored(h.path()).is_empty());
}

#[test]
fn status_verify_hashes_the_stored_sets_too() {
    let h = tempfile::tempdir().unwrap();
    let fps = two_stored_sets(h.path());
    assert_eq!(status(h.path(), &["--verify"]).code, 0);
    // One byte of a stored file, same size.
    let store = cache_root(h.path()).join(".keepwrap/store");
    let entry = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&fps[0])
        })
        .unwrap();
    let file = cache_files(&entry)
        .into_iter()
        .map(|p| entry.join(p))
        .find(|p| p.to_string_lossy().ends_with("_dp0.json"))
        .unwrap();
    let f = change_a_digit_then_verify(h.path(), &file);
    assert!(
        f.stderr
            .contains("status --verify: 1 stored set is not intact"),
        "{}",
        f.stderr
    );
    let row = f
        .stdout
        .iter()
        .find(|l| l.starts_with(&format!("stored, corrupt {}", fps[0])))
        .unwrap_or_else(|| panic!("{:?}", f.stdout));
    assert!(row.contains("changed after signing"), "{row}");
}

#[test]
fn status_on_a_root_that_does_not_exist_says_so() {
    let h = tempfile::tempdir().unwrap();
    let root = cache_root(h.path());
    let f = status(h.path(), &[]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(
        f.stdout[0],
        format!(
            "cache root {}: does not exist (nothing is cached here; the first launch creates it)",
            root.display()
        ),
        "{:?}",
        f.stdout
    );
    assert!(!root.exists());
    let j = status(h.path(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&j.stdout.join("\n")).unwrap();
    assert_eq!(v["root_exists"], false, "{v}");

    // Once it exists, the line names it alone.
    std::fs::create_dir_all(&root).unwrap();
    let f = status(h.path(), &[]);
    assert_eq!(f.stdout[0], format!("cache root {}", root.display()));
    let j = status(h.path(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&j.stdout.join("\n")).unwrap();
    assert_eq!(v["root_exists"], true, "{v}");
}

#[test]
fn status_counts_one_stored_entry_in_the_singular() {
    let h = tempfile::tempdir().unwrap();
    for chunked in ["1024", "2048"] {
        let b = boot(&mut engine(h.path(), &["--chunked-prefill-size", chunked]));
        assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
    }
    let f = status(h.path(), &[]);
    assert!(
        f.stdout
            .iter()
            .any(|l| l.contains(" 2 stored in 1 entry (")),
        "{:?}",
        f.stdout
    );
}

#[test]
fn evict_and_clean_dry_run_say_what_they_would_evict_and_evict_nothing() {
    let h = tempfile::tempdir().unwrap();
    let fps = two_stored_sets(h.path());
    let before = stored(h.path());
    for (args, n) in [
        (&["evict", "--dry-run", "--all"][..], 2),
        (&["clean", "--dry-run"], 2),
        (&["evict", "--dry-run", &fps[0]], 1),
        (&["evict", "--older-than", "1h", "--dry-run"], 0),
    ] {
        let f = maintenance(h.path(), args);
        assert_eq!(f.code, 0, "{args:?}: {}", f.stderr);
        let summary = f.stdout.last().unwrap();
        let sets = if n == 1 { "set" } else { "sets" };
        assert!(
            summary.starts_with(&format!("would evict {n} stored {sets} ("))
                && summary.ends_with("(dry run: nothing evicted)"),
            "{args:?}: {:?}",
            f.stdout
        );
        let each: Vec<&String> = f
            .stdout
            .iter()
            .filter(|l| l.starts_with("would evict the stored set of launch "))
            .collect();
        assert_eq!(each.len(), n, "{args:?}: {:?}", f.stdout);
        // "last used 5 seconds ago", not "5 seconds ago ago"
        for l in &each {
            assert!(l.ends_with(" ago)") && !l.contains("ago ago"), "{l}");
        }
        if n == 1 {
            assert!(each[0].contains(&fps[0]), "{each:?}");
        }
        assert!(!f.stderr.contains("keepwrap: evicted"), "{}", f.stderr);
        assert_eq!(stored(h.path()), before, "{args:?}");
    }
    let f = status(h.path(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    assert_eq!(v["stats"]["evicted"], 0, "{}", v["stats"]);
}

#[test]
fn a_store_max_size_of_0_is_no_limit() {
    // As ccache's: 0 is no limit, not "store nothing" (which evicted every
    // other launch's set at once).
    let h = tempfile::tempdir().unwrap();
    for chunked in ["1024", "2048", "4096"] {
        let b = boot(
            engine(h.path(), &["--chunked-prefill-size", chunked])
                .env("KEEPWRAP_STORE_MAX_SIZE", "0"),
        );
        assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
        assert!(!b.has_event("evicted"), "{}", b.stderr);
    }
    assert_eq!(stored(h.path()).len(), 2);
    let f = status(h.path(), &["--store-max-size", "0"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let line = f
        .stdout
        .iter()
        .find(|l| l.starts_with("store: "))
        .unwrap_or_else(|| panic!("{:?}", f.stdout));
    assert!(line.ends_with("(--store-max-size 0: no limit)"), "{line}");
}
