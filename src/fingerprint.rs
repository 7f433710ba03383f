//! The launch fingerprint: which parts of argv and environment identify a
//! launch, and their sha256 over Python-compatible canonical JSON.
//!
//! Fingerprint = lowercase sha256 hex of
//! `json.dumps({"argv": argv, "env": env}, sort_keys=True)` (see
//! [`crate::canonical`]), where `argv` is the command keepwrap execs minus the
//! profile's ignored arguments, and `env` the variables of the child's
//! environment whose name starts with one of the profile's prefixes, minus its
//! volatile names. Bytes that are not UTF-8 count the way Python's
//! `surrogateescape` decodes them, so the `seed` profile reproduces the
//! seed's `launch_fingerprint()` bit for bit.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::canonical::{self, py_str, Style};
use crate::launch::{self, args, args::Group, Canonical, Wrapper};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    /// What a user of a stock SGLang image wants
    Sglang,
    /// Bit for bit the seed's launch_fingerprint()
    Seed,
}

impl ProfileName {
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileName::Sglang => "sglang",
            ProfileName::Seed => "seed",
        }
    }
}

/// A profile plus the user's extensions.
#[derive(Debug, Clone)]
pub struct Options {
    pub profile: ProfileName,
    pub env_prefixes: Vec<String>,
    pub volatile_env: Vec<String>,
    pub ignored_args: Vec<String>,
}

/// How an ignored argument takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A switch: only the token itself (`FLAG`, or `FLAG=...`) is dropped;
    /// the next token is never swallowed.
    Flag,
    /// `FLAG=VALUE`, or `FLAG VALUE` when VALUE does not start with `--`.
    Value,
}

/// The fixed part of a profile. Every entry's reason is in docs/fingerprint.md.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: ProfileName,
    pub env_prefixes: &'static [&'static str],
    pub volatile_env: &'static [&'static str],
    /// Also volatile when `DSV41_LAUNCHER=tp4` (the seed's TP4 launcher).
    pub volatile_env_tp4: &'static [&'static str],
    pub ignored_args: &'static [(&'static str, ArgKind)],
}

const SEED_PREFIXES: &[&str] = &["SGLANG_", "DSV41_", "SPARK_", "B12X_", "NCCL_"];

const SEED_VOLATILE: &[&str] = &[
    "DSV41_DRAFT_CAPTURE",
    "DSV41_DRAFT_CAPTURE_OUT",
    "DSV41_DRAFT_CAPTURE_TRIGGER",
    "DSV41_DRAFT_CAPTURE_MAX_GIB",
    "DSV41_VERIFY_CAP",
    "DSV41_VERIFY_CAP_MIN",
    "DSV41_DRAFT_TAU",
    "DSV41_BLOCK_VERIFY",
    "DSV41_FOLDED_FENCE",
    "DSV41_AUTOTUNE_KEEP",
    "DSV41_DRAFT_HEAD_FP8",
    "DSV41_ENGRAM_PREFETCH",
    "DSV41_ENGRAM_PREFETCH_CHECK",
    "SGLANG_RUN_ID",
    "DSV41_WO_A_W8_DRAFT",
];

const SEED_VOLATILE_TP4: &[&str] = &[
    "DSV41_REPLICATED_SPLIT",
    "DSV41_REPLICATED_SPLIT_MAX_M",
    "DSV41_DRAFT_MAIN_PROJ_SPLIT",
    "DSV41_DRAFT_MAIN_PROJ_MAX_M",
    "DSV41_ROCE_GATHER",
    "DSV41_ROUTER_LIVE",
    "DSV41_DYN_SHARED",
    "DSV41_DYN_SHARED_RATIO",
    "DSV41_DYN_SHARED_FIXED",
    "DSV41_DYN_SHARED_MAX_M",
    "DSV41_DYN_SHARED_SERIAL",
    "DSV41_VERIFY_CAP_LOG",
    "DSV41_VERIFY_CAP_LOG_FEATURES",
    "DSV41_ROUTE_STATS",
    "DSV41_ROUTE_RING",
    "DSV41_DRAFT_TAU_POS",
    "DSV41_ENGRAM_DRM_NODE",
    "DSV41_ENGRAM_DRM_MIB",
    "DSV41_ENGRAM_DRM_LAYER",
    "DSV41_DRAFT_HEAD_FP8_IMPL",
];

