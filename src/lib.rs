//! keepwrap: a PID 1 supervisor that keeps the FlashInfer autotune cache of
//! an SGLang launch across boots, and only when the launch is the same.
//!
//! One module per concern:
//! - [`cli`]: the command line, and the hand-off to each subcommand;
//! - [`config`]: `keepwrap config`, the effective settings and where each came from;
//! - [`canonical`]: JSON byte-identical to Python's `json.dumps`;
//! - [`fingerprint`]: which parts of argv and environment identify a launch;
//! - [`child`]: spawning the engine, signals, reaping, exit status;
//! - [`clock`]: deadlines that saturate instead of overflowing;
//! - [`keep`]: the cache side of one launch (prune, watch, done, sign);
//! - [`supervise`]: the one poll loop that ties child, watch and readiness;
//! - [`cache`]: the autotune cache on disk (layout, sidecars, prune, sign);
//! - [`unify`]: one FlashInfer-exact union of a directory's rank files;
//! - [`share`]: multi-node launches: publish and unify rank files through a shared directory;
//! - [`watch`]: inotify over the cache tree;
//! - [`ready`]: when tuning is done (health probe, quiet window, exit);
//! - [`logging`]: `keepwrap: ...` lines on stderr, text or JSON;
//! - [`progress`]: tuning progress as rank files land, summed up for large launches;
//! - [`store`]: every launch's signed set kept apart in `.keepwrap/store`;
//! - [`lock`]: the lock of a cache root shared by several launches;
//! - [`owner`]: which process serves a loopback port;
//! - [`policy`]: when a set may be signed: the trust rules as a pure state machine;
//! - [`running`]: which launches use a cache root right now;
//! - [`stats`]: statistics kept across launches;
//! - [`status`]: `keepwrap status`, what is on disk and what a launch would do;
//! - [`explain`]: `keepwrap explain`, how a launch differs from signed ones;
//! - [`vllm_keep`]: the cache side of a vLLM launch (root, done, the shared file of 0.27-0.31);
//! - [`failpoint`]: crash points for the crash tests (cargo feature `failpoints`).

/// The sidecar format version as a literal, for `concat!` in `--version`.
macro_rules! sidecar_format {
    () => {
        2
    };
}

pub mod cache;
pub mod canonical;
pub mod child;
pub mod cli;
pub mod clock;
pub mod config;
pub mod explain;
pub mod failpoint;
pub mod fingerprint;
pub mod keep;
pub mod launch;
pub mod lock;
pub mod logging;
pub mod owner;
pub mod policy;
pub mod progress;
pub mod ready;
pub mod running;
pub mod share;
pub mod stats;
pub mod status;
pub mod store;
pub mod supervise;
pub mod unify;
pub mod vllm_keep;
pub mod watch;

/// Version of the sidecar format keepwrap writes. A sidecar with a larger
/// version is not trusted.
pub const SIDECAR_FORMAT: u32 = sidecar_format!();
