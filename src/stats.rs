//! Statistics kept across launches in `<root>/.keepwrap/stats.json`, as a
//! compiler cache keeps them; updated under the lock, shown by `keepwrap
//! status`, reset by `keepwrap status --zero`.

use std::os::fd::BorrowedFd;

use serde::{Deserialize, Serialize};

const FILE: &str = "stats.json";

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
    pub fn credit(&mut self, fp: &str, outcome: Outcome, boot: std::time::Duration) {
        let ms = u64::try_from(boot.as_millis()).unwrap_or(u64::MAX);
        match outcome {
            Outcome::Tuned => {
                self.tuning_ms = self.tuning_ms.saturating_add(ms);
                if !self.tuning_boot_ms.contains_key(fp)
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
                if let Some(tuned) = self.tuning_boot_ms.get(fp) {
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

/// At commit, under the lock: count the time a boot launched at `launched`
/// tuned or saved (a reuse when `reused`, a tune when `signed > 0`).
pub fn credit_boot(
    state: BorrowedFd<'_>,
    fp: &str,
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
        Stats::update(state, |st| st.credit(fp, outcome, boot));
    }
}

impl Stats {
    pub fn load(state: BorrowedFd<'_>) -> Stats {
        let mut buf = Vec::new();
        crate::cache::fsx::read_at(state, FILE, &mut buf, 1 << 20)
            .ok()
            .and_then(|_| serde_json::from_slice(&buf).ok())
            .unwrap_or_default()
    }

    pub fn save(&self, state: BorrowedFd<'_>) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("stats serialize");
        bytes.push(b'\n');
        crate::cache::fsx::write_atomic_at(state, c"stats.json", &bytes, 0o644)?;
        crate::cache::fsx::fsync_dir(state)
    }

    /// Load, change, save (call under the lock).
    pub fn update(state: BorrowedFd<'_>, f: impl FnOnce(&mut Stats)) {
        let mut s = Stats::load(state);
        if s.since == 0 {
            s.since = crate::store::now_secs();
        }
        f(&mut s);
        if let Err(e) = s.save(state) {
            tracing::warn!("cannot write {}/{FILE}: {e}", crate::store::STATE_DIR);
        }
    }

    /// Start counting again from now.
    /// The launches' measured tuning boots are kept: they are not counters,
    /// and a reuse after the reset is still credited with its launch's.
    pub fn zero(state: BorrowedFd<'_>) -> std::io::Result<()> {
        Stats {
            since: crate::store::now_secs(),
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

    #[test]
    fn a_reuse_is_credited_with_the_tuning_boot_minus_its_own() {
        let mut s = Stats::default();
        s.credit("a", Outcome::Reused, Duration::from_secs(1));
        assert_eq!(s.saved_ms, 0, "no tuning boot measured yet");
        s.credit("a", Outcome::Tuned, Duration::from_secs(90));
        s.credit("a", Outcome::Reused, Duration::from_secs(30));
        s.credit("a", Outcome::Reused, Duration::from_secs(100));
        s.credit("b", Outcome::Reused, Duration::from_secs(1));
        assert_eq!((s.tuning_ms, s.saved_ms), (90_000, 60_000));
    }

    #[test]
    fn the_remembered_launches_are_bounded() {
        let mut s = Stats::default();
        for i in 0..(MAX_TIMED_LAUNCHES + 10) {
            s.credit(&format!("{i:04}"), Outcome::Tuned, Duration::from_millis(5));
        }
        assert_eq!(s.tuning_boot_ms.len(), MAX_TIMED_LAUNCHES);
        assert!(s
            .tuning_boot_ms
            .contains_key(&format!("{:04}", MAX_TIMED_LAUNCHES + 9)));
    }
}
