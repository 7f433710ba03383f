//! `<root>/.keepwrap/fleet.json`: the last restore and publish of the
//! fleet, with their outcomes, and the last error with its key and HTTP
//! status, for `keepwrap status`. Best effort: a state that cannot be
//! written is left as it was. Read and written as every state file is
//! (never through a symlink, never blocking on a FIFO, at most 1 MiB).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::cache::fsx;
use crate::clock::now_secs as now;

use serde::{Deserialize, Serialize};

use super::s3::Failure;

pub const STATE_FILE: &str = "fleet.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetState {
    #[serde(default)]
    pub last_restore: Option<Outcome>,
    #[serde(default)]
    pub last_publish: Option<Outcome>,
    #[serde(default)]
    pub last_error: Option<LastError>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Outcome {
    /// Seconds since the epoch.
    pub at: u64,
    pub outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LastError {
    pub at: u64,
    pub key: String,
    pub status: Option<u16>,
    pub error: String,
}

/// `<root>/.keepwrap` opened as a state directory.
fn open_state(root: &Path) -> Option<OwnedFd> {
    let root = fsx::open_root(root).ok()?;
    fsx::open_state_dir_at(root.as_fd(), crate::STATE_DIR, None).ok()
}

/// The state of the state directory `dir`: None when there is none; one
/// that is not a regular file, too large or not valid is ignored with one
/// warning.
fn read_at(dir: &OwnedFd) -> Option<FleetState> {
    let shown = format!("{}/{STATE_FILE}", crate::STATE_DIR);
    fsx::read_state_json(dir.as_fd(), &shown, STATE_FILE, 1 << 20, "it is not used")
}

impl FleetState {
    /// The state of the cache root `root`.
    pub fn read(root: &Path) -> Option<FleetState> {
        read_at(&open_state(root)?)
    }

    fn error(&mut self, f: Option<&Failure>) {
        if let Some(f) = f {
            self.last_error = Some(LastError {
                at: now(),
                key: f.key.clone(),
                status: f.status,
                error: f.what.clone(),
            });
        }
    }

    pub fn restored(&mut self, outcome: &str, f: Option<&Failure>) {
        self.last_restore = Some(Outcome {
            at: now(),
            outcome: outcome.to_string(),
        });
        self.error(f);
    }

    pub fn published(&mut self, outcome: &str, f: Option<&Failure>) {
        self.last_publish = Some(Outcome {
            at: now(),
            outcome: outcome.to_string(),
        });
        self.error(f);
    }
}

/// Read, change and write the state of the cache root `root` (a
/// temporary file renamed over it).
pub fn update(root: &Path, f: impl FnOnce(&mut FleetState)) {
    let Some(dir) = open_state(root) else {
        return;
    };
    let mut s = read_at(&dir).unwrap_or_default();
    f(&mut s);
    let Ok(bytes) = serde_json::to_vec_pretty(&s) else {
        return;
    };
    if let Ok(name) = std::ffi::CString::new(STATE_FILE) {
        let _ = fsx::write_atomic_at_with(dir.as_fd(), &name, &bytes, 0o644, false);
    }
}
