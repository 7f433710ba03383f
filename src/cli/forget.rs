//! `keepwrap forget [--dry-run] -- COMMAND`: its arguments, and the launch
//! and root they name.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::args::FingerprintArgs;
use crate::clock::parse_duration;
use crate::engine::fingerprint::Launch;

#[derive(Debug, Args)]
pub struct ForgetCmd {
    #[command(flatten)]
    pub fingerprint: FingerprintArgs,

    /// Autotune cache root (resolved as for a run)
    #[arg(long, env = "KEEPWRAP_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// How long to wait for a launch's lock on the cache root
    #[arg(long, env = "KEEPWRAP_LOCK_TIMEOUT", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub lock_timeout: Duration,

    /// Say what would be removed, and remove nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Also withdraw the launch's HEAD from this fleet store
    /// (s3://BUCKET/PREFIX), for this machine's GPU model
    #[arg(long = "fleet", env = "KEEPWRAP_FLEET", value_name = "URL")]
    pub fleet: Option<String>,

    /// How long each call to the bucket may take
    #[arg(long, env = "KEEPWRAP_FLEET_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub fleet_timeout: Duration,

    /// The launch to forget, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `keepwrap forget`.
pub fn forget(cmd: ForgetCmd) -> ExitCode {
    if cmd.command.is_empty() {
        return super::usage_error(
            "no COMMAND after `--`: keepwrap forget [--dry-run] -- COMMAND [ARGS...]",
        );
    }
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let opts = cmd.fingerprint.options();
    let launch = Launch::new(&opts, &cmd.command, &env);
    let root = super::root_of(&opts, Some(&launch), cmd.cache_dir.as_deref(), &env);
    crate::cmd::forget::forget(
        root,
        &launch,
        crate::cmd::forget::Options {
            lock_timeout: cmd.lock_timeout,
            dry_run: cmd.dry_run,
            fleet: cmd.fleet.filter(|u| !u.is_empty()),
            fleet_timeout: cmd.fleet_timeout,
        },
    )
}
