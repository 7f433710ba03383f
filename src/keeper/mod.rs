//! The cache side of one launch: prune before the engine starts, watch it
//! tune, decide when tuning is done, sign the set for this launch. Every
//! failure here is logged and leaves the launch alone (fail open for the
//! launch); any doubt leaves the cache unsigned (fail closed for trust).
//!
//! While the engine runs, [`crate::keeper::policy`] decides and this module runs
//! its actions: the watch, the probe and the timers feed it events in the
//! supervisor loop; unify, hashing, signing, the lock, the store and the
//! share run on a worker thread that reports through a socket in the loop's
//! poll set, so the loop never waits for them.
//!
//! Here: the keeper and the running launch's side of the loop. Before the
//! engine starts, `prepare.rs` (with `read.rs`, the launch as read;
//! `place.rs`, the root, the done rule and the turn on the root;
//! `turn.rs`, the wait for other launches on the root; `restore.rs`, the
//! set brought back from the store and the work after the spawn); after,
//! `commit.rs` (the commit work) and `worker.rs` (the thread that runs it).

mod check;
mod commit;
pub mod explain;
mod last_seen;
pub mod observe;
mod pin;
mod place;
pub mod policy;
mod prepare;
mod read;
mod restore;
mod settings;
mod turn;
mod worker;

pub use pin::{has_copy as has_pinned_copy, last_pinned, unpin, Held as PinnedBoot};
pub use settings::{KeepMode, NotKept, Settings, UnifyMode};

/// The fingerprint the engine of the launch read as `read` last ran with,
/// when it was not `read` (its words do not show everything it gets): the
/// set a boot of these words is offered, which `status` and `explain` say.
pub fn seen_as(
    store: &crate::store::Store,
    read: &crate::digest::Fingerprint,
) -> Option<crate::digest::Fingerprint> {
    last_seen::get(store.state_fd(), read)
}

use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::PollFlags;

use crate::done::owner;
use crate::done::probe::{Probe, ProbeResult};
use crate::done::watch::{Stamp, Watcher};
use crate::done::Done;
use crate::keeper::policy::{Action, Event, Owner, Policy, Rule};
use crate::root::running::{Marker, State};
use crate::signals::Ended;

use commit::{Committer, Job, Report, SignKind};
use worker::Worker;

/// The keeper of one launch's cache: its marker among the launches on the
/// root, the watch of the tree, and where the launch is.
pub struct Keeper {
    /// This launch's marker among the launches using the root.
    marker: Marker,
    watcher: Watcher,
    launched: Instant,
    stage: Stage,
}

/// Where a kept launch is: its engine is not started yet, runs, or has
/// ended. The commit work is the keeper's before the start, and the
/// worker's from then on.
enum Stage {
    /// Before the engine starts.
    Before(Box<Before>),
    /// While the engine runs.
    Running(Box<Session>),
    /// The engine ended: the work is over.
    Ended,
}

/// What starts the session once the engine runs.
struct Before {
    /// The commit work (the root, the files kept, the store, the share).
    committer: Committer,
    done: Done,
    probe_interval: Duration,
    probe_timeout: Duration,
    /// The command's exit status may not be the engine's: an exit 0 proves
    /// nothing.
    exit_unproven: bool,
}

/// The look for the engine that runs ([`observe::find_engine`]).
struct Looking {
    child: u32,
    want: observe::Want,
    since: Instant,
    next: Instant,
}

impl Looking {
    /// Often at first (the engine must be seen before it reaches its cache,
    /// which it does once its weights are loaded), then less.
    fn again(&mut self, now: Instant) {
        let step = if now.saturating_duration_since(self.since) < LOOK_FAST_FOR {
            LOOK_FAST
        } else {
            LOOK_SLOW
        };
        self.next = now + step;
    }
}

/// How often the engine is looked for in its first seconds, and after.
const LOOK_FAST: Duration = Duration::from_millis(10);
const LOOK_FAST_FOR: Duration = Duration::from_secs(5);
const LOOK_SLOW: Duration = Duration::from_millis(200);

