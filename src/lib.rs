//! keepwrap: a PID 1 supervisor that keeps the FlashInfer autotune cache of
//! an SGLang launch across boots, and only when the launch is the same.
//!
//! One folder per promise, each with its pure decisions in files that do no
//! I/O and the system calls beside them:
//! - [`supervisor`]: the one poll loop; [`supervisor::child`] spawns the
//!   engine, forwards signals, reaps, turns its end into an exit status;
//! - [`launch`]: what a launch means, its fingerprint
//!   ([`launch::fingerprint`]), profiles, canonical JSON
//!   ([`launch::canonical`]), redaction;
//! - [`done`]: when tuning is done: the `--done` rules, the HTTP probe,
//!   which process serves a port ([`done::owner`]), the inotify watch
//!   ([`done::watch`]), the `landed` lines ([`done::progress`]);
//! - [`keeper`]: the cache side of one launch (prune, watch, done, sign) and
//!   its trust rules as a pure state machine ([`keeper::policy`]);
//! - [`cache`]: the autotune cache on disk (layout, sidecars, judge, prune,
//!   sign, survey, trash, no-follow file operations);
//! - [`unify`]: one FlashInfer-exact union of a directory's rank files;
//! - [`store`]: every launch's signed set kept apart in `.keepwrap/store`;
//! - [`share`]: multi-node launches: publish and unify rank files through a
//!   shared directory;
//! - [`root`]: what several launches share in a cache root: the lock, the
//!   running markers, the statistics;
//! - [`cmd`]: the subcommands `status`, `explain`, `config`;
//! - [`cli`]: the command line, and the hand-off to each subcommand;
//! - [`logging`]: `keepwrap: ...` lines on stderr, text or JSON;
//! - [`clock`]: deadlines that saturate instead of overflowing;
//! - [`failpoint`]: crash points for the crash tests (cargo feature `failpoints`).

#![deny(unsafe_code)]

/// The sidecar format version as a literal, for `concat!` in `--version`.
macro_rules! sidecar_format {
    () => {
        2
    };
}

pub mod cache;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod digest;
pub mod done;
pub mod failpoint;
pub mod keeper;
pub mod launch;
pub mod logging;
pub mod root;
pub mod share;
pub mod store;
pub mod supervisor;
#[allow(unsafe_code)]
pub mod sys;
pub mod unify;

/// keepwrap's state directory, inside the cache root (hidden: neither the
/// engine nor the cache walk reads it).
pub const STATE_DIR: &str = ".keepwrap";

/// Version of the sidecar format keepwrap writes. A sidecar with a larger
/// version is not trusted.
pub const SIDECAR_FORMAT: u32 = sidecar_format!();
