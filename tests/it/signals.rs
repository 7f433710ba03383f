//! Every signal, 1 to 64, proven from the outside: a child killed by any of
//! them gives 128+N, and every asynchronous one sent to keepwrap reaches the
//! child (realtime ones included), as with tini. The same scenarios run
//! against tini, and the two must agree.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(20);

/// Signals that do not end a process by default: the stop signals stop it
/// (the child is resumed and then exits 0), the others are ignored.
const NOT_FATAL: [i32; 8] = [
    libc::SIGSTOP,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGCONT,
    libc::SIGCHLD,
    libc::SIGURG,
    libc::SIGWINCH,
];

/// Signals that report a fault of the thread that raised it: never forwarded.
const SYNCHRONOUS: [i32; 7] = [
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGABRT,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Sent to keepwrap, dropped: the terminal must not stop the supervisor.
const DROPPED: [i32; 3] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wrapper {
    Keepwrap,
    Tini,
}

fn wrapped(w: Wrapper, dir: &Path, argv: &[&str]) -> Command {
    let mut cmd = match w {
        Wrapper::Keepwrap => keepwrap(&dir.join("cache")),
        Wrapper::Tini => tini(),
    };
    cmd.arg("--").args(argv).current_dir(dir);
    cmd.env("SIGCHILD_REPORT", dir.join("report"));
    cmd
}

/// The exit status of `w` over a child that sends itself signal `n`.
fn status_when_the_child_gets(w: Wrapper, n: i32) -> i32 {
    let dir = tempfile::tempdir().unwrap();
    let script = helper("sigdie.py");
    let mut cmd = wrapped(
        w,
        dir.path(),
        &["python3", script.to_str().unwrap(), &n.to_string()],
    );
    let mut g = Guard::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    g.wait(T)
}

fn expected_status(n: i32) -> i32 {
    if NOT_FATAL.contains(&n) {
        0
    } else {
        128 + n
    }
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn a_child_killed_by_any_signal_1_to_64_gives_128_plus_n() {
    let got: Vec<(i32, i32)> = (1..=64)
        .map(|n| (n, status_when_the_child_gets(Wrapper::Keepwrap, n)))
        .collect();
    let want: Vec<(i32, i32)> = (1..=64).map(|n| (n, expected_status(n))).collect();
    assert_eq!(got, want);
}

/// The signals of `mask` (bit N-1 is signal N).
fn signals_in(mask: u64) -> Vec<i32> {
    (1..=64).filter(|n| mask & (1 << (n - 1)) != 0).collect()
}

/// The child's last reported set of pending signals.
fn pending(report: &Path) -> u64 {
    lines(report)
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("pending "))
        .map(|hex| u64::from_str_radix(hex, 16).unwrap())
        .unwrap_or(0)
}

/// Send each of `signals` to `w` in turn and wait until the child has it
/// pending (or, for `dropped`, send it and check at the end that it never
/// arrived). Returns the signals the child got.
fn deliver(w: Wrapper, signals: &[i32], dropped: &[i32]) -> Vec<i32> {
    let dir = tempfile::tempdir().unwrap();
    let script = helper("sigpending.py");
    let mut cmd = wrapped(w, dir.path(), &["python3", script.to_str().unwrap()]);
    cmd.stdin(Stdio::piped()).stderr(Stdio::null());
    let mut g = Guard::spawn(&mut cmd);
    let report = dir.path().join("report");
    wait_for("the child to block its signals", T, || {
        lines(&report).iter().any(|l| l == "ready").then_some(())
    });
    let pid = g.pid().as_raw();
    let send = |n: i32| {
        // SAFETY: kill(2) with a valid pid and signal number.
        assert_eq!(unsafe { libc::kill(pid, n) }, 0, "kill {n}");
    };
    for &n in dropped {
        send(n);
    }
    for &n in signals {
        send(n);
        wait_for(&format!("{w:?}: signal {n} to reach the child"), T, || {
            (pending(&report) & (1 << (n - 1)) != 0).then_some(())
        });
        assert_eq!(
            g.child.try_wait().unwrap(),
            None,
            "{w:?} is still running after signal {n}"
        );
    }
    let got = signals_in(pending(&report));
    drop(g.child.stdin.take());
    assert_eq!(
        g.wait(T),
        0,
        "{w:?}: the child exits 0 once its stdin closes"
    );
    got
}

/// Every signal keepwrap forwards: all but KILL and STOP (which cannot be
/// caught), the synchronous ones, CHLD (keepwrap's own), the terminal
/// stop signals and the C library's reserved ones (32 up to `SIGRTMIN`: 32
/// and 33 with glibc, 32 to 34 with musl), which tini does not forward
/// either.
fn forwarded() -> Vec<i32> {
    (1..=64)
        .filter(|n| {
            ![libc::SIGKILL, libc::SIGSTOP, libc::SIGCHLD].contains(n)
                && !SYNCHRONOUS.contains(n)
                && !DROPPED.contains(n)
                && !(32..libc::SIGRTMIN()).contains(n)
        })
        .collect()
}

#[test]
fn every_asynchronous_signal_1_to_64_reaches_the_child_and_keepwrap_lives() {
    let signals = forwarded();
    let reserved = (libc::SIGRTMIN() - 32) as usize;
    assert_eq!(signals.len(), 64 - 2 - 1 - 7 - 3 - reserved);
    let got = deliver(Wrapper::Keepwrap, &signals, &DROPPED);
    assert_eq!(
        got, signals,
        "what the child got (TSTP, TTIN, TTOU dropped)"
    );
}

/// Write system calls `pid` has made, from /proc (failed ones included).
fn write_calls(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("syscw: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// keepwrap's own log line to a closed pipe raises SIGPIPE in keepwrap (it
/// is blocked, so it queues for the signalfd): that one is not the child's.
#[test]
fn keepwrap_s_own_sigpipe_is_not_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let script = helper("sigpending.py");
    let mut cmd = wrapped(
        Wrapper::Keepwrap,
        dir.path(),
        &["python3", script.to_str().unwrap()],
    );
    cmd.stdin(Stdio::piped()).stderr(Stdio::from(write_end));
    let mut g = Guard::spawn(&mut cmd);
    let report = dir.path().join("report");
    wait_for("the child to block its signals", T, || {
        lines(&report).iter().any(|l| l == "ready").then_some(())
    });
    // A cache file lands: keepwrap logs it, to the closed pipe.
    let kw = g.pid().as_raw();
    let before = write_calls(kw);
    let file = dir
        .path()
        .join("cache/0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{}").unwrap();
    wait_for("keepwrap to log the landing", T, || {
        (write_calls(kw) > before).then_some(())
    });
    // A realtime signal is read after any standard one queued before it:
    // once it reached the child, a forwarded PIPE would have too.
    let rt = libc::SIGRTMIN() + 1;
    // SAFETY: kill(2) with a valid pid and signal number.
    assert_eq!(unsafe { libc::kill(kw, rt) }, 0);
    wait_for("the realtime signal to reach the child", T, || {
        (pending(&report) & (1 << (rt - 1)) != 0).then_some(())
    });
    assert_eq!(signals_in(pending(&report)), vec![rt]);
    drop(g.child.stdin.take());
    assert_eq!(g.wait(T), 0);
}

/// The same scenarios against tini: the same statuses for every signal, and
/// tini forwards the same signals (neither forwards 32 and 33, which the C
/// library keeps for itself).
#[test]
#[ignore = "slow: run by .ci/run"]
fn tini_agrees_on_every_signal() {
    if !common::has_need(have("tini"), "tini (.ci/run installs it)") {
        return;
    }
    for n in 1..=64 {
        assert_eq!(
            status_when_the_child_gets(Wrapper::Tini, n),
            expected_status(n),
            "tini: the child got signal {n}"
        );
    }
    let signals: Vec<i32> = forwarded()
        .into_iter()
        .filter(|n| ![32, 33].contains(n))
        .collect();
    assert_eq!(deliver(Wrapper::Tini, &signals, &[]), signals);
}