/// Work that must not delay the engine's start: run after the spawn. It
/// drops the sender it is given once the part that keepwrap's exit waits
/// for (for at most a bounded time: the store's eviction) is done.
pub type AfterStart = Box<dyn FnOnce(std::sync::mpsc::Sender<()>) + Send>;

/// What [`Keeper::prepare`] hands to the supervisor: how the launch goes on.
pub enum Prepared {
    /// keepwrap only supervises it: it leaves no marker and keeps no cache
    /// (why is logged).
    Supervised,
    /// Hands-off: its marker only. Its engine writes into the root all the
    /// same (but for a root keepwrap names to the engine, which a hands-off
    /// engine is not given), and other launches must see it (they neither
    /// prune under it nor sign what it writes).
    HandsOff(Box<Marker>),
    /// It keeps the cache.
    Keeping(Box<Keeping>),
}

/// A launch that keeps the cache.
pub struct Keeping {
    pub keeper: Keeper,
    pub after_start: Option<AfterStart>,
}

impl Prepared {
    /// This launch's marker, whether it keeps the cache or not.
    pub fn marker(&self) -> Option<&Marker> {
        match self {
            Prepared::Supervised => None,
            Prepared::HandsOff(marker) => Some(marker),
            Prepared::Keeping(k) => Some(&k.keeper.marker),
        }
    }

    fn hands_off(marker: Marker) -> Prepared {
        marker.set_state(State::HandsOff);
        Prepared::HandsOff(Box::new(marker))
    }
}

impl Keeper {
    /// The engine is running: hand the commit work (store, share, the files
    /// kept) to the worker, start the policy, and probe the health endpoint
    /// if that is the rule.
    pub fn child_started(&mut self, child: u32) {
        let before = match std::mem::replace(&mut self.stage, Stage::Ended) {
            Stage::Before(before) => before,
            other => {
                self.stage = other;
                return;
            }
        };
        self.stage = Stage::Running(Box::new(Session::start(*before, child, self.launched)));
    }

