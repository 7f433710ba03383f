//! What keepwrap knows about vLLM and its FlashInfer autotune cache, as pure
//! functions of what they are given (argv, environment pairs, file names,
//! the bytes of a model's `config.json`): no file system, no process.
//!
//! The facts were read from vLLM 0.24.0-0.33.0 and FlashInfer 0.6.18 /
//! 0.7.2.post1 (`vllm/model_executor/warmup/flashinfer_autotune_cache.py`,
//! `kernel_warmup.py`, `vllm/envs.py`, `vllm/engine/arg_utils.py`,
//! `vllm/utils/argparse_utils.py`, `vllm/entrypoints/common/cli_args.py`).
//!
//! - [`recognise`]: is a command a vLLM server launch, and where its engine
//!   arguments start;
//! - [`autotune_root`], [`managed_store_root`], [`arch_component`]: where
//!   vLLM and FlashInfer keep the tactics, from the child's environment;
//! - [`Layout`], [`FileKind`]: which files each vLLM release writes;
//! - [`arg_roles`], [`FRONT_END_ARGS`], [`PER_NODE_ARGS`], [`VOLATILE_ENV`]:
//!   what must not enter a vLLM launch's fingerprint;
//! - [`ParallelSizes`]: the world, and which ranks' files a node writes;
//! - [`moe_from_config`], [`launch_moe`]: whether a launch runs MoE layers,
//!   decided conservatively.

use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

// ---------------------------------------------------------------------------
// Recognising a launch

/// How a vLLM server was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entrypoint {
    /// `vllm serve [MODEL] ...`, or `python -m vllm.entrypoints.cli.main serve ...`
    Serve,
    /// `python -m vllm.entrypoints.openai.api_server --model MODEL ...` (deprecated, still works)
    ApiServer,
}

/// A recognised vLLM launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub entrypoint: Entrypoint,
    /// Index in argv of the first engine argument (after `serve`, or after
    /// the api_server module name).
    pub args_start: usize,
}

impl Launch {
    /// The engine arguments of `argv` (the argv this launch was recognised in).
    pub fn args<'a>(&self, argv: &'a [OsString]) -> &'a [OsString] {
        argv.get(self.args_start..).unwrap_or(&[])
    }

    /// The model: the first engine argument when it is not an option
    /// (`vllm serve MODEL`), else the value of `--model` (`--model M`,
    /// `--model=M`). `None` when neither is on the command line (it may be
    /// in the `--config` file).
    pub fn model<'a>(&self, argv: &'a [OsString]) -> Option<&'a OsStr> {
        let args = self.args(argv);
        if self.entrypoint == Entrypoint::Serve {
            if let Some(first) = args.first() {
                if !first.as_bytes().starts_with(b"-") {
                    return Some(first);
                }
            }
        }
        option_value(args, "--model")
    }

    /// The `--config FILE` (or `--config=FILE`) of the launch: vLLM inserts
    /// its keys as arguments, so its contents belong to the launch.
    pub fn config_file<'a>(&self, argv: &'a [OsString]) -> Option<&'a OsStr> {
        option_value(self.args(argv), "--config")
    }
}

/// The value of the last `FLAG VALUE` or `FLAG=VALUE` in `args` (flag names
/// compared the way vLLM's parser does: `_` and `-` alike).
fn option_value<'a>(args: &'a [OsString], flag: &str) -> Option<&'a OsStr> {
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        let b = a.as_bytes();
        let (name, eq) = match b.iter().position(|&c| c == b'=') {
            Some(p) => (&b[..p], Some(p)),
            None => (b, None),
        };
        if canonical_flag(name) != flag.as_bytes() {
            continue;
        }
        found = match eq {
            Some(p) => Some(OsStr::from_bytes(&b[p + 1..])),
            None => args.get(i + 1).map(OsString::as_os_str),
        };
    }
    found
}

/// Whether `argv` is a vLLM server launch: `vllm serve ...` (any path to a
/// program named `vllm`), or a Python interpreter (`python`, `python3`,
/// `python3.12`, any path) running `-m vllm.entrypoints.openai.api_server`
/// or `-m vllm.entrypoints.cli.main serve`, after interpreter options such
/// as `-u`, `-O`, `-X opt`, `-W arg`. Other `vllm` subcommands and shell
/// wrappers are not recognised here.
pub fn recognise(argv: &[OsString]) -> Option<Launch> {
    let prog = Path::new(argv.first()?).file_name()?.as_bytes();
    if prog == b"vllm" {
        return (argv.get(1)?.as_bytes() == b"serve").then_some(Launch {
            entrypoint: Entrypoint::Serve,
            args_start: 2,
        });
    }
    if !super::is_python(&String::from_utf8_lossy(prog)) {
        return None;
    }
    let mut i = 1;
    let module: &[u8] = loop {
        let a = argv.get(i)?.as_bytes();
        if a == b"-m" {
            i += 1;
            break argv.get(i)?.as_bytes();
        }
        if let Some(m) = a.strip_prefix(b"-m") {
            break m;
        }
        if !a.starts_with(b"-") || a == b"-" || a == b"-c" || a.starts_with(b"--") {
            return None; // a script, stdin, -c, or --help/--version
        }
        // -X and -W take a value, attached or as the next argument
        if (a == b"-X" || a == b"-W") && argv.get(i + 1).is_some() {
            i += 1;
        }
        i += 1;
    };
    match module {
        b"vllm.entrypoints.openai.api_server" => Some(Launch {
            entrypoint: Entrypoint::ApiServer,
            args_start: i + 1,
        }),
        b"vllm.entrypoints.cli.main" => {
            (argv.get(i + 1)?.as_bytes() == b"serve").then_some(Launch {
                entrypoint: Entrypoint::Serve,
                args_start: i + 2,
            })
        }
        _ => None,
    }
}

/// A flag name the way vLLM's parser sees it: in `--long_name` (up to a `.`),
/// underscores become dashes. Short flags (`-tp`) are returned as they are.
pub fn canonical_flag(name: &[u8]) -> Vec<u8> {
    match name.strip_prefix(b"--") {
        Some(rest) => {
            let dot = rest.iter().position(|&c| c == b'.').unwrap_or(rest.len());
            let mut out = b"--".to_vec();
            out.extend(
                rest[..dot]
                    .iter()
                    .map(|&c| if c == b'_' { b'-' } else { c }),
            );
            out.extend_from_slice(&rest[dot..]);
            out
        }
        None => name.to_vec(),
    }
}

// ---------------------------------------------------------------------------
// Where the cache lives

/// First value of `name` in `env` (as `getenv` sees it), set or not.
fn getenv<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(k, _)| k.as_bytes() == name.as_bytes())
        .map(|(_, v)| v.as_os_str())
}

/// A value that is set and not empty.
fn nonempty<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    getenv(env, name).filter(|v| !v.is_empty())
}

