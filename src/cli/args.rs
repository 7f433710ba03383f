//! The arguments: the command line's definition (every option with its
//! `KEEPWRAP_*` variable, each subcommand's), the checks of their values,
//! and the `Settings` each lower layer takes from them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};

use crate::clock::parse_duration;
use crate::done::DoneRule;
use crate::engine::fingerprint::{self, ProfileName};
use crate::keeper::{KeepMode, UnifyMode};
use crate::logging::LogFormat;

const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (sidecar format ",
    sidecar_format!(),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "keepwrap",
    version = LONG_VERSION,
    about = "Supervise an SGLang launch as PID 1 and keep its autotune cache across identical launches",
    override_usage = "keepwrap [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap fingerprint [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap status [OPTIONS] [-- COMMAND [ARGS...]]\n       keepwrap explain [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap forget [--dry-run] [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap [OPTIONS] config [--json] [-- COMMAND [ARGS...]]\n       keepwrap share-status --share DIR [--json]\n       keepwrap evict [--dry-run] [--all | --older-than DURATION | FINGERPRINT]\n       keepwrap clean [--dry-run]",
    after_help = "Run a launch:  keepwrap [OPTIONS] -- python -m sglang.launch_server --model-path ... --tp 4"
)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Sub>,

    #[command(flatten)]
    pub run: RunArgs,

    /// Log format on stderr (the level: -v/-q, else KEEPWRAP_LOG, else info)
    #[arg(
        long,
        value_enum,
        env = "KEEPWRAP_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,

    /// Log more: debug, then trace (repeatable; wins over KEEPWRAP_LOG)
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Log less: warnings and errors, then errors, then nothing (repeatable)
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub quiet: u8,

    /// Print the effective settings and where each came from, then exit
    /// (as `keepwrap config`)
    #[arg(long)]
    pub show_config: bool,

    /// Refuse a launch whose keepwrap setting is invalid (exit 2). Without
    /// it the setting is said in one line and the engine starts: with the
    /// cache left alone for a cache setting, the default for a supervision
    /// setting
    #[arg(long, env = "KEEPWRAP_STRICT", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub strict: bool,

    /// The command to supervise, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// The settings of how the engine is supervised (the rest are the cache's):
/// an invalid one falls back to its default, an invalid cache setting
/// leaves the cache alone.
pub const SUPERVISION: [&str; 5] = ["kill_group", "grace", "kill_after", "log_format", "strict"];

// Each subcommand's arguments are defined only when that subcommand is
// used (or help is asked for): a launch does not pay for them at start.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Sub {
    /// Evict stored sets of other launches from the store, under the lock:
    /// every one (--all), those unused for longer than --older-than, or one
    /// launch's (FINGERPRINT, or a unique prefix of 8 or more digits)
    ///
    /// Each stored set is judged by the cache tree its files name (SGLang's,
    /// vLLM's tree or flat root, TensorRT-LLM's): --cache-dir may be any
    /// engine's root. Without it: SGLang's default root, and vLLM's and
    /// TensorRT-LLM's too when they have a store.
    Evict(EvictCmd),
    /// Evict every stored set (as `evict --all`); the cache files of the
    /// root itself are left alone
    ///
    /// Each stored set is judged by the cache tree its files name (SGLang's,
    /// vLLM's tree or flat root, TensorRT-LLM's): --cache-dir may be any
    /// engine's root. Without it: SGLang's default root, and vLLM's and
    /// TensorRT-LLM's too when they have a store.
    Clean(CleanCmd),
    /// Print the effective settings (options before `config`, KEEPWRAP_*
    /// variables, defaults), each with where it came from
    Config(ConfigCmd),
    /// List what each node published in the share (--share DIR)
    ShareStatus(ShareStatusCmd),
    /// The fleet store (--fleet s3://BUCKET/PREFIX): list its launches,
    /// remove those unused for longer than a duration, or check the
    /// credentials, the bucket and the permissions a mode needs
    Fleet(FleetCmd),
    /// Print the launch fingerprint of COMMAND, without launching it
    Fingerprint(FingerprintCmd),
    /// Show every cache file and store entry, totals and statistics; with
    /// `-- COMMAND`, what that launch would keep, restore, store and remove
    Status(StatusCmd),
    /// Compare the launch of COMMAND with every signed launch in the store,
    /// nearest first, without launching it
    Explain(ExplainCmd),
    /// Forget the signed set of COMMAND's launch: from the cache tree and
    /// the store (and with --fleet, its HEAD in the bucket), so its next
    /// boot tunes fresh
    Forget(super::ForgetCmd),
    /// Print the completion script of SHELL (bash, zsh, fish, elvish,
    /// powershell), generated from these definitions
    #[command(hide = true)]
    Completions(CompletionsCmd),
    /// Print the man page (roff), generated from these definitions
    #[command(hide = true)]
    Man,
}

