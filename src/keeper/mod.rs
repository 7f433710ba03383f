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

pub mod explain;
pub mod policy;
mod settings;
pub mod vllm;

pub use settings::{KeepMode, NotKept, Settings, UnifyMode};

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::PollFlags;

use crate::cache;
use crate::digest::short;
use crate::done::owner;
use crate::done::watch::{self, Stamp, Watcher};
use crate::done::{Done, Probe, ProbeResult};
use crate::keeper::policy::{Action, Event, Owner, Policy, Rule};
use crate::launch::fingerprint::{Launch, ProfileName};
use crate::root::lock::{self, CacheLock, LockError};
use crate::root::running::{self, Identity, Marker, Runs, Seen, State, Verdict, Why};
use crate::root::stats::Stats;
use crate::share::Share;
use crate::signals::Ended;
use crate::store::{self, Store};
use crate::unify;
use crate::STATE_DIR;

pub struct Keeper {
    root: PathBuf,
    fingerprint: String,
    done: Done,
    watcher: Watcher,
    probe: Option<Probe>,
    probe_interval: Duration,
    probe_timeout: Duration,
    launched: Instant,
    /// Cache files prune kept (signed for this launch), relative to root.
    kept: Vec<PathBuf>,
    /// While the engine runs.
    session: Option<Session>,
    /// Rewrite each directory's rank files as their union before signing.
    unify: bool,
    /// `<root>/.keepwrap`: other launches' sets, records, stats, the lock.
    /// This launch's marker among the launches using the root.
    marker: Marker,
    store: Option<Store>,
    lock_timeout: Duration,
    /// For the launch record: the profile and the redacted inputs.
    profile: &'static str,
    inputs: serde_json::Value,
    /// Multi-node launches: the directory every node mounts.
    share: Option<Share>,
}

/// The cache root: `--cache-dir`, else `$SGLANG_CACHE_DIR/flashinfer/autotune`
/// from the child's environment, else `$HOME/.cache/sglang/flashinfer/autotune`.
pub fn cache_root(args: &Settings, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    crate::root::place::root_from(args.cache_dir.as_deref(), env)
}

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
    pub after_start: Option<Box<dyn FnOnce() + Send>>,
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

/// Whether this launch may keep the cache, once the other launches on the
/// root have been looked at.
enum Turn {
    Go,
    HandsOff,
}

/// How often a waiting launch looks at the other launches again.
const WAIT_POLL: Duration = Duration::from_millis(200);
/// How often a waiting launch says it still waits.
const WAIT_PROGRESS: Duration = Duration::from_secs(60);

