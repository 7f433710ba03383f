//! When a set may be signed: the keeper's policy as a pure state machine.
//! Events go in (a cache file landed, the probe answered, a timer, a signal
//! forwarded, the engine ended, another launch seen), actions come out (sign,
//! sign again, a log line). No I/O and no clock of its own: the caller runs
//! the actions and passes the time in.
//!
//! The trust rules it owns:
//! - Done comes from the engine: a 200 counts only from a server of the
//!   engine's own process tree (or a non-local URL, trusted as given); a
//!   quiet window; a clean exit when that is the rule.
//! - A stop is never tuning done: once keepwrap has forwarded TERM, INT, HUP
//!   or QUIT, nothing that happens afterwards (a 200 while draining, a quiet
//!   window, an exit 0) makes tuning done.
//! - What lands after done is provisional: it is not signed while the engine
//!   runs, and is signed only when the engine then exits 0 on its own. After
//!   a stop or an abnormal end it stays unsigned, so the next launch keeps
//!   the set signed at done when its files did not change, and tunes again
//!   otherwise: never a mixed set.
//! - Another launch seen on the root spoils the run: nothing more is signed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use crate::done::owner::Owner;
use crate::events::{self, Outcome};
use crate::signals::Ended;

/// What marks tuning done, as far as the policy needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first 200 of the engine's own health endpoint.
    Health,
    /// No cache file landed for this long (or a clean exit before that).
    Quiet(Duration),
    /// The command exits 0.
    Exit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Cache files landed (new or rewritten by the engine), relative to the
    /// root.
    Landed { at: Instant, files: Vec<PathBuf> },
    /// The health endpoint `url` answered 200.
    ProbeOk {
        at: Instant,
        url: String,
        owner: Owner,
    },
    /// The health endpoint did not answer 200 (yet).
    ProbeFailed,
    /// Time passed: timers are checked.
    Tick(Instant),
    /// keepwrap forwarded this signal to the engine.
    Forwarded(i32),
    /// Another launch used the cache root while this one ran (as
    /// `running::Other` displays it).
    OtherLaunch(String),
    /// The engine (keepwrap's main child) ended.
    ChildEnded { at: Instant, ended: Ended },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Tuning is done: sign every cache file present as one set.
    SignDone,
    /// The engine exited 0 on its own after done, and files landed after
    /// done: sign again, taking them in (`late` files).
    SignLate { late: usize },
    /// Ask the health endpoint again later (the last 200 did not count).
    ProbeAgain,
    /// A file landed after done: look whether another launch uses the root
    /// (its engine may be the one writing), and say so as
    /// [`Event::OtherLaunch`].
    LookForOthers,
    /// One `keepwrap:` line.
    Log(events::Event),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The engine is tuning: nothing is signed yet.
    Tuning,
    /// Tuning is done and the set was handed to be signed.
    Done,
    /// The engine ended: nothing more happens.
    Ended,
}

/// Signals whose forwarding means the engine is being stopped.
pub const STOPS: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

#[derive(Debug)]
pub struct Policy {
    rule: Rule,
    launched: Instant,
    phase: Phase,
    last_landing: Option<Instant>,
    /// The first stop signal keepwrap forwarded.
    stopped: Option<i32>,
    /// Another launch used the root: never sign.
    other: bool,
    /// Another launch seen after the sign at done, as it displays: said
    /// with the files that landed after done, at the end.
    other_after_sign: Option<String>,
    /// A foreign owner of the probed port was already named.
    foreign_said: bool,
    /// Cache files that landed after done.
    late: BTreeSet<PathBuf>,
    /// A headless node (vLLM `--headless`): its exit says nothing about
    /// tuning, so an exit 0 neither makes tuning done nor signs what
    /// landed after done.
    headless: bool,
    /// The command's exit status may not be the engine's (a launch not
    /// read whole, `timeout --preserve-status`): an exit 0 neither makes
    /// tuning done nor signs what landed after done.
    exit_unproven: bool,
    /// With a quiet window: the file names that must all have landed (or
    /// be present from the start) before the window can close.
    expect: Option<Expect>,
}

/// The rank files a quiet window waits for, and those seen so far.
#[derive(Debug, Default)]
struct Expect {
    names: BTreeSet<String>,
    seen: BTreeSet<String>,
}

