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
//! engine starts, `prepare.rs` (and `turn.rs`, the wait for other launches
//! on the root); after, `commit.rs` (the commit work) and `worker.rs` (the
//! thread that runs it).

mod check;
mod commit;
pub mod explain;
mod last_seen;
pub mod observe;
pub mod policy;
mod prepare;
mod settings;
mod turn;
mod worker;

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
use crate::done::watch::{Stamp, Watcher};
use crate::done::{Done, Probe, ProbeResult};
use crate::keeper::policy::{Action, Event, Owner, Policy, Rule};
use crate::root::running::{Marker, State};
use crate::signals::Ended;

use commit::{Committer, Job, Report, SignKind};
use worker::Worker;

pub struct Keeper {
    done: Done,
    watcher: Watcher,
    probe: Option<Probe>,
    probe_interval: Duration,
    probe_timeout: Duration,
    launched: Instant,
    /// The commit work (the root, the files kept, the store, the share):
    /// here until the engine starts, then the worker's.
    commit: Option<Committer>,
    /// While the engine runs.
    session: Option<Session>,
    /// This launch's marker among the launches using the root.
    marker: Marker,
    /// The command's exit status may not be the engine's: an exit 0 proves
    /// nothing.
    exit_unproven: bool,
    /// Looking for the engine among the child's processes, until it is seen.
    looking: Option<Looking>,
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

/// What [`Keeper::prepare`] hands to the supervisor.
#[derive(Default)]
pub struct Prepared {
    /// The keeper, when this launch keeps the cache.
    pub keeper: Option<Keeper>,
    /// This launch's marker when it goes on without keeping the cache: its
    /// engine writes into the root all the same, and other launches must
    /// see it (they neither prune under it nor sign what it writes).
    pub marker: Option<Marker>,
    /// Work that must not delay the engine's start: run after the spawn.
    /// It drops the sender it is given once the part that keepwrap's exit
    /// waits for (for at most a bounded time: the store's eviction) is
    /// done.
    pub after_start: Option<Box<dyn FnOnce(std::sync::mpsc::Sender<()>) + Send>>,
}

impl Prepared {
    /// This launch's marker, whether it keeps the cache or not.
    pub fn marker(&self) -> Option<&Marker> {
        self.keeper
            .as_ref()
            .map(|k| &k.marker)
            .or(self.marker.as_ref())
    }

    fn hands_off(marker: Marker) -> Prepared {
        marker.set_state(State::HandsOff);
        Prepared {
            marker: Some(marker),
            ..Prepared::default()
        }
    }
}

impl Keeper {
    /// This launch's marker among the launches using the root.
    pub fn marker(&self) -> &Marker {
        &self.marker
    }

    /// The engine is running: hand the commit work (store, share, the files
    /// kept) to the worker, start the policy, and probe the health endpoint
    /// if that is the rule.
    pub fn child_started(&mut self, child: u32) {
        let Some(committer) = self.commit.take() else {
            return;
        };
        let now = Instant::now();
        if let Some(want) = committer.seeing.awaited() {
            self.looking = Some(Looking {
                child,
                want: want.clone(),
                since: now,
                next: now,
            });
        }
        let rule = match &self.done {
            Done::Health(endpoint) | Done::HeadHealth(endpoint) => {
                self.probe = Some(Probe::new(
                    endpoint.clone(),
                    self.probe_interval,
                    self.probe_timeout,
                    now,
                ));
                Rule::Health
            }
            Done::Quiet(d) | Done::RankFiles(_, d) => Rule::Quiet(*d),
            Done::Exit => Rule::Exit,
        };
        let policy = match &self.done {
            Done::HeadHealth(_) => Policy::new(rule, self.launched).headless(None, &[]),
            Done::RankFiles(names, _) => {
                Policy::new(rule, self.launched).headless(Some(names.clone()), &committer.kept)
            }
            _ => Policy::new(rule, self.launched),
        };
        let policy = if self.exit_unproven {
            policy.exit_unproven()
        } else {
            policy
        };
        self.session = Some(Session {
            policy,
            worker: Worker::start(committer),
            own: HashMap::new(),
            named: false,
            landed: std::collections::HashSet::new(),
        });
    }

