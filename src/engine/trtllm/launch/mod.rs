//! What keepwrap knows of a TensorRT-LLM server launch (`trtllm-serve`),
//! as pure functions of argv and environment pairs, plus the two reads
//! its fingerprint needs: the bytes of the `--extra_llm_api_options` YAML
//! and the GPU models the NVIDIA driver shows.
//!
//! The facts (docs/trtllm.md): `trtllm-serve MODEL [options]` and
//! `trtllm-serve serve MODEL [options]` (Click options, `--name value` or
//! `--name=value`, spelled with underscores), defaults `--host localhost`,
//! `--port 8000`. The autotuner keeps its tactics only where
//! `TLLM_AUTOTUNER_CACHE_PATH` says, and never checks the GPU or the
//! TensorRT-LLM build a file was tuned under: the fingerprint carries both.

mod fingerprint;

pub use crate::launch::gpu::*;
pub use fingerprint::*;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The variable that names the autotuner's cache file (a stem in layout
/// P). Unset: nothing persists.
pub const CACHE_VAR: &str = "TLLM_AUTOTUNER_CACHE_PATH";

/// The prefixes of the variables that shape what the autotuner tunes.
pub const ENV_PREFIXES: &[&str] = &["TLLM_", "TRTLLM_"];

/// The variables of [`ENV_PREFIXES`] that change nothing tuned: the cache
/// file's path (keepwrap's own) and log levels.
pub const VOLATILE_ENV: &[&str] = &[
    CACHE_VAR,
    "TLLM_LOG_LEVEL",
    "TLLM_AUTOTUNER_LOG_LEVEL_DEBUG_TO_INFO",
];

/// The Python package whose version the fingerprint carries.
pub const PACKAGE: &str = "tensorrt_llm";

/// The server's console script.
pub const COMMAND: &str = "trtllm-serve";

/// `trtllm-serve`'s other subcommands: not the server whose cache is kept.
const OTHER_SUBCOMMANDS: &[&str] = &[
    "disaggregated",
    "disaggregated_mpi_worker",
    "embeddings",
    "rerank",
    "mm_embedding_serve",
];

/// The options of the HTTP front end: where and how the server listens and
/// logs, nothing the autotuner reads.
pub const FRONT_END_ARGS: &[&str] = &["--host", "--port", "--served_model_name", "--log_level"];

/// The option whose YAML file's fields are merged into the launch's.
pub const EXTRA_OPTIONS: &str = "--extra_llm_api_options";

/// Its other name (TensorRT-LLM PR 9104, the spelling its docs prefer):
/// one option, the last one given winning.
pub const EXTRA_OPTIONS_ALIAS: &str = "--config";

/// The value of the last [`EXTRA_OPTIONS`] or [`EXTRA_OPTIONS_ALIAS`].
pub fn extra_options(args: &[OsString]) -> Option<&OsStr> {
    crate::launch::flags::last(
        args,
        &[EXTRA_OPTIONS, EXTRA_OPTIONS_ALIAS],
        crate::launch::flags::Names::Exact,
    )
}

/// The server's default port.
pub const DEFAULT_PORT: u16 = 8000;

/// The wrapper that runs `trtllm-serve` on each rank of a launch spread
/// over nodes by `mpirun` or `srun`.
pub const RANK_LAUNCHER: &str = "trtllm-llmapi-launch";

/// The launchers of a multi-node launch, before [`RANK_LAUNCHER`].
const MPI_LAUNCHERS: &[&str] = &["mpirun", "mpiexec", "srun"];

/// A recognised `trtllm-serve` launch: where `trtllm-serve` is in argv
/// (after `mpirun ... trtllm-llmapi-launch`, say), and where its options
/// start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recognised {
    pub serve_at: usize,
    pub args_start: usize,
}

/// Whether `argv` runs TensorRT-LLM's server: `trtllm-serve MODEL ...` or
/// `trtllm-serve serve MODEL ...` (any path to a program named
/// `trtllm-serve`), alone, behind `trtllm-llmapi-launch`, or behind
/// `mpirun`/`mpiexec`/`srun` and their options then `trtllm-llmapi-launch`.
/// Its other subcommands are not.
pub fn recognise(argv: &[OsString]) -> Option<Recognised> {
    let name = |i: usize| {
        argv.get(i)
            .and_then(|a| Path::new(a).file_name())
            .map(OsStr::as_bytes)
    };
    let first = name(0)?;
    let serve_at = if MPI_LAUNCHERS.iter().any(|l| l.as_bytes() == first) {
        1 + (1..argv.len()).position(|i| name(i) == Some(RANK_LAUNCHER.as_bytes()))? + 1
    } else if first == RANK_LAUNCHER.as_bytes() {
        1
    } else {
        0
    };
    if name(serve_at)? != COMMAND.as_bytes() {
        return None;
    }
    let at = |args_start| {
        Some(Recognised {
            serve_at,
            args_start,
        })
    };
    match argv.get(serve_at + 1).map(|a| a.as_bytes()) {
        Some(b"serve") => at(serve_at + 2),
        Some(sub) if OTHER_SUBCOMMANDS.iter().any(|s| s.as_bytes() == sub) => None,
        _ => at(serve_at + 1),
    }
}