const SGLANG_PREFIXES: &[&str] = &["SGLANG_", "SGL_", "FLASHINFER_", "NCCL_"];

const SGLANG_VOLATILE: &[&str] = &[
    // where the cache is mounted, not what is tuned
    "SGLANG_CACHE_DIR",
    // a fresh stamp on every boot (launchers)
    "SGLANG_RUN_ID",
    // per node / per pod addresses and ports
    "SGLANG_HOST_IP",
    "SGLANG_PORT",
    "SGLANG_BACKUP_PORT_BASE",
    "SGLANG_TCP_STORE_PORT",
    "NCCL_COMM_ID",
    // logging and debug output only
    "SGLANG_LOGGING_CONFIG_PATH",
    "SGLANG_LOG_GC",
    "SGLANG_LOG_FORWARD_ITERS",
    "SGLANG_LOG_MS",
    "SGLANG_LOG_REQUEST_EXCEEDED_MS",
    "SGLANG_LOG_REQUEST_HEADERS",
    "SGLANG_LOG_SCHEDULER_STATUS_TARGET",
    "SGLANG_LOG_SCHEDULER_STATUS_INTERVAL",
    "SGLANG_TORCH_PROFILER_DIR",
    "SGLANG_CUDA_COREDUMP_DIR",
    "FLASHINFER_LOGLEVEL",
    "FLASHINFER_LOGDEST",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
];

const SGLANG_IGNORED_ARGS: &[(&str, ArgKind)] = &[
    // where and how the HTTP API listens
    ("--host", ArgKind::Value),
    ("--port", ArgKind::Value),
    ("--api-key", ArgKind::Value),
    ("--admin-api-key", ArgKind::Value),
    ("--served-model-name", ArgKind::Value),
    ("--ssl-keyfile", ArgKind::Value),
    ("--ssl-certfile", ArgKind::Value),
    ("--ssl-ca-certs", ArgKind::Value),
    ("--ssl-keyfile-password", ArgKind::Value),
    ("--enable-ssl-refresh", ArgKind::Flag),
    // rendezvous address and port (the head's pod IP changes per boot)
    ("--dist-init-addr", ArgKind::Value),
    ("--nccl-init-addr", ArgKind::Value),
    ("--nccl-port", ArgKind::Value),
    // logging, metrics, tracing, dumps
    ("--log-level", ArgKind::Value),
    ("--log-level-http", ArgKind::Value),
    ("--log-requests", ArgKind::Flag),
    ("--log-requests-level", ArgKind::Value),
    ("--decode-log-interval", ArgKind::Value),
    ("--show-time-cost", ArgKind::Flag),
    ("--enable-metrics", ArgKind::Flag),
    ("--enable-metrics-for-all-schedulers", ArgKind::Flag),
    ("--enable-request-time-stats-logging", ArgKind::Flag),
    ("--enable-trace", ArgKind::Flag),
    ("--otlp-traces-endpoint", ArgKind::Value),
    ("--crash-dump-folder", ArgKind::Value),
    ("--file-storage-path", ArgKind::Value),
];

/// The `seed` profile: the seed's `launch_fingerprint()`.
pub const SEED: Profile = Profile {
    name: ProfileName::Seed,
    env_prefixes: SEED_PREFIXES,
    volatile_env: SEED_VOLATILE,
    volatile_env_tp4: SEED_VOLATILE_TP4,
    ignored_args: &[],
};

/// The `sglang` profile (the default).
pub const SGLANG: Profile = Profile {
    name: ProfileName::Sglang,
    env_prefixes: SGLANG_PREFIXES,
    volatile_env: SGLANG_VOLATILE,
    volatile_env_tp4: &[],
    ignored_args: SGLANG_IGNORED_ARGS,
};

/// The fixed part of profile `name`.
pub fn profile(name: ProfileName) -> &'static Profile {
    match name {
        ProfileName::Sglang => &SGLANG,
        ProfileName::Seed => &SEED,
    }
}

