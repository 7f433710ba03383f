//! The settings of the cache side of one launch, as the command line or
//! the `KEEPWRAP_*` variables give them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use crate::done::DoneRule;
use crate::engine::fingerprint::{self, ProfileName};
use crate::launch::Command;

/// How the cache of one launch is kept.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What the fingerprint covers.
    pub fingerprint: fingerprint::Options,
    /// `--cache-dir`: the cache root, else derived from the environment.
    pub cache_dir: Option<PathBuf>,
    /// `--done`: when tuning is done.
    pub done: DoneRule,
    /// Time between two health probes.
    pub probe_interval: Duration,
    /// How long one health probe may take.
    pub probe_timeout: Duration,
    /// `--headless-quiet`: a headless vLLM node's quiet window once its
    /// rank files have landed.
    pub headless_quiet: Duration,
    /// `--unify`.
    pub unify: UnifyMode,
    /// `--disable`: only supervise.
    pub disable: bool,
    /// `--start-cold`: this boot neither restores nor reuses the launch's
    /// set (put aside in the store until this boot signs its own).
    pub start_cold: bool,
    /// `--pin`: the set signed for the launch is the one every boot is
    /// given, whatever the engine writes.
    pub pin: bool,
    /// The invalid settings the cache depends on (only supervise).
    pub invalid: Vec<String>,
    /// `--keep`.
    pub keep: KeepMode,
    /// The most bytes the store holds.
    pub store_max_size: u64,
    /// A stored set unused this long is evicted.
    pub store_max_age: Duration,
    /// How long to wait for the lock of the cache root.
    pub lock_timeout: Duration,
    /// How long to wait for another launch on the root to finish tuning.
    pub wait_for_tuning: Duration,
    /// Multi-node launches.
    pub share: crate::share::Settings,
    /// `--fleet`: the fleet store in a bucket.
    pub fleet: crate::fleet::Settings,
}

/// Why the cache of a launch is not kept (the launch is only supervised);
/// shown as the one line that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotKept {
    #[error("cache keeping disabled (--disable): supervising only")]
    Disabled,
    #[error("cache keeping off (--keep never): supervising only")]
    Never,
    /// Settings the cache depends on are invalid (the lines above say
    /// which and why).
    #[error("cache keeping off, as {} cannot be used (the line above says why): supervising only", .0.join(" and "))]
    Invalid(Vec<String>),
    /// `--keep auto` and a command that is not an engine launch: the line
    /// that says what it is.
    #[error("{0}")]
    NotAnEngine(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeepMode {
    Auto,
    Always,
    Never,
}

impl NotKept {
    /// Why, as one word for the `supervising_only` event.
    pub fn reason(&self) -> &'static str {
        match self {
            NotKept::Disabled => "disabled",
            NotKept::Never => "keep_never",
            NotKept::Invalid(_) => "invalid_setting",
            NotKept::NotAnEngine(_) => "not_an_engine",
        }
    }
}

impl Settings {
    /// Whether to keep the cache of `command` run with `env`, or why not;
    /// the command as read (read only when the cache may be kept).
    pub fn keeps(
        &self,
        command: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<Command, NotKept> {
        if !self.invalid.is_empty() {
            return Err(NotKept::Invalid(self.invalid.clone()));
        }
        if self.disable {
            return Err(NotKept::Disabled);
        }
        match self.keep {
            KeepMode::Never => Err(NotKept::Never),
            KeepMode::Always => Ok(crate::engine::command(command, env)),
            KeepMode::Auto => {
                // An engine launch that cannot be read whole is pruned all
                // the same (nothing of another launch stays in its engine's
                // reach), and nothing is signed for it.
                let c = crate::engine::command(command, env);
                if !crate::engine::is_engine(&c) {
                    return Err(NotKept::NotAnEngine(c.not_engine_line()));
                }
                Ok(c)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnifyMode {
    Auto,
    On,
    Off,
}

impl Settings {
    /// Whether a launch fingerprinted with `profile` (resolved) unifies
    /// rank files.
    pub fn unifies(&self, profile: ProfileName) -> bool {
        match self.unify {
            UnifyMode::On => true,
            UnifyMode::Off => false,
            UnifyMode::Auto => crate::engine::of(profile).unifies_by_default(),
        }
    }
}