/// The value of the last `FLAG VALUE` or `FLAG=VALUE` in `args`.
pub fn option_value<'a>(args: &'a [OsString], flag: &str) -> Option<&'a OsStr> {
    crate::launch::flags::last(args, &[flag], crate::launch::flags::Names::Exact)
}

/// The parallel sizes a launch's options give (`--tp_size`, `--pp_size`,
/// `--cp_size`, default 1; `--ep_size`), and its world (`tp * pp * cp`)
/// when the options tell it whole: not when a size is not a number, nor
/// when an `--extra_llm_api_options` file may set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub cp: Option<u64>,
    pub ep: Option<u64>,
    pub world: Option<u64>,
}

/// [`Sizes`] of the options `args`.
pub fn sizes(args: &[OsString]) -> Sizes {
    let size = |flag: &str, default: Option<u64>| match option_value(args, flag) {
        None => default,
        Some(v) => v.to_str().and_then(|s| s.trim().parse::<u64>().ok()),
    };
    let (tp, pp, cp) = (
        size("--tp_size", Some(1)),
        size("--pp_size", Some(1)),
        size("--cp_size", Some(1)),
    );
    let ep = size("--ep_size", None);
    let world = match (tp, pp, cp, extra_options(args)) {
        (Some(t), Some(p), Some(c), None) if t > 0 && p > 0 && c > 0 => {
            t.checked_mul(p).and_then(|w| w.checked_mul(c))
        }
        _ => None,
    };
    Sizes {
        tp,
        pp,
        cp,
        ep,
        world,
    }
}

/// The switch that turns attention data parallelism on (TensorRT-LLM
/// PR 12105), beside the YAML's `enable_attention_dp`.
pub const ATTENTION_DP_FLAG: &str = "--enable_attention_dp";

/// Whether the options `args` give [`ATTENTION_DP_FLAG`] (bare, or
/// `=true` in one of Click's spellings of true).
pub fn attention_dp_flag(args: &[OsString]) -> bool {
    args.iter().any(|a| {
        let a = a.to_string_lossy();
        match a.strip_prefix(ATTENTION_DP_FLAG) {
            Some("") => true,
            Some(v) => v.strip_prefix('=').is_some_and(|v| {
                ["true", "1", "yes", "y", "on", "t"].contains(&v.to_ascii_lowercase().as_str())
            }),
            None => false,
        }
    })
}

/// Whether an `--extra_llm_api_options` YAML turns attention data
/// parallelism on: a top-level `enable_attention_dp: true` line (YAML's
/// spellings of true).
pub fn attention_dp(yaml: &str) -> bool {
    yaml.lines().any(|l| {
        let Some(v) = l.strip_prefix("enable_attention_dp:") else {
            return false;
        };
        let v = v.split('#').next().unwrap_or("").trim();
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        ["true", "yes", "on"].contains(&v.to_ascii_lowercase().as_str())
    })
}

/// Which cache files a TensorRT-LLM release writes at the path the
/// variable names (docs/trtllm.md, releases inferred from PR merge dates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Before 1.1: no persistence.
    None,
    /// 1.1.x and 1.2.0 release candidates: `<stem>.rank<N>.json` per rank;
    /// a file at the bare path turns tuning off.
    PerRank,
    /// 1.2.0 .. 1.2.x: one file, a `rank_<N>` section per rank, rewritten
    /// in place.
    File,
    /// 1.3.0 release candidates and later: one file, written atomically
    /// (temp file and rename) under a lock file beside it.
    FileAtomic,
}

/// The layout of TensorRT-LLM `version` (`1.2.0rc2`, `1.2.1`,
/// `1.3.0rc19`), None when it cannot be read as one.
pub fn layout_for_version(version: &str) -> Option<Layout> {
    let v = version.trim();
    let digits: String = v
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let rest = &v[digits.len()..];
    let mut parts = digits.split('.').filter(|p| !p.is_empty());
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = parts.next()?.parse().ok()?;
    let pre = rest.starts_with("rc") || rest.starts_with('a') || rest.starts_with('b');
    Some(match (major, minor) {
        (0, _) | (1, 0) => Layout::None,
        (1, 1) => Layout::PerRank,
        (1, 2) if pre && digits.trim_end_matches('.') == "1.2.0" => Layout::PerRank,
        (1, 2) => Layout::File,
        _ => Layout::FileAtomic,
    })
}

#[cfg(test)]
mod tests;
