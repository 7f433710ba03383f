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
}

impl Stats {
    /// The statistics of the state directory `state`: none yet when the
    /// file is missing; a file that is not a regular file (never followed,
    /// never blocked on), larger than 1 MiB or not valid is ignored with one
    /// warning, and counting starts again.
    pub fn load(state: BorrowedFd<'_>) -> Stats {
        use crate::cache::fsx;
        let shown = format!("{}/{FILE}", fsx::STATE_DIR);
        let then = "statistics start again";
        match fsx::read_state_file(state, FILE, 1 << 20) {
            Ok(None) => Stats::default(),
            Ok(Some(buf)) => serde_json::from_slice(&buf).unwrap_or_else(|e| {
                let e =
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not valid: {e}"));
                fsx::warn_state_file(&shown, &e, then);
                Stats::default()
            }),
            Err(e) => {
                fsx::warn_state_file(&shown, &e, then);
                Stats::default()
            }
        }
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
    pub fn zero(state: BorrowedFd<'_>) -> std::io::Result<()> {
        Stats {
            since: crate::store::now_secs(),
            ..Stats::default()
        }
        .save(state)
    }
}
