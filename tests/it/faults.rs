//! Fault injection: SIGKILL of the engine at random points of its boot,
//! TERM of keepwrap (`docker stop`) at random points of an offline run,
//! SIGKILL of keepwrap at random points of prune and of unify + commit and
//! at every crash point of them (the `failpoints` feature), and
//! a cache root that cannot be used (full, read-only, missing, a file).
//! Each trial loop is bounded by a count and a time; the RNG is seeded and
//! the seed printed (replay with KEEPWRAP_FAULT_SEED). `bench/faults.sh`
//! runs the same tests with more trials.
//!
//! The invariants, checked from the outside:
//! - no sidecar set is whole on disk unless the boot that wrote it reached
//!   done (or it was whole before the boot and is unchanged);
//! - the next boot exits 0 (never 86: ranks desynchronised by a partial hit)
//!   and either reuses on every rank or hits on none;
//! - a set that was whole and signed for this launch is never lost to a
//!   crash of keepwrap in prune or in a later sign, and prune keeps all of
//!   a set or none.

use crate::common;
use crate::harden;
use serde_json::json;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use harden::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Sleep `ms` milliseconds.
fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// The main child of keepwrap (the engine's launcher): its pid is also its
/// process group.
fn engine_pid(kw: &Running) -> i32 {
    let pid = kw.guard.pid().as_raw();
    wait_for(
        "keepwrap to spawn the engine",
        Duration::from_secs(20),
        || children_of(pid).first().copied(),
    )
}

/// One engine-kill trial: what it did, for the failure message.
struct Trial {
    /// The signal sent after the delay.
    signal: &'static str,
    n: usize,
    tp: u32,
    launch: u64,
    delay_ms: u64,
}

impl std::fmt::Display for Trial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trial {} (tp {}, launch variant {}, {} after {} ms)",
            self.n, self.tp, self.launch, self.signal, self.delay_ms
        )
    }
}