/// Why a cache location cannot be computed from the environment alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// `~` must be expanded and `HOME` is not set (Python would read the
    /// password database).
    #[error("{var} needs HOME to expand `~`, and HOME is not set")]
    NoHome { var: &'static str },
    /// `~user` forms need the password database.
    #[error("{var} starts with `~user`, which keepwrap does not expand")]
    OtherUser { var: &'static str },
}

/// Python's `os.path.expanduser` for `~` and `~/...` with `HOME` from `env`.
fn expanduser(
    path: &OsStr,
    env: &[(OsString, OsString)],
    var: &'static str,
) -> Result<PathBuf, RootError> {
    let b = path.as_bytes();
    if !b.starts_with(b"~") {
        return Ok(PathBuf::from(path));
    }
    let end = b.iter().position(|&c| c == b'/').unwrap_or(b.len());
    if end != 1 {
        return Err(RootError::OtherUser { var });
    }
    let home = getenv(env, "HOME").ok_or(RootError::NoHome { var })?;
    let mut out = home.as_bytes().to_vec();
    while out.last() == Some(&b'/') {
        out.pop();
    }
    out.extend_from_slice(&b[end..]);
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(PathBuf::from(OsString::from_vec(out)))
}

/// The directory that holds vLLM's `<sha256 hex>/` folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutotuneRoot {
    /// `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` (`~` expanded): the folders are
    /// right in it, with no FlashInfer version or arch levels. With a
    /// one-rank launch on 0.33.0, FlashInfer's managed store is here too
    /// (`v2/`).
    Override(PathBuf),
    /// `$VLLM_CACHE_ROOT/flashinfer_autotune_cache`: the folders are in
    /// `<flashinfer version>/<arch>/` below it (see [`arch_component`]).
    VllmCacheRoot(PathBuf),
}

impl AutotuneRoot {
    /// The directory itself.
    pub fn path(&self) -> &Path {
        match self {
            AutotuneRoot::Override(p) | AutotuneRoot::VllmCacheRoot(p) => p,
        }
    }
}

/// Where vLLM (0.27.1 and later) keeps the autotune files, from the child's
/// environment: `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` when set and not
/// empty; else `$VLLM_CACHE_ROOT`, else `$XDG_CACHE_HOME/vllm`, else
/// `~/.cache/vllm`, then `flashinfer_autotune_cache`. As in vLLM, a variable
/// set to the empty string counts as set for `VLLM_CACHE_ROOT` and
/// `XDG_CACHE_HOME` (giving a path relative to the engine's working
/// directory, returned relative), and `~` is expanded with `HOME`.
pub fn autotune_root(env: &[(OsString, OsString)]) -> Result<AutotuneRoot, RootError> {
    const OVERRIDE: &str = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR";
    if let Some(dir) = nonempty(env, OVERRIDE) {
        return expanduser(dir, env, OVERRIDE).map(AutotuneRoot::Override);
    }
    let root = match getenv(env, "VLLM_CACHE_ROOT") {
        Some(v) => expanduser(v, env, "VLLM_CACHE_ROOT")?,
        None => {
            let base = match getenv(env, "XDG_CACHE_HOME") {
                Some(x) => expanduser(x, env, "XDG_CACHE_HOME")?,
                None => expanduser(OsStr::new("~/.cache"), env, "HOME")?,
            };
            base.join("vllm")
        }
    };
    Ok(AutotuneRoot::VllmCacheRoot(
        root.join("flashinfer_autotune_cache"),
    ))
}

/// Root of FlashInfer's managed autotune store, used by one-rank launches on
/// vLLM 0.33.0 (`<root>/v2/<env hash>/manifest.json`, `entries/*.json`):
/// `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` when set and not empty, else
/// `$FLASHINFER_AUTOTUNE_CACHE_DIR`, else
/// `${FLASHINFER_WORKSPACE_BASE:-~}/.cache/flashinfer/autotune`.
pub fn managed_store_root(env: &[(OsString, OsString)]) -> Result<PathBuf, RootError> {
    if let Some(dir) = nonempty(env, "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR") {
        return expanduser(dir, env, "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR");
    }
    if let Some(dir) = nonempty(env, "FLASHINFER_AUTOTUNE_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match getenv(env, "FLASHINFER_WORKSPACE_BASE") {
        Some(b) => PathBuf::from(b),
        None => expanduser(OsStr::new("~"), env, "HOME")?,
    };
    Ok(base.join(".cache/flashinfer/autotune"))
}

/// The `<arch>` level below the FlashInfer version when
/// `FLASHINFER_CUDA_ARCH_LIST` decides it (`"10.0a 9.0a"` -> `90a_100a`:
/// dots dropped, sorted by compute capability, `_`-joined). `None` when the
/// variable is unset or empty: then the visible GPUs decide, which only the
/// engine's process can see.
pub fn arch_component(env: &[(OsString, OsString)]) -> Option<String> {
    let list = nonempty(env, "FLASHINFER_CUDA_ARCH_LIST")?.to_string_lossy();
    let mut archs: Vec<(u32, u32, String)> = list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (major, minor) = s.split_once('.').unwrap_or((s, ""));
            let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
            (
                major.parse().unwrap_or(0),
                digits.parse().unwrap_or(0),
                s.replace('.', ""),
            )
        })
        .collect();
    if archs.is_empty() {
        return None;
    }
    archs.sort();
    Some(
        archs
            .into_iter()
            .map(|(_, _, s)| s)
            .collect::<Vec<_>>()
            .join("_"),
    )
}

// ---------------------------------------------------------------------------
// Files, by release

/// What a vLLM release does with the autotune cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// 0.24.0: the cache code is switched off; every boot tunes, nothing is written.
    Off,
    /// 0.25.x, 0.26.x: one-rank launches only, one `autotune_configs.json`.
    OneRankOnly,
    /// Layout A, 0.27.1 - 0.31.x: one shared `autotune_configs.json` that
    /// world rank 0 writes on every boot and broadcasts on the next. Until
    /// 0.29.x the folder's hash includes the `VLLM_*` environment and the
    /// vLLM version; from 0.30.0 on, the engine configuration only. A kept
    /// file hangs every warm boot of a MoE model with more than one rank.
    Shared { env_in_key: bool },
    /// Layout C, 0.32.0 on: `autotune_configs_dp<D>_rank<R>.json` per rank,
    /// kept only when every rank's file agrees (the gate), saved only by a
    /// rank that tuned. From 0.33.0 on a kept cache skips tuning altogether,
    /// and one-rank launches use FlashInfer's managed store instead.
    PerRank {
        skips_tuning_when_kept: bool,
        managed_store_for_one_rank: bool,
    },
}

/// The layout of vLLM `version` (`0.33.0`, `0.31.0+cu129`, `0.32.0rc1`...),
/// or `None` for releases before 0.24.0 and versions that do not parse.
/// Releases between 0.26.x and 0.27.1 (0.27.0) were not read: `None`.
pub fn layout_for_version(version: &str) -> Option<Layout> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
    let v = (num()?, num()?, num().unwrap_or(0));
    Some(match v {
        (0, 0..=23, _) => return None,
        (0, 24, _) => Layout::Off,
        (0, 25 | 26, _) => Layout::OneRankOnly,
        (0, 27, 0) => return None,
        (0, 27..=29, _) => Layout::Shared { env_in_key: true },
        (0, 30 | 31, _) => Layout::Shared { env_in_key: false },
        (0, 32, _) => Layout::PerRank {
            skips_tuning_when_kept: false,
            managed_store_for_one_rank: false,
        },
        _ => Layout::PerRank {
            skips_tuning_when_kept: true,
            managed_store_for_one_rank: true,
        },
    })
}