/// Variables left out of the cluster fingerprint by default (see
/// [`Launch::cluster_fingerprint`]): selected by the `sglang` profile, yet
/// they legitimately differ between the nodes of one launch.
/// `SGLANG_CACHE_DIR`: where this node keeps its cache; `NCCL_SOCKET_IFNAME`
/// and `NCCL_IB_HCA`: the names of this node's network interfaces and HCAs.
/// (`SGLANG_HOST_IP` is volatile already.)
pub const DEFAULT_NODE_LOCAL_ENV: &[&str] =
    &["SGLANG_CACHE_DIR", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"];

/// Whether a flag or variable named `name` holds a secret: its name contains
/// KEY, TOKEN, SECRET or PASSWORD, in any case. Leading dashes and anything
/// from `=` on are not part of a flag's name.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-');
    let name = name
        .split_once('=')
        .map_or(name, |(n, _)| n)
        .to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| name.contains(w))
}

/// `<sha256:XXXXXXXXXXXX>`: the first 12 hex digits of the sha256 of `value`.
pub fn value_hash(value: &[u8]) -> String {
    format!("<sha256:{}>", &sha256_hex(value)[..12])
}

/// `<redacted sha256:XXXXXXXXXXXX>`, for a secret's value.
pub fn redacted_hash(value: &[u8]) -> String {
    format!("<redacted sha256:{}>", &sha256_hex(value)[..12])
}

/// Lowercase sha256 hex of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Secret {
    No,
    /// the whole token is the value of a secret-named flag
    Whole,
    /// `FLAG=VALUE` with a secret-named FLAG: the value starts at this byte
    After(usize),
}

#[derive(Debug, Clone)]
struct Arg {
    raw: OsString,
    ignored: bool,
    secret: Secret,
}

#[derive(Debug, Clone)]
struct EnvVar {
    name: OsString,
    value: OsString,
    volatile: bool,
}

/// Which server argument groups the profile and the user leave out.
#[derive(Debug, Clone, Default)]
struct Ignored {
    /// attributes of known options
    dests: HashSet<String>,
    /// heads of options the table does not know
    heads: HashSet<String>,
}

impl Ignored {
    fn new(flags: &[(String, ArgKind)]) -> Ignored {
        let mut out = Ignored::default();
        for (flag, _) in flags {
            match args::known(flag) {
                Some(o) => out.dests.insert(o.dest.to_string()),
                None => out.heads.insert(flag.clone()),
            };
        }
        out
    }

    fn contains(&self, g: &Group) -> bool {
        if g.known {
            self.dests.contains(&g.key)
        } else {
            self.heads.contains(&g.head)
        }
    }
}

/// The fingerprint inputs of one launch.
#[derive(Debug, Clone)]
pub struct Launch {
    profile: ProfileName,
    /// The command line the `argv` form fingerprints: the command as given,
    /// or the command inside a readable shell wrapper (`sglang` profile).
    args: Vec<Arg>,
    /// prefix-selected variables, first occurrence of a name only, in Python
    /// key order
    env: Vec<EnvVar>,
    command: launch::Command,
    /// An SGLang server launch in canonical form.
    canonical: Option<Canonical>,
    /// The `sglang` profile fingerprints the canonical launch.
    canonical_payload: bool,
    ignored: Ignored,
    fingerprint: String,
}

