//! Events of what launches share in a cache root: the cache lock, the
//! running markers, the statistics.

use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use super::secs;
use super::Shown;
use crate::STATE_DIR;

const TARGET: &str = "keepwrap::root";

pub fn lock_waiting(timeout: Duration, holder: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "lock_waiting",
        timeout_s = secs(timeout),
        holder = %holder,
        "waiting up to {} for the cache lock {STATE_DIR}/lock, held by {holder}",
        humantime::format_duration(timeout)
    );
}

pub fn lock_taken(waited: Duration) {
    tracing::info!(
        target: TARGET,
        event = "lock_taken",
        waited_s = secs(waited),
        "took the cache lock after waiting {:.1} s",
        secs(waited)
    );
}

/// A marker another user put among the running markers
/// (`.keepwrap/running/NAME`).
pub fn foreign_marker(marker: &str, uid: u32) {
    tracing::warn!(
        target: TARGET,
        event = "foreign_marker",
        marker,
        uid,
        "ignored the marker {marker}: owned by another user (uid {uid}); only this user's (or root's) launches are waited for or left alone"
    );
}

pub fn cannot_update_marker(marker: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_update_marker",
        marker,
        error = %error,
        "cannot update this launch's marker {marker}: {error}"
    );
}

pub fn cannot_pass_marker(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_pass_marker",
        error = %error,
        "cannot pass this launch's marker to the engine: {error}"
    );
}

/// Best effort: a full or read-only disk is warned about by the cache work.
pub fn cannot_write_stats(file: &str, error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "cannot_write_stats",
        file,
        error = %error,
        "cannot write {STATE_DIR}/{file}: {error}"
    );
}

/// `--cache-dir` is not where the engine writes.
pub fn cache_dir_not_engines(dir: &Path, engine: &Path, from: &str) {
    tracing::warn!(
        target: TARGET,
        event = "cache_dir_not_engines",
        dir = %Shown(dir),
        engine = %Shown(engine),
        "--cache-dir {} is not under the engine's cache directory {} ({from}): the engine writes its autotune cache there, so keepwrap does not protect it; set SGLANG_CACHE_DIR instead (one per pod: SGLANG_CACHE_DIR=/cache/$(POD_NAME))",
        Shown(dir),
        Shown(engine)
    );
}