/// The shared file of layout A (and of 0.25 / 0.26).
pub const SHARED_FILE: &str = "autotune_configs.json";
/// The second name of vLLM PR 57579 (layout B, in no release read).
pub const LAYOUT_B_FILE: &str = "autotune_config.json";

/// The layout C file of world rank `rank` in data-parallel rank `dp_rank`.
pub fn rank_file_name(dp_rank: u64, rank: u64) -> String {
    format!("autotune_configs_dp{dp_rank}_rank{rank}.json")
}

/// What a file name in a `<sha256>/` folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `autotune_configs_dp<D>_rank<R>.json` (layout C)
    Rank { dp_rank: u64, rank: u64 },
    /// `autotune_configs.json` (layout A)
    Shared,
    /// `autotune_config.json` (layout B)
    LayoutB,
    /// A temporary file of a save in progress, or left by a process that
    /// died: vLLM's `.autotune_configs*.json.<random>.tmp`, FlashInfer's
    /// `.autotuner_<random>.tmp`, the managed store's `.autotune_<random>.tmp`.
    Temp,
}

/// The kind of a file named `name`, `None` when it is none of vLLM's.
pub fn file_kind(name: &str) -> Option<FileKind> {
    match name {
        SHARED_FILE => return Some(FileKind::Shared),
        LAYOUT_B_FILE => return Some(FileKind::LayoutB),
        _ => {}
    }
    if name.ends_with(".tmp")
        && [".autotune_configs", ".autotuner_", ".autotune_"]
            .iter()
            .any(|p| name.starts_with(p))
    {
        return Some(FileKind::Temp);
    }
    let rest = name
        .strip_prefix("autotune_configs_dp")?
        .strip_suffix(".json")?;
    let (dp, rank) = rest.split_once("_rank")?;
    let number = |s: &str| {
        (!s.is_empty()
            && s.bytes().all(|c| c.is_ascii_digit())
            && (s == "0" || !s.starts_with('0')))
        .then(|| s.parse().ok())
        .flatten()
    };
    Some(FileKind::Rank {
        dp_rank: number(dp)?,
        rank: number(rank)?,
    })
}

// ---------------------------------------------------------------------------
// What the fingerprint leaves out

/// How an argument takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A switch. vLLM also accepts its paired spellings (`--no-X`,
    /// `--enable-X`/`--disable-X`); see [`switch_spellings`].
    Nothing,
    /// `FLAG VALUE` or `FLAG=VALUE`.
    One,
    /// `FLAG V1 V2 ...` (argparse `nargs="+"`) or `FLAG=V1`.
    OneOrMore,
}

/// One vLLM argument: its long name, its short alias, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    pub long: &'static str,
    pub short: Option<&'static str>,
    pub takes: Takes,
}

const fn arg(long: &'static str, takes: Takes) -> Arg {
    Arg {
        long,
        short: None,
        takes,
    }
}

const fn arg_short(long: &'static str, short: &'static str, takes: Takes) -> Arg {
    Arg {
        long,
        short: Some(short),
        takes,
    }
}

/// Arguments of the API front end: where and how it listens, authenticates
/// and logs. They change nothing that is tuned.
pub const FRONT_END_ARGS: &[Arg] = &[
    arg("--host", Takes::One),
    arg("--port", Takes::One),
    arg("--uds", Takes::One),
    arg("--grpc-port", Takes::One),
    arg_short("--api-server-count", "-asc", Takes::One),
    arg("--api-key", Takes::OneOrMore),
    arg("--ssl-keyfile", Takes::One),
    arg("--ssl-certfile", Takes::One),
    arg("--ssl-ca-certs", Takes::One),
    arg("--ssl-cert-reqs", Takes::One),
    arg("--ssl-ciphers", Takes::One),
    arg("--enable-ssl-refresh", Takes::Nothing),
    arg("--root-path", Takes::One),
    arg("--middleware", Takes::OneOrMore),
    arg("--allow-credentials", Takes::Nothing),
    arg("--allowed-origins", Takes::OneOrMore),
    arg("--allowed-methods", Takes::OneOrMore),
    arg("--allowed-headers", Takes::OneOrMore),
    arg("--served-model-name", Takes::OneOrMore),
    arg("--uvicorn-log-level", Takes::One),
    arg("--disable-uvicorn-access-log", Takes::Nothing),
    arg("--disable-access-log-for-endpoints", Takes::One),
    arg("--enable-log-requests", Takes::Nothing),
    arg("--disable-log-stats", Takes::Nothing),
    arg("--max-log-len", Takes::One),
    arg("--enable-request-id-headers", Takes::Nothing),
    arg("--disable-fastapi-docs", Takes::Nothing),
    arg("--enable-offline-docs", Takes::Nothing),
    arg("--data-parallel-supervisor-port", Takes::One),
    arg("--dp-supervisor-probe-interval-s", Takes::One),
    arg("--dp-supervisor-probe-timeout-s", Takes::One),
    arg("--dp-supervisor-probe-failure-threshold", Takes::One),
];

/// Arguments that differ between the nodes of one launch (which node this
/// is, which ranks it hosts, whether it serves), or name rendezvous
/// addresses and ports that change from boot to boot. vLLM's own cache key
/// leaves them out too (`vllm/config/parallel.py`).
pub const PER_NODE_ARGS: &[Arg] = &[
    arg_short("--node-rank", "-r", Takes::One),
    arg("--headless", Takes::Nothing),
    arg_short("--data-parallel-rank", "-dpn", Takes::One),
    arg_short("--data-parallel-start-rank", "-dpr", Takes::One),
    arg_short("--data-parallel-size-local", "-dpl", Takes::One),
    arg_short("--data-parallel-address", "-dpa", Takes::One),
    arg_short("--data-parallel-rpc-port", "-dpp", Takes::One),
    arg("--master-addr", Takes::One),
    arg("--master-port", Takes::One),
];

/// The spellings vLLM accepts for switch `long`: `--X` and `--no-X`, and for
/// `--enable-X` / `--disable-X` the opposite prefix too
/// (`vllm/utils/argparse_utils.py`, `EnableDisableAction`).
pub fn switch_spellings(long: &str) -> Vec<String> {
    let bare = long.trim_start_matches('-');
    let mut out = vec![format!("--{bare}"), format!("--no-{bare}")];
    if let Some(x) = bare.strip_prefix("enable-") {
        out.push(format!("--disable-{x}"));
    } else if let Some(x) = bare.strip_prefix("disable-") {
        out.push(format!("--enable-{x}"));
    }
    out
}

/// Which list an argument of a vLLM launch belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgRole {
    /// Part of the launch: fingerprinted.
    Launch,
    /// A [`FRONT_END_ARGS`] flag or its value.
    FrontEnd,
    /// A [`PER_NODE_ARGS`] flag or its value.
    PerNode,
}