#[derive(Debug, Args)]
pub struct CompletionsCmd {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["all", "older_than", "fingerprint"])))]
pub struct EvictCmd {
    /// Every stored set
    #[arg(long)]
    pub all: bool,

    /// The stored sets whose launch was not used for longer than DURATION
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub older_than: Option<Duration>,

    /// The stored set of this launch (a unique prefix of 8 or more digits)
    #[arg(value_name = "FINGERPRINT")]
    pub fingerprint: Option<String>,

    /// Say what would be evicted, and evict nothing
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub root: RootArgs,
}

#[derive(Debug, Args)]
pub struct CleanCmd {
    /// Say what would be evicted, and evict nothing
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub root: RootArgs,
}

// Which cache root a maintenance command works on, and how long it waits
// for the lock.
#[derive(Debug, Args)]
pub struct RootArgs {
    /// Autotune cache root (resolved as for a run)
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// How long to wait for a launch's lock on the cache root
    #[arg(long, env = "KEEPWRAP_LOCK_TIMEOUT", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub lock_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct ConfigCmd {
    /// Print JSON
    #[arg(long)]
    pub json: bool,

    /// A launch, after `--`: resolve the cache root and the done rule for it
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusCmd {
    #[command(flatten)]
    pub fingerprint: FingerprintArgs,

    /// Autotune cache root (resolved as for a run)
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Print JSON
    #[arg(long)]
    pub json: bool,

    /// Reset the statistics (then show the status)
    #[arg(long)]
    pub zero: bool,

    /// Also hash every signed cache file (slower): report changed bytes as
    /// corrupt, and exit 1 if any file is corrupt
    #[arg(long)]
    pub verify: bool,

    /// The store's limit, to show its use against (as for a run; 0: no limit)
    #[arg(long, env = "KEEPWRAP_STORE_MAX_SIZE", default_value = "1GiB", value_parser = crate::store::parse_size, value_name = "SIZE")]
    pub store_max_size: u64,

    /// Also list what each node of a multi-node launch published to this share
    #[arg(
        long,
        env = "KEEPWRAP_SHARE",
        value_name = "DIR",
        conflicts_with = "json"
    )]
    pub share: Option<PathBuf>,

    /// A launch, after `--`: say what it would keep, restore, store and remove
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct ExplainCmd {
    #[command(flatten)]
    pub fingerprint: FingerprintArgs,

    /// Autotune cache root (resolved as for a run)
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// The launch to compare, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct FingerprintCmd {
    #[command(flatten)]
    pub fingerprint: FingerprintArgs,

    /// Print the canonical inputs, one per line, secrets redacted
    #[arg(long, env = "KEEPWRAP_EXPLAIN", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub explain: bool,

    /// The command whose launch to fingerprint, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

// What identifies a launch.
#[derive(Debug, Clone, Args)]
pub struct FingerprintArgs {
    /// Fingerprint profile: which env vars and arguments identify a launch
    #[arg(long, value_enum, env = "KEEPWRAP_PROFILE", default_value = "auto")]
    pub profile: ProfileName,

    /// Also fingerprint env vars whose name starts with PREFIX (repeatable)
    #[arg(
        long,
        env = "KEEPWRAP_ENV_PREFIX",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub env_prefix: Vec<String>,

    /// Leave env var NAME out of the fingerprint (repeatable)
    #[arg(
        long,
        env = "KEEPWRAP_VOLATILE_ENV",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub volatile_env: Vec<String>,

    /// Leave FLAG and its value out of the fingerprint (repeatable)
    #[arg(
        long,
        env = "KEEPWRAP_IGNORE_ARG",
        value_delimiter = ',',
        value_name = "FLAG"
    )]
    pub ignore_arg: Vec<String>,
}