impl Expect {
    fn see(&mut self, files: &[PathBuf]) {
        for f in files {
            if let Some(n) = f.file_name().and_then(|n| n.to_str()) {
                if self.names.contains(n) {
                    self.seen.insert(n.to_string());
                }
            }
        }
    }

    fn complete(&self) -> bool {
        self.seen.len() == self.names.len()
    }
}

/// A signal's name (`SIGTERM`), or its number.
pub fn signal_name(signo: i32) -> String {
    match nix::sys::signal::Signal::try_from(signo) {
        Ok(s) => s.as_str().to_string(),
        Err(_) => format!("signal {signo}"),
    }
}

impl Policy {
    pub fn new(rule: Rule, launched: Instant) -> Policy {
        Policy {
            rule,
            launched,
            phase: Phase::Tuning,
            last_landing: None,
            stopped: None,
            other: false,
            other_after_sign: None,
            foreign_said: false,
            late: BTreeSet::new(),
            headless: false,
            exit_unproven: false,
            expect: None,
        }
    }

    /// A command whose exit status may not be the engine's: an exit 0 is
    /// never tuning done.
    pub fn exit_unproven(mut self) -> Policy {
        self.exit_unproven = true;
        self
    }

    /// A headless node: an exit 0 is never tuning done. With `expect`
    /// (file names), a quiet window closes only once every one of them has
    /// landed; `present` are the cache files there from the start (kept for
    /// this launch), which count as landed at the launch.
    pub fn headless(mut self, expect: Option<Vec<String>>, present: &[PathBuf]) -> Policy {
        self.headless = true;
        if let Some(names) = expect {
            let mut e = Expect {
                names: names.into_iter().collect(),
                seen: BTreeSet::new(),
            };
            e.see(present);
            if e.complete() {
                self.last_landing = Some(self.launched);
            }
            self.expect = Some(e);
        }
        self
    }

    /// Still waiting for done, and able to reach it while the engine runs.
    fn waiting(&self) -> bool {
        self.phase == Phase::Tuning && self.stopped.is_none() && !self.other
    }

    /// Is a health probe still worth running?
    pub fn wants_probe(&self) -> bool {
        self.rule == Rule::Health && self.waiting()
    }

    /// When the quiet window closes, if it is the rule and open.
    pub fn deadline(&self) -> Option<Instant> {
        if self.expect.as_ref().is_some_and(|e| !e.complete()) {
            return None;
        }
        match (self.rule, self.last_landing) {
            (Rule::Quiet(d), Some(t)) if self.waiting() => Some(t.checked_add(d).unwrap_or(t)),
            _ => None,
        }
    }