fn find_arg(token: &[u8]) -> Option<(ArgRole, &'static Arg, bool)> {
    let (name, attached) = match token.iter().position(|&c| c == b'=') {
        Some(p) => (&token[..p], true),
        None => (token, false),
    };
    let name = canonical_flag(name);
    let lists = [
        (ArgRole::FrontEnd, FRONT_END_ARGS),
        (ArgRole::PerNode, PER_NODE_ARGS),
    ];
    for (role, list) in lists {
        for a in list {
            let hit = if a.takes == Takes::Nothing {
                !attached
                    && switch_spellings(a.long)
                        .iter()
                        .any(|s| s.as_bytes() == name.as_slice())
            } else {
                a.long.as_bytes() == name.as_slice()
                    || a.short.is_some_and(|s| s.as_bytes() == name.as_slice())
            };
            if hit {
                return Some((role, a, attached));
            }
        }
    }
    // `-r1`: argparse's attached value of a two-letter short flag
    if token.len() > 2 && token.starts_with(b"-r") && token[2].is_ascii_digit() {
        let node_rank = PER_NODE_ARGS.iter().find(|a| a.short == Some("-r"))?;
        return Some((ArgRole::PerNode, node_rank, true));
    }
    None
}

/// The role of each of a launch's engine arguments (see [`Launch::args`]):
/// a listed flag and its value(s) are [`ArgRole::FrontEnd`] or
/// [`ArgRole::PerNode`], everything else [`ArgRole::Launch`]. A value is
/// the next argument unless that starts with `--` (a missing value: the
/// next flag is never swallowed); `nargs="+"` flags take every following
/// argument up to one that starts with `-`.
pub fn arg_roles(args: &[OsString]) -> Vec<ArgRole> {
    let mut roles = vec![ArgRole::Launch; args.len()];
    let mut i = 0;
    while i < args.len() {
        let Some((role, a, attached)) = find_arg(args[i].as_bytes()) else {
            i += 1;
            continue;
        };
        roles[i] = role;
        i += 1;
        if attached {
            continue;
        }
        match a.takes {
            Takes::Nothing => {}
            Takes::One => {
                if args
                    .get(i)
                    .is_some_and(|v| !v.as_bytes().starts_with(b"--"))
                {
                    roles[i] = role;
                    i += 1;
                }
            }
            Takes::OneOrMore => {
                while args.get(i).is_some_and(|v| !v.as_bytes().starts_with(b"-")) {
                    roles[i] = role;
                    i += 1;
                }
            }
        }
    }
    roles
}

/// Environment prefixes a vLLM launch's fingerprint selects.
pub const ENV_PREFIXES: &[&str] = &["VLLM_", "FLASHINFER_"];

/// `VLLM_*` and `FLASHINFER_*` variables that change nothing that is tuned:
/// from vLLM's own list of variables that do not affect compiled artifacts
/// (`compile_factors()` in `vllm/envs.py`), plus the other addresses,
/// ports, log and timeout settings of 0.33.0. Deliberately *not* here,
/// although vLLM's list has them, because they change what is tuned or
/// which model runs: `VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS`,
/// `VLLM_TUNED_CONFIG_FOLDER`, `VLLM_MODEL_REDIRECT_PATH`,
/// `VLLM_USE_MODELSCOPE`, `VLLM_TEST_FORCE_LOAD_FORMAT`,
/// `VLLM_RANDOMIZE_DP_DUMMY_INPUTS`, the `VLLM_MAX_*` media limits,
/// `VLLM_ENABLE_CUDA_COMPATIBILITY`, `VLLM_CUDA_COMPATIBILITY_PATH`.
pub const VOLATILE_ENV: &[&str] = &[
    // addresses, ports and per-process ranks: per node, per boot
    "VLLM_HOST_IP",
    "VLLM_LOOPBACK_IP",
    "VLLM_PORT",
    "VLLM_RPC_BASE_PATH",
    "VLLM_DP_MASTER_IP",
    "VLLM_DP_MASTER_PORT",
    "VLLM_DP_RANK",
    "VLLM_DP_RANK_LOCAL",
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "VLLM_NIXL_SIDE_CHANNEL_PORT",
    "VLLM_EC_SIDE_CHANNEL_HOST",
    "VLLM_EC_SIDE_CHANNEL_PORT",
    "VLLM_P2P_SIDE_CHANNEL_HOST",
    "VLLM_P2P_SIDE_CHANNEL_PORT",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    "VLLM_RAY_BUNDLE_INDICES",
    "VLLM_RAY_DP_PLACEMENT_NODE_IPS",
    // where caches and configuration live (the location is not the launch)
    "VLLM_CACHE_ROOT",
    "VLLM_CONFIG_ROOT",
    "VLLM_XLA_CACHE_PATH",
    "VLLM_ASSETS_CACHE",
    "VLLM_MEDIA_CACHE",
    "VLLM_DEBUG_DUMP_PATH",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
    "FLASHINFER_AUTOTUNE_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    // credentials
    "VLLM_API_KEY",
    // logging and usage statistics
    "VLLM_CONFIGURE_LOGGING",
    "VLLM_LOGGING_LEVEL",
    "VLLM_LOGGING_PREFIX",
    "VLLM_LOGGING_STREAM",
    "VLLM_LOGGING_CONFIG_PATH",
    "VLLM_LOGGING_COLOR",
    "VLLM_LOG_STATS_INTERVAL",
    "VLLM_LOG_BATCHSIZE_INTERVAL",
    "VLLM_LOG_MODEL_INSPECTION",
    "VLLM_DISABLE_LOG_LOGO",
    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
    "VLLM_REQUEST_BODY_LOG_LEVEL",
    "VLLM_RINGBUFFER_WARNING_INTERVAL",
    "VLLM_USAGE_STATS_SERVER",
    "VLLM_NO_USAGE_STATS",
    "VLLM_DO_NOT_TRACK",
    "FLASHINFER_LOGLEVEL",
    "FLASHINFER_LOGDEST",
    // timeouts and limits of requests
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "VLLM_HTTP_MAX_REQUEST_BODY_SIZE",
    "VLLM_ENGINE_READY_TIMEOUT_S",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
    "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
    "VLLM_IMAGE_FETCH_TIMEOUT",
    "VLLM_VIDEO_FETCH_TIMEOUT",
    "VLLM_AUDIO_FETCH_TIMEOUT",
    "VLLM_MEDIA_FETCH_MAX_RETRIES",
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
    "VLLM_CHAT_TEMPLATE_RENDER_TIMEOUT",
    "VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS",
    "VLLM_REGEX_COMPILATION_TIMEOUT_S",
];

// ---------------------------------------------------------------------------
// Parallel layout

/// The parallel sizes and node placement of a launch, from its engine
/// arguments (a `--config` file's keys must be merged in by the caller, in
/// front, as vLLM does). A size that does not parse is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelSizes {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub dp: Option<u64>,
    /// `--prefill-context-parallel-size` (multiplies the ranks per DP rank)
    pub pcp: Option<u64>,
    pub expert_parallel: bool,
    pub nnodes: Option<u64>,
    pub node_rank: Option<u64>,
    pub dp_rank: Option<u64>,
    pub dp_start_rank: Option<u64>,
    pub dp_size_local: Option<u64>,
    pub headless: bool,
}