impl FingerprintArgs {
    pub fn options(&self) -> fingerprint::Options {
        fingerprint::Options {
            profile: self.profile,
            env_prefixes: self.env_prefix.clone(),
            volatile_env: self.volatile_env.clone(),
            ignored_args: self.ignore_arg.clone(),
        }
    }
}

// How a launch is supervised and its cache kept.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub fingerprint: FingerprintArgs,

    /// Forward signals to the child's whole process group, not only the child
    #[arg(long, env = "KEEPWRAP_KILL_GROUP", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub kill_group: bool,

    /// After the child exits, how long what is left of its process group gets
    /// between TERM and KILL
    #[arg(long, env = "KEEPWRAP_GRACE", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub grace: Duration,

    /// KILL the child's process group this long after the first forwarded TERM
    /// or INT, if it is still alive (off by default)
    #[arg(long, env = "KEEPWRAP_KILL_AFTER", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Option<Duration>,

    /// Autotune cache root [default: $SGLANG_CACHE_DIR/flashinfer/autotune,
    /// else ~/.cache/sglang/flashinfer/autotune, `~` as Python expands it]
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// When tuning is done: auto, health[=URL], quiet=DURATION or exit
    #[arg(long, env = "KEEPWRAP_DONE", default_value = "auto", value_parser = parse_done, value_name = "RULE")]
    pub done: DoneRule,

    /// Interval between two health probes
    #[arg(long, env = "KEEPWRAP_PROBE_INTERVAL", default_value = "500ms", value_parser = parse_probe_duration, value_name = "DURATION")]
    pub probe_interval: Duration,

    /// How long one health probe may take
    #[arg(long, env = "KEEPWRAP_PROBE_TIMEOUT", default_value = "2s", value_parser = parse_probe_duration, value_name = "DURATION")]
    pub probe_timeout: Duration,

    /// A headless vLLM node whose launch names no head API to probe: how
    /// long no cache file may land, once its rank files all have, before
    /// tuning is done (at least 100ms)
    #[arg(long, env = "KEEPWRAP_HEADLESS_QUIET", default_value = "5s", value_parser = parse_quiet, value_name = "DURATION")]
    pub headless_quiet: Duration,

    /// Rewrite the rank files of each cache directory as their union at commit,
    /// so SGLang's stock entry gate sees agreement under expert parallelism
    /// (auto: on for the sglang and seed profiles, off for vllm)
    #[arg(
        long,
        value_enum,
        env = "KEEPWRAP_UNIFY",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub unify: UnifyMode,

    /// Pin the set signed for this launch: every boot is given it as
    /// signed, whatever the engine writes; shapes it lacks are tuned for
    /// that boot only (FlashInfer's managed store of a one-rank vLLM
    /// launch; elsewhere one line says it does not apply)
    #[arg(long, env = "KEEPWRAP_PIN", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub pin: bool,

    /// Only supervise: leave the cache alone
    #[arg(long, env = "KEEPWRAP_DISABLE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub disable: bool,

    /// This boot neither restores nor reuses the launch's signed set: the
    /// engine starts cold. The set is put aside in the store until this
    /// boot signs its own (a cold boot that fails loses nothing)
    #[arg(long, env = "KEEPWRAP_START_COLD", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub start_cold: bool,

    /// The invalid settings the cache depends on (a variable, else a flag),
    /// which leave the cache alone for this launch.
    #[arg(skip)]
    pub invalid: Vec<String>,

    /// Whether to keep the cache of this command: auto (an engine launch:
    /// Python, an sglang entry point, or a shell wrapper around one; anything
    /// else is only supervised), always, or never
    #[arg(
        long,
        value_enum,
        env = "KEEPWRAP_KEEP",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub keep: KeepMode,

    /// Most bytes the store of other launches' cache files may hold (least
    /// recently used evicted first; 0: no limit)
    #[arg(long, env = "KEEPWRAP_STORE_MAX_SIZE", default_value = "1GiB", value_parser = crate::store::parse_size, value_name = "SIZE")]
    pub store_max_size: u64,

    /// Evict a stored set whose launch was not used for this long
    #[arg(long, env = "KEEPWRAP_STORE_MAX_AGE", default_value = "30days", value_parser = parse_duration, value_name = "DURATION")]
    pub store_max_age: Duration,

    /// How long to wait for another launch's lock on the cache root before
    /// launching without keeping the cache
    #[arg(long, env = "KEEPWRAP_LOCK_TIMEOUT", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub lock_timeout: Duration,

    /// How long to wait, before starting the engine, for another launch on
    /// the same cache root to finish tuning; then the launch goes on
    /// without keeping the cache. TERM or INT ends the wait
    #[arg(long, env = "KEEPWRAP_WAIT_FOR_TUNING", default_value = "30m", value_parser = parse_duration, value_name = "DURATION")]
    pub wait_for_tuning: Duration,

    /// Write Prometheus metrics of this launch's boots (by outcome, time to
    /// done, files and shapes kept, fleet restores and publications) to
    /// PATH, replaced at each outcome, for node-exporter's textfile
    /// collector or a sidecar; its counters go on across restarts
    #[arg(long, env = "KEEPWRAP_METRICS_FILE", value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub share: ShareArgs,

    #[command(flatten)]
    pub fleet: FleetArgs,
}