    /// The inotify fd, while no sign is running (keepwrap's own rewrites
    /// are told apart from the engine's landings once it is over).
    pub fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.session {
            Some(s) if s.worker.busy() => None,
            _ => Some(self.watcher.fd()),
        }
    }

    /// Readable when the worker finished a sign.
    pub fn worker_fd(&self) -> Option<BorrowedFd<'_>> {
        self.session.as_ref().and_then(|s| s.worker.fd())
    }

    pub fn probe_fd(&self) -> Option<(BorrowedFd<'_>, PollFlags)> {
        self.probe.as_ref().and_then(Probe::poll_fd)
    }

    /// The next time `tick` has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        let s = self.session.as_ref()?;
        [
            s.policy.deadline(),
            self.probe.as_ref().and_then(Probe::deadline),
            self.looking.as_ref().map(|l| l.next),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Timers: look for the engine; start or time out a probe; close a
    /// quiet window.
    pub fn tick(&mut self, now: Instant) {
        self.look(now);
        if let Some(probe) = self.probe.as_mut() {
            if probe.step(now, false) == ProbeResult::Ready {
                self.probe_ready(now);
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
            if let Some(probe) = self.probe.as_mut() {
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
        let (Some(l), Some(s)) = (self.looking.as_mut(), self.session.as_mut()) else {
            return;
        };
        if now < l.next {
            return;
        }
        let Some(seen) = observe::find_engine(l.child, &l.want) else {
            l.again(now);
            return;
        };
        self.looking = None;
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
        let (Some(probe), Some(s)) = (self.probe.as_mut(), self.session.as_mut()) else {
            return;
        };
        // No other probe until this one's answer is judged: a judge that
        // takes longer than the interval (a loaded host) must not queue
        // others behind it, nor the lines and the sign that follow.
        probe.judging();
        let url = probe.endpoint().to_string();
        // A headless node probes the head: another process by design.
        let head = matches!(self.done, Done::HeadHealth(_));
        let report = match probe.addr() {
            Some(addr) if owner::is_local(addr) && !head => s.worker.run(Job::Owner {
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
        let Some(s) = self.session.as_mut() else {
            return;
        };
        for r in s.worker.finished() {
            self.take(r);
        }
        if self.session.as_ref().is_some_and(|s| !s.worker.busy()) {
            self.note_landings(Instant::now());
        }
    }

    /// One report of the worker: a sign's files are keepwrap's own writes,
    /// not landings; an owner is the judge of a probe's 200.
    fn take(&mut self, report: Report) {
        let Some(s) = self.session.as_mut() else {
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
        let Some(s) = self.session.as_mut() else {
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
        let Some(s) = self.session.as_mut() else {
            return;
        };
        let mut actions: VecDeque<Action> = s.policy.on(event).into();
        while let Some(action) = actions.pop_front() {
            match action {
                // Through the worker, so that the lines keep the order of
                // the events (landing lines are written there).
                Action::Log(line) => {
                    s.worker.run(Job::Log(line));
                }
                Action::ProbeAgain => {
                    if let Some(p) = self.probe.as_mut() {
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
            self.probe = None;
        }
    }

    /// The engine ended: wait for the sign under way, take in what landed
    /// meanwhile, let the policy decide, and run what it says to the end.
    pub fn child_ended(&mut self, ended: Ended) {
        let Some(s) = self.session.as_mut() else {
            return;
        };
        if self.looking.take().is_some() {
            s.worker.run(Job::Unseen);
        }
        s.worker.engine_gone();
        s.worker.wait();
        self.take_finished();
        self.feed(Event::ChildEnded {
            at: Instant::now(),
            ended,
        });
        if let Some(mut s) = self.session.take() {
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

/// While the engine runs: the policy, and the worker that runs its signs.
struct Session {
    policy: Policy,
    worker: Worker,
    /// Cache files as keepwrap's own signs left them (after unify): their
    /// inotify events are not landings of the engine.
    own: HashMap<PathBuf, Stamp>,
    /// Another process serving the probed port was named already.
    named: bool,
    /// The cache files the engine saved since the start.
    landed: std::collections::HashSet<PathBuf>,
}