impl ParallelSizes {
    /// Read from `args` (the last occurrence of a flag wins, as in argparse).
    pub fn from_args(args: &[OsString]) -> ParallelSizes {
        let num = |long: &str, short: &str, default: Option<u64>| -> Option<u64> {
            let mut v = default.map(|d| d.to_string().into_bytes());
            let mut i = 0;
            while i < args.len() {
                let b = args[i].as_bytes();
                let (name, val) = match b.iter().position(|&c| c == b'=') {
                    Some(p) => (&b[..p], Some(b[p + 1..].to_vec())),
                    None => (b, None),
                };
                let name = canonical_flag(name);
                if name == long.as_bytes() || name == short.as_bytes() {
                    v = val.or_else(|| args.get(i + 1).map(|n| n.as_bytes().to_vec()));
                }
                i += 1;
            }
            std::str::from_utf8(&v?).ok()?.parse().ok()
        };
        let switch = |long: &str, short: &str| -> bool {
            let mut on = false;
            for a in args {
                let name = canonical_flag(a.as_bytes());
                if name == long.as_bytes() || name == short.as_bytes() {
                    on = true;
                } else if switch_spellings(long)[1..]
                    .iter()
                    .any(|s| s.as_bytes() == name.as_slice())
                {
                    on = false;
                }
            }
            on
        };
        ParallelSizes {
            tp: num("--tensor-parallel-size", "-tp", Some(1)),
            pp: num("--pipeline-parallel-size", "-pp", Some(1)),
            dp: num("--data-parallel-size", "-dp", Some(1)),
            pcp: num("--prefill-context-parallel-size", "-pcp", Some(1)),
            expert_parallel: switch("--enable-expert-parallel", "-ep"),
            nnodes: num("--nnodes", "-n", Some(1)),
            node_rank: num("--node-rank", "-r", Some(0)),
            dp_rank: num("--data-parallel-rank", "-dpn", None),
            dp_start_rank: num("--data-parallel-start-rank", "-dpr", None),
            dp_size_local: num("--data-parallel-size-local", "-dpl", None),
            headless: switch("--headless", "--headless"),
        }
    }

    /// Ranks per DP rank (TP x PP x PCP); `None` when a size is unknown.
    pub fn within_dp(&self) -> Option<u64> {
        self.tp?.checked_mul(self.pp?)?.checked_mul(self.pcp?)
    }

    /// The world size, DP folded in as vLLM does; `None` when unknown.
    pub fn world(&self) -> Option<u64> {
        self.within_dp()?.checked_mul(self.dp?)
    }

    /// The world ranks whose files this node writes (layout C), `None` when
    /// the arguments do not say it unambiguously. `--nnodes N --node-rank R`:
    /// ranks `R*W/N .. (R+1)*W/N`; `--data-parallel-size-local L` with
    /// `--data-parallel-start-rank S` (or `--data-parallel-rank S`, L = 1):
    /// the ranks of DP ranks `S .. S+L`; otherwise the whole world.
    pub fn local_ranks(&self) -> Option<Range<u64>> {
        let world = self.world()?;
        let nnodes = self.nnodes?;
        if nnodes > 1 {
            let node = self.node_rank?;
            if world % nnodes != 0 || node >= nnodes {
                return None;
            }
            let per = world / nnodes;
            return Some(node * per..(node + 1) * per);
        }
        let within = self.within_dp()?;
        let (start, local) = match (self.dp_rank, self.dp_start_rank, self.dp_size_local) {
            (Some(r), _, _) => (r, 1),
            (None, Some(s), Some(l)) => (s, l),
            (None, None, Some(l)) => (0, l),
            (None, None, None) => (0, self.dp?),
            (None, Some(_), None) => return None,
        };
        let end = start.checked_add(local)?;
        if local == 0 || end > self.dp? {
            return None;
        }
        Some(start * within..end * within)
    }