impl Launch {
    /// Select the inputs from the command keepwrap will exec and the
    /// environment the child will get. Relative paths (a config file, a
    /// model directory) are read from the current directory, which the
    /// engine inherits.
    pub fn new(opts: &Options, argv: &[OsString], env: &[(OsString, OsString)]) -> Launch {
        let prof = profile(opts.profile);
        let seed = opts.profile == ProfileName::Seed;
        let command = launch::analyze(argv, env);

        // Environment: the first occurrence of a name wins, as with getenv()
        // and Python's os.environ; assignments inside a shell wrapper come
        // first.
        let assigns = if seed { &[][..] } else { &command.assigns[..] };
        let mut seen = HashSet::new();
        let env: Vec<&(OsString, OsString)> = assigns
            .iter()
            .chain(env)
            .filter(|(k, _)| seen.insert(k.as_bytes()))
            .collect();

        let prefixes: Vec<&[u8]> = prof
            .env_prefixes
            .iter()
            .map(|p| p.as_bytes())
            .chain(
                opts.env_prefixes
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| p.as_bytes()),
            )
            .collect();
        let tp4 = env
            .iter()
            .any(|(k, v)| k.as_bytes() == b"DSV41_LAUNCHER" && v.as_bytes() == b"tp4");
        let mut volatile: HashSet<&[u8]> = prof.volatile_env.iter().map(|n| n.as_bytes()).collect();
        if tp4 {
            volatile.extend(prof.volatile_env_tp4.iter().map(|n| n.as_bytes()));
        }
        volatile.extend(
            opts.volatile_env
                .iter()
                .filter(|n| !n.is_empty())
                .map(|n| n.as_bytes()),
        );
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| k.as_bytes() == name.as_bytes())
                .map(|(_, v)| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let canonical = command
            .server
            .as_ref()
            .map(|s| Canonical::new(s, Path::new("."), &lookup));

        let mut env: Vec<EnvVar> = env
            .into_iter()
            .filter(|(k, _)| prefixes.iter().any(|p| k.as_bytes().starts_with(p)))
            .map(|(k, v)| EnvVar {
                name: k.clone(),
                value: v.clone(),
                volatile: volatile.contains(k.as_bytes()),
            })
            .collect();
        env.sort_by_cached_key(|e| {
            canonical::py_code_points(&py_str(e.name.as_bytes())).collect::<Vec<u32>>()
        });

        // Arguments.
        let mut ignored: Vec<(String, ArgKind)> = prof
            .ignored_args
            .iter()
            .map(|(f, k)| (f.to_string(), *k))
            .collect();
        for flag in opts.ignored_args.iter().filter(|f| !f.is_empty()) {
            let flag = if flag.starts_with('-') {
                flag.clone()
            } else {
                format!("--{flag}")
            };
            // the profile's entry wins: a known switch never swallows a token
            if !ignored.iter().any(|(f, _)| *f == flag) {
                ignored.push((flag, ArgKind::Value));
            }
        }
        let words = if seed || command.wrapper != Wrapper::Shell {
            argv
        } else {
            &command.argv[..]
        };
        let mut args: Vec<Arg> = words
            .iter()
            .map(|a| Arg {
                raw: a.clone(),
                ignored: false,
                secret: Secret::No,
            })
            .collect();
        mark_ignored(&mut args, &ignored);
        mark_secrets(&mut args);

        let mut launch = Launch {
            profile: opts.profile,
            args,
            env,
            canonical_payload: !seed && canonical.is_some(),
            canonical,
            command,
            ignored: Ignored::new(&ignored),
            fingerprint: String::new(),
        };
        launch.fingerprint = launch.payload_hash(&[], false);
        launch
    }

    /// sha256 of the payload, leaving out the variables named in
    /// `node_local` and, with `cluster`, the node rank.
    fn payload_hash(&self, node_local: &[String], cluster: bool) -> String {
        let mut env_json = Map::new();
        for e in self.env.iter().filter(|e| {
            !e.volatile && !node_local.iter().any(|n| n.as_bytes() == e.name.as_bytes())
        }) {
            env_json.insert(
                py_str(e.name.as_bytes()),
                Value::String(py_str(e.value.as_bytes())),
            );
        }
        let payload = match (&self.canonical, self.canonical_payload) {
            (Some(c), true) => {
                let drop = |g: &Group| {
                    self.ignored.contains(g) || (cluster && g.known && g.key == "node_rank")
                };
                json!({ "launch": c.to_json(&drop), "env": env_json })
            }
            _ => {
                let drop = if cluster {
                    node_rank_tokens(&self.args)
                } else {
                    vec![false; self.args.len()]
                };
                let argv_json: Vec<Value> = self
                    .args
                    .iter()
                    .zip(&drop)
                    .filter(|(a, dropped)| !a.ignored && !**dropped)
                    .map(|(a, _)| Value::String(py_str(a.raw.as_bytes())))
                    .collect();
                json!({ "argv": argv_json, "env": env_json })
            }
        };
        sha256_hex(&canonical::value_to_python_json(&payload, Style::CANONICAL))
    }

    /// Lowercase sha256 hex.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The command, understood.
    pub fn command(&self) -> &launch::Command {
        &self.command
    }

    /// The SGLang server launch in canonical form, if the command is one.
    pub fn canonical(&self) -> Option<&Canonical> {
        self.canonical.as_ref()
    }

    /// Lines to log once at the launch: a config file that cannot be used, a
    /// shell string that cannot be read.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .canonical
            .iter()
            .filter_map(Canonical::config_warning)
            .collect();
        if let Wrapper::Unreadable(why) = self.command.wrapper {
            out.push(format!(
                "the shell command cannot be read safely ({why}): it is fingerprinted as written, and tuning will be judged done only at exit unless --done health=URL is given"
            ));
        }
        out
    }

    /// The value of server option `--FLAG`: the server's merged arguments
    /// (config file included), else `--FLAG VALUE`/`--FLAG=VALUE` in the
    /// command (the last one wins, as with argparse).
    pub fn option(&self, flag: &str) -> Option<String> {
        if let Some(c) = &self.canonical {
            let dest = args::known(flag)?.dest;
            return c.parsed.value(dest).map(str::to_string);
        }
        let mut found = None;
        let mut it = self.command.argv.iter().skip(1).peekable();
        while let Some(arg) = it.next() {
            let Some(a) = arg.to_str() else { continue };
            if a == flag {
                found = it.peek().and_then(|v| v.to_str()).map(str::to_string);
            } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                found = Some(v.to_string());
            }
        }
        found
    }

    /// The cluster fingerprint: the launch fingerprint's canonical JSON
    /// without what differs between the nodes of one multi-node launch, so
    /// that every node of one engine computes the same value. Leaves out the
    /// `--node-rank` argument (`--node-rank R` and `--node-rank=R`, before a
    /// bare `--`) and the variables named in `node_local`. The launch
    /// fingerprint is unchanged.
    pub fn cluster_fingerprint(&self, node_local: &[String]) -> String {
        self.payload_hash(node_local, true)
    }

    /// The inputs with every environment value hashed and secret-named
    /// flags' values redacted:
    /// `{"profile", "argv" or "launch", "env", "ignored_args",
    /// "volatile_env"}`. `argv` is the fingerprinted argv (`launch`: the
    /// canonical server launch, groups `[OPTION, VALUE...]`),
    /// `ignored_args` what the profile left out, `env` maps name to
    /// `<sha256:...>` (or `<redacted sha256:...>` for a secret-named
    /// variable). Strings are in [`canonical::py_str`] form: write them with
    /// [`canonical`], not plain serde_json.
    pub fn redacted_inputs(&self) -> Value {
        let mut env = Map::new();
        let mut volatile = Vec::new();
        for e in &self.env {
            let name = py_str(e.name.as_bytes());
            if e.volatile {
                volatile.push(Value::String(name));
            } else {
                env.insert(name, Value::String(env_value_hash(e)));
            }
        }
        if let (Some(c), true) = (&self.canonical, self.canonical_payload) {
            let mut launch = c.to_json(&|g| self.ignored.contains(g));
            launch["args"] = c
                .parsed
                .groups
                .iter()
                .filter(|g| !self.ignored.contains(g))
                .map(|g| Value::from(redacted_group(g)))
                .collect();
            let ignored: Vec<Value> = c
                .parsed
                .groups
                .iter()
                .filter(|g| self.ignored.contains(g))
                .map(|g| Value::from(redacted_group(g)))
                .collect();
            return json!({
                "profile": self.profile.as_str(),
                "launch": launch,
                "env": env,
                "ignored_args": ignored,
                "volatile_env": volatile,
            });
        }
        let argv: Vec<Value> = self
            .args
            .iter()
            .filter(|a| !a.ignored)
            .map(|a| Value::String(redacted_arg(a)))
            .collect();
        let ignored: Vec<Value> = self
            .args
            .iter()
            .filter(|a| a.ignored)
            .map(|a| Value::String(redacted_arg(a)))
            .collect();
        json!({
            "profile": self.profile.as_str(),
            "argv": argv,
            "env": env,
            "ignored_args": ignored,
            "volatile_env": volatile,
        })
    }

    /// The `--explain` text: one input per line, then the fingerprint.
    ///
    /// ```text
    /// profile sglang
    /// argv 0 "python"
    /// argv 5 "--api-key=" <redacted sha256:0123456789ab>
    /// env "SGLANG_X" <sha256:0123456789ab>
    /// ignored-arg 7 "--port"
    /// ignored-arg 8 "30000"
    /// volatile-env "SGLANG_RUN_ID"
    /// 0123...cdef
    /// ```
    ///
    /// An SGLang server launch (`sglang` profile) shows its canonical form
    /// instead of argv lines: `launch`, `arg` groups, `config`, `model`, and
    /// `ignored-arg` groups. Strings are JSON (Python `ensure_ascii` form),
    /// numbers are argv indices, environment values appear only as hashes.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "profile {}", self.profile.as_str());
        let canonical = self.canonical.as_ref().filter(|_| self.canonical_payload);
        match canonical {
            Some(c) => explain_canonical(&mut out, c, &self.command.wrapper, &self.ignored, false),
            None => {
                if let Wrapper::Unreadable(why) = self.command.wrapper {
                    let _ = writeln!(out, "shell unreadable: {why}");
                }
                for (i, a) in self.args.iter().enumerate().filter(|(_, a)| !a.ignored) {
                    let _ = writeln!(out, "argv {i} {}", explain_arg(a));
                }
            }
        }
        for e in self.env.iter().filter(|e| !e.volatile) {
            let _ = writeln!(
                out,
                "env {} {}",
                quote(e.name.as_bytes()),
                env_value_hash(e)
            );
        }
        match canonical {
            Some(c) => explain_canonical(&mut out, c, &self.command.wrapper, &self.ignored, true),
            None => {
                for (i, a) in self.args.iter().enumerate().filter(|(_, a)| a.ignored) {
                    let _ = writeln!(out, "ignored-arg {i} {}", explain_arg(a));
                }
            }
        }
        for e in self.env.iter().filter(|e| e.volatile) {
            let _ = writeln!(out, "volatile-env {}", quote(e.name.as_bytes()));
        }
        let _ = writeln!(out, "{}", self.fingerprint);
        out
    }
}

