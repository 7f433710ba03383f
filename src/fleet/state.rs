//! `<root>/.keepwrap/fleet.json`: the last restore and publish of the
//! fleet, with their outcomes, and the last error with its key and HTTP
//! status, for `keepwrap status`. Best effort: a state that cannot be
//! written is left as it was.

use std::path::Path;

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

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl FleetState {
    pub fn read(state_dir: &Path) -> Option<FleetState> {
        let bytes = std::fs::read(state_dir.join(STATE_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
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

/// Read, change and write the state (a temporary file renamed over it).
pub fn update(state_dir: &Path, f: impl FnOnce(&mut FleetState)) {
    let mut s = FleetState::read(state_dir).unwrap_or_default();
    f(&mut s);
    let Ok(bytes) = serde_json::to_vec_pretty(&s) else {
        return;
    };
    let tmp = state_dir.join(format!(".{STATE_FILE}.{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok()
        && std::fs::rename(&tmp, state_dir.join(STATE_FILE)).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}
