//! Statistics kept across launches in `<root>/.keepwrap/stats.json`, as a
//! compiler cache keeps them; shown by `keepwrap status`, reset by
//! `keepwrap status --zero`.
//!
//! A launch counts what it does in memory ([`Stats::record`]) and writes
//! the file once, at the end, under the lock ([`Stats::flush`]), and only
//! when something was counted. Statistics need no durability: the file is
//! replaced atomically (a reader sees the old or the new counts) but never
//! fsynced.

use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

const FILE: &str = "stats.json";

/// What this launch counted and has not written yet.
static PENDING: Mutex<Stats> = Mutex::new(Stats {
    since: 0,
    launches: 0,
    reuses: 0,
    tunes: 0,
    removed: 0,
    stored: 0,
    restored: 0,
    evicted: 0,
});

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Since when they are counted (unix seconds).
    pub since: u64,
    /// Launches that kept the cache (not `--disable`, not timed out).
    pub launches: u64,
    /// Launches that reused a signed set (in place or restored).
    pub reuses: u64,
    /// Launches that tuned and signed.
    pub tunes: u64,
    /// Cache files removed by prune.
    pub removed: u64,
    /// Cache files moved into the store.
    pub stored: u64,
    /// Cache files restored from the store.
    pub restored: u64,
    /// Store entries evicted.
    pub evicted: u64,
}

impl Stats {
    pub fn load(state: BorrowedFd<'_>) -> Stats {
        let mut buf = Vec::new();
        crate::cache::fsx::read_at(state, FILE, &mut buf, 1 << 20)
            .ok()
            .and_then(|_| serde_json::from_slice(&buf).ok())
            .unwrap_or_default()
    }

    /// Replace the file (atomically, not fsynced: see the module docs).
    pub fn save(&self, state: BorrowedFd<'_>) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("stats serialize");
        bytes.push(b'\n');
        crate::cache::fsx::write_atomic_at_with(state, c"stats.json", &bytes, 0o644, false)
    }

    /// Load, change, save (call under the lock).
    pub fn update(state: BorrowedFd<'_>, f: impl FnOnce(&mut Stats)) {
        let mut s = Stats::load(state);
        if s.since == 0 {
            s.since = crate::store::now_secs();
        }
        f(&mut s);
        if let Err(e) = s.save(state) {
            // Best effort: a full or read-only disk has been warned about
            // by the cache work itself.
            tracing::debug!("cannot write {}/{FILE}: {e}", crate::store::STATE_DIR);
        }
    }

    /// Count, in memory, what this launch did (`f` adds to the counters);
    /// written by the next [`Stats::flush`].
    pub fn record(f: impl FnOnce(&mut Stats)) {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut p);
    }

    /// Was anything counted since the last flush?
    pub fn pending() -> bool {
        *PENDING.lock().unwrap_or_else(|e| e.into_inner()) != Stats::default()
    }

    /// Add what was counted to the file (call under the lock); nothing is
    /// read or written when nothing was counted.
    pub fn flush(state: BorrowedFd<'_>) {
        let delta = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
        if delta == Stats::default() {
            return;
        }
        Stats::update(state, |s| s.add(&delta));
    }

    fn add(&mut self, d: &Stats) {
        self.launches += d.launches;
        self.reuses += d.reuses;
        self.tunes += d.tunes;
        self.removed += d.removed;
        self.stored += d.stored;
        self.restored += d.restored;
        self.evicted += d.evicted;
    }

    /// Start counting again from now.
    pub fn zero(state: BorrowedFd<'_>) -> std::io::Result<()> {
        Stats {
            since: crate::store::now_secs(),
            ..Stats::default()
        }
        .save(state)
    }
}