/// Which tokens are `--node-rank R` / `--node-rank=R` (before a bare `--`).
fn node_rank_tokens(args: &[Arg]) -> Vec<bool> {
    let mut drop = vec![false; args.len()];
    let mut i = 1;
    while i < args.len() {
        let tok = args[i].raw.as_bytes();
        if tok == b"--" {
            break;
        }
        if tok == b"--node-rank" {
            drop[i] = true;
            if i + 1 < args.len() && !args[i + 1].raw.as_bytes().starts_with(b"--") {
                i += 1;
                drop[i] = true;
            }
        } else if tok.starts_with(b"--node-rank=") {
            drop[i] = true;
        }
        i += 1;
    }
    drop
}

/// A group's tokens with the values of a secret-named option redacted.
fn redacted_group(g: &Group) -> Vec<String> {
    let secret = is_secret_name(&g.head);
    std::iter::once(g.head.clone())
        .chain(g.values.iter().map(|v| {
            if secret {
                redacted_hash(v.as_bytes())
            } else {
                v.clone()
            }
        }))
        .collect()
}

/// A sentinel-form string as a JSON string in Python's ensure_ascii form.
fn quote_str(s: &str) -> String {
    let v = Value::String(s.to_string());
    String::from_utf8(canonical::value_to_python_json(&v, Style::CANONICAL))
        .expect("ensure_ascii output is ASCII")
}

