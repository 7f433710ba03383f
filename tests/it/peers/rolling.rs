//! Launches of different fingerprints that meet on one cache root, as a
//! Kubernetes RollingUpdate on one `ReadWriteMany` volume makes them: launch
//! A serves from its signed set while launch B (another
//! `--chunked-prefill-size`) starts on the same root. B's engine must load
//! no file of A's (A's engine loaded its set at its start), A's set must
//! come back whole at A's next boot, and nothing B's engine wrote beside a
//! live A is ever signed.

use super::*;

use std::collections::BTreeMap;

/// The 2-rank launch with expert parallelism, the fixed gate.
const EP2: &[&str] = &["--tp", "2", "--ep", "2", "--gate", "fixed"];

/// [`EP2`] as a server on `port`, done at its health endpoint's first 200,
/// with `--chunked-prefill-size prefill` (not in the engine's key: another
/// value writes the same rank-file paths). `--port` is not fingerprinted.
fn server(h: &Path, port: u16, prefill: &str, extra: &[&str]) -> Command {
    let health = format!("health=http://127.0.0.1:{port}/health");
    let port = port.to_string();
    let args = [
        EP2,
        &["--port", &port, "--chunked-prefill-size", prefill],
        extra,
    ];
    keepwrap_engine(h, &["--done", &health], &args.concat())
}

