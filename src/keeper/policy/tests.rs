//! The policy, one row per event sequence: the rule, the events (times in
//! ms after the launch), and the actions expected (a log line by its
//! event's variant and fields).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::*;
use crate::events::Event as L;

#[derive(Debug, Clone, Copy)]
enum E {
    /// Cache files landed at ms.
    Land(u64, &'static [&'static str]),
    /// The probe got a 200 from the engine's own server at ms.
    Ok(u64),
    /// ... from a non-local URL.
    OkRemote(u64),
    /// ... from another process.
    OkForeign(u64),
    Fail,
    Tick(u64),
    Fwd(i32),
    Other,
    Exit(u64, i32),
    Killed(u64, Signal),
}

/// An expected action: `Sign`, `Late(n)`, `Again`, or a log line: its
/// pattern (as written, for the failure message) and whether an event
/// matches it.
#[derive(Clone, Copy)]
enum A {
    Sign,
    Late(usize),
    Again,
    Look,
    Log(&'static str, fn(&L) -> bool),
}

impl std::fmt::Debug for A {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            A::Sign => f.write_str("Sign"),
            A::Late(n) => write!(f, "Late({n})"),
            A::Again => f.write_str("Again"),
            A::Look => f.write_str("Look"),
            A::Log(pattern, _) => write!(f, "Log({pattern})"),
        }
    }
}

/// The log line of an event matching a pattern of [`L`] (its variant,
/// and its fields where a guard says them).
macro_rules! log {
    ($($pattern:tt)*) => {
        A::Log(stringify!($($pattern)*), |e| matches!(e, $($pattern)*))
    };
}

/// Paths relative to the cache root.
fn rel(names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(PathBuf::from).collect()
}

/// Another launch, as it displays.
const OTHER: &str = "launch 8c01d2e4... (pid 7, running)";

/// The engine killed by `sig` (the one place that knows how `Ended`
/// carries a signal).
fn killed_by(sig: Signal) -> Ended {
    Ended::Signaled(sig as i32)
}

const QUIET: Rule = Rule::Quiet(Duration::from_millis(500));
const URL: &str = "http://127.0.0.1:30000/health";

struct Row {
    name: &'static str,
    rule: Rule,
    events: &'static [E],
    expect: &'static [A],
}

fn run(row: &Row) -> Vec<Action> {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut p = Policy::new(row.rule, t0);
    let mut out = Vec::new();
    for e in row.events {
        let ev = match *e {
            E::Land(ms, files) => Event::Landed {
                at: at(ms),
                files: files.iter().map(PathBuf::from).collect(),
            },
            E::Ok(ms) | E::OkRemote(ms) | E::OkForeign(ms) => Event::ProbeOk {
                at: at(ms),
                url: URL.to_string(),
                owner: match *e {
                    E::Ok(_) => Owner::Engine,
                    E::OkRemote(_) => Owner::Remote,
                    _ => Owner::Foreign("pid 42 (python3)".to_string()),
                },
            },
            E::Fail => Event::ProbeFailed,
            E::Tick(ms) => Event::Tick(at(ms)),
            E::Fwd(sig) => Event::Forwarded(sig),
            E::Other => Event::OtherLaunch(OTHER.to_string()),
            E::Exit(ms, code) => Event::ChildEnded {
                at: at(ms),
                ended: Ended::Exited(code),
            },
            E::Killed(ms, sig) => Event::ChildEnded {
                at: at(ms),
                ended: killed_by(sig),
            },
        };
        out.extend(p.on(ev));
    }
    out
}

fn matches(got: &Action, want: &A) -> bool {
    match (got, want) {
        (Action::SignDone, A::Sign)
        | (Action::ProbeAgain, A::Again)
        | (Action::LookForOthers, A::Look) => true,
        (Action::SignLate { late }, A::Late(n)) => late == n,
        (Action::Log(event), A::Log(_, want)) => want(event),
        _ => false,
    }
}

const TERM: i32 = libc::SIGTERM;