fn engine_args(tp: u32, launch: u64) -> Vec<String> {
    let tp = tp.to_string();
    let cps = ["1024", "2048", "4096"][launch as usize % 3];
    [
        "--tp",
        &tp,
        "--ep",
        &tp,
        "--gate",
        "fixed",
        "--offline",
        "--chunked-prefill-size",
        cps,
        "--tune-ms",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What a trial starts from: its context line, the cache root, every set
/// recorded before the boot (in the tree or in the store: a boot may
/// restore one, whole and unchanged), and the engine's arguments.
fn trial_start(
    home: &Path,
    trial: &Trial,
    seed: u64,
) -> (String, PathBuf, BTreeMap<String, SetOnDisk>, Vec<String>) {
    let root = cache_root(home);
    let before = harden::sets(&root);
    (
        format!("{trial}, seed {seed}"),
        root,
        before,
        engine_args(trial.tp, trial.launch),
    )
}

/// Run one trial on `home`: boot, SIGKILL the engine's process group after
/// a random delay, check the disk, boot again and check that boot.
fn engine_kill_trial(home: &Path, trial: &Trial, seed: u64) {
    let (ctx, root, before, args) = trial_start(home, trial, seed);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kw = Running::spawn(&mut keepwrap_engine(home, &[], &args));
    let engine = engine_pid(&kw);
    sleep_ms(trial.delay_ms);
    let _ = kill(Pid::from_raw(-engine), Signal::SIGKILL);
    let b1 = kw.finish(Duration::from_secs(60));
    assert_no_panic(&b1.stderr, &ctx);
    // "tuning is done:" (the first line says "tuning is done when ...").
    let done = b1.has_event("tuning_done");
    assert!(
        b1.code == 137 || (b1.code == 0 && done),
        "{ctx}: keepwrap exits with the engine's status: {}\n{}",
        b1.code,
        b1.stderr
    );
    for (id, set) in whole_sets(&root) {
        let unchanged = before.contains_key(&id);
        assert!(
            done || unchanged,
            "{ctx}: a set signed without done is whole on disk: {set:?}\n{}",
            b1.stderr
        );
    }

    next_boot_keeps_all_or_nothing(home, &args, trial.tp, &ctx, &b1);
}

/// Boot the same launch again after `b1`: it exits 0, and either every rank
/// reuses or none hits (a partial hit desynchronises the ranks); a set `b1`
/// signed at done is reused whole.
fn next_boot_keeps_all_or_nothing(home: &Path, args: &[&str], tp: u32, ctx: &str, b1: &Finished) {
    let b2 = boot(&mut keepwrap_engine(home, &[], args));
    assert_no_panic(&b2.stderr, ctx);
    assert_eq!(
        b2.code, 0,
        "{ctx}: the next boot exits 0 (86 = a partial hit desynchronised the ranks)\n{}\n{}",
        b1.stderr, b2.stderr
    );
    let tuned = b2.tuned_by_rank();
    assert_eq!(tuned.len() as u32, tp, "{ctx}: every rank ran");
    let reused_all = tuned.values().all(|&t| t == 0);
    assert!(
        reused_all || b2.hit() == 0,
        "{ctx}: either every rank reuses or none hits: tuned {tuned:?}, hit {}\n{}\n{}",
        b2.hit(),
        b1.stderr,
        b2.stderr
    );
    if b1.has_event("signed") || b1.has_event("reused") {
        assert!(
            reused_all,
            "{ctx}: a set signed at done is reused whole: tuned {tuned:?}\n{}\n{}",
            b1.stderr, b2.stderr
        );
    }
}

/// Run `trials` random trials of `signal` on `threads` threads (each with
/// its own scratch home), within `budget`: trial `n` draws its topology,
/// launch variant and delay (below `spans[0]` ms for TP2, `spans[1]` for
/// TP4) from `seed` and `n`. Returns how many ran, and
/// for how many `trial` returned true.
fn run_trials(
    signal: &'static str,
    spans: [u64; 2],
    trials: usize,
    threads: usize,
    budget: Duration,
    seed: u64,
    trial: impl Fn(&Path, &Trial) -> bool + Sync,
) -> (usize, usize) {
    let start = Instant::now();
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let hits = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (ran, hits, trial) = (&ran, &hits, &trial);
            s.spawn(move || {
                let home = scratch();
                for n in (t..trials).step_by(threads) {
                    if start.elapsed() > budget {
                        break;
                    }
                    let mut rng = Rng::new(seed ^ (n as u64).wrapping_mul(0x9e37_79b9));
                    let tp = if rng.below(4) == 0 { 4 } else { 2 };
                    let span = if tp == 4 { spans[1] } else { spans[0] };
                    let t = Trial {
                        signal,
                        n,
                        tp,
                        launch: rng.below(3),
                        delay_ms: rng.below(span),
                    };
                    if trial(home.path(), &t) {
                        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    eprintln!(
        "{signal} trials: {} in {:.1} s",
        ran.load(std::sync::atomic::Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    (ran.into_inner(), hits.into_inner())
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn sigkill_of_the_engine_at_random_points_never_signs_a_partial_set_nor_gives_a_partial_hit() {
    let trials = env_usize("KEEPWRAP_FAULT_TRIALS", 50);
    let budget = Duration::from_secs(env_usize("KEEPWRAP_FAULT_SECS", 240) as u64);
    let threads = env_usize("KEEPWRAP_FAULT_THREADS", 3).max(1);
    let seed = seed();
    eprintln!("engine SIGKILL trials: {trials}, seed {seed} (KEEPWRAP_FAULT_SEED)");
    // Up to a bit past a whole boot (tp2 ~0.7 s, tp4 ~1.4 s on 2 busy
    // cores), so some trials reach done.
    let spans = [1100, 1800];
    let (ran, _) = run_trials(
        "SIGKILL",
        spans,
        trials,
        threads,
        budget,
        seed,
        |home, trial| {
            engine_kill_trial(home, trial, seed);
            true
        },
    );
    assert!(
        ran == trials || ran >= 50.min(trials),
        "only {ran} of {trials} trials fit in {budget:?} (seed {seed})"
    );
}

/// One TERM trial of an offline run: boot, TERM keepwrap (as `docker
/// stop` does) a random delay after the first rank file landed, check the disk, boot again and check
/// that boot. A stop is never tuning done: what the stopped run wrote is
/// never a set the next boot keeps, whole or in part. Whether the TERM
/// stopped the run before done.
fn term_trial(home: &Path, trial: &Trial, seed: u64) -> bool {
    let (ctx, root, before, mut args) = trial_start(home, trial, seed);
    // Slow enough tuning that a TERM finds a pass under way.
    args.extend(["--tune-ms".to_string(), "20".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A file saved again as it was signed (a trial after one that signed
    // in this home) lands at debug level only.
    let mut cmd = keepwrap_engine(home, &[], &args);
    let mut kw = Running::spawn(cmd.env("KEEPWRAP_LOG", "debug"));
    // From the first rank file on disk: TERM finds a half-tuned set.
    kw.wait_any_event(
        &["landed", "landed_unchanged", "landed_gone"],
        Duration::from_secs(30),
    );
    sleep_ms(trial.delay_ms);
    kw.guard.signal(Signal::SIGTERM);
    let b1 = kw.finish(Duration::from_secs(60));
    assert_no_panic(&b1.stderr, &ctx);
    // The fake exits 0 on TERM, or dies of it before its handler is set.
    assert!(
        b1.code == 0 || b1.code == 143,
        "{ctx}: keepwrap exits with the engine's status: {}\n{}",
        b1.code,
        b1.stderr
    );
    let stopped = b1.has_event("not_signing_stopped");
    let done = b1.has_event("tuning_done");
    for (id, set) in whole_sets(&root) {
        assert!(
            done || before.contains_key(&id),
            "{ctx}: a stopped run left a new whole signed set: {set:?}\n{}",
            b1.stderr
        );
    }

    next_boot_keeps_all_or_nothing(home, &args, trial.tp, &ctx, &b1);
    assert!(
        stopped != done,
        "{ctx}: a run is either stopped or done\n{}",
        b1.stderr
    );
    stopped
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn term_at_random_points_of_an_offline_run_never_leaves_a_set_the_next_boot_keeps_in_part() {
    let trials = env_usize("KEEPWRAP_FAULT_TRIALS", 24);
    let budget = Duration::from_secs(env_usize("KEEPWRAP_FAULT_SECS", 150) as u64);
    let threads = env_usize("KEEPWRAP_FAULT_THREADS", 3).max(1);
    // A fixed seed, so that a run replays exactly; KEEPWRAP_FAULT_SEED
    // explores others.
    let seed = std::env::var("KEEPWRAP_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7e57_0011);
    eprintln!("offline TERM trials: {trials}, seed {seed} (KEEPWRAP_FAULT_SEED)");
    // From the first rank file (the decode pass) to a bit past the end of
    // the extend pass (~15 shapes of 20 ms), so some trials reach done.
    let spans = [500, 700];
    let (ran, stopped) = run_trials(
        "TERM",
        spans,
        trials,
        threads,
        budget,
        seed,
        |home, trial| term_trial(home, trial, seed),
    );
    eprintln!("offline TERM trials: {stopped} stopped before done");
    assert!(
        ran == trials || ran >= 12.min(trials),
        "only {ran} of {trials} trials fit in {budget:?} (seed {seed})"
    );
    assert!(
        stopped > 0,
        "no trial stopped a run before done (seed {seed})"
    );
}

/// A tree for the prune trials: this launch's whole set (`L`, 1 directory)
/// beside the signed sets of `launches` other launches of `dirs`
/// directories each, as left by earlier boots. Returns the base holding
/// `root/` and `writer.sh`.
fn prune_template(launches: usize, dirs: usize) -> tempfile::TempDir {
    let base = scratch();
    install_writer(base.path());
    let l = boot(&mut writer_launch(base.path(), "L", 1, None));
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert!(l.logged_with("signed", json!({"files": 4})), "{}", l.stderr);
    for n in 0..launches {
        let other = scratch();
        install_writer(other.path());
        let o = boot(&mut writer_launch(
            other.path(),
            &format!("O{n}"),
            dirs,
            None,
        ));
        assert_eq!(o.code, 0, "{}", o.stderr);
        copy_tree(&other.path().join("root"), &base.path().join("root"));
    }
    base
}

/// Rank files kept in the store (`.keepwrap/store/<fingerprint>/...`).
fn stored_rank_files(root: &std::path::Path) -> usize {
    fn walk(dir: &std::path::Path) -> usize {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return 0;
        };
        rd.flatten()
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path())
                } else {
                    usize::from(name.starts_with("rank_") && name.ends_with(".json"))
                }
            })
            .sum()
    }
    walk(&root.join(".keepwrap/store"))
}

/// After keepwrap was killed during prune (`killed`) on `base`: this
/// launch's set is whole, and once the killed launch's engine is gone (the
/// next launch rightly runs hands-off beside it), the next launch keeps it
/// (`good`), and every one of the `others` files of the other launches is
/// in the store.
fn after_a_kill_in_prune(
    base: &Path,
    killed: &Finished,
    good: &[PathBuf],
    others: usize,
    ctx: &str,
) {
    let root = base.join("root");
    assert_no_panic(&killed.stderr, ctx);
    wait_until_nothing_holds(&root, Duration::from_secs(30));
    // This launch's set is whole, whatever prune had done.
    let whole = whole_sets(&root);
    assert!(
        whole.values().any(|s| s.members.len() == 4 && s.whole),
        "{ctx}: the good set survives: {whole:?}\n{}",
        killed.stderr
    );
    let next = boot(&mut writer_launch(base, "L", 1, None));
    assert_eq!(next.code, 0, "{ctx}\n{}", next.stderr);
    assert!(
        next.logged_with("pruned", json!({"kept": 4}))
            && next.logged_with("reused", json!({"files": 4})),
        "{ctx}: nothing good lost\n{}\n{}",
        killed.stderr,
        next.stderr
    );
    assert_eq!(
        cache_files(&root),
        good,
        "{ctx}: nothing of the other launches is left in place"
    );
    assert_eq!(
        stored_rank_files(&root),
        others,
        "{ctx}: every file of the other launches is in the store"
    );
}

/// This launch's 4 rank files in a prune template.
fn good_files(template: &Path) -> Vec<PathBuf> {
    let good: Vec<PathBuf> = cache_files(&template.join("root"))
        .into_iter()
        .filter(|p| {
            p.to_string_lossy()
                .contains(&format!("/{}/", writer_key("L", 1)))
        })
        .collect();
    assert_eq!(good.len(), 4);
    good
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn sigkill_of_keepwrap_during_prune_trusts_nothing_in_part_and_keeps_the_good_set() {
    let trials = env_usize("KEEPWRAP_PRUNE_TRIALS", 12);
    let budget = Duration::from_secs(env_usize("KEEPWRAP_FAULT_SECS", 240) as u64);
    let seed = seed();
    let mut rng = Rng::new(seed);
    eprintln!("keepwrap SIGKILL in prune: {trials} trials, seed {seed}");
    // Other launches' files, all stored by the prune (4 rank files a directory).
    const LAUNCHES: usize = 4;
    const DIRS: usize = 20;
    const OTHERS: usize = LAUNCHES * DIRS * 4;
    let template = prune_template(LAUNCHES, DIRS);
    let good = good_files(template.path());

    // How long an uninterrupted prune of this tree takes.
    let calib = scratch();
    copy_tree(template.path(), calib.path());
    let t0 = Instant::now();
    let c = boot(&mut writer_launch(calib.path(), "L", 1, None));
    let full = t0.elapsed();
    assert!(
        c.logged_with("pruned", json!({"kept": 4, "stored": OTHERS, "removed": 0})),
        "{}",
        c.stderr
    );
    assert!(c.logged_with("reused", json!({"files": 4})));

    let start = Instant::now();
    let mut mid_prune = 0;
    for n in 0..trials {
        if start.elapsed() > budget {
            break;
        }
        let delay = rng.below(full.as_millis() as u64 + 1);
        let ctx = format!("prune trial {n}, SIGKILL after {delay} ms, seed {seed}");
        let base = scratch();
        copy_tree(template.path(), base.path());
        let kw = Running::spawn(&mut writer_launch(base.path(), "L", 1, None));
        sleep_ms(delay);
        let _ = kill(kw.guard.pid(), Signal::SIGKILL);
        let killed = kw.finish(Duration::from_secs(30));
        if !killed.has_event("pruned") && killed.has_event("launch") {
            mid_prune += 1;
        }
        after_a_kill_in_prune(base.path(), &killed, &good, OTHERS, &ctx);
    }
    eprintln!(
        "keepwrap SIGKILL in prune: {mid_prune} kills landed inside prune ({full:?} uninterrupted)"
    );
}

/// After keepwrap was killed during unify + commit (`killed`) of the
/// writer's `dirs` directories on `base`: a whole set on disk is the whole
/// launch, and once the killed launch's engine is gone, the next launch
/// keeps all of it or none (then tunes and signs all). Returns whether it
/// kept all.
fn after_a_kill_in_commit(base: &Path, killed: &Finished, dirs: usize, ctx: &str) -> bool {
    let root = base.join("root");
    let files = dirs * 4;
    assert_no_panic(&killed.stderr, ctx);
    for set in whole_sets(&root).values() {
        assert_eq!(
            set.members.len(),
            files,
            "{ctx}: a whole set is the whole launch"
        );
    }
    wait_until_nothing_holds(&root, Duration::from_secs(30));
    let next = boot(&mut writer_launch(base, "L", dirs, Some("written")));
    assert_eq!(next.code, 0, "{ctx}\n{}", next.stderr);
    let reused = next.logged_with("pruned", json!({"kept": files}));
    assert!(
        reused || next.logged_with("pruned", json!({"kept": 0})),
        "{ctx}: all or nothing is kept\n{}\n{}",
        killed.stderr,
        next.stderr
    );
    if reused {
        assert!(next.logged_with("reused", json!({"files": files})), "{ctx}");
    } else {
        assert!(
            next.logged_with("signed", json!({"files": files})),
            "{ctx}\n{}",
            next.stderr
        );
    }
    assert_eq!(cache_files(&root).len(), files, "{ctx}");
    reused
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn sigkill_of_keepwrap_during_unify_and_commit_trusts_all_or_nothing() {
    let trials = env_usize("KEEPWRAP_COMMIT_TRIALS", 12);
    let budget = Duration::from_secs(env_usize("KEEPWRAP_FAULT_SECS", 240) as u64);
    let seed = seed();
    let mut rng = Rng::new(seed ^ 0x00c0_ffee);
    const DIRS: usize = 40;
    let files = DIRS * 4;
    eprintln!("keepwrap SIGKILL in unify + commit: {trials} trials, seed {seed}");

    // Calibrate: from the writer's last file to keepwrap's exit.
    let calib = scratch();
    install_writer(calib.path());
    let kw = Running::spawn(&mut writer_launch(calib.path(), "L", DIRS, Some("written")));
    wait_for("the writer", Duration::from_secs(30), || {
        calib.path().join("written").exists().then_some(())
    });
    let t0 = Instant::now();
    let c = kw.finish(Duration::from_secs(60));
    let commit = t0.elapsed();
    assert!(
        c.logged_with("signed", json!({"files": files})),
        "{}",
        c.stderr
    );
    assert!(c.logged_with("unified", json!({"files": 4})));

    let start = Instant::now();
    let (mut kept_all, mut kept_none) = (0, 0);
    for n in 0..trials {
        if start.elapsed() > budget {
            break;
        }
        let delay_us = rng.below(commit.as_micros() as u64 + 1);
        let ctx = format!(
            "commit trial {n}, SIGKILL {delay_us} us after the engine's last write, seed {seed}"
        );
        let base = scratch();
        install_writer(base.path());
        let marker = base.path().join("written");
        let kw = Running::spawn(&mut writer_launch(base.path(), "L", DIRS, Some("written")));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marker.exists() {
            assert!(
                Instant::now() < deadline,
                "{ctx}: the writer never finished"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_micros(delay_us));
        let _ = kill(kw.guard.pid(), Signal::SIGKILL);
        let killed = kw.finish(Duration::from_secs(30));
        if after_a_kill_in_commit(base.path(), &killed, DIRS, &ctx) {
            kept_all += 1;
        } else {
            kept_none += 1;
        }
    }
    eprintln!(
        "keepwrap SIGKILL in unify + commit: next boot kept all {kept_all} times, none {kept_none} times ({commit:?} uninterrupted)"
    );
}

/// Every crash point of prune's moves into the store (`KEEPWRAP_FAILPOINT=
/// store:<n>`, the `failpoints` feature), n = 1, 2, ... until the launch
/// runs to its end: the checks of the random kills above, at each.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_of_keepwrap_at_every_crash_point_of_prune_keeps_the_good_set() {
    const LAUNCHES: usize = 2;
    const DIRS: usize = 2;
    let template = prune_template(LAUNCHES, DIRS);
    let good = good_files(template.path());
    let points = every_crash_point("store", |n| {
        let base = scratch();
        copy_tree(template.path(), base.path());
        let mut cmd = writer_launch(base.path(), "L", 1, None);
        cmd.env("KEEPWRAP_FAILPOINT", format!("store:{n}"));
        let killed = boot(&mut cmd);
        let ctx = format!("prune, crash after store change {n}");
        let crashed = crashed(&killed, &ctx);
        if crashed {
            after_a_kill_in_prune(base.path(), &killed, &good, LAUNCHES * DIRS * 4, &ctx);
        }
        crashed
    });
    // Each other launch's set: a rename per directory (each holds nothing
    // but the set's files: it moves whole), then its install. The moves
    // file by file: `store_crash::sigkill_at_every_point_of_a_set_of_whole_
    // directories_loses_nothing`.
    assert!(points >= LAUNCHES * (DIRS + 1), "{points} crash points");
}

/// Every crash point of unify (each rank file replaced by its union) and
/// of sign (each sidecar, then the set manifest), n = 1, 2, ... until the
/// launch runs to its end: the checks of the random kills above, at each.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_of_keepwrap_at_every_crash_point_of_unify_and_sign_trusts_all_or_nothing() {
    const DIRS: usize = 3;
    for step in ["unify", "sign"] {
        let (mut kept_all, mut kept_none) = (0, 0);
        let points = every_crash_point(step, |n| {
            let base = scratch();
            install_writer(base.path());
            let mut cmd = writer_launch(base.path(), "L", DIRS, Some("written"));
            cmd.env("KEEPWRAP_FAILPOINT", format!("{step}:{n}"));
            let killed = boot(&mut cmd);
            let ctx = format!("commit, crash after {step} change {n}");
            let crashed = crashed(&killed, &ctx);
            if crashed {
                if after_a_kill_in_commit(base.path(), &killed, DIRS, &ctx) {
                    kept_all += 1;
                } else {
                    kept_none += 1;
                }
            }
            crashed
        });
        eprintln!(
            "{step}: {points} crash points, next boot kept all {kept_all} times, none {kept_none}"
        );
        // unify: 4 rank files a directory; sign: a sidecar each, then the
        // manifest (only that last one makes the set whole), then the
        // sidecar of each member signed before its change time settled
        // again, with its stamp (the set stays whole).
        if step == "unify" {
            assert_eq!(points, DIRS * 4, "{step}");
        } else {
            let signed = DIRS * 4 + 1;
            assert!(
                (signed..=signed + DIRS * 4).contains(&points),
                "{step}: {points}"
            );
            let restamped = points - signed;
            assert_eq!((kept_all, kept_none), (1 + restamped, signed - 1), "{step}");
        }
    }
}

/// Run `trial(n)` for n = 1, 2, ... until it says the launch ran to its
/// end (false); returns the number of crash points.
fn every_crash_point(step: &str, mut trial: impl FnMut(usize) -> bool) -> usize {
    let started = Instant::now();
    let mut n = 1;
    while trial(n) {
        n += 1;
        assert!(n < 10_000, "{step}: no end");
    }
    eprintln!(
        "{step}: {} crash points in {:.1} s",
        n - 1,
        started.elapsed().as_secs_f64()
    );
    n - 1
}

/// Did keepwrap stop at its crash point (SIGKILL), or run to its end (0)?
fn crashed(killed: &Finished, ctx: &str) -> bool {
    match killed.code {
        0 => false,
        137 => true,
        c => panic!("{ctx}: exit {c}\n{}", killed.stderr),
    }
}

// ---- a cache root keepwrap cannot use: the launch goes on, one warning ----

/// The names of a run's warnings, in order.
fn warnings(f: &Finished) -> Vec<String> {
    f.warnings()
        .iter()
        .map(|e| e["code"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_root_that_cannot_be_used_gets_one_warning_and_the_launch_goes_on() {
    let h = scratch();
    let file = h.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let dangling = h.path().join("dangling");
    std::os::unix::fs::symlink(h.path().join("nowhere"), &dangling).unwrap();
    let cases: [(&str, PathBuf, &str); 3] = [
        ("a file", file.clone(), "root_not_a_directory"),
        (
            "below a file (cannot be created)",
            file.join("autotune"),
            "cannot_use_root",
        ),
        ("a dangling symlink", dangling, "root_not_a_directory"),
    ];
    for (what, root, needle) in cases {
        let b = boot(keepwrap(&root).args(["--done", "exit", "--", "sh", "-c", "exit 7"]));
        assert_eq!(b.code, 7, "{what}: the child's status: {}", b.stderr);
        let w = warnings(&b);
        assert_eq!(w.len(), 1, "{what}: one warning: {}", b.stderr);
        assert!(
            w[0] == needle && b.logged_with(needle, json!({"root": root.to_str().unwrap()})),
            "{what}: {}",
            w[0]
        );
    }
}

#[test]
fn a_read_only_root_gets_one_warning_and_the_launch_goes_on() {
    if !common::has_need(can_mount(), "root and unshare --mount") {
        return;
    }
    let base = scratch();
    install_writer(base.path());
    let root = base.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let b = boot(&mut in_mount_ns(
        "mount --bind -o ro \"$0\" \"$0\"",
        &root,
        &writer_launch(base.path(), "L", 1, None),
    ));
    // The writer cannot write on a read-only root, and says so; its status
    // is the launch's.
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        !b.log_events()
            .iter()
            .any(|e| e["code"].as_str().unwrap().starts_with("not_signing")),
        "{}",
        b.stderr
    );
    let w = warnings(&b);
    assert_eq!(w.len(), 1, "one warning: {}", b.stderr);
    assert_eq!(w[0], "root_read_only", "{}", b.stderr);
}

#[test]
fn a_full_disk_gets_one_warning_per_failed_step_and_nothing_is_trusted() {
    if !common::has_need(can_mount(), "root and unshare --mount") {
        return;
    }
    let base = scratch();
    install_writer(base.path());
    let root = base.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let copy = base.path().join("after");
    // The engine writes its rank files, then the disk fills up: unify and
    // the sidecars find no space. What is left is copied out of the mount.
    std::fs::write(
        base.path().join("fill.sh"),
        "sh writer.sh root L 2 && dd if=/dev/zero of=root/.filler bs=4k 2>/dev/null; exit 0\n",
    )
    .unwrap();
    let mut cmd = Command::new("unshare");
    cmd.current_dir(base.path())
        .env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env("KEEPWRAP_CACHE_DIR", &root)
        .args([
            "--mount",
            "sh",
            "-c",
            "mkdir after && mount -t tmpfs -o size=64k tmpfs root || exit 99; \
             \"$@\"; rc=$?; rm -f root/.filler; cp -a root/. after/; exit $rc",
            "sh",
        ])
        .arg(BIN)
        .args(["--keep", "always", "--done", "exit", "--", "sh", "fill.sh"]);
    let b = boot(&mut cmd);
    assert_eq!(b.code, 0, "the launch goes on: {}", b.stderr);
    assert_no_panic(&b.stderr, "full disk");
    let w = warnings(&b);
    assert!(
        !w.is_empty() && w.len() <= 2,
        "one warning for unify and one for sign at most: {}",
        b.stderr
    );
    let w = b.warnings();
    assert!(
        w.iter().all(|e| e["error"]
            .as_str()
            .unwrap()
            .contains("No space left on device")),
        "{}",
        b.stderr
    );
    let last = w.last().unwrap();
    assert!(
        last["code"] == "cannot_sign"
            && last["error"]
                .as_str()
                .unwrap()
                .contains("will not be trusted"),
        "{}",
        b.stderr
    );
    assert!(!b.has_event("signed"), "{}", b.stderr);
    assert_eq!(cache_files(&copy).len(), 8, "the engine's files are there");
    assert!(whole_sets(&copy).is_empty(), "nothing trusted");
}

// ---- a crash while a later set of the launch is signed ----

/// One rank file per directory: nothing to unify.
const GROWN_DIRS: [&str; 3] = [
    "0.7.2/sm121/1111111111111111",
    "0.7.2/sm121/2222222222222222",
    "0.7.2/sm121/3333333333333333",
];

/// `keepwrap --done exit -- sh -c SCRIPT` in `base`, root `base/root`.
fn sh_in(base: &Path, script: &str) -> Command {
    let mut c = keepwrap(&base.join("root"));
    c.current_dir(base)
        .args(["--done", "exit", "--", "sh", "-c", script]);
    c
}

/// A launch signs a set of two; its next boot tunes a third directory and
/// keepwrap is killed after the sidecar of the new member is written (the
/// others record their members already: not written again), before the
/// manifest. The launch's script.
fn killed_while_signing_a_grown_set(base: &Path) -> String {
    let root = base.join("root");
    let write = |d: &str, v: u32| {
        format!(
            "mkdir -p root/{d} && [ -e root/{d}/rank_tp0_pp0_dp0.json ] || printf '{{\"k{v}\": [\"T\", {v}]}}' > root/{d}/rank_tp0_pp0_dp0.json"
        )
    };
    // One launch (one argv): it tunes a third directory once `grow` exists.
    let script = format!(
        "{} && {} && {{ [ ! -e grow ] || {{ {}; }}; }}",
        write(GROWN_DIRS[0], 0),
        write(GROWN_DIRS[1], 1),
        write(GROWN_DIRS[2], 2)
    );
    let b1 = boot(&mut sh_in(base, &script));
    assert!(
        b1.logged_with("signed", json!({"files": 2})),
        "{}",
        b1.stderr
    );
    std::fs::write(base.join("grow"), "").unwrap();
    let sidecar = |d: &str| root.join(d).join("rank_tp0_pp0_dp0.launch");
    let before = std::fs::read(sidecar(GROWN_DIRS[0])).unwrap();
    // keepwrap stops itself with SIGKILL right after the first sidecar it
    // writes at sign (the `failpoints` feature).
    let killed = boot(sh_in(base, &script).env("KEEPWRAP_FAILPOINT", "sign:1"));
    assert_eq!(killed.code, 128 + 9, "{}", killed.stderr);
    assert!(
        sidecar(GROWN_DIRS[2]).exists(),
        "the crash point is after the sidecar of the new member"
    );
    assert_eq!(
        std::fs::read(sidecar(GROWN_DIRS[0])).ok(),
        Some(before),
        "a member whose sidecar records it is not signed again"
    );
    assert!(
        killed.logged_with("pruned", json!({"kept": 2})),
        "{}",
        killed.stderr
    );
    assert!(
        !killed.logged_with("signed", json!({"files": 3})),
        "{}",
        killed.stderr
    );
    script
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn sigkill_of_keepwrap_between_sidecars_of_a_grown_set_keeps_the_set_signed_before() {
    let t = scratch();
    let script = killed_while_signing_a_grown_set(t.path());
    // The set signed by the first boot is on disk as it was signed (same
    // bytes, its manifest the last one committed): it is kept whole.
    let b3 = boot(&mut sh_in(t.path(), &script));
    assert_eq!(b3.code, 0, "{}", b3.stderr);
    assert!(
        b3.logged_with("pruned", json!({"kept": 2})),
        "a whole signed set was lost to a crash in a later sign:\n{}",
        b3.stderr
    );
    assert!(
        b3.logged_with("signed", json!({"files": 3})),
        "{}",
        b3.stderr
    );
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_grown_set_left_by_a_sign_killed_midway_is_stored_whole_and_restored() {
    let t = scratch();
    let script = killed_while_signing_a_grown_set(t.path());
    // Another launch on the root stores the set, the launch comes back.
    let other = boot(&mut sh_in(t.path(), "true"));
    assert!(
        other.logged_with("pruned", json!({"kept": 0, "stored": 2})),
        "{}",
        other.stderr
    );
    let back = boot(&mut sh_in(t.path(), &script));
    assert_eq!(back.code, 0, "{}", back.stderr);
    assert!(
        back.logged_with("restored", json!({"files": 2})),
        "{}\n{}",
        other.stderr,
        back.stderr
    );
}