impl Keeper {
    /// Fingerprint the launch, make sure the root exists, wait for any other
    /// launch on the root that is still tuning, prune what this launch must
    /// not load, and start watching. No keeper when the cache cannot be kept
    /// this time (the reason is logged); the launch goes on.
    pub fn prepare(args: &Settings, argv: &[OsString], env: &[(OsString, OsString)]) -> Prepared {
        let launched = Instant::now();
        let opts = args.fingerprint.clone();
        let launch = Launch::new(&opts, argv, env);
        let fingerprint = launch.fingerprint().to_string();
        let profile = launch.profile();
        let root = if profile == ProfileName::Vllm {
            vllm::root(args.cache_dir.as_deref(), env)
                .map_err(crate::events::vllm::no_vllm_cache_root)
                .ok()
        } else {
            let root = cache_root(args, env);
            if root.is_none() {
                crate::events::keeper::no_cache_root();
            }
            root
        };
        let Some(root) = root else {
            return Prepared::default();
        };
        crate::root::place::warn_cache_dir(args.cache_dir.as_deref(), argv, env);
        for line in launch.warnings() {
            crate::events::keeper::launch_warning(&line);
        }
        let done = match args.done.resolve(&launch) {
            Ok(done) => done,
            Err(e) => {
                crate::events::keeper::done_rule_unusable(e);
                return Prepared::default();
            }
        };
        crate::events::keeper::launch(&fingerprint, profile.as_str(), &root, &done);
        vllm::note_managed_store(&launch, env);
        if !ensure_root(&root) {
            return Prepared::default();
        }
        let runs = match Runs::open(&root) {
            Ok(r) => r,
            Err(e) => {
                crate::events::keeper::cannot_open_running(
                    &root.join(STATE_DIR).join(running::RUNNING_DIR),
                    e,
                );
                return Prepared::default();
            }
        };
        let id = Identity::of(&launch, &opts, argv, env, &args.share.node_local());
        let share = if profile == ProfileName::Vllm {
            vllm::share(&args.share, &launch, args.store_max_age)
        } else {
            Share::new(
                &args.share,
                &launch,
                argv,
                args.unifies(profile),
                args.store_max_age,
            )
        };
        let store = match Store::open(&root) {
            Ok(s) => Some(s),
            Err(e) => {
                crate::events::keeper::store_unusable(STATE_DIR, &root, e);
                None
            }
        };
        // Held until the engine is spawned (end of this function).
        let (_lock, turn) = wait_turn(args, &runs, store.as_ref(), &id);
        let state = match turn {
            Turn::Go => State::Tuning,
            Turn::HandsOff => State::HandsOff,
        };
        let marker = match runs.register(&id, state) {
            Ok(m) => m,
            Err(e) => {
                crate::events::keeper::cannot_leave_marker(
                    &root.join(STATE_DIR).join(running::RUNNING_DIR),
                    e,
                );
                return Prepared::default();
            }
        };
        if let Turn::HandsOff = turn {
            return Prepared::hands_off(marker);
        }
        let inputs = launch.redacted_inputs();
        // The trash is emptied once the engine has started (after_start).
        let pruned = match &store {
            Some(s) => {
                s.recover();
                let r = cache::prune_then_empty(
                    &root,
                    &fingerprint,
                    Some(&mut |fd, set| s.stash(fd, set)),
                );
                s.sync();
                r
            }
            None => cache::prune_then_empty(&root, &fingerprint, None),
        };
        let (mut kept, removed, stored, trash) = match pruned {
            Ok((report, trash)) => (report.kept, report.removed, report.stored, trash),
            Err(e) => {
                crate::events::keeper::cannot_prune(&root, e);
                return Prepared::hands_off(marker);
            }
        };
        let mut after_start: Option<Box<dyn FnOnce() + Send>> = None;
        if let Some(s) = &store {
            let now = crate::clock::now_secs();
            let mut restored = 0;
            if kept.is_empty() {
                if let Some(r) = s.restore(&fingerprint) {
                    restored = r.paths.len();
                    crate::events::keeper::restored(
                        restored,
                        &fingerprint,
                        store::ago(r.signed_at, now),
                    );
                    kept = r.paths;
                }
            }
            // Nothing to compare with before any launch signed: no thread.
            if kept.is_empty() && s.has_records() {
                after_start = Some(explain_later(&root, &fingerprint, &inputs));
            } else {
                s.touch(&fingerprint);
            }
            let limits = store::Limits {
                max_size: args.store_max_size,
                max_age: args.store_max_age,
            };
            let evicted = s.evict(limits, now);
            Stats::record(|st| {
                st.launches += 1;
                st.removed += removed as u64;
                st.stored += stored as u64;
                st.restored += restored as u64;
                st.evicted += evicted as u64;
            });
        }
        let watcher = match Watcher::new(&root) {
            Ok(w) => w,
            Err(e) => {
                crate::events::keeper::watch_failed(e);
                return Prepared::hands_off(marker);
            }
        };
        let mut keeper = Keeper {
            marker,
            root,
            fingerprint,
            done,
            watcher,
            probe: None,
            probe_interval: args.probe_interval,
            probe_timeout: args.probe_timeout,
            launched,
            kept,
            session: None,
            unify: args.unifies(profile),
            store,
            lock_timeout: args.lock_timeout,
            profile: profile.as_str(),
            inputs,
            share,
        };
        keeper.take_share_union();
        vllm::before_start(&keeper.root, &launch, &mut keeper.kept);
        keeper.unify_kept();
        let after_start: Box<dyn FnOnce() + Send> = Box::new(move || {
            if let Some(job) = after_start {
                job();
            }
            trash.run();
        });
        Prepared {
            keeper: Some(keeper),
            marker: None,
            after_start: Some(after_start),
        }
    }

    /// This launch's marker among the launches using the root.
    pub fn marker(&self) -> &Marker {
        &self.marker
    }

