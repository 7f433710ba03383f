//! Statistics kept across launches in `<root>/.keepwrap/stats.json`, as a
//! compiler cache keeps them; shown by `keepwrap status`, reset by
//! `keepwrap status --zero`.
//!
//! A launch counts what it does in memory ([`Stats::record`]) and writes
//! the file once, at the end, under the lock ([`Stats::flush`]), and only
//! when something was counted. Statistics need no durability: the file is
//! replaced atomically (a reader sees the old or the new counts) but never
//! fsynced. The new counts are written into a spare file,
//! `.keepwrap/.stats.json.spare`, which then swaps places with
//! `stats.json` (`renameat2` with `RENAME_EXCHANGE`): after the first
//! launch no file is created or deleted for the statistics (on ext4
//! without a journal, creating an inode scans the recently deleted ones).

use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use crate::digest::Fingerprint;
use serde::{Deserialize, Serialize};

const FILE: &str = "stats.json";
/// The file the next counts are written into before it swaps places with
/// [`FILE`]: it holds the previous counts.
const SPARE: &std::ffi::CStr = c".stats.json.spare";

/// What this launch counted and has not written yet: counters to add, and
/// the boot to credit ([`credit_boot`]).
struct Pending {
    delta: Stats,
    credit: Option<(Fingerprint, Outcome, std::time::Duration)>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

fn pending_mut<R>(f: impl FnOnce(&mut Pending) -> R) -> R {
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    f(p.get_or_insert_with(|| Pending {
        delta: Stats::default(),
        credit: None,
    }))
}

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
    /// Milliseconds of tuning boots measured (launch to done, for launches
    /// that tuned and signed).
    pub tuning_ms: u64,
    /// Milliseconds the cache saved: at each reuse, the launch's last tuning
    /// boot minus this boot (launch to done), when positive.
    pub saved_ms: u64,
    /// Per launch fingerprint, the last tuning boot (milliseconds), so a
    /// reuse can be credited with it. At most [`MAX_TIMED_LAUNCHES`].
    pub tuning_boot_ms: std::collections::BTreeMap<String, u64>,
}

/// How many launches' tuning boot durations `stats.json` remembers.
pub const MAX_TIMED_LAUNCHES: usize = 256;

/// What a commit did, for [`Stats::credit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Tuned,
    Reused,
    Nothing,
}

impl Stats {
    /// Account for the boot of `fp` that just committed, `boot` after its
    /// launch: a tuning boot's duration is remembered for the launch; a
    /// reuse is credited with the launch's last tuning boot minus its own.
    pub fn credit(&mut self, fp: &Fingerprint, outcome: Outcome, boot: std::time::Duration) {
        let ms = u64::try_from(boot.as_millis()).unwrap_or(u64::MAX);
        match outcome {
            Outcome::Tuned => {
                self.tuning_ms = self.tuning_ms.saturating_add(ms);
                if !self.tuning_boot_ms.contains_key(fp.as_str())
                    && self.tuning_boot_ms.len() >= MAX_TIMED_LAUNCHES
                {
                    let first = self.tuning_boot_ms.keys().next().cloned();
                    if let Some(k) = first {
                        self.tuning_boot_ms.remove(&k);
                    }
                }
                self.tuning_boot_ms.insert(fp.to_string(), ms);
            }
            Outcome::Reused => {
                if let Some(tuned) = self.tuning_boot_ms.get(fp.as_str()) {
                    self.saved_ms = self.saved_ms.saturating_add(tuned.saturating_sub(ms));
                }
            }
            Outcome::Nothing => {}
        }
    }

    /// Reuses over launches that reused or tuned, as a percentage.
    pub fn hit_rate(&self) -> Option<f64> {
        let n = self.reuses + self.tunes;
        (n > 0).then(|| 100.0 * self.reuses as f64 / n as f64)
    }
}

/// At commit: count the time a boot launched at `launched` tuned or saved
/// (a reuse when `reused`, a tune when `signed > 0`); written by the next
/// [`Stats::flush`].
pub fn credit_boot(
    _state: BorrowedFd<'_>,
    fp: &Fingerprint,
    reused: bool,
    signed: usize,
    launched: std::time::Instant,
) {
    let boot = launched.elapsed();
    let outcome = match (reused, signed) {
        (true, _) => Outcome::Reused,
        (false, n) if n > 0 => Outcome::Tuned,
        _ => Outcome::Nothing,
    };
    if outcome != Outcome::Nothing {
        pending_mut(|p| p.credit = Some((fp.clone(), outcome, boot)));
    }
}