    /// The layout C file names this node's ranks write.
    pub fn local_rank_files(&self) -> Option<Vec<String>> {
        let within = self.within_dp()?;
        Some(
            self.local_ranks()?
                .map(|r| rank_file_name(r / within, r))
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------
// MoE or dense

/// Whether a launch runs mixture-of-experts layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moe {
    /// The config names this many experts (under this key).
    Yes { key: String, experts: u64 },
    /// Nothing shows experts: a dense model.
    Dense,
    /// Cannot tell (no config, not JSON, an expert hint without a count...):
    /// treat as MoE.
    Unsure(String),
}

impl Moe {
    /// The conservative reading: only a certain [`Moe::Dense`] is dense.
    pub fn treat_as_moe(&self) -> bool {
        !matches!(self, Moe::Dense)
    }
}

/// Keys that count a model's experts (DeepSeek, Qwen-MoE, Mixtral, GPT-OSS,
/// Llama 4, DBRX, ERNIE-MoE ...).
pub const EXPERT_COUNT_KEYS: &[&str] = &[
    "n_routed_experts",
    "num_experts",
    "num_local_experts",
    "moe_num_experts",
    "num_routed_experts",
    "n_experts",
];

/// Keys that only MoE configs carry, without counting the experts.
const EXPERT_HINT_KEYS: &[&str] = &[
    "num_experts_per_tok",
    "num_experts_per_token",
    "moe_intermediate_size",
    "moe_topk",
    "moe_k",
    "n_shared_experts",
    "moe_layer_freq",
];

/// Decide from the bytes of the model's `config.json` (`None`: there is
/// none, e.g. the model is a hub name), looking into nested sections
/// (`text_config`, `ffn_config`, ...). An expert count of 2 or more is MoE;
/// a count of 0 or `null` with no other sign is dense; anything else that
/// hints at experts (a count of 1, a list, an expert-only key, an
/// architecture or model type named like a MoE) is unsure.
pub fn moe_from_config(config: Option<&[u8]>) -> Moe {
    let Some(bytes) = config else {
        return Moe::Unsure("no config.json".into());
    };
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Moe::Unsure(format!("config.json is not JSON: {e}")),
    };
    if !value.is_object() {
        return Moe::Unsure("config.json is not a JSON object".into());
    }
    let mut found = Found::default();
    scan(&value, "", 0, &mut found);
    if let Some((key, experts)) = found.count {
        return Moe::Yes { key, experts };
    }
    if let Some(why) = found.hint {
        return Moe::Unsure(why);
    }
    Moe::Dense
}

#[derive(Default)]
struct Found {
    count: Option<(String, u64)>,
    hint: Option<String>,
}

/// How deep [`moe_from_config`] looks into nested sections.
const MAX_DEPTH: usize = 6;

fn scan(v: &Value, path: &str, depth: usize, found: &mut Found) {
    let Some(obj) = v.as_object() else { return };
    for (k, val) in obj {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let lower = k.to_ascii_lowercase();
        if EXPERT_COUNT_KEYS.contains(&lower.as_str()) {
            match val {
                Value::Null => {}
                Value::Number(n) => match n.as_u64() {
                    Some(0) => {}
                    Some(c) if c >= 2 => {
                        found.count.get_or_insert((here.clone(), c));
                    }
                    _ => {
                        found.hint.get_or_insert(format!("{here} is {n}"));
                    }
                },
                _ => {
                    found.hint.get_or_insert(format!("{here} is not a number"));
                }
            }
        } else if EXPERT_HINT_KEYS.contains(&lower.as_str()) {
            let empty = matches!(val, Value::Null) || val.as_u64() == Some(0);
            if !empty {
                found.hint.get_or_insert(format!("{here} is set"));
            }
        } else if lower == "architectures" || lower == "model_type" {
            let names: Vec<String> = match val {
                Value::String(s) => vec![s.clone()],
                Value::Array(a) => a
                    .iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            for n in names {
                let l = n.to_ascii_lowercase();
                if [
                    "moe", "mixtral", "dbrx", "jamba", "arctic", "deepseek", "gpt_oss", "gptoss",
                ]
                .iter()
                .any(|m| l.contains(m))
                {
                    found.hint.get_or_insert(format!("{here} names {n}"));
                }
            }
        }
        if val.is_object() {
            if depth < MAX_DEPTH {
                scan(val, &here, depth + 1, found);
            } else {
                found
                    .hint
                    .get_or_insert(format!("{here} nests deeper than keepwrap looks"));
            }
        }
    }
}

/// The MoE decision for a launch: the model's config, and the launch
/// itself. Expert parallelism asked for, or a `--hf-overrides` that
/// mentions experts, makes a dense reading unsure.
pub fn launch_moe(args: &[OsString], config: Option<&[u8]>) -> Moe {
    let verdict = moe_from_config(config);
    if verdict != Moe::Dense {
        return verdict;
    }
    if ParallelSizes::from_args(args).expert_parallel {
        return Moe::Unsure("the launch enables expert parallelism".into());
    }
    if let Some(o) = option_value(args, "--hf-overrides") {
        if o.to_string_lossy().to_ascii_lowercase().contains("expert") {
            return Moe::Unsure("--hf-overrides mentions experts".into());
        }
    }
    Moe::Dense
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn env(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn recognises_the_launch_shapes() {
        let serve = os(&["/usr/local/bin/vllm", "serve", "/models/m", "-tp", "2"]);
        let l = recognise(&serve).unwrap();
        assert_eq!(l.entrypoint, Entrypoint::Serve);
        assert_eq!(l.args(&serve), &os(&["/models/m", "-tp", "2"])[..]);
        assert_eq!(l.model(&serve), Some(OsStr::new("/models/m")));

        let api = os(&[
            "python3",
            "-u",
            "-X",
            "faulthandler",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model=/m",
            "--port",
            "9000",
        ]);
        let l = recognise(&api).unwrap();
        assert_eq!(l.entrypoint, Entrypoint::ApiServer);
        assert_eq!(l.args_start, 6);
        assert_eq!(l.model(&api), Some(OsStr::new("/m")));

        for argv in [
            os(&["python", "-m", "vllm.entrypoints.cli.main", "serve", "M"]),
            os(&[
                "/opt/venv/bin/python3.12",
                "-mvllm.entrypoints.cli.main",
                "serve",
                "M",
            ]),
            os(&["vllm", "serve", "--model", "M", "-tp", "2"]),
        ] {
            let l = recognise(&argv).unwrap_or_else(|| panic!("{argv:?}"));
            assert_eq!(l.entrypoint, Entrypoint::Serve);
            assert_eq!(l.model(&argv), Some(OsStr::new("M")), "{argv:?}");
        }
        let cfg = os(&["vllm", "serve", "--config", "/etc/v.yaml"]);
        let l = recognise(&cfg).unwrap();
        assert_eq!(l.model(&cfg), None);
        assert_eq!(l.config_file(&cfg), Some(OsStr::new("/etc/v.yaml")));

        for argv in [
            os(&["vllm", "bench", "serve"]),
            os(&["vllm"]),
            os(&["python3", "-m", "sglang.launch_server", "--model-path", "M"]),
            os(&[
                "python3",
                "script.py",
                "-m",
                "vllm.entrypoints.openai.api_server",
            ]),
            os(&[
                "python3",
                "-c",
                "import vllm",
                "-m",
                "vllm.entrypoints.openai.api_server",
            ]),
            os(&["python3", "-m", "vllm.entrypoints.cli.main", "bench"]),
            os(&["pythonic", "-m", "vllm.entrypoints.openai.api_server"]),
            os(&["bash", "-c", "vllm serve M"]),
            os(&[]),
        ] {
            assert_eq!(recognise(&argv), None, "{argv:?}");
        }
    }

    #[test]
    fn cache_root_follows_vllms_precedence() {
        let root = |e: &[(&str, &str)]| autotune_root(&env(e));
        let home = [("HOME", "/home/u")];
        assert_eq!(
            root(&home),
            Ok(AutotuneRoot::VllmCacheRoot(
                "/home/u/.cache/vllm/flashinfer_autotune_cache".into()
            ))
        );
        assert_eq!(
            root(&[("HOME", "/home/u/"), ("XDG_CACHE_HOME", "/xdg")]),
            Ok(AutotuneRoot::VllmCacheRoot(
                "/xdg/vllm/flashinfer_autotune_cache".into()
            ))
        );
        assert_eq!(
            root(&[
                ("XDG_CACHE_HOME", "/xdg"),
                ("VLLM_CACHE_ROOT", "~/vc"),
                ("HOME", "/h")
            ]),
            Ok(AutotuneRoot::VllmCacheRoot(
                "/h/vc/flashinfer_autotune_cache".into()
            ))
        );
        assert_eq!(
            root(&[
                ("VLLM_CACHE_ROOT", "/vc"),
                ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "/fi"),
            ]),
            Ok(AutotuneRoot::Override("/fi".into()))
        );
        // empty override: not used; empty VLLM_CACHE_ROOT: set (relative, as in vLLM)
        assert_eq!(
            root(&[
                ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", ""),
                ("VLLM_CACHE_ROOT", "")
            ]),
            Ok(AutotuneRoot::VllmCacheRoot(
                "flashinfer_autotune_cache".into()
            ))
        );
        // the first occurrence of a name wins
        assert_eq!(
            root(&[("VLLM_CACHE_ROOT", "/a"), ("VLLM_CACHE_ROOT", "/b")])
                .unwrap()
                .path(),
            Path::new("/a/flashinfer_autotune_cache")
        );
        assert_eq!(root(&[]), Err(RootError::NoHome { var: "HOME" }));
        assert_eq!(
            root(&[
                ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "~bob/x"),
                ("HOME", "/h")
            ]),
            Err(RootError::OtherUser {
                var: "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"
            })
        );
        assert_eq!(
            root(&[("VLLM_CACHE_ROOT", "~")]).unwrap_err().to_string(),
            "VLLM_CACHE_ROOT needs HOME to expand `~`, and HOME is not set"
        );
        assert_eq!(
            root(&[("VLLM_CACHE_ROOT", "~/x"), ("HOME", "/")])
                .unwrap()
                .path(),
            Path::new("/x/flashinfer_autotune_cache")
        );
    }

    #[test]
    fn managed_store_and_arch() {
        let store = |e: &[(&str, &str)]| managed_store_root(&env(e)).unwrap();
        assert_eq!(
            store(&[("HOME", "/h")]),
            Path::new("/h/.cache/flashinfer/autotune")
        );
        assert_eq!(
            store(&[("HOME", "/h"), ("FLASHINFER_WORKSPACE_BASE", "/ws")]),
            Path::new("/ws/.cache/flashinfer/autotune")
        );
        assert_eq!(
            store(&[
                ("FLASHINFER_AUTOTUNE_CACHE_DIR", "/fa"),
                ("FLASHINFER_WORKSPACE_BASE", "/ws")
            ]),
            Path::new("/fa")
        );
        assert_eq!(
            store(&[
                ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "/v"),
                ("FLASHINFER_AUTOTUNE_CACHE_DIR", "/fa")
            ]),
            Path::new("/v")
        );
        let arch = |v: &str| arch_component(&env(&[("FLASHINFER_CUDA_ARCH_LIST", v)]));
        assert_eq!(arch("10.0a 9.0a").as_deref(), Some("90a_100a"));
        assert_eq!(arch("12.0f,9.0a,10.3a").as_deref(), Some("90a_103a_120f"));
        assert_eq!(arch(" "), None);
        assert_eq!(arch_component(&[]), None);
    }

