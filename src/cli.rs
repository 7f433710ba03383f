//! The command line: `keepwrap [OPTIONS] -- COMMAND [ARGS...]` and the
//! subcommands. Every option also reads a `KEEPWRAP_*` variable, so that a
//! Dockerfile can configure the entrypoint.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use crate::fingerprint::{self, ProfileName};
use crate::logging::{self, LogFormat};
use crate::ready::DoneRule;

/// Exit status for keepwrap's own usage errors (as clap uses).
pub const EXIT_USAGE: u8 = 2;

const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (sidecar format ", "1", ")");

#[derive(Debug, Parser)]
#[command(
    name = "keepwrap",
    version,
    long_version = LONG_VERSION,
    about = "Supervise an SGLang launch as PID 1 and keep its autotune cache across identical launches",
    override_usage = "keepwrap [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap fingerprint [OPTIONS] -- COMMAND [ARGS...]\n       keepwrap status [OPTIONS] [-- COMMAND [ARGS...]]\n       keepwrap explain [OPTIONS] -- COMMAND [ARGS...]",
    after_help = "Run a launch:  keepwrap [OPTIONS] -- python -m sglang.launch_server --model-path ... --tp 4"
)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Sub>,

    #[command(flatten)]
    pub run: RunArgs,

    /// Log format on stderr (the filter comes from KEEPWRAP_LOG, `info` by default)
    #[arg(
        long,
        value_enum,
        env = "KEEPWRAP_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,

    /// The command to supervise, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub enum Sub {
    /// List what each node published in the share (--share DIR)
    ShareStatus(ShareStatusCmd),
    /// Print the launch fingerprint of COMMAND, without launching it
    Fingerprint(FingerprintCmd),
    /// Show every cache file and store entry, totals and statistics; with
    /// `-- COMMAND`, what that launch would keep, restore, store and remove
    Status(StatusCmd),
    /// Compare the launch of COMMAND with every signed launch in the store,
    /// nearest first, without launching it
    Explain(ExplainCmd),
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

    /// Also hash every signed cache file (slower): report changed bytes as corrupt
    #[arg(long)]
    pub verify: bool,

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

/// What identifies a launch.
#[derive(Debug, Clone, Args)]
pub struct FingerprintArgs {
    /// Fingerprint profile: which env vars and arguments identify a launch
    #[arg(long, value_enum, env = "KEEPWRAP_PROFILE", default_value = "sglang")]
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

/// How a launch is supervised and its cache kept.
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
    /// else $HOME/.cache/sglang/flashinfer/autotune]
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// When tuning is done: auto, health[=URL], quiet=DURATION or exit
    #[arg(long, env = "KEEPWRAP_DONE", default_value = "auto", value_parser = DoneRule::parse, value_name = "RULE")]
    pub done: DoneRule,

    /// Interval between two health probes
    #[arg(long, env = "KEEPWRAP_PROBE_INTERVAL", default_value = "500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub probe_interval: Duration,

    /// How long one health probe may take
    #[arg(long, env = "KEEPWRAP_PROBE_TIMEOUT", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub probe_timeout: Duration,

    /// Rewrite the rank files of each cache directory as their union at commit,
    /// so SGLang's stock entry gate sees agreement under expert parallelism
    /// (auto: on for the sglang and seed profiles)
    #[arg(
        long,
        value_enum,
        env = "KEEPWRAP_UNIFY",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub unify: UnifyMode,

    /// Only supervise: leave the cache alone
    #[arg(long, env = "KEEPWRAP_DISABLE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub disable: bool,

    /// Most bytes the store of other launches' cache files may hold (least
    /// recently used evicted first)
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

    #[command(flatten)]
    pub share: ShareArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnifyMode {
    Auto,
    On,
    Off,
}

impl RunArgs {
    /// Whether this launch unifies rank files.
    pub fn unifies(&self) -> bool {
        match self.unify {
            UnifyMode::On => true,
            UnifyMode::Off => false,
            // Both profiles front an SGLang engine, whose stock gate needs it.
            UnifyMode::Auto => matches!(
                self.fingerprint.profile,
                ProfileName::Sglang | ProfileName::Seed
            ),
        }
    }
}

/// `5s`, `500ms`, `2m`, `1h 30m`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(format!("'{s}' is not a duration"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("'{s}' is not a duration ({e}); try 5s, 500ms or 2m"))
}

fn usage_error(what: &str) -> ExitCode {
    eprintln!("keepwrap: error: {what}");
    eprintln!("Usage: keepwrap [OPTIONS] -- COMMAND [ARGS...]   (keepwrap --help for more)");
    ExitCode::from(EXIT_USAGE)
}

/// Parse the command line, run what it asks, and return the exit status.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    logging::init(cli.log_format);
    match cli.subcommand {
        Some(Sub::ShareStatus(cmd)) => crate::share::print_status(&cmd.share),
        Some(Sub::Fingerprint(cmd)) => {
            if cmd.command.is_empty() {
                return usage_error(
                    "no COMMAND after `--`: keepwrap fingerprint [OPTIONS] -- COMMAND [ARGS...]",
                );
            }
            fingerprint::print(&cmd.fingerprint.options(), &cmd.command, cmd.explain)
        }
        Some(Sub::Status(cmd)) => {
            let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            let root = crate::keep::root_from(cmd.cache_dir.as_deref(), &env);
            let code = crate::status::run(
                root,
                &cmd.fingerprint.options(),
                &cmd.command,
                cmd.json,
                cmd.zero,
                cmd.verify,
            );
            match &cmd.share {
                Some(dir) if code == ExitCode::SUCCESS => {
                    println!("\nshare {}:", dir.display());
                    crate::share::print_status(dir)
                }
                _ => code,
            }
        }
        Some(Sub::Explain(cmd)) => {
            if cmd.command.is_empty() {
                return usage_error(
                    "no COMMAND after `--`: keepwrap explain [OPTIONS] -- COMMAND [ARGS...]",
                );
            }
            let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            let root = crate::keep::root_from(cmd.cache_dir.as_deref(), &env);
            crate::explain::print(root, &cmd.fingerprint.options(), &cmd.command)
        }
        None => {
            if cli.command.is_empty() {
                return usage_error("no COMMAND after `--`: what should keepwrap run?");
            }
            crate::supervise::run(&cli.run, cli.command)
        }
    }
}

/// Multi-node launches: the directory every node mounts.
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
    /// The node-local env names: the defaults plus `--node-local-env`.
    pub fn node_local(&self) -> Vec<String> {
        let mut names: Vec<String> = fingerprint::DEFAULT_NODE_LOCAL_ENV
            .iter()
            .map(|n| n.to_string())
            .collect();
        for n in self.node_local_env.iter().filter(|n| !n.is_empty()) {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

#[derive(Debug, Args)]
pub struct ShareStatusCmd {
    /// The share directory
    #[arg(long = "share", env = "KEEPWRAP_SHARE", value_name = "DIR")]
    pub share: PathBuf,
}