    /// The inotify fd, while no sign is running (keepwrap's own rewrites
    /// are told apart from the engine's landings once it is over).
    pub fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.stage {
            Stage::Running(s) if s.worker.busy() => None,
            _ => Some(self.watcher.fd()),
        }
    }

    /// Readable when the worker finished a sign.
    pub fn worker_fd(&self) -> Option<BorrowedFd<'_>> {
        self.session().and_then(|s| s.worker.fd())
    }

    pub fn probe_fd(&self) -> Option<(BorrowedFd<'_>, PollFlags)> {
        self.session()
            .and_then(|s| s.probe.as_ref())
            .and_then(Probe::poll_fd)
    }

    /// The next time `tick` has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        let s = self.session()?;
        [
            s.policy.deadline(),
            s.probe.as_ref().and_then(Probe::deadline),
            s.looking.as_ref().map(|l| l.next),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The session, while the engine runs.
    fn session(&self) -> Option<&Session> {
        match &self.stage {
            Stage::Running(s) => Some(s),
            _ => None,
        }
    }

    /// Timers: look for the engine; start or time out a probe; close a
    /// quiet window.
    pub fn tick(&mut self, now: Instant) {
        self.look(now);
        if let Stage::Running(s) = &mut self.stage {
            if let Some(probe) = s.probe.as_mut() {
                if probe.step(now, false) == ProbeResult::Ready {
                    self.probe_ready(now);
                }
            }
        }
        self.feed(Event::Tick(now));
    }

    /// The inotify fd, the probe socket or the worker is ready.
    pub fn on_events(&mut self, watch_ready: bool, probe_revents: PollFlags, worker_ready: bool) {
        let now = Instant::now();
        if worker_ready {
            self.take_finished();
        }
        if watch_ready {
            self.note_landings(now);
        }
        if !probe_revents.is_empty() {
            let Stage::Running(s) = &mut self.stage else {
                return;
            };
            if let Some(probe) = s.probe.as_mut() {
                match probe.step(now, true) {
                    ProbeResult::Ready => self.probe_ready(now),
                    ProbeResult::NotYet => self.feed(Event::ProbeFailed),
                    ProbeResult::Pending => {}
                }
            }
        }
    }

    /// Look for the engine when it is time: once seen, the worker checks it
    /// against the set offered.
    fn look(&mut self, now: Instant) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        let Some(l) = s.looking.as_mut() else {
            return;
        };
        if now < l.next {
            return;
        }
        let Some(seen) = observe::find_engine(l.child, &l.want) else {
            l.again(now);
            return;
        };
        s.looking = None;
        s.worker.run(Job::Seen {
            seen: Box::new(seen),
            touched: !s.landed.is_empty(),
        });
    }

    /// keepwrap forwarded `signo` to the engine.
    pub fn forwarded(&mut self, signo: i32) {
        self.feed(Event::Forwarded(signo));
    }

    /// The probe got a 200: it counts when the engine's own process tree
    /// serves the port (the worker looks, as reading the kernel's socket
    /// tables can take a while), or when the URL is not a local one.
    fn probe_ready(&mut self, now: Instant) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        let s = &mut **s;
        let Some(probe) = s.probe.as_mut() else {
            return;
        };
        // No other probe until this one's answer is judged: a judge that
        // takes longer than the interval (a loaded host) must not queue
        // others behind it, nor the lines and the sign that follow.
        probe.judging();
        let url = probe.endpoint().to_string();
        let report = match probe.addr() {
            // A headless node probes the head: another process by design.
            Some(addr) if owner::is_local(addr) && !s.head => s.worker.run(Job::Owner {
                addr,
                name: !s.named,
                at: now,
                url,
            }),
            Some(_) => Some(Report::Owner {
                at: now,
                url,
                owner: Owner::Remote,
            }),
            None => {
                probe.defer(now);
                None
            }
        };
        if let Some(r) = report {
            self.take(r);
        }
    }

    /// Take what the worker finished, then catch up with the watch when no
    /// sign is under way.
    fn take_finished(&mut self) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        for r in s.worker.finished() {
            self.take(r);
        }
        if self.session().is_some_and(|s| !s.worker.busy()) {
            self.note_landings(Instant::now());
        }
    }

    /// One report of the worker: a sign's files are keepwrap's own writes,
    /// not landings; an owner is the judge of a probe's 200.
    fn take(&mut self, report: Report) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        match report {
            Report::Signed { stamps, done } => {
                s.own.extend(stamps);
                if done {
                    // Launches waiting for this one may start now: the set
                    // is signed.
                    self.marker.mark_done();
                }
            }
            Report::Owner { at, url, owner } => {
                s.named |= matches!(owner, Owner::Foreign(_));
                self.feed(Event::ProbeOk { at, url, owner });
            }
            Report::Checked { repruned } => {
                if repruned {
                    // keepwrap's own moves, not landings of the engine.
                    self.watcher.read();
                }
            }
        }
    }

    /// Cache files the engine landed: one line each (written by the worker,
    /// which parses them), and the policy told.
    fn note_landings(&mut self, now: Instant) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        let mut landed = self.watcher.read();
        landed.retain(|rel| match s.own.remove(rel) {
            Some(stamp) => self.watcher.stamp(rel) != Some(stamp),
            None => true,
        });
        if landed.is_empty() {
            return;
        }
        s.landed.extend(landed.iter().cloned());
        s.worker.run(Job::Landed {
            files: landed.clone(),
            after: now.saturating_duration_since(self.launched),
        });
        self.feed(Event::Landed {
            at: now,
            files: landed,
        });
    }

    /// Give the policy an event and run its actions.
    fn feed(&mut self, event: Event) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        let s = &mut **s;
        let mut actions: VecDeque<Action> = s.policy.on(event).into();
        while let Some(action) = actions.pop_front() {
            match action {
                // Through the worker, so that the lines keep the order of
                // the events (landing lines are written there).
                Action::Log(line) => {
                    s.worker.run(Job::Log(line));
                }
                Action::ProbeAgain => {
                    if let Some(p) = s.probe.as_mut() {
                        p.defer(Instant::now());
                    }
                }
                Action::LookForOthers => {
                    if let Some(other) = other_launch(&self.marker) {
                        actions.extend(s.policy.on(Event::OtherLaunch(other)));
                    }
                }
                Action::SignDone | Action::SignLate { .. } => {
                    // Another launch seen on the root: the running markers
                    // say so, and the policy decides.
                    if let Some(other) = other_launch(&self.marker) {
                        actions.extend(s.policy.on(Event::OtherLaunch(other)));
                        if action == Action::SignDone {
                            // Done, with nothing to sign.
                            self.marker.mark_done();
                        }
                        continue;
                    }
                    let kind = match action {
                        Action::SignLate { late } => SignKind::Late(late),
                        _ => SignKind::Done,
                    };
                    let files = self.watcher.known_files().map(Path::to_path_buf).collect();
                    let landed = s.landed.clone();
                    if let Some(Report::Signed { stamps, done }) = s.worker.run(Job::Sign {
                        kind,
                        files,
                        landed,
                    }) {
                        s.own.extend(stamps);
                        if done {
                            self.marker.mark_done();
                        }
                    }
                }
            }
        }
        if !s.policy.wants_probe() {
            s.probe = None;
        }
    }

    /// The engine ended: wait for the sign under way, take in what landed
    /// meanwhile, let the policy decide, and run what it says to the end.
    pub fn child_ended(&mut self, ended: Ended) {
        let Stage::Running(s) = &mut self.stage else {
            return;
        };
        if s.looking.take().is_some() {
            s.worker.run(Job::Unseen);
        }
        s.worker.engine_gone();
        s.worker.wait();
        self.take_finished();
        self.feed(Event::ChildEnded {
            at: Instant::now(),
            ended,
        });
        if let Stage::Running(mut s) = std::mem::replace(&mut self.stage, Stage::Ended) {
            s.worker.wait();
            s.worker.stop();
        }
    }
}

