//! Multi-node launches: a directory every node mounts (`--share DIR`: NFS,
//! CephFS, a ReadWriteMany volume) through which the nodes of one engine
//! agree on one union of all their rank files, so SGLang's stock entry gate
//! keeps the cache when every rank is on a different node.
//!
//! # Layout
//!
//! `<share>/keepwrap/<cluster fingerprint>/node<R>/` holds node R's signed
//! rank files under their paths relative to the cache root
//! (`<version>/sm<arch>/<key16>/rank_tp<T>_pp<P>_dp<D>.json`) and
//! `manifest.json` ([`Manifest`]): the node's place around a set manifest
//! of the cache's one format, which lists them with their sha256. The
//! cluster fingerprint ([`Launch::cluster_fingerprint`]) is the launch
//! fingerprint without `--node-rank` and the node-local variables: every node
//! of one engine computes the same value.
//!
//! # Publishing (at commit)
//!
//! Through the share's storage ([`Dir`](crate::publish::Dir)): files
//! first, each written to a temp name, fsynced and linked to its name when
//! absent, or renamed over it under its lock when it holds other bytes (a
//! file whose bytes are already there is not rewritten), then the manifest
//! the same way. A reader never sees a torn file under its final name. Old
//! publications (older than `--store-max-age`, the store's age limit) are removed at the same time.
//!
//! # Reading (before the engine starts)
//!
//! Every node `0..N-1` must have a manifest for this cluster fingerprint,
//! node rank and node count, and every file it lists must have the size and
//! sha256 the manifest says. A node whose publication is being replaced gives
//! a mismatch: it is read once more, and if it still does not verify it
//! counts as not published (fail closed). Only when every node verifies is
//! the union taken, per cache directory, with [`unify::unify`] (same format
//! and conflict rule as on one node); this node's rank files are then
//! written with the union's bytes and signed for this launch, so the local
//! prune and sign stay the only source of trust.
//!
//! All share I/O runs in a short-lived thread bounded by `--share-timeout`:
//! a hung mount cannot stall the start nor the supervisor loop (the thread
//! is abandoned; a syscall stuck on a hard NFS mount may still keep the
//! process from exiting until the mount answers).
//!
//! [`Launch::cluster_fingerprint`]: crate::engine::fingerprint::Launch::cluster_fingerprint
//! [`unify::unify`]: crate::unify::unify

mod dir;
mod handle;
mod publish;
mod read;
mod same;
mod settings;
mod status;
mod union;

pub(crate) use dir::checked_path;
pub(crate) use dir::mkdirs;
pub use handle::*;
pub use publish::*;
pub use read::*;
pub use same::*;
pub use settings::Settings;
pub use status::*;
pub use union::*;

use std::ffi::OsString;
use std::sync::mpsc;
use std::time::Duration;

use crate::stops::Stopped;

use serde::{Deserialize, Serialize};

use crate::cache::SetManifest;

/// Version of the manifest format. A manifest with another version is not
/// read (its node counts as not published).
pub const MANIFEST_FORMAT: u32 = 2;
/// The manifest's file name in a node's directory.
pub const MANIFEST: &str = "manifest.json";
/// keepwrap's directory in the share.
pub const TOP: &str = "keepwrap";
/// The default age limit of publications (`--store-max-age`'s default).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_MANIFEST: u64 = 16 << 20;

/// `manifest.json`: what one node published, the envelope of its node
/// fields around a set manifest ([`SetManifest`]: the cluster fingerprint,
/// the set id, when it was published, the rank files).
///
/// ```json
/// {"format": 2, "node_rank": 1, "nnodes": 4, "published_at_utc": "2026-01-01T00:00:00Z",
///  "set": {"format": 2, "keepwrap": "0.1.0", "fingerprint": "9f2c...", "id": "<64 hex>",
///          "signed_at": 1767225600,
///          "members": [{"path": "0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json",
///                       "sha256": "5e1a...", "size": 51234}]}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub node_rank: u32,
    pub nnodes: u32,
    pub published_at_utc: String,
    /// The rank files, for the cluster fingerprint; `signed_at`: when they
    /// were published (seconds since the epoch).
    pub set: SetManifest,
}

/// The key of node `rank`'s publication of `cluster` in the share.
pub(crate) fn node_key(cluster: &str, rank: u32) -> String {
    format!("{TOP}/{cluster}/node{rank}")
}

/// This node's place in a multi-node launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub nnodes: u32,
    pub rank: u32,
}

/// Why `--nnodes` and `--node-rank` do not give this node's place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("{flag} has no value")]
    NoValue { flag: &'static str },
    #[error("{flag} {value} is not a number")]
    NotANumber { flag: &'static str, value: String },
    #[error("--node-rank {rank} is out of range for --nnodes {nnodes}")]
    OutOfRange { rank: u32, nnodes: u32 },
}

/// `--nnodes` (default 1) and `--node-rank` (default 0) from the command
/// (`FLAG VALUE` or `FLAG=VALUE`, the last one wins, up to a bare `--`).
pub fn node_of(argv: &[OsString]) -> Result<Node, NodeError> {
    use crate::launch::flags;
    const FLAGS: [&str; 2] = ["--nnodes", "--node-rank"];
    let mut place = [1u32, 0u32];
    for hit in flags::hits(flags::before_tail(argv), &FLAGS, flags::Names::Exact) {
        let flag = FLAGS[hit.flag];
        let value = hit.value.ok_or(NodeError::NoValue { flag })?;
        place[hit.flag] =
            value
                .to_str()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| NodeError::NotANumber {
                    flag,
                    value: value.to_string_lossy().into_owned(),
                })?;
    }
    let [nnodes, rank] = place;
    if nnodes == 0 || rank >= nnodes {
        return Err(NodeError::OutOfRange { rank, nnodes });
    }
    Ok(Node { nnodes, rank })
}

/// How often [`bounded`] looks for a stop signal while it waits.
const STOP_CHECK: Duration = Duration::from_millis(20);

/// Run `f` on a short-lived thread and wait at most `timeout` for it. `None`
/// on timeout (the thread is abandoned). Runs inline if no thread starts.
/// Before the engine starts the wait is one of those a stop signal ends
/// (Err): it looks for one every [`STOP_CHECK`] ([`crate::stops::check`]).
pub(crate) fn bounded<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<Option<T>, Stopped> {
    let (tx, rx) = mpsc::sync_channel(1);
    let f = std::sync::Arc::new(std::sync::Mutex::new(Some(f)));
    let g = f.clone();
    let spawned = std::thread::Builder::new()
        .name("keepwrap-share".into())
        .spawn(move || {
            if let Some(f) = g.lock().ok().and_then(|mut f| f.take()) {
                let _ = tx.send(f());
            }
        });
    match spawned {
        Ok(_) => {
            let deadline = crate::clock::after(std::time::Instant::now(), timeout);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left.min(STOP_CHECK)) {
                    Ok(v) => return Ok(Some(v)),
                    Err(mpsc::RecvTimeoutError::Timeout) if left > STOP_CHECK => {
                        crate::stops::check()?
                    }
                    Err(_) => return Ok(None),
                }
            }
        }
        Err(_) => Ok(f.lock().ok().and_then(|mut f| f.take()).map(|f| f())),
    }
}

#[cfg(test)]
mod tests;
