//! Which launches are using a cache root right now, so that two engines on
//! one root never remove, load or sign each other's files. The lock
//! serialises keepwrap's own work; the engines, though, run side by side and
//! write the same rank-file paths. So every launch that starts an engine
//! leaves a marker, `.keepwrap/running/<pid>-<start>`, one line:
//!
//! ```text
//! tuning   <fingerprint> <start, ns since the epoch> <peer key> <rank> <host>
//! ```
//!
//! The first word is the launch's state, rewritten in place: `tuning` (its
//! engine may still be tuning), `done` (tuning is done), `handsoff` (it keeps
//! nothing: it never says when it is done) or `ended`. The peer key and rank
//! tell the nodes (or data-parallel ranks) of one multi-node launch apart from
//! replicas of one launch: peers have the same key and different ranks.
//!
//! Two byte-range locks (open file description locks, `F_OFD_SETLK`, which
//! NFS and local file systems both honour) say who is alive:
//! - byte 0 is held through a descriptor the engine inherits, so it is held
//!   as long as keepwrap *or* any process of the engine holding it lives (an
//!   engine orphaned by a `kill -9` of keepwrap keeps it);
//! - byte 1 is held by keepwrap alone (close-on-exec).
//!
//! A marker whose byte 0 is free belongs to a launch that is gone; byte 0
//! held and byte 1 free is an orphaned engine. At a normal exit keepwrap
//! removes its marker, or, when a launch that started before it is still
//! alive (that launch must learn that this one ran alongside), replaces it by
//! an unlocked copy saying `ended`. Ended markers nobody needs any more are
//! removed by the next launch, so the directory holds about one file per
//! live launch.
//!
//! Every marker is opened without following symlinks and without blocking
//! (a FIFO or a link to `/dev/zero` planted there is skipped), checked to be
//! a regular file and read with a size cap; the directories are opened one
//! component at a time, never through a symlinked `.keepwrap`.

//!
//! `seen.rs` holds what a marker says and the verdict (no file touched),
//! `marker.rs` the markers' files and their locks.

mod marker;
mod seen;

pub use marker::{Marker, Runs};
pub use seen::{verdict, Identity, Life, Seen, State, Verdict, Why};

/// The directory of the markers, below `.keepwrap/`.
pub const RUNNING_DIR: &str = "running";
#[cfg(test)]
mod tests;
