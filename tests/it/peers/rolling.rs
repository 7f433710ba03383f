//! Launches of different fingerprints that meet on one cache root, as a
//! Kubernetes RollingUpdate on one `ReadWriteMany` volume makes them: launch
//! A serves from its signed set while launch B (another
//! `--chunked-prefill-size`) starts on the same root. B's engine must load
//! no file of A's (A's engine loaded its set at its start), A's set must
//! come back whole at A's next boot, and nothing B's engine wrote beside a
//! live A is ever signed.

use super::*;

use std::collections::BTreeMap;

/// The 2-rank launch with expert parallelism (fixed gate) as a server on
/// `port`, done at its health endpoint's first 200, with
/// `--chunked-prefill-size prefill` (not in the engine's key: another
/// value writes the same rank-file paths). `--port` is not fingerprinted.
fn server(h: &Path, port: u16, prefill: &str, extra: &[&str]) -> Command {
    let health = format!("health=http://127.0.0.1:{port}/health");
    let port = port.to_string();
    keepwrap_engine(
        h,
        &["--done", &health],
        &[
            &[
                "--tp",
                "2",
                "--ep",
                "2",
                "--gate",
                "fixed",
                "--port",
                &port,
                "--chunked-prefill-size",
                prefill,
            ],
            extra,
        ]
        .concat(),
    )
}

/// The same launch offline (done when it exits 0).
fn offline(h: &Path, prefill: &str, extra: &[&str]) -> Command {
    keepwrap_engine(
        h,
        &[],
        &[
            &[
                "--tp",
                "2",
                "--ep",
                "2",
                "--gate",
                "fixed",
                "--offline",
                "--chunked-prefill-size",
                prefill,
            ],
            extra,
        ]
        .concat(),
    )
}

const A: &str = "2048";
const B: &str = "4096";

/// Start a server launch and wait until its engine serves (its tuning is
/// over, whatever keepwrap does with the cache).
fn serving(cmd: &mut Command) -> Running {
    let mut r = Running::spawn(cmd);
    r.wait_stdout("the engine's ready line", Duration::from_secs(60), |l| {
        l.contains("\"event\": \"ready\"")
    });
    r
}

/// Stop a server launch (TERM) and collect what it printed.
fn stop(r: Running) -> Finished {
    r.guard.signal(Signal::SIGTERM);
    let f = r.finish(Duration::from_secs(30));
    assert_eq!(f.code, 0, "{}", f.stderr);
    f
}

/// The bytes of every cache file below `root` (the live tree only).
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    cache_files(root)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(root.join(&p)).unwrap();
            (p, bytes)
        })
        .collect()
}

use std::path::PathBuf;

/// The engine of `f` loaded no cache file: every rank's every pass found
/// none and hit nothing.
fn loaded_nothing(f: &Finished) -> bool {
    let passes = f.events("pass");
    !passes.is_empty()
        && passes
            .iter()
            .all(|p| p["load"] == "missing" && p["hit"] == 0)
}

/// A signs and serves; B starts beside it: B's engine loads none of A's
/// files, tunes its own, signs nothing (A's engine ran beside it); A signs
/// nothing more. Once both have ended, in either order, A's next boot
/// brings A's set back whole, byte for byte, and tunes nothing.
fn b_beside_a(b_ends_first: bool) {
    let h = home();
    let root = cache_root(h.path());
    let mut a = serving(&mut server(h.path(), free_port(), A, &[]));
    a.wait_event_with("signed", json!({"files": 2}), Duration::from_secs(30));
    let signed = tree(&root);
    assert_eq!(signed.len(), 2);
    let b = serving(&mut server(h.path(), free_port(), B, &[]));
    let (a, b) = if b_ends_first {
        let b = stop(b);
        (stop(a), b)
    } else {
        let a = stop(a);
        (a, stop(b))
    };
    assert!(
        loaded_nothing(&b),
        "B's engine loaded none of A's files: {:?}\n{}",
        b.events("pass"),
        b.stderr
    );
    assert!(b.tuned() > 0, "{}", b.stderr);
    assert!(b.has_event("beside_other_launch"), "{}", b.stderr);
    assert!(
        b.logged_with("pruned", json!({"stored": 2})),
        "{}",
        b.stderr
    );
    assert!(
        !b.has_event("signed") && b.has_event("not_signing_other_launch"),
        "nothing B's engine wrote beside A's is signed: {}",
        b.stderr
    );
    assert_eq!(
        a.events_named("signed").len(),
        1,
        "A signs nothing more: {}",
        a.stderr
    );
    assert!(markers(&root).is_empty(), "{:?}", markers(&root));
    // A's next boot: its set whole, from the store.
    let again = stop(serving(&mut server(h.path(), free_port(), A, &[])));
    assert!(
        again.logged_with("restored", json!({"files": 2})),
        "{}",
        again.stderr
    );
    assert_eq!(again.tuned(), 0, "{}", again.stderr);
    assert_eq!(again.tactics(), a.tactics(), "A's very tactics");
    assert_eq!(tree(&root), signed, "A's set, byte for byte");
}

#[test]
fn a_launch_of_another_fingerprint_beside_a_serving_one_loads_none_of_its_files_b_ends_first() {
    b_beside_a(true);
}

#[test]
fn a_launch_of_another_fingerprint_beside_a_serving_one_loads_none_of_its_files_a_ends_first() {
    b_beside_a(false);
}
