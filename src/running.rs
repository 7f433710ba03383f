//! Which launches are using a cache root right now, so that two *different*
//! launches running at the same time on one root never trust each other's
//! files. The lock serialises keepwrap's own work; the engines, though, run
//! side by side and write the same rank-file paths (the engine's key leaves
//! out settings such as `--chunked-prefill-size`). So every launch leaves a
//! marker, `.keepwrap/running/<pid>-<start>`, holding its fingerprint, and
//! keeps an exclusive `flock` on it for as long as it lives: a marker whose
//! lock can be taken belongs to a launch that is gone.
//!
//! A launch that finds another fingerprint's launch alive keeps nothing; a
//! launch about to sign refuses when a launch of another fingerprint is
//! alive, or started after it did (it ran alongside).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::STATE_DIR;

/// Markers of launches that are gone are removed after this long.
const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// This launch's marker; the lock is released when keepwrap exits.
pub struct Marker {
    _file: File,
    dir: PathBuf,
    name: String,
    fingerprint: String,
    started: u128,
}

/// Another launch seen on the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Other {
    pub pid: u32,
    pub fingerprint: String,
    pub alive: bool,
}

impl std::fmt::Display for Other {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fp8: String = self.fingerprint.chars().take(8).collect();
        let state = if self.alive { "running" } else { "ended" };
        write!(f, "launch {fp8}... (pid {}, {state})", self.pid)
    }
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

impl Marker {
    /// Leave this launch's marker under `root`, locked for its lifetime.
    pub fn register(root: &Path, fingerprint: &str) -> io::Result<Marker> {
        let dir = root.join(STATE_DIR).join("running");
        crate::cache::fsx::state_dir(root, "running")?;
        let started = now_nanos();
        let name = format!("{}-{started}", std::process::id());
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(&name))?;
        file.try_lock()
            .map_err(|e| io::Error::other(format!("cannot lock {name}: {e}")))?;
        writeln!(file, "{fingerprint} {started}")?;
        let marker = Marker {
            _file: file,
            dir,
            name,
            fingerprint: fingerprint.to_string(),
            started,
        };
        marker.remove_stale();
        Ok(marker)
    }

    /// Launches of another fingerprint alive now, or started after this one.
    pub fn others(&self) -> Vec<Other> {
        let mut out = Vec::new();
        for (name, fp, started) in self.markers() {
            if name == self.name || fp == self.fingerprint {
                continue;
            }
            let alive = is_alive(&self.dir.join(&name));
            if alive || started >= self.started {
                let pid = name
                    .split('-')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                out.push(Other {
                    pid,
                    fingerprint: fp,
                    alive,
                });
            }
        }
        out
    }

    /// `(name, fingerprint, start)` of every readable marker.
    fn markers(&self) -> Vec<(String, String, u128)> {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let text = fs::read_to_string(e.path()).ok()?;
                let (fp, started) = text.trim().split_once(' ')?;
                Some((name, fp.to_string(), started.parse().ok()?))
            })
            .collect()
    }

    fn remove_stale(&self) {
        let horizon = self.started.saturating_sub(STALE_AFTER.as_nanos());
        for (name, _, started) in self.markers() {
            let path = self.dir.join(&name);
            if started < horizon && !is_alive(&path) {
                let _ = fs::remove_file(path);
            }
        }
    }
}

/// Is the launch that owns this marker still holding its lock?
fn is_alive(path: &Path) -> bool {
    match File::open(path) {
        Ok(f) => f.try_lock().is_err(),
        Err(_) => false,
    }
}