impl RunArgs {
    /// What the supervisor and the keeper need of these options.
    pub fn settings(&self) -> crate::supervisor::Settings {
        crate::supervisor::Settings {
            stopping: crate::supervisor::Stopping {
                kill_group: self.kill_group,
                grace: self.grace,
                kill_after: self.kill_after,
            },
            cache: crate::keeper::Settings {
                fingerprint: self.fingerprint.options(),
                cache_dir: self.cache_dir.clone(),
                done: self.done.clone(),
                probe_interval: self.probe_interval,
                probe_timeout: self.probe_timeout,
                headless_quiet: self.headless_quiet,
                unify: self.unify,
                disable: self.disable,
                start_cold: self.start_cold,
                pin: self.pin,
                invalid: self.invalid.clone(),
                keep: self.keep,
                store_max_size: no_limit_at_0(self.store_max_size),
                store_max_age: self.store_max_age,
                lock_timeout: self.lock_timeout,
                wait_for_tuning: self.wait_for_tuning,
                share: self.share.settings(),
                fleet: self.fleet.settings(),
            },
            metrics_file: self.metrics_file.clone(),
        }
    }
}

/// `--store-max-size 0` is no limit, as ccache's `max_size = 0`.
fn no_limit_at_0(size: u64) -> u64 {
    if size == 0 {
        u64::MAX
    } else {
        size
    }
}

/// The shortest `--probe-interval` and `--probe-timeout`: a shorter one
/// would turn the health probe into a busy loop.
pub const MIN_PROBE: Duration = Duration::from_millis(10);

/// The shortest `--done quiet=` window: a shorter one would declare tuning
/// done at the first cache file that lands.
pub const MIN_QUIET: Duration = Duration::from_millis(100);

/// `--probe-interval` and `--probe-timeout`: a duration of at least
/// [`MIN_PROBE`].
fn parse_probe_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < MIN_PROBE {
        return Err(format!(
            "'{s}' is too short: at least 10ms, or the health probe would busy-loop"
        ));
    }
    Ok(d)
}

/// `--done`: a rule, whose quiet window is at least [`MIN_QUIET`].
fn parse_done(s: &str) -> Result<DoneRule, String> {
    match DoneRule::parse(s).map_err(|e| e.to_string())? {
        DoneRule::Quiet(d) => quiet_enough(s, d).map(DoneRule::Quiet),
        rule => Ok(rule),
    }
}

/// `--headless-quiet`: a quiet window of at least [`MIN_QUIET`].
fn parse_quiet(s: &str) -> Result<Duration, String> {
    quiet_enough(s, parse_duration(s).map_err(|e| e.to_string())?)
}

/// `d`, written `s`, unless it is under [`MIN_QUIET`].
fn quiet_enough(s: &str, d: Duration) -> Result<Duration, String> {
    if d < MIN_QUIET {
        return Err(format!(
            "'{s}' is too short a quiet window: at least 100ms, or tuning would be done at the first cache file that lands"
        ));
    }
    Ok(d)
}