const ROWS: &[Row] = &[
    // Done by the engine.
    Row {
        name: "a 200 from the engine's own server is done",
        rule: Rule::Health,
        events: &[E::Land(100, &["a/rank_tp0_pp0_dp0.json"]), E::Fail, E::Ok(900)],
        expect: &[
            log!(L::DoneHealth { url, after } if url == URL && *after == Duration::from_millis(900)),
            A::Sign,
        ],
    },
    Row {
        name: "a 200 of a non-local URL is trusted as given",
        rule: Rule::Health,
        events: &[E::OkRemote(50)],
        expect: &[log!(L::DoneHealth { .. }), A::Sign],
    },
    Row {
        name: "rule 2: a 200 from another process is not done, said once, probed again",
        rule: Rule::Health,
        events: &[E::OkForeign(10), E::OkForeign(20), E::OkForeign(30), E::Ok(40)],
        expect: &[
            log!(L::NotDoneForeign { url, owner } if url == URL && owner == "pid 42 (python3)"),
            A::Again,
            A::Again,
            A::Again,
            log!(L::DoneHealth { .. }),
            A::Sign,
        ],
    },
    Row {
        name: "rule 2: another process answers, then the engine crashes: nothing",
        rule: Rule::Health,
        events: &[
            E::OkForeign(10),
            E::Land(20, &["a/rank_tp0_pp0_dp0.json"]),
            E::Killed(30, Signal::SIGSEGV),
        ],
        expect: &[
            log!(L::NotDoneForeign { .. }),
            A::Again,
            log!(L::NotSigningEarly { status } if *status == Ended::Signaled(11)),
        ],
    },
    Row {
        name: "the quiet window closes after the last landing",
        rule: QUIET,
        events: &[
            E::Tick(400),
            E::Land(100, &["a/x.json"]),
            E::Tick(500),
            E::Land(300, &["a/y.json"]),
            E::Tick(700),
            E::Tick(800),
            E::Tick(900),
        ],
        expect: &[
            log!(L::DoneQuiet { quiet, after } if *quiet == Duration::from_millis(500) && *after == Duration::from_millis(800)),
            A::Sign,
        ],
    },
    Row {
        name: "no landing, no quiet window",
        rule: QUIET,
        events: &[E::Tick(10_000)],
        expect: &[],
    },
    Row {
        name: "an exit 0 is done when that is the rule",
        rule: Rule::Exit,
        events: &[E::Land(100, &["a/x.json"]), E::Exit(200, 0)],
        expect: &[log!(L::DoneExit { after } if *after == Duration::from_millis(200)), A::Sign],
    },
    Row {
        name: "an exit 0 before the quiet window closed is done",
        rule: QUIET,
        events: &[E::Land(100, &["a/x.json"]), E::Exit(200, 0)],
        expect: &[log!(L::DoneExit { .. }), A::Sign],
    },
    Row {
        name: "a server exiting 0 never answered: not done",
        rule: Rule::Health,
        events: &[E::Land(100, &["a/x.json"]), E::Fail, E::Exit(200, 0)],
        expect: &[log!(L::NotSigningEarly { status } if *status == Ended::Exited(0))],
    },
    Row {
        name: "a non-zero exit is not done",
        rule: Rule::Exit,
        events: &[E::Exit(200, 7)],
        expect: &[log!(L::NotSigningEarly { status } if *status == Ended::Exited(7))],
    },
    // Rule 1: a stop is never tuning done.
    Row {
        name: "rule 1: exit 0 after a forwarded TERM signs nothing",
        rule: Rule::Exit,
        events: &[E::Land(100, &["a/x.json"]), E::Fwd(TERM), E::Exit(300, 0)],
        expect: &[log!(L::NotSigningStopped { status, signal } if *status == Ended::Exited(0) && signal == "SIGTERM")],
    },
    Row {
        name: "rule 1: INT, HUP and QUIT are stops too",
        rule: Rule::Exit,
        events: &[E::Fwd(libc::SIGHUP), E::Fwd(libc::SIGINT), E::Exit(300, 0)],
        expect: &[log!(L::NotSigningStopped { signal, .. } if signal == "SIGHUP")],
    },
    Row {
        name: "rule 1: QUIT is a stop",
        rule: Rule::Exit,
        events: &[E::Fwd(libc::SIGQUIT), E::Killed(300, Signal::SIGQUIT)],
        expect: &[log!(L::NotSigningStopped { signal, .. } if signal == "SIGQUIT")],
    },
    Row {
        name: "rule 1: USR1 and WINCH are not stops",
        rule: Rule::Exit,
        events: &[E::Fwd(libc::SIGUSR1), E::Fwd(libc::SIGWINCH), E::Exit(300, 0)],
        expect: &[log!(L::DoneExit { .. }), A::Sign],
    },
    Row {
        name: "rule 1: the quiet window does not close after a stop",
        rule: QUIET,
        events: &[E::Land(100, &["a/x.json"]), E::Fwd(TERM), E::Tick(5_000), E::Exit(6_000, 0)],
        expect: &[log!(L::NotSigningStopped { status, signal } if *status == Ended::Exited(0) && signal == "SIGTERM")],
    },
    Row {
        name: "rule 1: a 200 while draining after a stop is not done",
        rule: Rule::Health,
        events: &[E::Fwd(TERM), E::Ok(100), E::Exit(200, 0)],
        expect: &[log!(L::NotSigningStopped { signal, .. } if signal == "SIGTERM")],
    },
    Row {
        name: "rule 1: killed after the stop (--kill-after) signs nothing",
        rule: Rule::Exit,
        events: &[E::Fwd(TERM), E::Killed(100, Signal::SIGKILL)],
        expect: &[log!(L::NotSigningStopped { status, signal } if *status == Ended::Signaled(9) && signal == "SIGTERM")],
    },
    Row {
        name: "a stop after done keeps the set signed at done",
        rule: Rule::Health,
        events: &[E::Ok(100), E::Fwd(TERM), E::Exit(300, 0)],
        expect: &[log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }), A::Sign],
    },
    // Rule 2: what lands after done is provisional.
    Row {
        name: "rule 2: landed after done, then exit 0 on its own: signed again",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Land(700, &["a/x.json", "a/y.json"]),
            E::Land(800, &["a/y.json"]),
            E::Exit(900, 0),
        ],
        expect: &[
            log!(L::DoneQuiet { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            A::Look,
            A::Late(2),
        ],
    },
    Row {
        name: "rule 2: landed after done, then a crash: not signed",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Land(700, &["a/y.json"]),
            E::Killed(900, Signal::SIGKILL),
        ],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            log!(L::LateNotSignedAbnormal { paths, outcome: Outcome::Unjudged, status } if *paths == rel(&["a/y.json"]) && *status == Ended::Signaled(9)),
        ],
    },
    Row {
        name: "rule 2: landed after done, then a TERM keepwrap did not forward: not signed",
        rule: Rule::Health,
        events: &[E::Ok(100), E::Land(700, &["a/y.json"]), E::Killed(900, Signal::SIGTERM)],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            log!(L::LateNotSignedAbnormal { status, .. } if *status == Ended::Signaled(15)),
        ],
    },
    Row {
        name: "rule 2: landed after done, then a non-zero exit: not signed",
        rule: Rule::Health,
        events: &[E::Ok(100), E::Land(700, &["a/y.json"]), E::Exit(900, 1)],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            log!(L::LateNotSignedAbnormal { status, .. } if *status == Ended::Exited(1)),
        ],
    },
    Row {
        name: "rule 2: landed after done, then a forwarded stop: not signed",
        rule: Rule::Health,
        events: &[E::Ok(100), E::Land(700, &["a/y.json"]), E::Fwd(TERM), E::Exit(900, 0)],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            log!(L::LateNotSignedStopped { paths, outcome: Outcome::Unjudged, status, signal } if *paths == rel(&["a/y.json"]) && *status == Ended::Exited(0) && signal == "SIGTERM"),
        ],
    },
    Row {
        name: "rule 2: a crash after done with nothing late leaves the done set alone",
        rule: Rule::Health,
        events: &[E::Ok(100), E::Killed(900, Signal::SIGKILL)],
        expect: &[log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }), A::Sign],
    },
    Row {
        name: "rule 2: no second done, no second sign",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Land(700, &["a/y.json"]),
            E::Tick(5_000),
        ],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
        ],
    },
    // Another launch seen.
    Row {
        name: "another launch seen at done: not signed, said once",
        rule: Rule::Exit,
        events: &[E::Exit(100, 0), E::Other, E::Other],
        expect: &[
            log!(L::DoneExit { .. }),
            A::Sign,
            log!(L::OtherLaunch { other } if other == OTHER),
        ],
    },
    Row {
        name: "another launch seen at done spoils what lands later",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Other,
            E::Land(700, &["a/y.json"]),
            E::Exit(900, 0),
        ],
        expect: &[log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }), A::Sign, log!(L::OtherLaunch { .. })],
    },
    Row {
        name: "another launch seen after the sign at done: the late files are not signed, said at the end with them",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Land(700, &["a/y.json"]),
            E::Other,
            E::Land(800, &["a/z.json"]),
            E::Exit(900, 0),
        ],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            log!(L::OtherAfterSign { other } if other == OTHER),
            log!(L::LateNotSignedOther { paths, outcome: Outcome::Unjudged, other } if *paths == rel(&["a/y.json", "a/z.json"]) && other == OTHER),
        ],
    },
    Row {
        name: "another launch seen at the late sign: the late files are not signed",
        rule: QUIET,
        events: &[
            E::Land(100, &["a/x.json"]),
            E::Tick(600),
            E::Land(700, &["a/y.json"]),
            E::Exit(900, 0),
            E::Other,
        ],
        expect: &[
            log!(L::DoneHealth { .. } | L::DoneQuiet { .. } | L::DoneExit { .. }),
            A::Sign,
            log!(L::LateLanding {}),
            A::Look,
            A::Late(1),
            log!(L::LateNotSignedOther { paths, other, .. } if *paths == rel(&["a/y.json"]) && other == OTHER),
        ],
    },
    Row {
        name: "after the end, nothing more happens",
        rule: Rule::Health,
        events: &[E::Exit(100, 0), E::Ok(200), E::Land(300, &["a/x.json"]), E::Exit(400, 0)],
        expect: &[log!(L::NotSigningEarly { status } if *status == Ended::Exited(0))],
    },
];