    /// Take one event; the actions to run, in order.
    pub fn on(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::Landed { at, files } => self.landed(at, files, &mut out),
            Event::ProbeOk { at, url, owner } => self.probe_ok(at, url, owner, &mut out),
            Event::ProbeFailed => {}
            Event::Tick(now) => {
                if let (Some(end), Rule::Quiet(d)) = (self.deadline(), self.rule) {
                    if now >= end {
                        out.push(Action::Log(events::Event::DoneQuiet {
                            quiet: d,
                            after: now.saturating_duration_since(self.launched),
                        }));
                        self.done(&mut out);
                    }
                }
            }
            Event::Forwarded(signo) => {
                if STOPS.contains(&signo) && self.stopped.is_none() && self.phase != Phase::Ended {
                    self.stopped = Some(signo);
                }
            }
            Event::OtherLaunch(who) => self.other_launch(who, &mut out),
            Event::ChildEnded { at, ended } => self.ended(at, ended, &mut out),
        }
        out
    }

    /// Another launch seen: before the sign at done (or at it, which is
    /// then skipped), nothing is signed, said now; after it (files landed
    /// after done), what landed since is not signed, said with those files
    /// once the engine has ended.
    fn other_launch(&mut self, who: String, out: &mut Vec<Action>) {
        if self.other {
            return;
        }
        self.other = true;
        let signed = self.phase != Phase::Tuning && !self.late.is_empty();
        if !signed {
            out.push(Action::Log(events::Event::OtherLaunch { other: who }));
        } else if self.phase == Phase::Ended {
            out.push(Action::Log(events::Event::LateNotSignedOther {
                paths: self.late(),
                outcome: Outcome::Unjudged,
                other: who,
            }));
        } else {
            self.other_after_sign = Some(who.clone());
            out.push(Action::Log(events::Event::OtherAfterSign { other: who }));
        }
    }

    /// The files that landed after done, for a line about them.
    fn late(&self) -> Vec<PathBuf> {
        self.late.iter().cloned().collect()
    }

    fn landed(&mut self, at: Instant, files: Vec<PathBuf>, out: &mut Vec<Action>) {
        if files.is_empty() {
            return;
        }
        match self.phase {
            Phase::Tuning => {
                if let Some(e) = self.expect.as_mut() {
                    e.see(&files);
                }
                self.last_landing = Some(at);
            }
            Phase::Done => {
                let first = self.late.is_empty();
                self.late.extend(files);
                if !self.other {
                    if first {
                        out.push(Action::Log(events::Event::LateLanding {}));
                    }
                    out.push(Action::LookForOthers);
                }
            }
            Phase::Ended => {}
        }
    }

    fn probe_ok(&mut self, at: Instant, url: String, owner: Owner, out: &mut Vec<Action>) {
        if !self.wants_probe() {
            return;
        }
        match owner {
            Owner::Engine | Owner::Remote => {
                out.push(Action::Log(events::Event::DoneHealth {
                    url,
                    after: at.saturating_duration_since(self.launched),
                }));
                self.done(out);
            }
            Owner::Foreign(who) => {
                if !self.foreign_said {
                    self.foreign_said = true;
                    out.push(Action::Log(events::Event::NotDoneForeign {
                        url,
                        owner: who,
                    }));
                }
                out.push(Action::ProbeAgain);
            }
        }
    }

    fn done(&mut self, out: &mut Vec<Action>) {
        self.phase = Phase::Done;
        if !self.other {
            out.push(Action::SignDone);
        }
    }

    fn ended(&mut self, at: Instant, ended: Ended, out: &mut Vec<Action>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        match phase {
            Phase::Ended => {}
            Phase::Tuning => {
                if self.other {
                    // Said when it was seen.
                } else if let Some(sig) = self.stopped {
                    out.push(Action::Log(events::Event::NotSigningStopped {
                        status: ended,
                        signal: signal_name(sig),
                    }));
                } else if self.headless && ended.succeeded() {
                    out.push(Action::Log(events::Event::NotSigningHeadless {}));
                } else if self.exit_unproven && ended.succeeded() {
                    out.push(Action::Log(events::Event::NotSigningExitUnproven {}));
                } else if matches!(self.rule, Rule::Exit | Rule::Quiet(_)) && ended.succeeded() {
                    out.push(Action::Log(events::Event::DoneExit {
                        after: at.saturating_duration_since(self.launched),
                    }));
                    out.push(Action::SignDone);
                } else {
                    out.push(Action::Log(events::Event::NotSigningEarly {
                        status: ended,
                    }));
                }
            }
            Phase::Done => {
                let n = self.late.len();
                if let Some(other) = self.other_after_sign.take() {
                    out.push(Action::Log(events::Event::LateNotSignedOther {
                        paths: self.late(),
                        outcome: Outcome::Unjudged,
                        other,
                    }));
                    return;
                }
                if n == 0 || self.other {
                    return;
                }
                let paths = self.late();
                let outcome = Outcome::Unjudged;
                if let Some(sig) = self.stopped {
                    out.push(Action::Log(events::Event::LateNotSignedStopped {
                        paths,
                        outcome,
                        status: ended,
                        signal: signal_name(sig),
                    }));
                } else if ended.succeeded() && self.headless {
                    out.push(Action::Log(events::Event::LateNotSignedHeadless {
                        paths,
                        outcome,
                    }));
                } else if ended.succeeded() && self.exit_unproven {
                    out.push(Action::Log(events::Event::LateNotSignedExitUnproven {
                        paths,
                        outcome,
                    }));
                } else if ended.succeeded() {
                    out.push(Action::SignLate { late: n });
                } else {
                    out.push(Action::Log(events::Event::LateNotSignedAbnormal {
                        paths,
                        outcome,
                        status: ended,
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