/// Write `bytes` into the spare file (created the first time: never
/// through a symlink, never a file with another link or of another user)
/// and swap it with the statistics file; the first time, rename it there.
fn swap_in(state: BorrowedFd<'_>, bytes: &[u8]) -> std::io::Result<()> {
    let (file, size) = crate::cache::fsx::open_spare_at(state, SPARE, true)?;
    crate::cache::fsx::overwrite(&file, bytes, size)?;
    drop(file);
    match crate::sys::renameat2_exchange(state, SPARE, c"stats.json") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::cache::fsx::rename_at(state, SPARE, FILE)
        }
        r => r,
    }
}

impl Stats {
    /// The statistics of the state directory `state`: none yet when the
    /// file is missing; a file that is not a regular file (never followed,
    /// never blocked on), larger than 1 MiB or not valid is ignored with one
    /// warning, and counting starts again.
    pub fn load(state: BorrowedFd<'_>) -> Stats {
        let shown = format!("{}/{FILE}", crate::STATE_DIR);
        let then = "statistics start again";
        crate::cache::fsx::read_state_json(state, &shown, FILE, 1 << 20, then).unwrap_or_default()
    }

    /// Replace the file (atomically, not fsynced: see the module docs).
    pub fn save(&self, state: BorrowedFd<'_>) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("stats serialize");
        bytes.push(b'\n');
        match swap_in(state, &bytes) {
            Ok(()) => Ok(()),
            Err(_) => {
                let _ = crate::cache::fsx::unlink_at(state, SPARE);
                crate::cache::fsx::write_atomic_at_with(state, c"stats.json", &bytes, 0o644, false)
            }
        }
    }

    /// Load, change, save (call under the lock).
    pub fn update(state: BorrowedFd<'_>, f: impl FnOnce(&mut Stats)) {
        let mut s = Stats::load(state);
        if s.since == 0 {
            s.since = crate::clock::now_secs();
        }
        f(&mut s);
        if let Err(e) = s.save(state) {
            // Best effort: a full or read-only disk has been warned about
            // by the cache work itself.
            crate::events::Event::CannotWriteStats {
                file: FILE.to_string(),
                error: e.to_string(),
            }
            .emit();
        }
    }

    /// Count, in memory, what this launch did (`f` adds to the counters);
    /// written by the next [`Stats::flush`].
    pub fn record(f: impl FnOnce(&mut Stats)) {
        pending_mut(|p| f(&mut p.delta));
    }

    /// Was anything counted since the last flush?
    pub fn pending() -> bool {
        PENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|p| p.delta != Stats::default() || p.credit.is_some())
    }

    /// Add what was counted to the file (call under the lock); nothing is
    /// read or written when nothing was counted.
    pub fn flush(state: BorrowedFd<'_>) {
        let Some(p) = PENDING.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        if p.delta == Stats::default() && p.credit.is_none() {
            return;
        }
        Stats::update(state, |s| {
            s.add(&p.delta);
            if let Some((fp, outcome, boot)) = &p.credit {
                s.credit(fp, *outcome, *boot);
            }
        });
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
    /// The launches' measured tuning boots are kept: they are not counters,
    /// and a reuse after the reset is still credited with its launch's.
    pub fn zero(state: BorrowedFd<'_>) -> std::io::Result<()> {
        Stats {
            since: crate::clock::now_secs(),
            tuning_boot_ms: Stats::load(state).tuning_boot_ms,
            ..Stats::default()
        }
        .save(state)
    }
}

#[cfg(test)]
mod credit_tests {
    use super::*;
    use std::time::Duration;

    fn fp(s: &str) -> Fingerprint {
        Fingerprint::of(s.as_bytes())
    }

    #[test]
    fn a_reuse_is_credited_with_the_tuning_boot_minus_its_own() {
        let mut s = Stats::default();
        s.credit(&fp("a"), Outcome::Reused, Duration::from_secs(1));
        assert_eq!(s.saved_ms, 0, "no tuning boot measured yet");
        s.credit(&fp("a"), Outcome::Tuned, Duration::from_secs(90));
        s.credit(&fp("a"), Outcome::Reused, Duration::from_secs(30));
        s.credit(&fp("a"), Outcome::Reused, Duration::from_secs(100));
        s.credit(&fp("b"), Outcome::Reused, Duration::from_secs(1));
        assert_eq!((s.tuning_ms, s.saved_ms), (90_000, 60_000));
    }

    #[test]
    fn the_remembered_launches_are_bounded() {
        let mut s = Stats::default();
        for i in 0..(MAX_TIMED_LAUNCHES + 10) {
            s.credit(
                &fp(&format!("{i:04}")),
                Outcome::Tuned,
                Duration::from_millis(5),
            );
        }
        assert_eq!(s.tuning_boot_ms.len(), MAX_TIMED_LAUNCHES);
        assert!(s
            .tuning_boot_ms
            .contains_key(fp(&format!("{:04}", MAX_TIMED_LAUNCHES + 9)).as_str()));
    }
}
