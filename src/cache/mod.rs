//! The autotune cache on disk: which files are cache files, their sidecars,
//! what a launch prunes before the engine starts, and how a set of files is
//! signed for a launch once tuning is done.
//!
//! Layout under the root (engine.md):
//! `<flashinfer version>/sm<arch>/<key16>/rank_tp<T>_pp<P>_dp<D>.json`, with
//! keepwrap's sidecar `rank_....launch` beside each rank file.

use std::io;
use std::path::{Path, PathBuf};

/// What prune did, for the summary line and the outcome line.
#[derive(Debug, Default, Clone)]
pub struct PruneReport {
    /// Cache files kept: signed for this launch, bytes unchanged, set whole.
    pub kept: Vec<PathBuf>,
    /// Cache files removed.
    pub removed: usize,
    /// Orphan sidecars and `.autotuner_*.tmp` leftovers removed.
    pub leftovers: usize,
}

/// What sign did.
#[derive(Debug, Default, Clone)]
pub struct SignReport {
    /// Cache files in the signed set (relative to the root).
    pub signed: Vec<PathBuf>,
    /// The set equals the one already recorded: nothing was written.
    pub unchanged: bool,
}

/// Is `rel` (relative to the root) a cache file keepwrap guards: `*.json`,
/// not under a `runs/` directory, not a FlashInfer temp file.
pub fn is_cache_file(_rel: &Path) -> bool {
    unimplemented!()
}

/// Remove every cache file this launch must not load; log one line per
/// decision and one summary line.
pub fn prune(_root: &Path, _fingerprint: &str) -> io::Result<PruneReport> {
    unimplemented!()
}

/// Sign every cache file present under the root for this launch, as one set.
pub fn sign(_root: &Path, _fingerprint: &str) -> io::Result<SignReport> {
    unimplemented!()
}

/// Number of entries (keys other than `_metadata`, `_records`,
/// `_generation`) in a cache file, if it parses as a JSON object.
pub fn entry_count(_path: &Path) -> Option<usize> {
    unimplemented!()
}