    #[test]
    fn layouts_and_file_names() {
        assert_eq!(layout_for_version("0.23.1"), None);
        assert_eq!(layout_for_version("0.24.0"), Some(Layout::Off));
        assert_eq!(layout_for_version("0.26.0"), Some(Layout::OneRankOnly));
        assert_eq!(layout_for_version("0.27.0"), None);
        assert_eq!(
            layout_for_version("0.27.1"),
            Some(Layout::Shared { env_in_key: true })
        );
        assert_eq!(
            layout_for_version("0.29.0+cu129"),
            Some(Layout::Shared { env_in_key: true })
        );
        assert_eq!(
            layout_for_version("0.30.0"),
            Some(Layout::Shared { env_in_key: false })
        );
        assert_eq!(
            layout_for_version("0.31.0"),
            Some(Layout::Shared { env_in_key: false })
        );
        assert_eq!(
            layout_for_version("0.32.0rc1"),
            Some(Layout::PerRank {
                skips_tuning_when_kept: false,
                managed_store_for_one_rank: false
            })
        );
        assert_eq!(
            layout_for_version("0.33.0"),
            Some(Layout::PerRank {
                skips_tuning_when_kept: true,
                managed_store_for_one_rank: true
            })
        );
        assert_eq!(layout_for_version("1.0"), layout_for_version("0.33.0"));
        assert_eq!(layout_for_version("dev"), None);

        assert_eq!(rank_file_name(1, 2), "autotune_configs_dp1_rank2.json");
        assert_eq!(
            file_kind("autotune_configs_dp1_rank2.json"),
            Some(FileKind::Rank {
                dp_rank: 1,
                rank: 2
            })
        );
        assert_eq!(file_kind("autotune_configs.json"), Some(FileKind::Shared));
        assert_eq!(file_kind("autotune_config.json"), Some(FileKind::LayoutB));
        for temp in [
            ".autotune_configs.json.k2j3h4.tmp",
            ".autotune_configs_dp0_rank0.json.ab.tmp",
            ".autotuner_x8d.tmp",
            ".autotune_q1.tmp",
        ] {
            assert_eq!(file_kind(temp), Some(FileKind::Temp), "{temp}");
        }
        for other in [
            "autotune_configs_dp_rank1.json",
            "autotune_configs_dp01_rank1.json",
            "autotune_configs_dp0_rank1.json.launch",
            "autotune_configs_dp0_rank-1.json",
            "rank_tp0_pp0_dp0.json",
            "manifest.json",
            ".autotune_configs.json",
        ] {
            assert_eq!(file_kind(other), None, "{other}");
        }
    }

    #[test]
    fn front_end_and_per_node_arguments() {
        use ArgRole::{FrontEnd as F, Launch as L, PerNode as N};
        let args = os(&[
            "/m",
            "-tp",
            "4",
            "--port",
            "8001",
            "--host=0.0.0.0",
            "--api-key",
            "k1",
            "k2",
            "-ep",
            "--node_rank",
            "1",
            "--headless",
            "-dpa",
            "10.0.0.1",
            "--master-port=29500",
            "-r1",
            "--no-enable-log-requests",
            "--max-num-seqs",
            "64",
            "--uvicorn-log-level",
            "--enforce-eager",
        ]);
        let want = [
            L, L, L, F, F, F, F, F, F, L, N, N, N, N, N, N, N, F, L, L, F, L,
        ];
        assert_eq!(arg_roles(&args), want);
        // a switch never takes the next token; an attached value is one token
        assert_eq!(arg_roles(&os(&["--headless", "x"])), [N, L]);
        assert_eq!(arg_roles(&os(&["--headless=1"])), [L]);
        assert_eq!(
            arg_roles(&os(&["--served-model-name", "a", "b", "-tp", "2"])),
            [F, F, F, L, L]
        );
        // what the engine tunes stays in
        for a in [
            "--nnodes",
            "-dp",
            "--data-parallel-size",
            "--enable-expert-parallel",
            "--config",
        ] {
            assert_eq!(arg_roles(&os(&[a])), [L], "{a}");
        }
        assert_eq!(
            switch_spellings("--enable-log-requests"),
            [
                "--enable-log-requests",
                "--no-enable-log-requests",
                "--disable-log-requests"
            ]
        );
        for list in [FRONT_END_ARGS, PER_NODE_ARGS] {
            for a in list {
                assert!(a.long.starts_with("--") && !a.long.contains('_'), "{a:?}");
            }
        }
    }

