//! Before the engine starts, in order: find the cache root and the done
//! rule, take this launch's turn on the root and leave its marker, prune
//! what it must not load (stashing other launches' sets in the store),
//! bring its own set back from the store, start the watch, take the
//! share's union. Each step that fails logs why and the launch goes on,
//! hands-off or without a keeper.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cache::{self, PruneReport, Shape};
use crate::digest::Fingerprint;
use crate::done::watch::Watcher;
use crate::done::Done;
use crate::engine::{Engine, NoRoot};
use crate::launch::fingerprint::Launch;
use crate::launch::Command;
use crate::root::lock::CacheLock;
use crate::root::running::{self, Identity, Marker, Runs, State};
use crate::root::stats::Stats;
use crate::stops::Stopped;
use crate::store::{self, Store};
use crate::STATE_DIR;

use super::check::{Redo, Seeing};
use super::commit::Committer;
use super::last_seen;
use super::turn::{wait_turn, Turn};
use super::{explain, Keeper, Prepared, Settings};

/// Work run after the engine's spawn (see [`Prepared::after_start`]).
type AfterStart = Box<dyn FnOnce(std::sync::mpsc::Sender<()>) + Send>;
/// One part of it.
type Job = Box<dyn FnOnce() + Send>;

impl Keeper {
    /// Fingerprint the launch (`command`: `argv` as read by
    /// [`Settings::keeps`]), make sure the root exists, wait for any other
    /// launch on the root that is still tuning, prune what this launch must
    /// not load, and start watching. No keeper when the cache cannot be kept
    /// this time (the reason is logged); the launch goes on. Err: a stop signal
    /// came before the start.
    pub fn prepare(
        args: &Settings,
        command: Command,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<Prepared, Stopped> {
        let launched = Instant::now();
        let opts = args.fingerprint.clone();
        let launch = Launch::of(&opts, command, argv, env);
        let read = launch.fingerprint().clone();
        let unread = match (&launch.command().wrapper, args.keep) {
            (crate::launch::Wrapper::Unreadable(u), super::KeepMode::Auto) => Some(u.clone()),
            _ => None,
        };
        let seeing = match &unread {
            Some(u) => Seeing::Refused(format!("the launch cannot be read whole ({u})")),
            None => Seeing::of(
                launch.command(),
                argv,
                &read,
                &opts,
                args.cache_dir.as_deref(),
            ),
        };
        // What the fingerprint holds as a constant although the engine will
        // read something (an engine not found, a hub id not downloaded yet):
        // no set is offered, and the fingerprint is taken again at done.
        let redo = match (launch.unresolved(), &unread) {
            (Some(why), None) => Some(Redo {
                opts: opts.clone(),
                argv: argv.to_vec(),
                env: env.to_vec(),
                cwd: None,
                why,
            }),
            _ => None,
        };
        let profile = launch.profile();
        let engine = crate::engine::of(profile);
        let Some((root, shape, done)) = locate(args, engine, &launch, env, unread.is_some()) else {
            return Ok(Prepared::default());
        };
        if let Some(r) = &redo {
            crate::events::Event::UnresolvedLaunch { why: r.why.clone() }.emit();
        }
        if let Some(u) = &unread {
            crate::events::Event::UnreadablePruned {
                program: argv
                    .first()
                    .map(|a| crate::launch::canonical::py_str(a.as_encoded_bytes()))
                    .unwrap_or_default(),
                why: u.why.clone(),
                instead: u.instead.to_string(),
            }
            .emit();
        }
        // The root and its `.keepwrap` are opened once, for the markers
        // and the store.
        let (runs, opened) = match open_state(&root) {
            Ok(r) => r,
            Err(e) => {
                crate::events::Event::CannotOpenRunning {
                    dir: running_dir(&root).to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                return Ok(Prepared::default());
            }
        };
        let id = Identity::of(
            &launch,
            &opts,
            env,
            &args.share.node_local(),
            engine.rank_flags(&launch),
            &engine.ranks(&launch),
        );
        let share = engine.share(
            &args.share,
            &launch,
            shape,
            args.unifies(profile),
            args.store_max_age,
        );
        let fleet = fleet_of(args, &launch, &read, &root, shape);
        let store = match Store::open_in(&root, shape, opened.0, opened.1) {
            Ok(s) => Some(s),
            Err(e) => {
                crate::events::Event::StoreUnusable {
                    state: STATE_DIR.to_string(),
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                None
            }
        };
        // A launch whose engine keepwrap does not exec itself is offered the
        // set of what its engine was last seen with.
        let offered = match (&seeing, &store) {
            _ if unread.is_some() || redo.is_some() => Fingerprint::of(NOTHING_OFFERED),
            (Seeing::Awaiting(_), Some(s)) => match last_seen::get(s.state_fd(), &read) {
                Some(seen) => {
                    crate::events::Event::OfferedAsSeen {
                        read: read.to_string(),
                        seen: seen.to_string(),
                    }
                    .emit();
                    seen
                }
                None => read.clone(),
            },
            _ => read.clone(),
        };
        let fingerprint = offered;
        // Held until the engine is spawned (end of this function).
        let (_lock, marker) = match take_turn(args, runs, store.as_ref(), &id, &root)? {
            Ok(turn) => turn,
            Err(prepared) => return Ok(*prepared),
        };
        let inputs = launch.redacted_inputs();
        let Some((mut pruned, trash, leftover)) =
            prune(&root, shape, &fingerprint, store.as_ref(), engine, &launch)
        else {
            return Ok(Prepared::hands_off(marker));
        };
        let leftover = leftover.map(|l| remove_leftover_later(&root, shape, l));
        let (after_start, evict) = match &store {
            Some(s) => restore(
                args,
                s,
                &root,
                &fingerprint,
                &inputs,
                &mut pruned,
                unread.is_none() && redo.is_none(),
            ),
            None => (None, None),
        };
        // What prune just looked at is not looked at again.
        let seen = pruned
            .kept
            .iter()
            .zip(&pruned.kept_ids)
            .map(|(p, id)| (p.clone(), (id.ino, id.size, id.mtime.0, id.mtime.1)));
        let watched = if pruned.whole {
            Watcher::seeded_whole(&root, shape, seen)
        } else {
            Watcher::seeded(&root, shape, seen)
        };
        let mut watcher = match watched {
            Ok(w) => w,
            Err(e) => {
                crate::events::Event::WatchFailed {
                    error: e.to_string(),
                }
                .emit();
                return Ok(Prepared::hands_off(marker));
            }
        };
        let mut commit = Committer {
            root,
            shape,
            fingerprint,
            launched,
            kept: pruned.kept,
            unify: args.unifies(profile),
            store,
            lock_timeout: args.lock_timeout,
            profile,
            inputs,
            share,
            fleet,
            settle_at: None,
            signed_at_done: Vec::new(),
            seeing,
            redo,
            saves_every_boot: engine.saves_every_boot() && launch.command().server.is_some(),
        };
        if commit.fingerprint != read {
            // Other nodes and pods find a set by the words: what this
            // launch's engine runs with is not what they say.
            commit.unshare();
        }
        take_share(engine, &mut commit, &mut watcher)?;
        take_fleet(&mut commit, &mut watcher)?;
        engine.before_start(&commit.root, &launch, &mut commit.kept);
        if commit.unify && !pruned.split.is_empty() {
            // Files kept for this launch but signed without being unified
            // (e.g. with `--unify off`, `split`: their directories): the
            // engine loads them as they are, and the sign at done unifies
            // them. Rewriting and signing them again here would make the
            // engine wait for work that grows with the set (seconds at
            // 10,000 files).
            crate::events::Event::KeptNotUnified {
                dirs: pruned.split.len(),
                fingerprint: commit.fingerprint.to_string(),
            }
            .emit();
        }
        let keeper = Keeper {
            marker,
            done,
            watcher,
            probe: None,
            probe_interval: args.probe_interval,
            probe_timeout: args.probe_timeout,
            launched,
            commit: Some(commit),
            session: None,
            exit_unproven: launch.command().exit_unproven_why().is_some(),
            looking: None,
        };
        // Nothing to evict or explain and nothing in the trash: no work, no
        // thread. keepwrap's exit waits (a bounded time) for the eviction
        // and the eviction trash a killed keepwrap left, only.
        let after_start: Option<AfterStart> = if after_start.is_none()
            && evict.is_none()
            && !trash.has_work()
            && leftover.is_none()
        {
            None
        } else {
            Some(Box::new(move |done| {
                if let Some(job) = evict {
                    job();
                }
                if let Some(job) = leftover {
                    job();
                }
                drop(done);
                if let Some(job) = after_start {
                    job();
                }
                trash.run();
            }))
        };
        Ok(Prepared {
            keeper: Some(keeper),
            marker: None,
            after_start,
        })
    }
}

/// Multi-node: when every node has published, take what the share gives
/// this node (SGLang: the union of all nodes' rank files) and sign it.
fn take_share(
    engine: &dyn Engine,
    commit: &mut Committer,
    watcher: &mut Watcher,
) -> Result<(), Stopped> {
    let Some(share) = commit.share.as_ref() else {
        return Ok(());
    };
    let taken = engine.take_share(share, &commit.root, &commit.fingerprint, &commit.kept)?;
    if let Some(signed) = taken {
        // keepwrap's own writes are not landings of the engine.
        watcher.read();
        commit.kept = signed;
    }
    Ok(())
}

/// The fleet: when the root has no set for this launch, restore the
/// fleet's (signed locally, all or nothing).
fn take_fleet(commit: &mut Committer, watcher: &mut Watcher) -> Result<(), Stopped> {
    let Some(fleet) = commit.fleet.as_ref().filter(|_| commit.kept.is_empty()) else {
        return Ok(());
    };
    if let Some(signed) = fleet.restore(&commit.root)? {
        // keepwrap's own writes are not landings of the engine.
        watcher.read();
        commit.kept = signed;
    }
    Ok(())
}

/// The fleet of this launch, when `--fleet` is set (a multi-node launch
/// names itself in the bucket by its cluster fingerprint, alike on every
/// node).
fn fleet_of(
    args: &Settings,
    launch: &Launch,
    fingerprint: &Fingerprint,
    root: &Path,
    shape: Shape,
) -> Option<crate::fleet::Fleet> {
    args.fleet.url.as_ref()?;
    let nodes = crate::engine::of(launch.profile()).node(launch).map(|n| {
        (n.nnodes > 1).then(|| crate::fleet::Nodes {
            rank: n.rank,
            nnodes: n.nnodes,
            cluster: launch.cluster_fingerprint(&args.share.node_local()),
        })
    });
    crate::fleet::Fleet::new(
        &args.fleet,
        launch.profile(),
        fingerprint,
        root,
        shape,
        nodes,
        |k| std::env::var(k).ok(),
    )
}

/// The cache root (created on a first boot) and the done rule of this
/// launch, with the launch's line and its warnings logged; None (logged)
/// when the cache cannot be kept.
fn locate(
    args: &Settings,
    engine: &dyn Engine,
    launch: &Launch,
    env: &[(OsString, OsString)],
    unread: bool,
) -> Option<(PathBuf, Shape, Done)> {
    if engine.left_alone(launch) {
        return None;
    }
    // where the engine writes: its own environment (after `env -i`, `env -u`,
    // a shell's `export`), not keepwrap's
    let engine_env = &launch.command().env[..];
    let root = engine
        .root_of_launch(args.cache_dir.as_deref(), launch)
        .map_err(NoRoot::log)
        .ok()?;
    let shape = engine.shape(engine_env);
    crate::engine::warn_cache_dir(engine, args.cache_dir.as_deref(), launch.argv(), engine_env);
    // An unreadable launch under `--keep auto` has its own line.
    let warnings = launch.warnings();
    let shown = if unread {
        warnings.len().saturating_sub(1)
    } else {
        warnings.len()
    };
    for line in warnings.into_iter().take(shown) {
        crate::events::Event::LaunchWarning {
            line: line.to_string(),
        }
        .emit();
    }
    let done = match engine.done(&args.done, launch) {
        Ok(done) => done.headless_quiet(args.headless_quiet),
        // Nothing is signed for it: pruned all the same.
        Err(_) if unread => Done::Exit,
        Err(e) => {
            crate::events::Event::DoneRuleUnusable {
                error: e.to_string(),
            }
            .emit();
            return None;
        }
    };
    crate::events::set_root(&root);
    crate::events::Event::Launch {
        fingerprint: launch.fingerprint().to_string(),
        profile: launch.profile().as_str().to_string(),
        root: root.to_path_buf(),
        done: done.to_string(),
    }
    .emit();
    engine.note_launch(launch, env);
    ensure_root(&root).then_some((root, shape, done))
}

/// Open (creating) `<root>/.keepwrap/running`, never through a symlink:
/// the markers' directory, with the root and `.keepwrap` as opened.
fn open_state(root: &Path) -> std::io::Result<(Runs, (OwnedFd, OwnedFd))> {
    let root_fd = crate::cache::fsx::open_root(root)?;
    let state = crate::cache::fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, Some(0o755))?;
    let runs = Runs::open_in(state.as_fd())?;
    Ok((runs, (root_fd, state)))
}

/// `<root>/.keepwrap/running`: the launches' markers.
fn running_dir(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(running::RUNNING_DIR)
}

/// The lock (held while the engine is prepared) and this launch's marker.
type Turned = (Option<CacheLock>, Marker);

/// Wait for this launch's turn on the root and leave its marker: the lock
/// (held while the engine is prepared) and the marker when this launch
/// keeps the cache, else what it goes on with (hands-off, or no marker).
/// Err: a stop signal ended the wait.
fn take_turn(
    args: &Settings,
    runs: Runs,
    store: Option<&Store>,
    id: &Identity,
    root: &Path,
) -> Result<Result<Turned, Box<Prepared>>, Stopped> {
    let (lock, turn) = wait_turn(args, &runs, store, id)?;
    let state = match turn {
        Turn::Go(_) => State::Tuning,
        Turn::HandsOff => State::HandsOff,
    };
    let mut marker = match runs.register(id, state) {
        Ok(m) => m,
        Err(e) => {
            crate::events::Event::CannotLeaveMarker {
                dir: running_dir(root).to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            return Ok(Err(Box::default()));
        }
    };
    Ok(match turn {
        Turn::HandsOff => Err(Box::new(Prepared::hands_off(marker))),
        Turn::Go(beside) => {
            marker.ran_beside(beside);
            Ok((lock, marker))
        }
    })
}

/// Remove what this launch must not load, other launches' whole sets into
/// the store when there is one; None (logged) when the root cannot be
/// pruned. The trash the prune filled is emptied once the engine has
/// started (the returned job, run after the spawn), and so is the eviction
/// trash a killed keepwrap left (the last value, when there is any).
pub(super) fn prune(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    store: Option<&Store>,
    engine: &dyn Engine,
    launch: &Launch,
) -> Option<(PruneReport, cache::TrashJob, Option<store::Evicted>)> {
    let refuse = engine.refuse_at_prune(launch);
    let refuse = refuse.as_deref();
    let mut leftover = None;
    let pruned = match store {
        Some(s) => {
            s.recover();
            leftover = Some(s.leftover_trash()).filter(|l| !l.is_empty());
            let r = cache::prune_then_empty(
                root,
                shape,
                fingerprint,
                Some(&mut |fd, set| s.stash(fd, set)),
                refuse,
            );
            s.sync();
            r
        }
        None => cache::prune_then_empty(root, shape, fingerprint, None, refuse),
    };
    match pruned {
        Ok((pruned, trash)) => Some((pruned, trash, leftover)),
        Err(e) => {
            crate::events::Event::CannotPrune {
                root: root.to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            None
        }
    }
}

/// With nothing kept, bring this launch's set back from the store (when it
/// is `offered` one), and count the launch. What runs after the spawn: the line that says why a
/// launch has no cache, when it needs computing, and the eviction past the
/// store's limits (which can delete thousands of files: never before the
/// start).
fn restore(
    args: &Settings,
    s: &Store,
    root: &Path,
    fingerprint: &Fingerprint,
    inputs: &serde_json::Value,
    pruned: &mut PruneReport,
    offered: bool,
) -> (Option<Job>, Option<Job>) {
    let now = crate::clock::now_secs();
    let mut restored = 0;
    if pruned.kept.is_empty() && offered {
        if let Some(r) = s.restore(fingerprint) {
            restored = r.paths.len();
            crate::events::Event::Restored {
                files: restored,
                fingerprint: fingerprint.to_string(),
                signed_ago: store::ago(r.signed_at, now).to_string(),
            }
            .emit();
            pruned.kept = r.paths;
            pruned.kept_ids.clear();
            // The tree changed since prune listed it.
            pruned.whole = false;
        }
    }
    let mut explain = None;
    // Nothing to compare with before any launch signed: no thread (and no
    // record of this launch to touch).
    if pruned.kept.is_empty() && offered {
        if s.has_records() {
            explain = Some(explain_later(root, s.shape(), fingerprint, inputs));
        }
    } else {
        s.touch(fingerprint);
    }
    // An empty store has nothing to evict: no thread for it.
    let mut evict = None;
    if pruned.stored > 0 || s.has_entries() {
        let limits = store::Limits {
            max_size: args.store_max_size,
            max_age: args.store_max_age,
        };
        evict = Some(evict_later(
            root,
            s.shape(),
            limits,
            args.lock_timeout,
            fingerprint,
        ));
    }
    let (removed, stored) = (pruned.removed, pruned.stored);
    Stats::record(|st| {
        st.launches += 1;
        st.removed += removed as u64;
        st.stored += stored as u64;
        st.restored += restored as u64;
    });
    (explain, evict)
}

/// Evict past the store's limits, once the engine has started: under the
/// lock (a short wait: another launch holds it for milliseconds; when it
/// cannot be had, the next launch evicts), each entry out of the store,
/// then deleted after the lock is given back.
fn evict_later(
    root: &Path,
    shape: Shape,
    limits: store::Limits,
    timeout: Duration,
    fingerprint: &Fingerprint,
) -> Job {
    let (root, fingerprint) = (root.to_path_buf(), fingerprint.clone());
    Box::new(move || {
        let Some(s) = Store::open_existing(&root, shape) else {
            return;
        };
        let timeout = timeout.min(EVICT_LOCK_WAIT);
        // Not a change: a point before the eviction's first one, so that
        // a slowed store (`KEEPWRAP_FAILPOINT_DELAY_MS`) slows its start too.
        crate::failpoint::hit("evict");
        let evicted = {
            let Ok(_lock) = crate::root::lock::acquire(
                s.state_fd(),
                timeout,
                &format!("launch {} (eviction)", fingerprint.short()),
            )
            .map_err(|e| match e {
                crate::root::lock::LockError::TimedOut(who) => crate::events::Event::LockGaveUp {
                    timeout,
                    what: "eviction".to_string(),
                    holder: who.to_string(),
                    then: "the store is evicted by the next launch".to_string(),
                }
                .emit(),
                crate::root::lock::LockError::Io(e) => crate::events::Event::LockFailed {
                    what: "eviction".to_string(),
                    error: e.to_string(),
                    then: "the store is evicted by the next launch".to_string(),
                }
                .emit(),
                // Stopped while waiting: the next launch evicts.
                crate::root::lock::LockError::Stopped(_) => {}
            }) else {
                return;
            };
            s.evict(limits, crate::clock::now_secs())
        };
        let n = evicted.entries as u64;
        s.remove_evicted(evicted);
        if n > 0 {
            Stats::record(|st| st.evicted += n);
        }
    })
}

/// Delete, once the engine has started, the eviction trash a killed
/// keepwrap left (it grows with what was left; no lock needed: it is out
/// of the store already).
fn remove_leftover_later(root: &Path, shape: Shape, leftover: store::Evicted) -> Job {
    let root = root.to_path_buf();
    Box::new(move || {
        if let Some(s) = Store::open_existing(&root, shape) {
            s.remove_evicted(leftover);
        }
    })
}

/// What prune keeps for a launch that is offered no set: the files signed
/// for the fingerprint of these bytes, which no launch has (a launch's is
/// the sha256 of its canonical JSON).
const NOTHING_OFFERED: &[u8] = b"keepwrap: no set is offered to this launch";

/// Longest wait for the lock to evict after the start.
const EVICT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The line a launch with no cache logs, computed off the start path: with
/// many arguments the comparison takes time the engine must not wait for.
fn explain_later(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    inputs: &serde_json::Value,
) -> Job {
    let (root, fingerprint, inputs) = (root.to_path_buf(), fingerprint.clone(), inputs.clone());
    Box::new(move || {
        if let Some(s) = Store::open_existing(&root, shape) {
            if let Some(event) = explain::no_cache_event(&s, &fingerprint, &inputs) {
                event.emit();
            }
        }
    })
}

/// A missing root is the normal first boot: create it. Anything else that
/// makes it unusable is a warning, and the launch goes on.
fn ensure_root(root: &Path) -> bool {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() || (m.file_type().is_symlink() && root.is_dir()) => writable(root),
        Ok(_) => {
            crate::events::Event::RootNotADirectory {
                root: root.to_path_buf(),
            }
            .emit();
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir_all(root) {
            Ok(()) => {
                crate::events::Event::RootCreated {
                    root: root.to_path_buf(),
                }
                .emit();
                true
            }
            Err(e) => {
                crate::events::Event::CannotCreateRoot {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                false
            }
        },
        Err(e) => {
            crate::events::Event::CannotUseRoot {
                root: root.to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            false
        }
    }
}

/// A root on a read-only file system can be neither pruned nor signed. One
/// another user can write is said once: nothing in it is ever signed, and
/// prune removes every cache file in it.
fn writable(root: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    match statvfs(root) {
        Ok(st) if st.flags().contains(FsFlags::ST_RDONLY) => {
            crate::events::Event::RootReadOnly {
                root: root.to_path_buf(),
            }
            .emit();
            false
        }
        _ => match cache::root_untrusted(root) {
            Some(why) => {
                crate::events::Event::RootUntrusted {
                    root: root.to_path_buf(),
                    reason: why.to_string(),
                }
                .emit();
                true
            }
            None => true,
        },
    }
}
