//! keepwrap as a container entrypoint, proven from the outside: exit
//! statuses, signal forwarding, reaping as PID 1 and as a subreaper, the
//! grace period, a clean signal state for the child, the terminal. The
//! scenario table also runs against tini, and the two must agree.

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(20);

/// A supervisor under test: keepwrap, or tini for comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wrapper {
    Keepwrap,
    Tini,
}

/// A scenario's directory. What the supervisors it starts write to stderr
/// goes to a file in it, shown only when the test fails.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The file the supervisors' stderr is appended to.
    fn stderr(&self) -> Stdio {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("stderr"))
            .unwrap()
            .into()
    }

    /// `wrapper [extra...] -- argv...`
    fn cmd(&self, w: Wrapper, extra: &[&str], argv: &[&str]) -> Command {
        let mut cmd = match w {
            Wrapper::Keepwrap => keepwrap(&self.path("cache")),
            Wrapper::Tini => tini(),
        };
        cmd.args(extra).arg("--").args(argv);
        cmd.env("SIGCHILD_REPORT", self.path("report"));
        cmd
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let said = std::fs::read_to_string(self.path("stderr")).unwrap_or_default();
            eprintln!("the supervisors' stderr:\n{said}");
        }
    }
}

fn run_code(mut cmd: Command) -> i32 {
    let mut g = Guard::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    g.wait(T)
}

fn sigchild(args: &[&str]) -> Vec<String> {
    let mut v = vec![
        "python3".to_string(),
        helper("sigchild.py").to_string_lossy().into_owned(),
    ];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

/// Wait until the report has `line` for some pid; return that pid.
fn reported(report: &Path, what: &str) -> Vec<i32> {
    lines(report)
        .iter()
        .filter_map(|l| {
            l.split_once(' ')
                .filter(|(_, w)| *w == what)
                .and_then(|(p, _)| p.parse().ok())
        })
        .collect()
}

fn wait_reported(report: &Path, what: &str, n: usize) -> Vec<i32> {
    wait_for(&format!("{n} x '{what}' in the report"), T, || {
        let pids = reported(report, what);
        (pids.len() >= n).then_some(pids)
    })
}

/// Every code, four runs at a time (each a process start and nothing to
/// wait for), each stripe in its own directory.
fn scenario_exit_codes_pass_through(w: Wrapper) {
    const STRIPES: i32 = 4;
    std::thread::scope(|s| {
        for stripe in 0..STRIPES {
            s.spawn(move || {
                let env = Env::new();
                for code in (stripe..=255).step_by(STRIPES as usize) {
                    let got = run_code(env.cmd(w, &[], &["sh", "-c", &format!("exit {code}")]));
                    assert_eq!(got, code, "{w:?}: exit {code}");
                }
            });
        }
    });
}

const DEADLY: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGKILL,
];

fn scenario_killed_by_signal_exits_128_plus_n(w: Wrapper) {
    let env = Env::new();
    for sig in DEADLY {
        let name = sig.as_str().trim_start_matches("SIG");
        let got = run_code(env.cmd(w, &[], &["sh", "-c", &format!("kill -s {name} $$")]));
        assert_eq!(got, 128 + sig as i32, "{w:?}: child killed by {sig}");
    }
}

const FORWARDED: [Signal; 8] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
];