// Multi-node launches: the directory every node mounts.
#[derive(Debug, Clone, Args)]
pub struct ShareArgs {
    /// A directory every node of a multi-node launch mounts (NFS, CephFS, a
    /// ReadWriteMany volume): nodes publish their signed rank files there and
    /// take the union of all nodes' files before the engine starts
    #[arg(long = "share", env = "KEEPWRAP_SHARE", value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Also leave env var NAME out of the cluster fingerprint: it differs
    /// between the nodes of one launch (repeatable; always left out:
    /// SGLANG_CACHE_DIR, NCCL_SOCKET_IFNAME, NCCL_IB_HCA)
    #[arg(
        long,
        env = "KEEPWRAP_NODE_LOCAL_ENV",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub node_local_env: Vec<String>,

    /// How long reading the share before the start, or publishing to it, may
    /// take before the launch goes on without it
    #[arg(long, env = "KEEPWRAP_SHARE_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub share_timeout: Duration,
}

impl ShareArgs {
    /// What the share module needs of these options.
    pub fn settings(&self) -> crate::share::Settings {
        crate::share::Settings {
            dir: self.dir.clone(),
            node_local_env: self.node_local_env.clone(),
            share_timeout: self.share_timeout,
        }
    }
}

// The fleet store: signed sets shared through an S3-compatible bucket.
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// A bucket every pod of the fleet reads (s3://BUCKET/PREFIX): a launch
    /// with no set of its own restores the fleet's before the engine starts,
    /// and publishes its own once signed. The endpoint, region and
    /// credentials come from the standard AWS variables and files
    #[arg(long = "fleet", env = "KEEPWRAP_FLEET", value_name = "URL")]
    pub url: Option<String>,

    /// read-only restores and never publishes (for untrusted jobs; the real
    /// boundary is the bucket's IAM policy)
    #[arg(
        long,
        env = "KEEPWRAP_FLEET_MODE",
        value_enum,
        default_value = "read-write",
        value_name = "MODE"
    )]
    pub fleet_mode: crate::fleet::Mode,

    /// How long the fleet may take before the start (the whole restore), and
    /// each publication before keepwrap exits
    #[arg(long, env = "KEEPWRAP_FLEET_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub fleet_timeout: Duration,

    /// The boot a multi-node launch's nodes share (each node's files are
    /// published under it); without it, SLURM_JOB_ID with
    /// SLURM_RESTART_COUNT. A multi-node launch with none restores and
    /// never publishes
    #[arg(long, env = "KEEPWRAP_BOOT_ID", value_name = "ID")]
    pub boot_id: Option<String>,
}

impl FleetArgs {
    /// What the fleet module needs of these options.
    pub fn settings(&self) -> crate::fleet::Settings {
        crate::fleet::Settings {
            url: self.url.clone(),
            mode: self.fleet_mode,
            timeout: self.fleet_timeout,
            boot_id: self.boot_id.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct FleetCmd {
    /// The fleet store
    #[arg(long = "fleet", env = "KEEPWRAP_FLEET", value_name = "URL")]
    pub url: Option<String>,

    /// How long each call to the bucket may take
    #[arg(long, env = "KEEPWRAP_FLEET_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub fleet_timeout: Duration,

    #[command(subcommand)]
    pub action: FleetAction,
}

#[derive(Debug, Subcommand)]
pub enum FleetAction {
    /// List every launch in the bucket: its fingerprint, the set its HEAD
    /// names, when HEAD was written
    Ls,
    /// Remove every launch none of whose objects was written within
    /// --older-than (HEAD first, then its sets and blobs)
    Gc {
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        older_than: Duration,
        /// Say what would be removed, remove nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Check the credentials, the bucket and the permissions the mode
    /// needs (read-only: list and get; read-write: also a probe object
    /// created, replaced and deleted under the prefix): one line per
    /// check, exit 1 on a problem (for an init container or a CI step)
    Check {
        /// The mode whose permissions are checked
        #[arg(
            long,
            env = "KEEPWRAP_FLEET_MODE",
            value_enum,
            default_value = "read-write",
            value_name = "MODE"
        )]
        fleet_mode: crate::fleet::Mode,
    },
}

#[derive(Debug, Args)]
pub struct ShareStatusCmd {
    /// The share directory
    #[arg(long = "share", env = "KEEPWRAP_SHARE", value_name = "DIR")]
    pub share: Option<PathBuf>,

    /// Print JSON
    #[arg(long)]
    pub json: bool,
}