/// A launch that used the root while this one ran, if any (its engine may
/// have written some of the rank files): the policy's "another launch seen".
fn other_launch(marker: &Marker) -> Option<String> {
    marker.others().first().map(ToString::to_string)
}

/// While the engine runs: the policy, the worker that runs its signs, the
/// probe and the look for the engine.
struct Session {
    policy: Policy,
    worker: Worker,
    /// The health probe, while the policy wants it.
    probe: Option<Probe>,
    /// The probe asks the head of a multi-node launch (another process by
    /// design).
    head: bool,
    /// Looking for the engine among the child's processes, until it is seen.
    looking: Option<Looking>,
    /// Cache files as keepwrap's own signs left them (after unify): their
    /// inotify events are not landings of the engine.
    own: HashMap<PathBuf, Stamp>,
    /// Another process serving the probed port was named already.
    named: bool,
    /// The cache files the engine saved since the start.
    landed: std::collections::HashSet<PathBuf>,
}

impl Session {
    /// The engine `child` started: the rule of its done, the policy, the
    /// probe when the rule is health, and the look for the engine while it
    /// is awaited.
    fn start(before: Before, child: u32, launched: Instant) -> Session {
        let Before {
            committer,
            done,
            probe_interval,
            probe_timeout,
            exit_unproven,
        } = before;
        let now = Instant::now();
        let looking = committer.seeing.awaited().map(|want| Looking {
            child,
            want: want.clone(),
            since: now,
            next: now,
        });
        let mut probe = None;
        let rule = match &done {
            Done::Health(endpoint) | Done::HeadHealth(endpoint) => {
                probe = Some(Probe::new(
                    endpoint.clone(),
                    probe_interval,
                    probe_timeout,
                    now,
                ));
                Rule::Health
            }
            Done::Quiet(d) | Done::RankFiles(_, d) => Rule::Quiet(*d),
            Done::Exit => Rule::Exit,
        };
        let policy = match &done {
            Done::HeadHealth(_) => Policy::new(rule, launched).headless(None, &[]),
            Done::RankFiles(names, _) => {
                Policy::new(rule, launched).headless(Some(names.clone()), &committer.kept)
            }
            _ => Policy::new(rule, launched),
        };
        let policy = if exit_unproven {
            policy.exit_unproven()
        } else {
            policy
        };
        Session {
            policy,
            worker: Worker::start(committer),
            probe,
            head: matches!(done, Done::HeadHealth(_)),
            looking,
            own: HashMap::new(),
            named: false,
            landed: std::collections::HashSet::new(),
        }
    }
}
