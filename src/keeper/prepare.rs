//! Before the engine starts, in order: find the cache root and the done
//! rule, take this launch's turn on the root and leave its marker (those
//! two in `place.rs`), prune what it must not load (stashing other
//! launches' sets in the store), bring its own set back from the store,
//! start the watch, take the share's union. Each step that fails logs why
//! and the launch goes on, hands-off or without a keeper.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Instant;

use crate::cache::{self, PruneReport, Shape};
use crate::digest::Fingerprint;
use crate::done::watch::Watcher;
use crate::engine::fingerprint::Launch;
use crate::engine::Engine;
use crate::launch::Command;
use crate::root::running::Marker;
use crate::stops::Stopped;
use crate::store::{self, Store};
use crate::STATE_DIR;

use super::commit::Committer;
use super::place::{locate, open_state, take_turn, Place};
use super::read::{Read, Words};
use super::restore::{after_start, remove_leftover_later, restore};
use super::{Before, Keeper, Keeping, Prepared, Settings, Stage};

impl Keeper {
    /// Fingerprint the launch (`command`: `argv` as read by
    /// [`Settings::keeps`]), make sure the root exists, wait for any other
    /// launch on the root that is still tuning, prune what this launch must
    /// not load, and start watching. Supervised or hands-off when the cache
    /// cannot be kept this time (the reason is logged); the launch goes on.
    /// Err: a stop signal came before the start. With it, the variables
    /// the engine is started with on top of keepwrap's environment (where
    /// keepwrap keeps what the engine writes); none for a launch only
    /// supervised.
    pub fn prepare(
        args: &Settings,
        command: Command,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<(Prepared, Vec<(OsString, OsString)>), Stopped> {
        let launched = Instant::now();
        let read = Read::of(args, command, argv, env);
        let set = read.set.clone();
        let prepared = Self::prepare_read(args, read, argv, launched)?;
        // Hands-off, the engine writes where it would without keepwrap: a
        // root of keepwrap's may hold what another launch is tuning, and
        // an engine whose cache is shared by design (a store keyed by
        // shape) would load it.
        let set = match prepared {
            Prepared::Supervised | Prepared::HandsOff(_) => Vec::new(),
            Prepared::Keeping(_) => set,
        };
        Ok((prepared, set))
    }

    fn prepare_read(
        args: &Settings,
        read: Read,
        argv: &[OsString],
        launched: Instant,
    ) -> Result<Prepared, Stopped> {
        if let Some(why) = &read.unkept {
            crate::events::Event::SupervisingOnly {
                reason: "engine_variable".to_string(),
                why: why.clone(),
            }
            .emit();
            return Ok(Prepared::Supervised);
        }
        let engine = crate::engine::of(read.launch.profile());
        let unread = matches!(read.words, Words::Unreadable(_));
        let Some(place) = locate(args, engine, &read.launch, unread) else {
            return Ok(Prepared::Supervised);
        };
        read.say(argv);
        // The root and its `.keepwrap` are opened once, for the markers
        // and the store.
        let Some((runs, (root_fd, state_fd))) = open_state(&place.root) else {
            return Ok(Prepared::Supervised);
        };
        let id = read.identity(args, engine);
        let share = engine.share(
            &args.share,
            &read.launch,
            place.shape,
            args.unifies(read.launch.profile()),
            args.store_max_age,
        );
        let fleet = fleet_of(args, &read.launch, &read.fingerprint, &place);
        let store = open_store(&place, root_fd, state_fd);
        let sets = Sets {
            fingerprint: read.offer(store.as_ref()),
            store,
            share,
            fleet,
        };
        // Held until the engine is spawned (end of this function).
        let (_lock, marker) = match take_turn(args, runs, sets.store.as_ref(), &id, &place.root)? {
            Ok(turn) => turn,
            Err(prepared) => return Ok(prepared),
        };
        keep(args, engine, read, place, sets, marker, launched)
    }
}

/// This launch's turn taken: prune the tree for the set offered, bring it
/// back from the store, start the watch, take the share's and the fleet's
/// sets, and hand the commit work to the keeper; hands-off (logged) when
/// the tree cannot be pruned or watched.
fn keep(
    args: &Settings,
    engine: &dyn Engine,
    read: Read,
    place: Place,
    sets: Sets,
    marker: Marker,
    launched: Instant,
) -> Result<Prepared, Stopped> {
    let Place { root, shape, done } = place;
    let launch = &read.launch;
    let inputs = launch.redacted_inputs();
    // What the engine's rule refuses: at the prune, and again at done (a
    // file the next start would remove is never signed).
    let refuse = engine.refuse_at_prune(launch);
    // A cold start keeps nothing: the launch's own set is pruned as
    // another launch's would be, into the store.
    let cold = args.start_cold;
    let keep_for = if cold {
        Fingerprint::default()
    } else {
        sets.fingerprint.clone()
    };
    let pinning = super::pin::pinning(args, engine, launch);
    super::pin::at_start(&root, shape, &sets.fingerprint, pinning);
    let Some((mut pruned, trash, leftover)) = prune(
        &root,
        shape,
        &keep_for,
        sets.store.as_ref(),
        refuse.as_ref(),
    ) else {
        return Ok(Prepared::hands_off(marker));
    };
    if cold {
        put_aside(sets.store.as_ref(), &sets.fingerprint);
    }
    let leftover = leftover.map(|l| remove_leftover_later(&root, shape, l));
    let (explain, evict) = match &sets.store {
        Some(s) => restore(
            args,
            s,
            &root,
            &sets.fingerprint,
            &inputs,
            &mut pruned,
            read.words.offered() && !cold,
        ),
        None => (None, None),
    };
    let Some(mut watcher) = watch(&root, shape, &pruned) else {
        return Ok(Prepared::hands_off(marker));
    };
    let mut commit = Committer {
        root,
        shape,
        fingerprint: sets.fingerprint,
        launched,
        kept: pruned.kept,
        unify: args.unifies(launch.profile()),
        store: sets.store,
        lock_timeout: args.lock_timeout,
        profile: launch.profile(),
        inputs,
        share: sets.share,
        fleet: sets.fleet,
        settle_at: None,
        signed_at_done: Vec::new(),
        seeing: read.seeing,
        redo: read.words.redo(),
        saves_every_boot: engine.saves_every_boot(launch),
        refuse,
        cold,
        pin: super::pin::State::Off,
    };
    let split = pruned.split.len();
    take_sets(
        engine,
        launch,
        &read.fingerprint,
        &mut commit,
        &mut watcher,
        split,
    )?;
    commit.pin = super::pin::begin(
        &commit.root,
        shape,
        &commit.fingerprint,
        &commit.kept,
        pinning,
    );
    let before = Before {
        committer: commit,
        done,
        probe_interval: args.probe_interval,
        probe_timeout: args.probe_timeout,
        exit_unproven: crate::engine::exit_unproven_why(launch.command()).is_some(),
    };
    let keeper = Keeper {
        marker,
        watcher,
        launched,
        stage: Stage::Before(Box::new(before)),
    };
    Ok(Prepared::Keeping(Box::new(Keeping {
        keeper,
        after_start: after_start(explain, evict, trash, leftover),
    })))
}

/// Where this launch's set may come from besides the tree, and the
/// fingerprint of the set it is offered.
struct Sets {
    fingerprint: Fingerprint,
    store: Option<Store>,
    share: Option<crate::share::Share>,
    fleet: Option<crate::fleet::Fleet>,
}

/// The store in the root's `.keepwrap` (None, logged, when it cannot be
/// used).
fn open_store(place: &Place, root_fd: OwnedFd, state_fd: OwnedFd) -> Option<Store> {
    let root = &place.root;
    match Store::open_in(root, place.shape, root_fd, state_fd) {
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
    }
}

/// Start watching the tree as prune left it (what prune just looked at is
/// not looked at again); None (logged) when the watch cannot start.
fn watch(root: &Path, shape: Shape, pruned: &PruneReport) -> Option<Watcher> {
    let seen = pruned
        .kept
        .iter()
        .zip(&pruned.kept_ids)
        .map(|(p, id)| (p.clone(), (id.ino, id.size, id.mtime.0, id.mtime.1)));
    let watched = if pruned.whole {
        Watcher::seeded_whole(root, shape, seen)
    } else {
        Watcher::seeded(root, shape, seen)
    };
    match watched {
        Ok(w) => Some(w),
        Err(e) => {
            crate::events::Event::WatchFailed {
                error: e.to_string(),
            }
            .emit();
            None
        }
    }
}

/// The sets taken before the start: none from other nodes and pods when
/// the set offered is not of the launch's words (`read`) or the start is
/// cold, else the share's union and the fleet's; then the engine's own preparation of the files
/// kept. `split`: how many directories of them were signed without being
/// unified.
fn take_sets(
    engine: &dyn Engine,
    launch: &Launch,
    read: &Fingerprint,
    commit: &mut Committer,
    watcher: &mut Watcher,
    split: usize,
) -> Result<(), Stopped> {
    if commit.fingerprint != *read {
        // Other nodes and pods find a set by the words: what this
        // launch's engine runs with is not what they say.
        commit.unshare();
    }
    if !commit.cold {
        take_share(engine, commit, watcher)?;
        take_fleet(commit, watcher)?;
    }
    engine.before_start(&commit.root, launch, &mut commit.kept);
    if commit.unify && split > 0 {
        // Files kept for this launch but signed without being unified
        // (e.g. with `--unify off`, `split`: their directories): the
        // engine loads them as they are, and the sign at done unifies
        // them. Rewriting and signing them again here would make the
        // engine wait for work that grows with the set (seconds at
        // 10,000 files).
        crate::events::Event::KeptNotUnified {
            dirs: split,
            fingerprint: commit.fingerprint.to_string(),
        }
        .emit();
    }
    Ok(())
}

/// `--start-cold`, once prune moved the launch's set (signed for
/// `fingerprint`) out of the tree: one line says where it is.
fn put_aside(store: Option<&Store>, fingerprint: &Fingerprint) {
    let files = store
        .and_then(|s| s.manifest(fingerprint))
        .map_or(0, |m| m.set.members.len());
    crate::events::Event::StartCold {
        files,
        fingerprint: fingerprint.to_string(),
        put_aside: store.is_some(),
    }
    .emit();
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
    place: &Place,
) -> Option<crate::fleet::Fleet> {
    args.fleet.url.as_ref()?;
    let nodes = crate::engine::of(launch.profile()).node(launch).map(|n| {
        (n.nnodes > 1).then(|| crate::fleet::Nodes {
            rank: n.rank,
            nnodes: n.nnodes,
            cluster: launch
                .cluster_fingerprint(&crate::engine::fingerprint::node_local(&args.share)),
        })
    });
    crate::fleet::Fleet::new(
        &args.fleet,
        launch.profile(),
        fingerprint,
        &place.root,
        place.shape,
        nodes,
        |k| std::env::var(k).ok(),
    )
}

/// Remove what this launch must not load (`refuse`: what its engine's rule
/// refuses of its own set), other launches' whole sets into
/// the store when there is one; None (logged) when the root cannot be
/// pruned. The trash the prune filled is emptied once the engine has
/// started (the returned job, run after the spawn), and so is the eviction
/// trash a killed keepwrap left (the last value, when there is any).
pub(super) fn prune(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    store: Option<&Store>,
    refuse: Option<&crate::engine::Refuse>,
) -> Option<(PruneReport, cache::TrashJob, Option<store::Evicted>)> {
    let refuse = refuse.map(|r| &**r as &dyn Fn(&str) -> Option<String>);
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