    /// Files kept for this launch but signed without being unified (e.g.
    /// with `--unify off`): unify them now and sign the result, so that the
    /// engine's gate agrees on this very boot.
    fn unify_kept(&mut self) {
        if !self.unify || self.kept.len() < 2 {
            return;
        }
        if unify::unify_tree(&self.root, self.kept.iter().map(PathBuf::as_path)).rewritten == 0 {
            return;
        }
        self.watcher.read();
        match cache::sign(&self.root, &self.fingerprint) {
            Ok(r) => crate::events::keeper::signed_unified(r.signed.len(), &self.fingerprint),
            Err(e) => crate::events::keeper::cannot_sign(&self.root, e),
        }
    }

    /// Multi-node: when every node has published, write the union of all
    /// nodes' rank files over this node's and sign them (see [`Share`]).
    fn take_share_union(&mut self) {
        let Some(share) = self.share.as_ref() else {
            return;
        };
        let taken = if self.profile == ProfileName::Vllm.as_str() {
            // vLLM: each node keeps its own ranks' files; a node whose
            // cache is empty takes its own back from a complete set.
            if !self.kept.is_empty() {
                return;
            }
            vllm::take_own(share, &self.root, &self.fingerprint)
        } else {
            share.take_union(&self.root, &self.fingerprint)
        };
        if let Some(signed) = taken {
            // keepwrap's own writes are not landings of the engine.
            self.watcher.read();
            self.kept = signed;
        }
    }

