//! A prune says one line per boot: the summary, with its counts by reason,
//! at the default level; the line of each file only at debug level
//! (`KEEPWRAP_LOG=debug`). A root with thousands of stray files must not
//! write thousands of lines before the engine starts.

use crate::common;
use serde_json::json;

use std::path::Path;
use std::process::Command;

use common::*;

const EP4_FIXED: &[&str] = &["--tp", "4", "--ep", "4", "--gate", "fixed", "--offline"];

/// The per-file codes of prune.
const PER_FILE: [&str; 4] = ["kept", "stored", "removed", "removed_leftover"];

/// A root holding a set signed for another launch (4 files, as boot one of
/// arm `2048` leaves it), `strays` unsigned rank files and one temp file a
/// crash left.
fn root_with_strays(home: &Path, strays: usize) {
    let b1 = boot(&mut arm(home, "2048"));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    let dir = cache_root(home).join("0.7.2/sm121/00000000000000ff");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..strays {
        std::fs::write(dir.join(format!("rank_tp{i}_pp0_dp0.json")), "{}").unwrap();
    }
    std::fs::write(dir.join(".autotuner_0.tmp"), "{").unwrap();
}

fn arm(home: &Path, prefill: &str) -> Command {
    let args = [EP4_FIXED, &["--chunked-prefill-size", prefill]].concat();
    keepwrap_engine(home, &[], &args)
}

/// keepwrap's prune lines of `stderr` at level `level`.
fn prune_lines(stderr: &str, level: &str) -> Vec<serde_json::Value> {
    log_events(stderr)
        .into_iter()
        .filter(|e| e["level"] == level)
        .filter(|e| e["code"] == "pruned" || PER_FILE.contains(&e["code"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_root_of_stray_and_foreign_files_gets_one_info_line_with_counts_by_reason() {
    const STRAYS: usize = 300;
    let h = tempfile::tempdir().unwrap();
    root_with_strays(h.path(), STRAYS);
    let b2 = boot(&mut arm(h.path(), "4096"));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    let info = prune_lines(&b2.stderr, "INFO");
    assert_eq!(info.len(), 1, "one prune line at info level: {info:#?}");
    let summary = &info[0];
    assert_eq!(summary["code"], "pruned");
    assert!(
        has_fields(
            summary,
            &json!({"kept": 0, "stored": 4, "removed": STRAYS, "leftovers": 1, "left": 0,
                    "reasons": {"unsigned": STRAYS}})
        ),
        "{summary}"
    );
    assert_eq!(
        summary["message"],
        format!("prune: kept 0, stored 4, removed {STRAYS} cache files ({STRAYS} unsigned) and 1 leftover (KEEPWRAP_LOG=debug names each file)")
    );
    assert!(
        prune_lines(&b2.stderr, "DEBUG").is_empty(),
        "no debug line at the default level"
    );
    assert!(
        b2.stderr.len() < 40_000,
        "{} bytes of log for one boot",
        b2.stderr.len()
    );
}

#[test]
fn each_file_has_its_line_at_debug_level() {
    let h = tempfile::tempdir().unwrap();
    root_with_strays(h.path(), 3);
    let b2 = boot(arm(h.path(), "4096").env("KEEPWRAP_LOG", "debug"));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    let debug = prune_lines(&b2.stderr, "DEBUG");
    let count = |code: &str| debug.iter().filter(|e| e["code"] == code).count();
    assert_eq!(
        (count("stored"), count("removed"), count("removed_leftover")),
        (4, 3, 1),
        "{debug:#?}"
    );
    for e in debug.iter().filter(|e| e["code"] == "removed") {
        assert_eq!(e["reason"], "no sidecar (unsigned)", "{e}");
    }
    let info = prune_lines(&b2.stderr, "INFO");
    assert_eq!(info.len(), 1, "{info:#?}");
    assert_eq!(
        info[0]["message"],
        "prune: kept 0, stored 4, removed 3 cache files (3 unsigned) and 1 leftover (KEEPWRAP_LOG=debug names each file)"
    );
}

#[test]
fn one_file_of_each_reason_is_said_in_the_singular() {
    let h = tempfile::tempdir().unwrap();
    root_with_strays(h.path(), 1);
    let b2 = boot(&mut arm(h.path(), "4096"));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    let info = prune_lines(&b2.stderr, "INFO");
    assert_eq!(info.len(), 1, "{info:#?}");
    assert_eq!(
        info[0]["message"],
        "prune: kept 0, stored 4, removed 1 cache file (1 unsigned) and 1 leftover (KEEPWRAP_LOG=debug names each file)"
    );
}
