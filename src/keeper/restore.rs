//! A launch's set brought back from the store before the start, and the
//! work run after the spawn: the eviction past the store's limits, the
//! trash, and the line that says why a launch has no cache.

use std::path::Path;
use std::time::Duration;

use crate::cache::{self, PruneReport, Shape};
use crate::digest::Fingerprint;
use crate::root::stats::Stats;
use crate::store::{self, Store};

use super::{explain, AfterStart, Settings};

/// One part of the work run after the engine's spawn.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The work run after the spawn: the eviction, the eviction trash a killed
/// keepwrap left, then (keepwrap's exit no longer waits) the line that says
/// why a launch has no cache and the prune's trash. Nothing to evict or
/// explain and nothing in the trash: no work, no thread. keepwrap's exit
/// waits (a bounded time) for the eviction and the eviction trash a killed
/// keepwrap left, only.
pub(super) fn after_start(
    explain: Option<Job>,
    evict: Option<Job>,
    trash: cache::TrashJob,
    leftover: Option<Job>,
) -> Option<AfterStart> {
    if explain.is_none() && evict.is_none() && !trash.has_work() && leftover.is_none() {
        return None;
    }
    Some(Box::new(move |done| {
        if let Some(job) = evict {
            job();
        }
        if let Some(job) = leftover {
            job();
        }
        drop(done);
        if let Some(job) = explain {
            job();
        }
        trash.run();
    }))
}

/// With nothing kept, bring this launch's set back from the store (when it
/// is `offered` one), and count the launch. What runs after the spawn: the line that says why a
/// launch has no cache, when it needs computing, and the eviction past the
/// store's limits (which can delete thousands of files: never before the
/// start).
pub(super) fn restore(
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
            args.start_cold,
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
/// then deleted after the lock is given back. `cold`: the launch's own
/// set, put aside until this boot signs a new one, is spared.
fn evict_later(
    root: &Path,
    shape: Shape,
    limits: store::Limits,
    timeout: Duration,
    fingerprint: &Fingerprint,
    cold: bool,
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
            let spare = cold.then_some(fingerprint.as_str());
            s.evict(limits, crate::clock::now_secs(), spare)
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
pub(super) fn remove_leftover_later(root: &Path, shape: Shape, leftover: store::Evicted) -> Job {
    let root = root.to_path_buf();
    Box::new(move || {
        if let Some(s) = Store::open_existing(&root, shape) {
            s.remove_evicted(leftover);
        }
    })
}

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
