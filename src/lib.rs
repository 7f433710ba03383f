//! keepwrap: a PID 1 supervisor that keeps the autotune cache of an SGLang,
//! vLLM or TensorRT-LLM launch across boots, and only when the launch is
//! the same.
//!
//! One folder per promise, each with its pure decisions in files that do no
//! I/O and the system calls beside them. From the top down (a module
//! imports only modules below it; `architecture` checks it):
//! - [`cli`]: the command line, and the hand-off to each subcommand;
//! - [`cmd`]: the subcommands `status`, `explain`, `config`;
//! - [`supervisor`]: the one poll loop, its [`supervisor::Settings`];
//!   [`supervisor::rules`] says where each signal goes, when `--kill-after`
//!   fires and how the group is drained, over a [`supervisor::rules::Child`];
//!   [`supervisor::child`] spawns the engine, forwards signals, reaps;
//! - [`keeper`]: the cache side of one launch (prune, watch, done, sign),
//!   its trust rules as a pure state machine ([`keeper::policy`]) and why a
//!   launch has no cache ([`keeper::explain`]);
//! - [`fleet`]: signed sets shared through an S3-compatible bucket;
//! - [`engine`]: what differs between engines, a folder each behind two
//!   traits ([`engine::Engine`], [`cache::Layout`]), each reading its own
//!   launch; the launch read once and its fingerprint
//!   ([`engine::fingerprint`]);
//! - [`share`]: multi-node launches: publish and unify rank files through a
//!   shared directory;
//! - [`publish`]: the storage sets are published through (get,
//!   put-if-absent, list, delete), its directory and read-only backends,
//!   and the thread a publication runs on;
//! - [`done`]: when tuning is done: the `--done` rules, the HTTP probe,
//!   which process serves a port ([`done::owner`]), the inotify watch
//!   ([`done::watch`]), the `landed` lines ([`done::progress`]);
//! - [`store`]: every launch's signed set kept apart in `.keepwrap/store`;
//! - [`unify`]: one FlashInfer-exact union of a directory's rank files;
//! - [`root`]: what launches sharing one cache root share:
//!   the lock, the running markers, the statistics;
//! - [`cache`]: the autotune cache on disk (layout, sidecars, judge, prune,
//!   sign, survey, trash, no-follow file operations);
//! - [`launch`]: what a command means whatever engine it runs (prefixes,
//!   shells, `FLAG VALUE` options, models, the installed package), canonical
//!   JSON ([`launch::canonical`]), redaction;
//! - [`signals`]: which signals keepwrap handles, the mask every thread
//!   blocks, how a process ended;
//! - [`digest`]: sha256 hex and the [`digest::Fingerprint`];
//! - [`events`]: the catalogue of every event keepwrap logs, with its
//!   fields;
//! - [`logging`]: `keepwrap: ...` lines on stderr, text or JSON;
//! - [`metrics`]: the metrics file, from the events' outcomes;
//! - [`clock`]: deadlines that saturate, durations, the time in seconds;
//! - [`failpoint`]: crash points for the crash tests (cargo feature `failpoints`);
//! - [`sys`]: every `unsafe` block, behind safe functions (the crate denies
//!   `unsafe_code` everywhere else).

#![deny(unsafe_code)]

#[cfg(test)]
mod architecture;

/// The sidecar format version as a literal, for `concat!` in `--version`.
macro_rules! sidecar_format {
    () => {
        3
    };
}

pub mod cache;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod digest;
pub mod done;
pub mod engine;
pub mod events;
pub mod failpoint;
pub mod fleet;
pub mod keeper;
pub mod launch;
pub mod logging;
pub mod metrics;
pub mod publish;
pub mod root;
pub mod share;
pub mod signals;
pub mod stops;
pub mod store;
pub mod supervisor;
#[allow(unsafe_code)]
pub mod sys;
pub mod unify;

/// keepwrap's state directory, inside the cache root (hidden: neither the
/// engine nor the cache walk reads it).
pub const STATE_DIR: &str = ".keepwrap";

/// Version of the sidecar format keepwrap writes. A sidecar with a larger
/// version is not trusted; one of [`OLDEST_SIDECAR_FORMAT`] or later is
/// read.
pub const SIDECAR_FORMAT: u32 = sidecar_format!();

/// The oldest sidecar format read: format 2 differs from 3 only by the
/// ids of sets it carried (`set`, `committed`), which are ignored (a set's
/// members are the ones its manifest lists), so an upgrade keeps every
/// set. A sign rewrites such a sidecar in the format it writes.
pub const OLDEST_SIDECAR_FORMAT: u32 = 2;

/// Version of the set manifest format (`.keepwrap/sets/<fp>.json`, a
/// store entry's `.set.json`, a share node's manifest): only this one is
/// read.
pub const SET_FORMAT: u32 = 2;