/// The canonical launch's `--explain` lines: the launch, its groups, config
/// and models (`ignored` false), or its ignored groups (`ignored` true).
fn explain_canonical(
    out: &mut String,
    c: &Canonical,
    wrapper: &Wrapper,
    ign: &Ignored,
    ignored: bool,
) {
    let group = |g: &Group| {
        let secret = is_secret_name(&g.head);
        std::iter::once(quote_str(&g.head))
            .chain(g.values.iter().map(|v| {
                if secret {
                    redacted_hash(v.as_bytes())
                } else {
                    quote_str(v)
                }
            }))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if ignored {
        for g in c.parsed.groups.iter().filter(|g| ign.contains(g)) {
            let _ = writeln!(out, "ignored-arg {}", group(g));
        }
        return;
    }
    let entry = match c.server.entry {
        launch::Entry::LaunchServer => "sglang.launch_server",
        launch::Entry::Serve => "sglang serve",
    };
    let via = if *wrapper == Wrapper::Shell {
        " (inside a shell command)"
    } else {
        ""
    };
    let order = if c.parsed.ordered {
        "arguments in the order given (not all understood)"
    } else {
        "arguments by name"
    };
    let _ = writeln!(out, "launch {entry}{via}, {order}");
    for o in &c.server.python_opts {
        let _ = writeln!(out, "python-opt {}", quote_str(o));
    }
    if let Some(t) = &c.server.model_type {
        let _ = writeln!(out, "model-type {}", quote_str(t));
    }
    for g in c.parsed.groups.iter().filter(|g| !ign.contains(g)) {
        let _ = writeln!(out, "arg {}", group(g));
    }
    if let Some(f) = &c.config {
        let state = match &f.outcome {
            launch::config::Outcome::Args(_) => "merged into the arguments",
            launch::config::Outcome::Unreadable(_) => "unreadable",
            launch::config::Outcome::Unparsable(_) => "unparsable",
        };
        let hash = f
            .sha256
            .as_deref()
            .map_or("-".to_string(), |h| format!("<sha256:{}>", &h[..12]));
        let _ = writeln!(out, "config {} {hash} {state}", quote_str(&f.path));
    }
    for (opt, desc) in &c.models {
        let _ = writeln!(out, "model {opt} {}", launch::model::explain(desc));
    }
}

/// Drop the ignored flags (tokens after argv[0], up to a bare `--`).
fn mark_ignored(args: &mut [Arg], ignored: &[(String, ArgKind)]) {
    let mut i = 1;
    while i < args.len() {
        let tok = args[i].raw.as_bytes();
        if tok == b"--" {
            break;
        }
        let hit = ignored.iter().find_map(|(flag, kind)| {
            let f = flag.as_bytes();
            if tok == f {
                Some(Some(*kind))
            } else if tok.len() > f.len() && tok.starts_with(f) && tok[f.len()] == b'=' {
                Some(None)
            } else {
                None
            }
        });
        if let Some(kind) = hit {
            args[i].ignored = true;
            if kind == Some(ArgKind::Value)
                && i + 1 < args.len()
                && !args[i + 1].raw.as_bytes().starts_with(b"--")
            {
                i += 1;
                args[i].ignored = true;
            }
        }
        i += 1;
    }
}

/// Mark the values of secret-named flags (`--api-key=V`, `--api-key V`).
fn mark_secrets(args: &mut [Arg]) {
    let mut i = 1;
    while i < args.len() {
        let tok = args[i].raw.as_bytes();
        if tok.len() > 1 && tok[0] == b'-' && tok != b"--" {
            let (name, eq) = match tok.iter().position(|&b| b == b'=') {
                Some(p) => (&tok[..p], Some(p)),
                None => (tok, None),
            };
            if is_secret_name(&String::from_utf8_lossy(name)) {
                match eq {
                    Some(p) => args[i].secret = Secret::After(p + 1),
                    None => {
                        if i + 1 < args.len() && !args[i + 1].raw.as_bytes().starts_with(b"--") {
                            i += 1;
                            args[i].secret = Secret::Whole;
                        }
                    }
                }
            }
        }
        i += 1;
    }
}

/// A JSON string in Python's ensure_ascii form.
fn quote(bytes: &[u8]) -> String {
    let v = Value::String(py_str(bytes));
    String::from_utf8(canonical::value_to_python_json(&v, Style::CANONICAL))
        .expect("ensure_ascii output is ASCII")
}

fn explain_arg(a: &Arg) -> String {
    let raw = a.raw.as_bytes();
    match a.secret {
        Secret::No => quote(raw),
        Secret::Whole => redacted_hash(raw),
        Secret::After(p) => format!("{} {}", quote(&raw[..p]), redacted_hash(&raw[p..])),
    }
}

fn redacted_arg(a: &Arg) -> String {
    let raw = a.raw.as_bytes();
    match a.secret {
        Secret::No => py_str(raw),
        Secret::Whole => redacted_hash(raw),
        Secret::After(p) => format!("{}{}", py_str(&raw[..p]), redacted_hash(&raw[p..])),
    }
}

fn env_value_hash(e: &EnvVar) -> String {
    if is_secret_name(&String::from_utf8_lossy(e.name.as_bytes())) {
        redacted_hash(e.value.as_bytes())
    } else {
        value_hash(e.value.as_bytes())
    }
}

/// `keepwrap fingerprint`: print the fingerprint (and with `explain` the
/// inputs, secrets redacted) of the launch of `command` in this environment.
pub fn print(opts: &Options, command: &[OsString], explain: bool) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let launch = Launch::new(opts, command, &env);
    let text = if explain {
        launch.explain()
    } else {
        format!("{}\n", launch.fingerprint())
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keepwrap: error: writing the fingerprint: {e}");
            ExitCode::FAILURE
        }
    }
}