fn scenario_signals_reach_the_child(w: Wrapper) {
    let env = Env::new();
    let argv = sigchild(&["--stay"]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let g = Guard::spawn(env.cmd(w, &[], &argv).stderr(env.stderr()));
    let report = env.path("report");
    let child = wait_reported(&report, "ready", 1)[0];
    for sig in FORWARDED {
        g.signal(sig);
        let pids = wait_reported(&report, sig.as_str(), 1);
        assert_eq!(pids, vec![child], "{w:?}: {sig} reached the child once");
    }
}

fn scenario_docker_stop_exits_143(w: Wrapper) {
    let env = Env::new();
    let mut g = Guard::spawn(
        env.cmd(
            w,
            &[],
            &["sh", "-c", "echo $$ > \"$SIGCHILD_REPORT\"; exec sleep 30"],
        )
        .stderr(Stdio::null()),
    );
    wait_for("the child to start", T, || {
        (!lines(&env.path("report")).is_empty()).then_some(())
    });
    g.signal(Signal::SIGTERM);
    assert_eq!(g.wait(T), 143, "{w:?}");
}

fn scenario_cwd_env_and_signal_state_are_the_callers(w: Wrapper) {
    let env = Env::new();
    let mut cmd = env.cmd(
        w,
        &[],
        &[
            "sh",
            "-c",
            "pwd; echo \"$KEEPWRAP_TEST_VALUE\"; grep -E '^Sig(Blk|Ign)' /proc/self/status",
        ],
    );
    cmd.current_dir(env.dir.path())
        .env("KEEPWRAP_TEST_VALUE", "hello world");
    // The caller leaves junk in the signal state: the child must not see it.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{signal, SigHandler, SigSet};
            signal(Signal::SIGUSR1, SigHandler::SigIgn).unwrap();
            signal(Signal::SIGPIPE, SigHandler::SigIgn).unwrap();
            let mut set = SigSet::empty();
            set.add(Signal::SIGUSR2);
            set.add(Signal::SIGHUP);
            set.thread_block().unwrap();
            Ok(())
        });
    }
    let out = cmd.stderr(Stdio::null()).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // The C library's reserved signals (32 up to SIGRTMIN) keep the action
    // the caller gave them (cargo leaves 32 ignored): it refuses to set it,
    // for keepwrap as for tini.
    let reserved: u64 = (32..libc::SIGRTMIN()).fold(0, |m, n| m | 1 << (n - 1));
    let text = match text.split_once("SigIgn:\t") {
        Some((head, ign)) => {
            let ign = u64::from_str_radix(ign.trim(), 16).unwrap();
            format!("{head}SigIgn:\t{:016x}\n", ign & !reserved)
        }
        None => text,
    };
    let want = format!(
        "{}\nhello world\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
        env.dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(text, want, "{w:?}");
    assert_eq!(out.status.code(), Some(0));
}

fn scenario_orphans_are_reaped_as_subreaper(w: Wrapper) {
    let env = Env::new();
    // 100 orphans: each inner shell starts a short sleep and exits at once,
    // so the sleep is reparented to the nearest subreaper.
    let script = "for i in $(seq 100); do sh -c 'sleep 0.2 &'; done; echo spawned > \"$SIGCHILD_REPORT\"; read x || true";
    let mut cmd = env.cmd(w, &[], &["sh", "-c", script]);
    cmd.stdin(Stdio::piped()).stderr(env.stderr());
    let mut g = Guard::spawn(&mut cmd);
    wait_for("the orphans to be spawned", T, || {
        (!lines(&env.path("report")).is_empty()).then_some(())
    });
    let wrapper = g.pid().as_raw();
    // All orphans end within 0.2 s; then only the main child may remain,
    // and nothing may stay a zombie.
    wait_for("every orphan to be reaped", T, || {
        let kids = children_of(wrapper);
        (kids.len() == 1 && kids.iter().all(|&k| proc_state(k) != Some('Z'))).then_some(())
    });
    drop(g.child.stdin.take());
    assert_eq!(g.wait(T), 0, "{w:?}");
}

