//! `keepwrap status` as `ccache -s`: launches, reuses, tunes, the hit rate,
//! the store against its limit and the tuning time the cache saved; and
//! `status --verify` failing on a file whose bytes changed.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// The fake engine's launch, offline (done at a clean exit), 40 ms per
/// tuned shape so a tuning boot is measurably longer than a reuse.
fn launch(home: &Path) -> Command {
    keepwrap_engine(
        home,
        &[],
        &[
            "--tp",
            "2",
            "--ep",
            "2",
            "--gate",
            "stock",
            "--offline",
            "--tune-ms",
            "40",
        ],
    )
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
    assert!(b1.logged("tuned and signed 2 cache files"), "{}", b1.stderr);
    let b2 = boot(&mut launch(h.path()));
    assert!(
        b2.logged("reused 2 cache files signed for this launch"),
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
    // Boot 1 tuned 27 shapes per rank at 40 ms each: more than a second.
    let tuning = st["tuning_ms"].as_u64().unwrap();
    let saved = st["saved_ms"].as_u64().unwrap();
    assert!(tuning >= 1000, "{st}");
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
        text.contains("\nwhat the cache saved: hit rate 50% (1 reuses of 2 launches that reused or tuned); tuning time saved "),
        "{text}"
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
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.iter().position(|b| b.is_ascii_digit()).unwrap();
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&file, &bytes).unwrap();

    let f = status(h.path(), &[]);
    assert_eq!(
        f.code, 0,
        "without --verify the bytes are not read: {}",
        f.stderr
    );
    let f = status(h.path(), &["--verify"]);
    assert_eq!(f.code, 1, "{}", f.stderr);
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