/// [`EP2`] offline (done when it exits 0).
fn offline(h: &Path, prefill: &str, extra: &[&str]) -> Command {
    let args = [
        EP2,
        &["--offline", "--chunked-prefill-size", prefill],
        extra,
    ];
    keepwrap_engine(h, &[], &args.concat())
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

/// The engine of `f` loaded no file of another launch: the first pass of
/// every rank found no rank file (the later ones load what the first
/// saved) and no pass hit anything.
fn loaded_nothing(f: &Finished) -> bool {
    let passes = f.events("pass");
    let first = |p: &&serde_json::Value| p["pass"] == "decode";
    passes.iter().filter(first).count() == 2
        && passes.iter().filter(first).all(|p| p["load"] == "missing")
        && passes.iter().all(|p| p["hit"] == 0)
}

/// A boots alone, tunes, signs and serves: it, and its set as signed.
fn a_signed(h: &Path) -> (Running, BTreeMap<PathBuf, Vec<u8>>) {
    let mut a = serving(&mut server(h, free_port(), A, &[]));
    a.wait_event_with("signed", json!({"files": 2}), Duration::from_secs(30));
    let signed = tree(&cache_root(h));
    assert_eq!(signed.len(), 2);
    (a, signed)
}

/// A server launch of `prefill` that serves beside another and, done,
/// signed nothing.
fn serving_beside(h: &Path, prefill: &str) -> Running {
    let mut r = serving(&mut server(h, free_port(), prefill, &[]));
    r.wait_event("not_signing_other_launch", Duration::from_secs(30));
    r
}

/// `f` brought the set back from the store and tuned nothing: its engine
/// used `tactics`.
fn restored_whole(f: &Finished, tactics: &BTreeMap<u64, String>) {
    assert!(
        f.logged_with("restored", json!({"files": 2})),
        "{}",
        f.stderr
    );
    assert_eq!((f.tuned(), &f.tactics()), (0, tactics), "{}", f.stderr);
}

/// A signs and serves; B starts beside it: B's engine loads none of A's
/// files, tunes its own, signs nothing (A's engine ran beside it); A signs
/// nothing more. Once both have ended, in either order, A's next boot
/// brings A's set back whole, byte for byte, and tunes nothing.
fn b_beside_a(b_ends_first: bool) {
    let h = home();
    let root = cache_root(h.path());
    let (a, signed) = a_signed(h.path());
    let b = serving_beside(h.path(), B);
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
    restored_whole(&again, &a.tactics());
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

/// A serves from its signed set, B serves beside it; A is replaced (its
/// next boot starts while B serves): A's boot removes B's unsigned files,
/// brings its own set back whole and tunes nothing, while B's engine goes
/// on unharmed. Then each launch alone keeps and gets back its own tuning.
#[test]
fn a_reboot_of_the_first_launch_beside_the_other_restores_its_own_set() {
    let h = home();
    let root = cache_root(h.path());
    let (a, signed) = a_signed(h.path());
    let b = serving_beside(h.path(), B);
    let a = stop(a);
    let again = serving_beside(h.path(), A);
    assert_eq!(tree(&root), signed, "A's set in place, byte for byte");
    let again = stop(again);
    let b = stop(b);
    assert!(again.has_event("beside_other_launch"), "{}", again.stderr);
    assert!(
        again.logged_with("pruned", json!({"kept": 0, "stored": 0, "removed": 2})),
        "B's unsigned files go: {}",
        again.stderr
    );
    restored_whole(&again, &a.tactics());
    assert!(loaded_nothing(&b), "{}", b.stderr);
    // Alone, B tunes (nothing of it was signed) and signs; then A gets its
    // set back from the store, and B gets its own.
    let solo = stop_signed(server(h.path(), free_port(), B, &[]), "signed");
    assert!(
        solo.logged_with("pruned", json!({"stored": 2})),
        "{}",
        solo.stderr
    );
    assert!(loaded_nothing(&solo), "{}", solo.stderr);
    let a3 = stop_signed(server(h.path(), free_port(), A, &[]), "reused");
    restored_whole(&a3, &a.tactics());
    let b3 = stop_signed(server(h.path(), free_port(), B, &[]), "reused");
    restored_whole(&b3, &solo.tactics());
}

/// Boot `cmd` alone, wait until keepwrap logged `outcome` (`signed`,
/// `reused`) for its 2 files, and stop it.
fn stop_signed(mut cmd: Command, outcome: &str) -> Finished {
    let mut r = serving(&mut cmd);
    r.wait_event_with(outcome, json!({"files": 2}), Duration::from_secs(30));
    stop(r)
}

/// A serves; B starts beside it and is still tuning when A's next boot
/// starts: that boot waits for B (never loads B's files in flight), then
/// goes around it and brings A's set back whole.
#[test]
fn a_reboot_while_the_other_launch_tunes_waits_for_it_then_restores_its_own_set() {
    let h = home();
    let root = cache_root(h.path());
    let (a, signed) = a_signed(h.path());
    let mut b = Running::spawn(&mut server(
        h.path(),
        free_port(),
        B,
        &["--load-ms", "2000"],
    ));
    b.wait_event("beside_other_launch", Duration::from_secs(30));
    let a = stop(a);
    let mut again = Running::spawn(&mut server(h.path(), free_port(), A, &[]));
    again.wait_event("waiting_for_other", Duration::from_secs(30));
    again.wait_event("beside_other_launch", Duration::from_secs(60));
    again.wait_stdout("the engine's ready line", Duration::from_secs(60), |l| {
        l.contains("\"event\": \"ready\"")
    });
    assert_eq!(tree(&root), signed, "A's set in place, byte for byte");
    let again = stop(again);
    let b = stop(b);
    assert!(again.has_event("other_done_tuning"), "{}", again.stderr);
    restored_whole(&again, &a.tactics());
    assert!(loaded_nothing(&b), "{}", b.stderr);
    assert!(!b.has_event("signed"), "{}", b.stderr);
}

/// A third launch C beside A and B (both serving): C's engine loads
/// nothing of either, and A's set comes back whole once all have ended.
#[test]
fn a_third_launch_beside_two_serving_ones_loads_nothing_of_either() {
    let h = home();
    let root = cache_root(h.path());
    let (a, signed) = a_signed(h.path());
    let b = serving_beside(h.path(), B);
    let c = boot(&mut offline(h.path(), "1024", &[]));
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(
        c.logged_with("beside_other_launch", json!({"more": 1})),
        "{}",
        c.stderr
    );
    assert!(loaded_nothing(&c), "{}", c.stderr);
    assert!(!c.has_event("signed"), "{}", c.stderr);
    let (a, b) = (stop(a), stop(b));
    assert!(loaded_nothing(&b), "{}", b.stderr);
    let again = stop_signed(server(h.path(), free_port(), A, &[]), "reused");
    restored_whole(&again, &a.tactics());
    assert_eq!(tree(&root), signed);
    assert!(markers(&root).is_empty(), "{:?}", markers(&root));
}

/// The word a launch's marker starts with (`done`, `tuning`, ...), for the
/// one marker below `root`.
fn marker_state(root: &Path) -> Option<String> {
    let names = markers(root);
    let [name] = names.as_slice() else {
        return None;
    };
    let text = std::fs::read_to_string(root.join(".keepwrap/running").join(name)).ok()?;
    text.split_whitespace().next().map(str::to_string)
}

/// keepwrap of A is killed (`kill -9`, not PID 1) once A is done: its
/// engine serves on, an orphan whose marker says done. B goes around it as
/// around a live launch: it stores A's set, loads nothing of it, signs
/// nothing; once the orphan has ended, A's next boot gets its set back.
#[test]
fn a_launch_beside_the_orphaned_engine_of_a_launch_done_tuning_loads_none_of_its_files() {
    let h = home();
    let root = cache_root(h.path());
    let (mut a, signed) = a_signed(h.path());
    wait_for("A's marker to say done", Duration::from_secs(10), || {
        (marker_state(&root).as_deref() == Some("done")).then_some(())
    });
    let start = a.wait_stdout("the engine's start line", Duration::from_secs(5), |l| {
        l.contains("\"event\": \"start\"")
    });
    let v: serde_json::Value = serde_json::from_str(&start).unwrap();
    let engine = GroupGuard(v["pid"].as_i64().unwrap() as i32);
    a.guard.signal(Signal::SIGKILL);
    wait_for("keepwrap to die", Duration::from_secs(5), || {
        a.guard.child.try_wait().unwrap()
    });
    assert!(pid_alive(engine.0), "the engine outlives keepwrap");
    // What A's engine printed before it served: its tactics among them.
    let a_tactics = Finished {
        code: 0,
        stdout: a.stdout.clone(),
        stderr: String::new(),
    }
    .tactics();
    assert_eq!(a_tactics.len(), 2);
    let b = boot(&mut offline(h.path(), B, &[]));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.has_event("beside_other_launch"), "{}", b.stderr);
    assert!(
        b.logged_with("pruned", json!({"stored": 2})),
        "{}",
        b.stderr
    );
    assert!(loaded_nothing(&b), "{}", b.stderr);
    assert!(!b.has_event("signed"), "{}", b.stderr);
    assert!(pid_alive(engine.0), "the orphan did not crash");
    end_orphan(engine);
    let again = stop_signed(server(h.path(), free_port(), A, &[]), "reused");
    restored_whole(&again, &a_tactics);
    assert_eq!(tree(&root), signed);
}

/// B is killed (SIGKILL) at each crash point of the store while it stores
/// the set of A, which serves (and, when B has a set of its own in the
/// store, while it restores it): the next launches recover, whichever comes
/// first. A replica of A gets A's set whole; B's next boot loads nothing
/// of A's (only its own set, when it has one); once all have ended, A's
/// next boot gets its set back, byte for byte.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_of_a_launch_beside_a_serving_one_at_every_crash_point_loses_nothing_of_it() {
    for own_set in [false, true] {
        let mut points = 0;
        for n in 1.. {
            let ctx = format!("killed after store change {n} (B's own set: {own_set})");
            let h = home();
            let root = cache_root(h.path());
            // B's own set, signed alone first (A's first boot stores it).
            let b_tactics = own_set.then(|| {
                let b = boot(&mut offline(h.path(), B, &[]));
                assert!(b.logged_with("signed", json!({"files": 2})), "{}", b.stderr);
                b.tactics()
            });
            // B's engine loads none of A's files: nothing, or its own set.
            let only_its_own = |b: &Finished| match &b_tactics {
                None => assert!(loaded_nothing(b), "{ctx}: {}", b.stderr),
                Some(t) => restored_whole(b, t),
            };
            let (a, signed) = a_signed(h.path());
            let mut cmd = offline(h.path(), B, &[]);
            cmd.env("KEEPWRAP_FAILPOINT", format!("store:{n}"));
            let killed = boot(&mut cmd);
            if killed.code != 128 + 9 {
                // Fewer than n crash points: it ran to its end.
                assert_eq!(killed.code, 0, "{ctx}: {}", killed.stderr);
                only_its_own(&killed);
                stop(a);
                break;
            }
            points += 1;
            assert!(
                killed.events("start").is_empty(),
                "{ctx}: killed before its engine started"
            );
            // A replica of A first: it recovers and gets A's set, whole.
            let replica = stop(serving_beside(h.path(), A));
            // B again, beside A: none of A's files.
            let b = boot(&mut offline(h.path(), B, &[]));
            assert_eq!(b.code, 0, "{ctx}: {}", b.stderr);
            only_its_own(&b);
            let a = stop(a);
            // Restored from the store, or reused where recovery put back
            // a flat stash killed between its renames: whole either way.
            if !replica.logged_with("pruned", json!({"kept": 2})) {
                restored_whole(&replica, &a.tactics());
            }
            assert_eq!(
                (replica.tuned(), &replica.tactics()),
                (0, &a.tactics()),
                "{ctx}: {}",
                replica.stderr
            );
            let again = stop_signed(server(h.path(), free_port(), A, &[]), "reused");
            restored_whole(&again, &a.tactics());
            assert_eq!(tree(&root), signed, "{ctx}");
        }
        // The flat stash: the directory into the store, its manifest into
        // it; a flat restore: the entry out, its manifest back, the
        // directory in place.
        assert_eq!(points, if own_set { 4 } else { 2 }, "own set: {own_set}");
    }
}