fn scenario_ctrl_c_under_a_terminal_exits_130(w: Wrapper) {
    let env = Env::new();
    let mut cmd = Command::new("python3");
    cmd.arg(helper("pty_ctrl_c.py"));
    if w == Wrapper::Tini {
        // The terminal starts tini as a shell starts a foreground job.
        with_default_signals(&mut cmd);
    }
    let wrapped = env.cmd(w, &[], &["sh", "-c", "echo ready; exec sleep 30"]);
    cmd.arg(wrapped.get_program()).args(wrapped.get_args());
    for (k, v) in wrapped.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "130",
        "{w:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn scenario_missing_and_unexecutable_commands(w: Wrapper) -> (i32, i32) {
    let env = Env::new();
    let file = env.path("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let missing = run_code(env.cmd(w, &[], &["keepwrap-no-such-command"]));
    let unexec = run_code(env.cmd(w, &[], &[file.to_str().unwrap()]));
    (missing, unexec)
}

#[test]
fn exit_codes_0_to_255_pass_through() {
    scenario_exit_codes_pass_through(Wrapper::Keepwrap);
}

#[test]
fn a_child_killed_by_signal_n_gives_128_plus_n() {
    scenario_killed_by_signal_exits_128_plus_n(Wrapper::Keepwrap);
}

#[test]
fn every_forwarded_signal_reaches_the_child() {
    scenario_signals_reach_the_child(Wrapper::Keepwrap);
}

#[test]
fn docker_stop_terminates_the_child_and_exits_143() {
    scenario_docker_stop_exits_143(Wrapper::Keepwrap);
}

#[test]
fn the_child_gets_the_callers_cwd_and_env_and_a_clean_signal_state() {
    scenario_cwd_env_and_signal_state_are_the_callers(Wrapper::Keepwrap);
}

#[test]
fn as_a_subreaper_100_orphans_leave_no_zombie() {
    scenario_orphans_are_reaped_as_subreaper(Wrapper::Keepwrap);
}

#[test]
fn ctrl_c_under_a_terminal_reaches_the_child_and_exits_130() {
    scenario_ctrl_c_under_a_terminal_exits_130(Wrapper::Keepwrap);
}

#[test]
fn a_missing_command_exits_127_and_an_unexecutable_one_126_naming_it() {
    assert_eq!(
        scenario_missing_and_unexecutable_commands(Wrapper::Keepwrap),
        (127, 126)
    );
    let env = Env::new();
    let out = env
        .cmd(Wrapper::Keepwrap, &[], &["keepwrap-no-such-command"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let e = common::events_named(&err, "cannot_run");
    assert_eq!(e.len(), 1, "{err}");
    assert_eq!(
        (
            &e[0]["level"],
            &e[0]["program"],
            &e[0]["reason"],
            &e[0]["status"]
        ),
        (
            &"ERROR".into(),
            &"keepwrap-no-such-command".into(),
            &"not found".into(),
            &127.into()
        ),
        "{err}"
    );
    let file = env.path("plain-file");
    std::fs::write(&file, "data").unwrap();
    let out = env
        .cmd(Wrapper::Keepwrap, &[], &[file.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let e = common::events_named(&err, "cannot_run");
    assert_eq!(e.len(), 1, "{err}");
    assert_eq!(e[0]["program"], file.to_str().unwrap(), "{err}");
    assert!(
        e[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not executable"),
        "{err}"
    );
    assert_eq!(e[0]["status"], 126, "{err}");
}

#[test]
fn no_command_is_a_usage_error() {
    let env = Env::new();
    let out = keepwrap(&env.path("cache")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no COMMAND after `--`"));
}

#[test]
fn kill_group_reaches_grandchildren_and_the_default_does_not() {
    for group in [true, false] {
        let env = Env::new();
        let argv = sigchild(&["--spawn", "--stay"]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let extra: &[&str] = if group { &["--kill-group"] } else { &[] };
        let g = Guard::spawn(
            env.cmd(Wrapper::Keepwrap, extra, &argv)
                .stderr(env.stderr()),
        );
        let report = env.path("report");
        let ready = wait_reported(&report, "ready", 2);
        let child = children_of(g.pid().as_raw())[0];
        let grandchild = *ready.iter().find(|&&p| p != child).unwrap();
        g.signal(Signal::SIGUSR1);
        let got = wait_reported(&report, "SIGUSR1", if group { 2 } else { 1 });
        if group {
            assert_eq!(got.len(), 2);
            assert!(got.contains(&child) && got.contains(&grandchild));
        } else {
            assert_eq!(got, vec![child]);
            // Had the grandchild been sent USR1 with the child, it would be
            // handled before this later USR2 (Python runs pending handlers
            // in signal-number order).
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(grandchild), Signal::SIGUSR2)
                .unwrap();
            wait_reported(&report, "SIGUSR2", 1);
            assert_eq!(reported(&report, "SIGUSR1"), vec![child]);
        }
    }
}

#[test]
fn a_child_that_ignores_term_is_killed_after_kill_after() {
    let env = Env::new();
    let script = "trap '' TERM; echo $$ > \"$SIGCHILD_REPORT\"; sleep 30; exit 9";
    let mut g = Guard::spawn(
        env.cmd(
            Wrapper::Keepwrap,
            &["--kill-after", "300ms"],
            &["sh", "-c", script],
        )
        .stderr(Stdio::null()),
    );
    wait_for("the child to start", T, || {
        (!lines(&env.path("report")).is_empty()).then_some(())
    });
    g.signal(Signal::SIGTERM);
    assert_eq!(g.wait(T), 128 + Signal::SIGKILL as i32);
}

#[test]
fn leftovers_of_the_group_get_term_then_kill_after_the_grace() {
    for (ignores_term, flags) in [(false, "--grace=30s"), (true, "--grace=300ms")] {
        let env = Env::new();
        let trap = if ignores_term { "trap '' TERM; " } else { "" };
        let script = format!("({trap}exec sleep 30) & echo $! > \"$SIGCHILD_REPORT\"; exit 3");
        let mut g = Guard::spawn(
            env.cmd(Wrapper::Keepwrap, &[flags], &["sh", "-c", &script])
                .stderr(Stdio::null()),
        );
        // With a 30 s grace the leftover goes on TERM, long before the grace ends.
        assert_eq!(g.wait(T), 3);
        let left: i32 = lines(&env.path("report"))[0].parse().unwrap();
        assert_eq!(
            proc_state(left),
            None,
            "the leftover {left} was reaped (ignores TERM: {ignores_term})"
        );
    }
}

#[test]
fn as_pid_1_100_orphans_leave_no_zombie() {
    if !common::has_need(is_root() && have("unshare"), "root and unshare") {
        return;
    }
    let env = Env::new();
    // Inside a new PID namespace keepwrap is PID 1. The child leaves 100
    // orphans, waits for them to be gone, and exits with the number of
    // zombies it can still see.
    let script = r#"
import glob, subprocess, time
for _ in range(100):
    subprocess.run(["sh", "-c", "sleep 0.1 &"])
deadline = time.monotonic() + 15
while True:
    states = []
    for path in glob.glob("/proc/[0-9]*/status"):
        try:
            fields = dict(l.split(":", 1) for l in open(path) if ":" in l)
        except OSError:
            continue
        states.append((fields["Name"].strip(), fields["State"].split()[0]))
    busy = [s for s in states if s[0] == "sleep" or s[1] == "Z"]
    if not busy or time.monotonic() > deadline:
        break
    time.sleep(0.02)
print(f"pid1-check zombies={sum(1 for s in states if s[1] == 'Z')} sleeps={sum(1 for s in states if s[0] == 'sleep')}")
"#;
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--mount-proc",
        BIN,
        "--",
        "python3",
        "-c",
        script,
    ]);
    cmd.env("KEEPWRAP_CACHE_DIR", env.path("cache"));
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pid1-check zombies=0 sleeps=0"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn as_pid_1_term_is_forwarded_and_the_exit_status_kept() {
    if !common::has_need(is_root() && have("unshare"), "root and unshare") {
        return;
    }
    let env = Env::new();
    let argv = sigchild(&[]);
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child", BIN, "--"])
        .args(&argv);
    cmd.env("KEEPWRAP_CACHE_DIR", env.path("cache"))
        .env("SIGCHILD_REPORT", env.path("report"))
        .stderr(env.stderr());
    let mut g = Guard::spawn(&mut cmd);
    let report = env.path("report");
    wait_reported(&report, "ready", 1);
    // unshare --fork waits for keepwrap; TERM keepwrap itself (PID 1 inside).
    let kw = wait_for("keepwrap inside the namespace", T, || {
        children_of(g.pid().as_raw()).first().copied()
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(kw), Signal::SIGTERM).unwrap();
    wait_reported(&report, "SIGTERM", 1);
    // sigchild exits 0 on TERM.
    assert_eq!(g.wait(T), 0);
}

/// The same scenario table against tini: the exit codes and deliveries agree.
#[test]
fn tini_agrees_on_the_scenario_table() {
    if !common::has_need(have("tini"), "tini (.ci/run installs it)") {
        return;
    }
    scenario_exit_codes_pass_through(Wrapper::Tini);
    scenario_killed_by_signal_exits_128_plus_n(Wrapper::Tini);
    scenario_signals_reach_the_child(Wrapper::Tini);
    scenario_docker_stop_exits_143(Wrapper::Tini);
    // Not compared: tini leaves the caller's ignored signals ignored for the
    // child; keepwrap resets every disposition, as its issue asks.
    scenario_orphans_are_reaped_as_subreaper(Wrapper::Tini);
    scenario_ctrl_c_under_a_terminal_exits_130(Wrapper::Tini);
    assert_eq!(
        scenario_missing_and_unexecutable_commands(Wrapper::Tini),
        scenario_missing_and_unexecutable_commands(Wrapper::Keepwrap)
    );
}

/// tini starts its child with no signal blocked and none of 1 to 31
/// ignored (tini itself ignores 32 and 33, which its child inherits),
/// whatever the state of the caller (the next test runs this one under a
/// caller that ignores signals): the comparisons are about tini, not about
/// the caller.
#[test]
fn tini_starts_the_child_with_no_signal_ignored_nor_blocked() {
    if !common::has_need(have("tini"), "tini (.ci/run installs it)") {
        return;
    }
    let env = Env::new();
    let mut cmd = env.cmd(
        Wrapper::Tini,
        &[],
        &["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"],
    );
    let f = output(&mut cmd);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let mask = |name: &str| {
        let line = f.stdout.iter().find_map(|l| l.strip_prefix(name));
        u64::from_str_radix(line.expect(name).trim(), 16).unwrap()
    };
    assert_eq!(
        (mask("SigBlk:"), mask("SigIgn:") & 0x7fff_ffff),
        (0, 0),
        "{:?}",
        f.stdout
    );
}

/// Under `nohup` (SIGHUP ignored) or as a shell's background job (SIGINT
/// ignored) the tini comparisons still hold: the test above, run by a
/// caller that ignores both.
#[test]
fn the_tini_comparison_holds_when_the_caller_ignores_sigint_and_sighup() {
    if !common::has_need(have("tini"), "tini (.ci/run installs it)") {
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "--include-ignored",
        "--test-threads=1",
        "entrypoint::tini_starts_the_child_with_no_signal_ignored_nor_blocked",
    ]);
    // SAFETY: between fork and exec the closure only calls signal(2), which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{signal, SigHandler};
            signal(Signal::SIGINT, SigHandler::SigIgn).unwrap();
            signal(Signal::SIGHUP, SigHandler::SigIgn).unwrap();
            Ok(())
        });
    }
    let f = output(&mut cmd);
    let text = f.stdout.join("\n");
    assert!(
        f.code == 0 && text.contains("test result: ok. 1 passed"),
        "{text}\n{}",
        f.stderr
    );
}