    /// The engine is running: hand the commit work (store, share, the files
    /// kept) to the worker, start the policy, and probe the health endpoint
    /// if that is the rule.
    pub fn child_started(&mut self) {
        let now = Instant::now();
        let rule = match &self.done {
            Done::Health(endpoint) => {
                self.probe = Some(Probe::new(
                    endpoint.clone(),
                    self.probe_interval,
                    self.probe_timeout,
                    now,
                ));
                Rule::Health
            }
            Done::Quiet(d) => Rule::Quiet(*d),
            Done::Exit => Rule::Exit,
            Done::HeadHealth(endpoint) => {
                self.probe = Some(Probe::new(
                    endpoint.clone(),
                    self.probe_interval,
                    self.probe_timeout,
                    now,
                ));
                Rule::Health
            }
            Done::RankFiles(_, d) => Rule::Quiet(*d),
        };
        let policy = match &self.done {
            Done::HeadHealth(_) => Policy::new(rule, self.launched).headless(None, &[]),
            Done::RankFiles(names, _) => {
                Policy::new(rule, self.launched).headless(Some(names.clone()), &self.kept)
            }
            _ => Policy::new(rule, self.launched),
        };
        let committer = Committer {
            root: self.root.clone(),
            fingerprint: self.fingerprint.clone(),
            launched: self.launched,
            kept: std::mem::take(&mut self.kept),
            unify: self.unify,
            store: self.store.take(),
            lock_timeout: self.lock_timeout,
            profile: self.profile,
            inputs: std::mem::take(&mut self.inputs),
            share: self.share.take(),
            settle_at: None,
        };
        self.session = Some(Session {
            policy,
            worker: Worker::start(committer),
            own: HashMap::new(),
            named: false,
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
            self.probe.as_ref().map(Probe::deadline),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Timers: start or time out a probe; close a quiet window.
    pub fn tick(&mut self, now: Instant) {
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
        // No other probe until this one's answer is judged.
        probe.defer(now);
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
            None => None,
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
                Action::Info(line) => {
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
                    if let Some(Report::Signed { stamps, done }) =
                        s.worker.run(Job::Sign { kind, files })
                    {
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
}

/// What the worker is asked to do.
enum Job {
    /// One `keepwrap:` line at info level.
    Log(crate::events::policy::Note),
    /// Log the tuning progress of the cache files that landed (each is
    /// parsed to count its entries).
    Landed {
        files: Vec<PathBuf>,
        after: Duration,
    },
    /// Unify and sign every cache file present (`files`: those the watch
    /// knows of).
    Sign { kind: SignKind, files: Vec<PathBuf> },
    /// Who serves the loopback address `addr`, which answered `url` with
    /// 200 at `at`; `name`: name another owner.
    Owner {
        addr: std::net::SocketAddr,
        name: bool,
        at: Instant,
        url: String,
    },
}

#[derive(Debug, Clone, Copy)]
enum SignKind {
    /// Tuning is done.
    Done,
    /// At a clean exit, with this many files that landed after done.
    Late(usize),
}

/// What the worker reports.
enum Report {
    /// A sign finished: the cache files as it left them; `done`: it was
    /// the sign at done.
    Signed {
        stamps: Vec<(PathBuf, Stamp)>,
        done: bool,
    },
    /// Who served a probe's 200.
    Owner {
        at: Instant,
        url: String,
        owner: Owner,
    },
}

/// The commit work, off the supervisor loop: unify, hash and sign, the
/// lock, the store's record and statistics, the share's publication.
struct Committer {
    root: PathBuf,
    fingerprint: String,
    /// When the launch started (the statistics credit a boot's tuning time).
    launched: Instant,
    /// Cache files prune kept (signed for this launch), relative to root.
    kept: Vec<PathBuf>,
    unify: bool,
    store: Option<Store>,
    lock_timeout: Duration,
    profile: &'static str,
    inputs: serde_json::Value,
    share: Option<Share>,
    /// When the members signed without a stamp settle ([`Committer::settle`]).
    settle_at: Option<i64>,
}

impl Committer {
    fn run(&mut self, job: Job) -> Option<Report> {
        match job {
            Job::Log(note) => {
                note.log();
                None
            }
            Job::Landed { files, after } => {
                crate::done::progress::landed(&self.root, &files, after);
                None
            }
            Job::Sign { kind, files } => {
                let signed = self.sign(kind, &files);
                let stamps = files
                    .iter()
                    .chain(&signed)
                    .filter_map(|rel| {
                        let meta = std::fs::symlink_metadata(self.root.join(rel)).ok()?;
                        Some((rel.clone(), watch::stamp(&meta)))
                    })
                    .collect();
                Some(Report::Signed {
                    stamps,
                    done: matches!(kind, SignKind::Done),
                })
            }
            Job::Owner {
                addr,
                name,
                at,
                url,
            } => Some(Report::Owner {
                at,
                url,
                owner: owner::owner_of(addr, name),
            }),
        }
    }

    /// Unify, then sign every cache file present as one set, and say how
    /// this boot went. The files signed.
    fn sign(&mut self, kind: SignKind, files: &[PathBuf]) -> Vec<PathBuf> {
        if self.unify {
            unify::unify_tree(&self.root, files.iter().map(PathBuf::as_path));
        }
        let Ok(_lock) = self.commit_lock() else {
            return Vec::new();
        };
        // Files unify just wrote are signed at once, their stamps recorded
        // once their change times settle (settle, after the report).
        let report = match cache::sign_unsettled(&self.root, &self.fingerprint) {
            Ok(r) => r,
            Err(e) => {
                crate::events::keeper::cannot_sign(&self.root, e);
                return Vec::new();
            }
        };
        self.settle_at = report.settle_at;
        self.publish(&report);
        let n = report.signed.len();
        if let SignKind::Late(late) = kind {
            crate::events::keeper::signed_again(n, late, &self.fingerprint);
            if let Some(s) = &self.store {
                if n > 0 && report.failed == 0 && !report.unchanged {
                    s.record_signed(&self.fingerprint, self.profile, self.inputs.clone(), n);
                }
            }
            return report.signed;
        }
        let reused = n > 0 && report.unchanged && same_files(&report.signed, &self.kept);
        if n == 0 {
            let present = files
                .iter()
                .filter(|p| std::fs::symlink_metadata(self.root.join(p)).is_ok())
                .count();
            if present > 0 {
                crate::events::keeper::nothing_signed(present);
            } else {
                crate::events::keeper::nothing_to_keep();
            }
        } else if reused {
            crate::events::keeper::reused(n, &self.fingerprint);
        } else {
            crate::events::keeper::signed(n, &self.fingerprint);
        }
        if let Some(s) = &self.store {
            if n > 0 && report.failed == 0 {
                if report.unchanged && s.record(&self.fingerprint).is_some() {
                    s.touch(&self.fingerprint);
                } else {
                    s.record_signed(&self.fingerprint, self.profile, self.inputs.clone(), n);
                }
            }
            Stats::record(|st| {
                if reused {
                    st.reuses += 1;
                } else if n > 0 {
                    st.tunes += 1;
                }
            });
            crate::root::stats::credit_boot(
                s.state_fd(),
                &self.fingerprint,
                reused,
                n,
                self.launched,
            );
            Stats::flush(s.state_fd());
        }
        report.signed
    }

    /// Multi-node: publish the signed rank files into the share.
    fn publish(&mut self, report: &cache::SignReport) {
        if report.failed == 0 && !report.signed.is_empty() {
            if let Some(share) = self.share.as_mut() {
                share.publish(&self.root, &report.signed);
            }
        }
    }

    /// The lock for a commit: Ok(None) without a store; Err when it timed
    /// out (logged: nothing is signed). Other holders keep it for
    /// milliseconds, so the wait is short.
    fn commit_lock(&self) -> Result<Option<CacheLock>, ()> {
        match &self.store {
            None => Ok(None),
            Some(s) => take_lock(
                s,
                self.lock_timeout.min(COMMIT_LOCK_WAIT),
                &self.fingerprint,
                "signs",
            )
            .map(Some)
            .ok_or(()),
        }
    }

    /// Record the stamps of the members the last sign could not stamp, once
    /// their change times have settled (a wait of at most about 100 ms), so
    /// that the next launch trusts them without reading them.
    fn settle(&mut self) {
        let Some(at) = self.settle_at.take() else {
            return;
        };
        let wait = at.saturating_sub(cache::now_ns());
        if wait > 1_000_000_000 {
            return;
        }
        if wait > 0 {
            std::thread::sleep(Duration::from_nanos(wait as u64));
        }
        let Ok(_lock) = self.commit_lock() else {
            return;
        };
        // Best effort: without the stamps the next launch reads and hashes
        // those files instead.
        let _ = cache::restamp(&self.root, &self.fingerprint);
    }

    /// Before keepwrap exits: write the statistics this launch gathered
    /// (once, under the lock), and let the share's publication finish.
    fn finish(&mut self) {
        self.settle();
        if let (Some(s), true) = (&self.store, Stats::pending()) {
            if let Ok(_lock) = self.commit_lock() {
                Stats::flush(s.state_fd());
            }
        }
        if let Some(share) = self.share.as_mut() {
            share.finish();
        }
    }
}

/// The worker thread: jobs in order through a channel; each finished sign
/// reported through a socket in the supervisor's poll set, so that the loop
/// keeps forwarding signals and reaping meanwhile. When the thread cannot
/// start, the jobs run in the loop (late, but the launch goes on).
///
/// The thread starts with the first job that needs it while the engine
/// runs: log lines before it are written in the loop (nothing is queued
/// ahead of them), and once the engine has ended the jobs of a launch that
/// never needed the thread run in the loop, which has nothing else to do
/// then (a command that exits at once starts no thread).
struct Worker {
    /// The committer until the thread starts.
    idle: Option<Committer>,
    jobs: Option<mpsc::Sender<Job>>,
    results: Option<mpsc::Receiver<Report>>,
    /// Readable when a result is queued.
    wake: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    /// Without a thread: the committer, run in the loop.
    inline: Option<Committer>,
    /// Signs sent and not yet taken.
    busy: usize,
    ready: Vec<Report>,
}

impl Worker {
    fn start(committer: Committer) -> Worker {
        Worker {
            idle: Some(committer),
            jobs: None,
            results: None,
            wake: None,
            thread: None,
            inline: None,
            busy: 0,
            ready: Vec::new(),
        }
    }

    /// The engine has ended: a thread that never started is not needed
    /// any more.
    fn engine_gone(&mut self) {
        if let Some(c) = self.idle.take() {
            self.inline = Some(c);
        }
    }

    /// Start the thread with the idle committer.
    fn spawn_thread(&mut self) {
        let Some(committer) = self.idle.take() else {
            return;
        };
        let mut w = Worker {
            idle: None,
            jobs: None,
            results: None,
            wake: None,
            thread: None,
            inline: None,
            busy: 0,
            ready: Vec::new(),
        };
        let (wake, wake_tx) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => {
                crate::events::keeper::commit_worker_failed(e);
                w.inline = Some(committer);
                *self = w;
                return;
            }
        };
        let _ = wake.set_nonblocking(true);
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (results_tx, results) = mpsc::channel::<Report>();
        let (hand, handed) = mpsc::channel::<Committer>();
        let spawned = std::thread::Builder::new()
            .name("keepwrap-commit".into())
            .spawn(move || {
                crate::signals::block_signals_in_thread();
                // Behind the supervisor loop and the engine for the CPU: the
                // commit can wait a little, a signal or the engine cannot.
                crate::sys::set_thread_nice(10);
                let Ok(mut c) = handed.recv() else {
                    return;
                };
                for job in job_rx {
                    if let Some(report) = c.run(job) {
                        if results_tx.send(report).is_err() {
                            break;
                        }
                        let _ = (&wake_tx).write(&[1]);
                        c.settle();
                    }
                }
                c.finish();
            });
        match spawned {
            Ok(thread) => {
                let _ = hand.send(committer);
                w.jobs = Some(jobs);
                w.results = Some(results);
                w.wake = Some(wake);
                w.thread = Some(thread);
            }
            Err(e) => {
                crate::events::keeper::commit_worker_failed(e);
                w.inline = Some(committer);
            }
        }
        w.busy = self.busy;
        w.ready = std::mem::take(&mut self.ready);
        *self = w;
    }

    fn busy(&self) -> bool {
        self.busy > 0
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.wake.as_ref().map(AsFd::as_fd)
    }

    /// Run `job`: on the thread (the result comes through [`finished`]), or
    /// here and now without one (the result is returned).
    fn run(&mut self, job: Job) -> Option<Report> {
        if self.idle.is_some() {
            if let Job::Log(note) = &job {
                note.log();
                return None;
            }
            self.spawn_thread();
        }
        if let Some(c) = self.inline.as_mut() {
            return c.run(job);
        }
        let sign = matches!(job, Job::Sign { .. });
        if let Some(jobs) = &self.jobs {
            if jobs.send(job).is_ok() && sign {
                self.busy += 1;
            }
        }
        None
    }

    /// What finished since last asked.
    fn finished(&mut self) -> Vec<Report> {
        if let Some(w) = self.wake.as_ref() {
            let mut buf = [0u8; 64];
            while matches!((&*w).read(&mut buf), Ok(n) if n > 0) {}
        }
        if let Some(rx) = &self.results {
            while let Ok(r) = rx.try_recv() {
                if matches!(r, Report::Signed { .. }) {
                    self.busy = self.busy.saturating_sub(1);
                }
                self.ready.push(r);
            }
        }
        std::mem::take(&mut self.ready)
    }

    /// Block until every sign sent has finished (the engine is gone).
    fn wait(&mut self) {
        while self.busy > 0 {
            match self.results.as_ref().map(mpsc::Receiver::recv) {
                Some(Ok(r)) => {
                    if matches!(r, Report::Signed { .. }) {
                        self.busy -= 1;
                    }
                    self.ready.push(r);
                }
                _ => self.busy = 0,
            }
        }
    }

    /// No more jobs: let the thread finish what it has (the share's
    /// publication included) and end.
    fn stop(&mut self) {
        self.engine_gone();
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(c) = self.inline.as_mut() {
            c.finish();
        }
    }
}

/// The line a launch with no cache logs, computed off the start path: with
/// many arguments the comparison takes time the engine must not wait for.
fn explain_later(
    root: &Path,
    fingerprint: &str,
    inputs: &serde_json::Value,
) -> Box<dyn FnOnce() + Send> {
    let (root, fingerprint, inputs) = (root.to_path_buf(), fingerprint.to_string(), inputs.clone());
    Box::new(move || {
        if let Some(s) = Store::open_existing(&root) {
            if let Some(line) = explain::no_cache_line(&s, &fingerprint, &inputs) {
                crate::events::keeper::no_cache(&fingerprint, &line);
            }
        }
    })
}

/// Look at the other launches on the root under the cache lock: go on, go
/// on hands-off, or wait (bounded by `--wait-for-tuning`) for one that is
/// still tuning, then look again. Returns the lock (held, when there is a
/// store and it was taken) and the turn. Runs before the engine starts, off
/// the supervisor's thread: a TERM ends the wait at once.
fn wait_turn(
    args: &Settings,
    runs: &Runs,
    store: Option<&Store>,
    me: &Identity,
) -> (Option<CacheLock>, Turn) {
    let started = Instant::now();
    let deadline = started.checked_add(args.wait_for_tuning);
    let mut waited_for: Option<String> = None;
    loop {
        let lock = match store {
            Some(s) => match take_lock(s, args.lock_timeout, &me.fingerprint, "launches") {
                Some(l) => Some(l),
                None => return (None, Turn::HandsOff),
            },
            None => None,
        };
        let seen = runs.scan_and_tidy();
        let other = match running::verdict(me, &seen) {
            Verdict::Go => {
                if let Some(other) = waited_for {
                    crate::events::keeper::other_done_tuning(&other, started.elapsed());
                }
                return (lock, Turn::Go);
            }
            Verdict::HandsOff(why, other) => {
                hands_off_line(why, other);
                return (lock, Turn::HandsOff);
            }
            Verdict::Wait(other) => other.clone(),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            crate::events::keeper::gave_up_waiting(&other, args.wait_for_tuning);
            return (lock, Turn::HandsOff);
        }
        drop(lock);
        if waited_for.is_none() {
            crate::events::keeper::waiting_for_other(&other, args.wait_for_tuning);
        }
        waited_for = Some(other.who());
        let mut next_progress = Instant::now() + WAIT_PROGRESS;
        // Look again, without the lock, until that launch is done or gone.
        loop {
            std::thread::sleep(WAIT_POLL);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            let seen = runs.scan();
            match running::verdict(me, &seen) {
                Verdict::Wait(o) => {
                    if now >= next_progress {
                        crate::events::keeper::still_waiting(
                            o,
                            started.elapsed(),
                            args.wait_for_tuning,
                        );
                        next_progress = now + WAIT_PROGRESS;
                    }
                }
                _ => break,
            }
        }
    }
}

/// The one line a launch that goes on hands-off logs, naming the launch in
/// its way and the topology that works.
fn hands_off_line(why: Why, other: &Seen) {
    match why {
        Why::Peer => crate::events::keeper::peer_on_root(other),
        Why::Orphan => crate::events::keeper::orphan_on_root(other),
        Why::HandsOff | Why::OtherLaunch => crate::events::keeper::other_on_root(other),
    }
}

/// Longest wait for the lock at commit, whatever `--lock-timeout` says.
const COMMIT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Take the cache root's lock for this launch; None when it timed out or
/// failed (logged: `then` says what the launch does without it).
fn take_lock(s: &Store, timeout: Duration, fingerprint: &str, then: &str) -> Option<CacheLock> {
    let (after, what) = if then == "signs" {
        ("nothing is signed, the next launch tunes again", "commit")
    } else {
        ("the launch goes on without keeping the cache", "launch")
    };
    match lock::acquire(
        s.state_fd(),
        timeout,
        &format!("launch {}", short(fingerprint)),
    ) {
        Ok(l) => Some(l),
        Err(LockError::TimedOut(who)) => {
            crate::events::keeper::lock_gave_up(timeout, what, who, after);
            None
        }
        Err(LockError::Io(e)) => {
            crate::events::keeper::lock_failed(what, e, after);
            None
        }
    }
}

fn same_files(a: &[PathBuf], b: &[PathBuf]) -> bool {
    let mut a: Vec<&Path> = a.iter().map(PathBuf::as_path).collect();
    let mut b: Vec<&Path> = b.iter().map(PathBuf::as_path).collect();
    a.sort();
    b.sort();
    a == b
}

/// A missing root is the normal first boot: create it. Anything else that
/// makes it unusable is a warning, and the launch goes on.
fn ensure_root(root: &Path) -> bool {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() || (m.file_type().is_symlink() && root.is_dir()) => writable(root),
        Ok(_) => {
            crate::events::keeper::root_not_a_directory(root);
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir_all(root) {
            Ok(()) => {
                crate::events::keeper::root_created(root);
                true
            }
            Err(e) => {
                crate::events::keeper::cannot_create_root(root, e);
                false
            }
        },
        Err(e) => {
            crate::events::keeper::cannot_use_root(root, e);
            false
        }
    }
}

/// A root on a read-only file system can be neither pruned nor signed.
fn writable(root: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    match statvfs(root) {
        Ok(st) if st.flags().contains(FsFlags::ST_RDONLY) => {
            crate::events::keeper::root_read_only(root);
            false
        }
        _ => true,
    }
}
