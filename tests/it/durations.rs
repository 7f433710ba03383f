//! Durations from the command line and the environment: anything a user can
//! type is either accepted and safe (no panic, no busy loop, no done at the
//! first landing) or refused up front with exit 2 (`--strict`; without it,
//! the line is said and the launch goes on) and a message naming the option.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(20);

/// Every duration option of a launch, with its variable.
const OPTIONS: [(&str, &str); 9] = [
    ("--grace", "KEEPWRAP_GRACE"),
    ("--kill-after", "KEEPWRAP_KILL_AFTER"),
    ("--probe-interval", "KEEPWRAP_PROBE_INTERVAL"),
    ("--probe-timeout", "KEEPWRAP_PROBE_TIMEOUT"),
    ("--headless-quiet", "KEEPWRAP_HEADLESS_QUIET"),
    ("--store-max-age", "KEEPWRAP_STORE_MAX_AGE"),
    ("--lock-timeout", "KEEPWRAP_LOCK_TIMEOUT"),
    ("--share-timeout", "KEEPWRAP_SHARE_TIMEOUT"),
    ("--wait-for-tuning", "KEEPWRAP_WAIT_FOR_TUNING"),
];

/// Run `keepwrap ARGS -- true` with `env`; its exit code and stderr.
fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = keepwrap(&dir.path().join("cache"));
    // --strict: refused, not only said (without it the launch goes on
    // with the default, tests/it/cli.rs).
    cmd.arg("--strict")
        .args(args)
        .args(["--", "true"])
        .envs(env.iter().copied());
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_refused(args: &[&str], env: &[(&str, &str)], names: &[&str]) {
    let (code, err) = run(args, env);
    assert_eq!(code, 2, "{args:?} {env:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} {env:?}: {err}");
    for name in names {
        assert!(err.contains(name), "{args:?} {env:?} names {name}: {err}");
    }
}

#[test]
fn absurd_durations_are_refused_naming_the_option() {
    let bad = [
        ("1e20", "longer than"),
        ("18446744073709551615", "longer than"),
        ("500000000000years", "longer than"),
        ("101years", "longer than"),
        ("-5", "negative"),
        ("-1s", "not a duration"),
        ("NaN", "not a duration"),
        ("inf", "not a duration"),
        ("5 parsecs", "not a duration"),
        ("", "not a duration"),
    ];
    for (option, var) in OPTIONS {
        for (value, why) in bad {
            let arg = format!("{option}={value}");
            assert_refused(&[&arg], &[], &[option, value, why]);
            // A variable set but empty is the same as an unset one.
            if !value.is_empty() {
                assert_refused(&[], &[(var, value)], &[option, why]);
            }
        }
    }
    for (value, why) in bad {
        let arg = format!("--done=quiet={value}");
        assert_refused(&[&arg], &[], &["--done", why]);
    }
}

#[test]
fn a_zero_probe_interval_probe_timeout_or_quiet_window_is_refused() {
    for (args, minimum) in [
        (["--probe-interval", "0"], "at least 10ms"),
        (["--probe-interval", "9ms"], "at least 10ms"),
        (["--probe-timeout", "0s"], "at least 10ms"),
        (["--probe-timeout", "0.001"], "at least 10ms"),
        (["--done", "quiet=0"], "at least 100ms"),
        (["--done", "quiet=99ms"], "at least 100ms"),
        (["--headless-quiet", "0"], "at least 100ms"),
        (["--headless-quiet", "99ms"], "at least 100ms"),
    ] {
        assert_refused(&args, &[], &[args[0], minimum]);
    }
    assert_refused(
        &[],
        &[("KEEPWRAP_PROBE_INTERVAL", "0")],
        &["--probe-interval", "at least 10ms"],
    );
}

#[test]
fn the_limits_themselves_are_accepted() {
    for args in [
        vec!["--probe-interval", "10ms", "--probe-timeout", "10ms"],
        vec!["--done", "quiet=100ms", "--headless-quiet", "100ms"],
        vec!["--grace", "100years", "--kill-after", "100years"],
        vec!["--store-max-age", "100years", "--lock-timeout", "0"],
        vec!["--grace", "3153600000"],
    ] {
        let (code, err) = run(&args, &[]);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
}

/// The longest --kill-after and --grace, with a TERM and a leftover of the
/// group: the deadlines are far away, not a panic.
#[test]
fn the_longest_kill_after_and_grace_do_not_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    // The child leaves a grandchild that exits on TERM, and exits on TERM
    // (its trap set before it says it is ready: a TERM between the two
    // would end it with 143).
    let script =
        "trap 'exit 0' TERM; sleep 30 & echo ready > \"$REPORT\"; while :; do sleep 0.05; done";
    let mut cmd = keepwrap(&dir.path().join("cache"));
    cmd.args(["--kill-after", "100years", "--grace", "100years", "--"])
        .args(["sh", "-c", script])
        .env("REPORT", &report)
        .stderr(Stdio::null());
    let mut g = Guard::spawn(&mut cmd);
    wait_for("the child to start", T, || {
        (!lines(&report).is_empty()).then_some(())
    });
    g.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(g.wait(T), 0);
}

/// At the shortest interval and timeout, probing a port where nothing
/// listens makes one probe per interval, not a busy loop: counted from the
/// debug line each probe logs (a spin would make thousands a second).
#[test]
fn the_shortest_probe_interval_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("--done=health=http://127.0.0.1:{port}/health");
    let mut cmd = keepwrap(&dir.path().join("cache"));
    cmd.args([&url, "--probe-interval=10ms", "--probe-timeout=10ms", "--"])
        .args(["sleep", "30"])
        .env("KEEPWRAP_LOG", "debug");
    let mut r = Running::spawn(&mut cmd);
    let probe = |e: &serde_json::Value| e["code"].as_str().unwrap().starts_with("probe_");
    r.wait_event_where("probe_failed", T, |_| true);
    let start = std::time::Instant::now();
    let probes = || r.log_events().iter().filter(|e| probe(e)).count();
    let before = probes();
    std::thread::sleep(Duration::from_secs(1));
    let made = probes() - before;
    let elapsed = start.elapsed();
    let most = (elapsed.as_millis() / 10) as usize + 20;
    assert!(
        made >= 10 && made <= most,
        "{made} probes in {elapsed:?} (at most {most})"
    );
}

proptest::proptest! {
    /// No text panics the parser, and what it accepts is within bounds.
    #[test]
    fn parse_duration_never_panics(s in "\\PC{0,24}", x in proptest::num::f64::ANY) {
        for text in [s, x.to_string(), format!("{x:e}"), format!("{x}s")] {
            if let Ok(d) = keepwrap::cli::parse_duration(&text) {
                proptest::prop_assert!(d <= keepwrap::cli::MAX_DURATION);
            }
        }
    }
}