    #[test]
    fn volatile_environment() {
        for v in VOLATILE_ENV {
            assert!(ENV_PREFIXES.iter().any(|p| v.starts_with(p)), "{v}");
        }
        let mut sorted = VOLATILE_ENV.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), VOLATILE_ENV.len(), "no duplicates");
        for tuned in [
            "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
            "VLLM_FLASHINFER_MOE_BACKEND",
            "VLLM_ATTENTION_BACKEND",
            "FLASHINFER_CUDA_ARCH_LIST",
        ] {
            assert!(!VOLATILE_ENV.contains(&tuned), "{tuned}");
        }
    }

    #[test]
    fn parallel_sizes_and_local_files() {
        let p = |v: &[&str]| ParallelSizes::from_args(&os(v));
        let one = p(&["/m"]);
        assert_eq!(one.world(), Some(1));
        assert_eq!(
            one.local_rank_files().unwrap(),
            ["autotune_configs_dp0_rank0.json"]
        );

        let tp_nodes = p(&[
            "/m",
            "-tp",
            "4",
            "--nnodes",
            "2",
            "--node-rank=1",
            "--headless",
        ]);
        assert!(tp_nodes.headless);
        assert_eq!(tp_nodes.local_ranks(), Some(2..4));
        assert_eq!(
            tp_nodes.local_rank_files().unwrap(),
            [
                "autotune_configs_dp0_rank2.json",
                "autotune_configs_dp0_rank3.json"
            ]
        );

        let dp_head = p(&["/m", "-tp", "2", "-dp", "2", "-dpl", "1", "-ep"]);
        assert!(dp_head.expert_parallel);
        assert_eq!(dp_head.world(), Some(4));
        assert_eq!(dp_head.local_ranks(), Some(0..2));
        let dp_other = p(&[
            "/m",
            "-tp",
            "2",
            "-dp",
            "2",
            "-dpl",
            "1",
            "-dpr",
            "1",
            "--headless",
        ]);
        assert_eq!(
            dp_other.local_rank_files().unwrap(),
            [
                "autotune_configs_dp1_rank2.json",
                "autotune_configs_dp1_rank3.json"
            ]
        );
        let external = p(&[
            "/m",
            "--tensor_parallel_size",
            "2",
            "-dp",
            "4",
            "--data-parallel-rank",
            "3",
        ]);
        assert_eq!(external.local_ranks(), Some(6..8));
        let dp_all = p(&["/m", "-tp", "2", "-dp", "2"]);
        assert_eq!(dp_all.local_ranks(), Some(0..4));

        // the last occurrence wins; a disabling spelling after -ep turns it off
        assert_eq!(p(&["-tp", "2", "-tp", "8"]).tp, Some(8));
        assert!(!p(&["-ep", "--no-enable-expert-parallel"]).expert_parallel);
        assert!(!p(&["-ep", "--disable-expert-parallel"]).expert_parallel);
        // unknown or inconsistent: no answer rather than a wrong one
        assert_eq!(p(&["-tp", "four"]).world(), None);
        assert_eq!(p(&["-tp", "3", "--nnodes", "2"]).local_ranks(), None);
        assert_eq!(
            p(&["-tp", "2", "--nnodes", "2", "-r", "2"]).local_ranks(),
            None
        );
        assert_eq!(p(&["-dp", "2", "-dpr", "1"]).local_ranks(), None);
        assert_eq!(
            p(&["-dp", "2", "-dpl", "2", "-dpr", "1"]).local_ranks(),
            None
        );
        assert_eq!(p(&["-tp", &u64::MAX.to_string(), "-pp", "2"]).world(), None);
    }

    #[test]
    fn moe_decisions_are_conservative() {
        let m = |s: &str| moe_from_config(Some(s.as_bytes()));
        assert_eq!(
            m(r#"{"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 256}"#),
            Moe::Yes {
                key: "n_routed_experts".into(),
                experts: 256
            }
        );
        assert_eq!(
            m(r#"{"model_type": "llama4", "text_config": {"num_local_experts": 16}}"#),
            Moe::Yes {
                key: "text_config.num_local_experts".into(),
                experts: 16
            }
        );
        assert_eq!(
            m(r#"{"ffn_config": {"moe_num_experts": 16}}"#),
            Moe::Yes {
                key: "ffn_config.moe_num_experts".into(),
                experts: 16
            }
        );
        assert_eq!(
            m(r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}"#),
            Moe::Dense
        );
        assert_eq!(
            m(r#"{"architectures": ["Qwen2ForCausalLM"], "num_experts": 0}"#),
            Moe::Dense
        );
        assert_eq!(
            m(r#"{"num_experts": null, "moe_intermediate_size": 0}"#),
            Moe::Dense
        );
        for unsure in [
            r#"{"num_experts": 1}"#,
            r#"{"moe_num_experts": [64, 64]}"#,
            r#"{"num_experts": "8"}"#,
            r#"{"num_experts_per_tok": 2}"#,
            r#"{"architectures": ["MixtralForCausalLM"]}"#,
            r#"{"model_type": "qwen3_moe"}"#,
            r#"[1, 2]"#,
            "not json",
            "",
        ] {
            let v = m(unsure);
            assert!(matches!(v, Moe::Unsure(_)), "{unsure}: {v:?}");
            assert!(v.treat_as_moe());
        }
        assert!(moe_from_config(None).treat_as_moe());
        assert!(!Moe::Dense.treat_as_moe());
        // nesting deeper than the scan looks is unsure, not dense
        let deep = [
            "{\"a\":".repeat(100),
            "{\"num_experts\": 8}".into(),
            "}".repeat(100),
        ]
        .concat();
        assert!(matches!(m(&deep), Moe::Unsure(_)), "{:?}", m(&deep));

        let dense = br#"{"architectures": ["LlamaForCausalLM"]}"#;
        assert_eq!(
            launch_moe(&os(&["/m", "-tp", "2"]), Some(dense)),
            Moe::Dense
        );
        assert!(launch_moe(&os(&["/m", "-tp", "2", "-ep"]), Some(dense)).treat_as_moe());
        assert!(launch_moe(
            &os(&["/m", "--hf-overrides", r#"{"num_experts": 8}"#]),
            Some(dense)
        )
        .treat_as_moe());
        assert!(launch_moe(&os(&["/m"]), None).treat_as_moe());
    }

    /// Arguments and values from vLLM's vocabulary and arbitrary bytes:
    /// no function panics, and each answers within its own promises.
    #[test]
    fn no_panic_on_any_input() {
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;

        let word = prop_oneof![
            Just(b"vllm".to_vec()),
            Just(b"serve".to_vec()),
            Just(b"python3".to_vec()),
            Just(b"-m".to_vec()),
            Just(b"vllm.entrypoints.openai.api_server".to_vec()),
            Just(b"--port".to_vec()),
            Just(b"--api-key".to_vec()),
            Just(b"-r1".to_vec()),
            Just(b"--node_rank=".to_vec()),
            Just(b"-tp".to_vec()),
            Just(b"-dpl".to_vec()),
            Just(b"--nnodes".to_vec()),
            Just(b"~".to_vec()),
            Just(b"HOME".to_vec()),
            Just(b"VLLM_CACHE_ROOT".to_vec()),
            Just(b"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR".to_vec()),
            Just(b"FLASHINFER_CUDA_ARCH_LIST".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..12),
        ];
        let argv = proptest::collection::vec(word, 0..10);
        let mut runner = TestRunner::default();
        runner
            .run(
                &(argv, proptest::collection::vec(any::<u8>(), 0..64)),
                |(argv, bytes)| {
                    let argv: Vec<OsString> = argv.into_iter().map(OsString::from_vec).collect();
                    if let Some(l) = recognise(&argv) {
                        prop_assert!(l.args_start <= argv.len());
                        let _ = (l.model(&argv), l.config_file(&argv));
                    }
                    prop_assert_eq!(arg_roles(&argv).len(), argv.len());
                    let sizes = ParallelSizes::from_args(&argv);
                    if let (Some(r), Some(w)) = (sizes.local_ranks(), sizes.world()) {
                        prop_assert!(r.start < r.end && r.end <= w);
                    }
                    let env: Vec<(OsString, OsString)> = argv
                        .chunks(2)
                        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
                        .collect();
                    let _ = (
                        autotune_root(&env),
                        managed_store_root(&env),
                        arch_component(&env),
                    );
                    let text = String::from_utf8_lossy(&bytes);
                    let _ = (file_kind(&text), layout_for_version(&text));
                    let _ = launch_moe(&argv, Some(&bytes));
                    Ok(())
                },
            )
            .unwrap();
    }
}