#[test]
fn every_row_of_the_policy_table() {
    let mut failed = Vec::new();
    for row in ROWS {
        let got = run(row);
        let ok =
            got.len() == row.expect.len() && got.iter().zip(row.expect).all(|(g, w)| matches(g, w));
        if !ok {
            failed.push(format!(
                "{}:\n  expected {:?}\n  got      {:?}",
                row.name, row.expect, got
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_probe_stops_once_done_or_stopped_and_the_quiet_timer_with_it() {
    let t0 = Instant::now();
    let mut p = Policy::new(Rule::Health, t0);
    assert!(p.wants_probe());
    p.on(Event::Forwarded(libc::SIGTERM));
    assert!(!p.wants_probe());

    let mut p = Policy::new(QUIET, t0);
    assert_eq!(p.deadline(), None);
    p.on(Event::Landed {
        at: t0,
        files: vec![PathBuf::from("a/x.json")],
    });
    assert_eq!(p.deadline(), Some(t0 + Duration::from_millis(500)));
    p.on(Event::Forwarded(libc::SIGINT));
    assert_eq!(p.deadline(), None);
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn event() -> impl Strategy<Value = E> {
        prop_oneof![
            (0u64..5_000).prop_map(|ms| E::Land(ms, &["a/x.json"])),
            (0u64..5_000).prop_map(|ms| E::Land(ms, &["a/y.json"])),
            (0u64..5_000).prop_map(E::Ok),
            (0u64..5_000).prop_map(E::OkForeign),
            Just(E::Fail),
            (0u64..10_000).prop_map(E::Tick),
            prop::sample::select(vec![
                libc::SIGTERM,
                libc::SIGINT,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGUSR1,
                libc::SIGWINCH
            ])
            .prop_map(E::Fwd),
            Just(E::Other),
            (0u64..10_000, 0i32..3).prop_map(|(ms, c)| E::Exit(ms, c)),
            (0u64..10_000).prop_map(|ms| E::Killed(ms, Signal::SIGKILL)),
        ]
    }

    fn rule() -> impl Strategy<Value = Rule> {
        prop_oneof![Just(Rule::Health), Just(Rule::Exit), Just(QUIET)]
    }

    proptest! {
        /// Whatever happens: at most one sign at done, none after a stop or
        /// another launch, a late sign only at an exit 0 on its own, and
        /// nothing after the end.
        #[test]
        fn no_sequence_breaks_the_rules(rule in rule(), events in prop::collection::vec(event(), 0..24)) {
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let mut p = Policy::new(rule, t0);
            let (mut stopped, mut other, mut ended, mut signs) = (false, false, false, 0);
            for e in events {
                let ev = match e {
                    E::Land(ms, f) => Event::Landed { at: at(ms), files: f.iter().map(PathBuf::from).collect() },
                    E::Ok(ms) => Event::ProbeOk { at: at(ms), url: URL.into(), owner: Owner::Engine },
                    E::OkForeign(ms) | E::OkRemote(ms) => Event::ProbeOk { at: at(ms), url: URL.into(), owner: Owner::Foreign("x".into()) },
                    E::Fail => Event::ProbeFailed,
                    E::Tick(ms) => Event::Tick(at(ms)),
                    E::Fwd(sig) => Event::Forwarded(sig),
                    E::Other => Event::OtherLaunch("launch".into()),
                    E::Exit(ms, c) => Event::ChildEnded { at: at(ms), ended: Ended::Exited(c) },
                    E::Killed(ms, s) => Event::ChildEnded { at: at(ms), ended: killed_by(s) },
                };
                let clean_exit = matches!(e, E::Exit(_, 0));
                let was_ended = ended;
                let actions = p.on(ev);
                for a in &actions {
                    match a {
                        Action::SignDone => {
                            signs += 1;
                            prop_assert!(!stopped && !other && !was_ended, "{actions:?}");
                        }
                        Action::SignLate { .. } => {
                            prop_assert!(clean_exit && !stopped && !other && !was_ended && signs == 1);
                        }
                        Action::ProbeAgain | Action::LookForOthers => prop_assert!(!was_ended),
                        // The shell asks about other launches when it is
                        // to sign, the end's sign included.
                        Action::Log(_) => prop_assert!(!was_ended || matches!(e, E::Other)),
                    }
                }
                prop_assert!(signs <= 1);
                match e {
                    E::Fwd(sig) if STOPS.contains(&sig) && !ended => stopped = true,
                    E::Other => other = true,
                    E::Exit(..) | E::Killed(..) => ended = true,
                    _ => {}
                }
            }
        }
    }
}

/// A headless vLLM node: its exit 0 is never tuning done, and what lands
/// after done is not signed at its exit 0; with expected rank files, the
/// quiet window closes only once all of them are there.
#[test]
fn a_headless_node() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let exit0 = |ms| Event::ChildEnded {
        at: at(ms),
        ended: Ended::Exited(0),
    };
    // waiting for the head: an exit 0 on its own is not done
    let mut p = Policy::new(Rule::Health, t0).headless(None, &[]);
    let acts = p.on(exit0(900));
    assert!(
        acts.contains(&Action::Log(L::NotSigningHeadless {})),
        "{acts:?}"
    );
    assert!(!acts.contains(&Action::SignDone));
    // done by the head's 200, a late file, then exit 0: not signed
    let mut p = Policy::new(Rule::Health, t0).headless(None, &[]);
    assert!(p
        .on(Event::ProbeOk {
            at: at(100),
            url: URL.into(),
            owner: Owner::Remote
        })
        .contains(&Action::SignDone));
    p.on(Event::Landed {
        at: at(200),
        files: vec![PathBuf::from("h/autotune_configs_dp0_rank1.json")],
    });
    let acts = p.on(exit0(300));
    assert!(
        !acts.iter().any(|a| matches!(a, Action::SignLate { .. })),
        "{acts:?}"
    );
    assert!(
        acts.contains(&Action::Log(L::LateNotSignedHeadless {
            paths: rel(&["h/autotune_configs_dp0_rank1.json"]),
            outcome: Outcome::Unjudged,
        })),
        "{acts:?}"
    );
    // expected files: one of two landed, the window does not close
    let names = vec![
        "autotune_configs_dp1_rank2.json".to_string(),
        "autotune_configs_dp1_rank3.json".to_string(),
    ];
    let mut p = Policy::new(QUIET, t0).headless(Some(names.clone()), &[]);
    assert_eq!(p.deadline(), None);
    p.on(Event::Landed {
        at: at(100),
        files: vec![PathBuf::from("h/autotune_configs_dp1_rank2.json")],
    });
    assert_eq!(p.deadline(), None);
    assert!(p.on(Event::Tick(at(5000))).is_empty());
    p.on(Event::Landed {
        at: at(6000),
        files: vec![PathBuf::from("h/autotune_configs_dp1_rank3.json")],
    });
    assert_eq!(p.deadline(), Some(at(6500)));
    assert!(p.on(Event::Tick(at(6500))).contains(&Action::SignDone));
    // present from the start (kept): the window runs from the launch
    let kept: Vec<PathBuf> = names
        .iter()
        .map(|n| PathBuf::from(format!("h/{n}")))
        .collect();
    let mut p = Policy::new(QUIET, t0).headless(Some(names), &kept);
    assert_eq!(p.deadline(), Some(at(500)));
    assert!(p.on(Event::Tick(at(500))).contains(&Action::SignDone));
}

/// A command whose exit status may not be the engine's (`sh -c '... ||
/// true'` with `--done quiet=D` or `exit`): its exit 0 is never tuning done,
/// and what lands after done is not signed on it.
#[test]
fn an_exit_that_may_not_be_the_engines() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let exit0 = |ms| Event::ChildEnded {
        at: at(ms),
        ended: Ended::Exited(0),
    };
    for rule in [QUIET, Rule::Exit] {
        let mut p = Policy::new(rule, t0).exit_unproven();
        let acts = p.on(exit0(50));
        assert!(!acts.contains(&Action::SignDone), "{acts:?}");
        assert!(
            acts.contains(&Action::Log(L::NotSigningExitUnproven {})),
            "{acts:?}"
        );
        // the same without the flag signs at exit 0
        let mut p = Policy::new(rule, t0);
        assert!(p.on(exit0(50)).contains(&Action::SignDone));
    }
    // done by health, a late file, then exit 0: the late file is not signed
    let mut p = Policy::new(Rule::Health, t0).exit_unproven();
    assert!(p
        .on(Event::ProbeOk {
            at: at(100),
            url: URL.into(),
            owner: Owner::Engine
        })
        .contains(&Action::SignDone));
    p.on(Event::Landed {
        at: at(200),
        files: vec![PathBuf::from("d/rank1.json")],
    });
    let acts = p.on(exit0(300));
    assert!(
        !acts.iter().any(|a| matches!(a, Action::SignLate { .. })),
        "{acts:?}"
    );
    assert!(
        acts.contains(&Action::Log(L::LateNotSignedExitUnproven {
            paths: rel(&["d/rank1.json"]),
            outcome: Outcome::Unjudged,
        })),
        "{acts:?}"
    );
}
