//! The profiles: which environment variables and arguments identify a
//! launch, and which do not (every entry's reason is in docs/fingerprint.md).

use clap::ValueEnum;

use crate::launch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    /// vllm for a vLLM server launch, trtllm for a TensorRT-LLM one, else sglang
    Auto,
    /// What a user of a stock SGLang image wants
    Sglang,
    /// Bit for bit the seed's launch_fingerprint()
    Seed,
    /// What a user of a stock vLLM image wants
    Vllm,
    /// What a user of a stock TensorRT-LLM image wants
    Trtllm,
}

impl ProfileName {
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileName::Auto => "auto",
            ProfileName::Sglang => "sglang",
            ProfileName::Seed => "seed",
            ProfileName::Vllm => "vllm",
            ProfileName::Trtllm => "trtllm",
        }
    }

    /// `auto` for a command: `vllm` when it runs a vLLM server (directly,
    /// behind launcher prefixes or `env`, or inside a readable shell
    /// wrapper), `trtllm` when it runs `trtllm-serve`, else `sglang`.
    /// Any other profile is itself.
    pub fn resolve(self, command: &launch::Command) -> ProfileName {
        match self {
            ProfileName::Auto
                if crate::engine::vllm::launch::recognise(&command.argv).is_some() =>
            {
                ProfileName::Vllm
            }
            ProfileName::Auto
                if crate::engine::trtllm::launch::recognise(&command.argv).is_some() =>
            {
                ProfileName::Trtllm
            }
            ProfileName::Auto => ProfileName::Sglang,
            p => p,
        }
    }

    /// The profile of the launches a subcommand without a command looks
    /// at: `auto` is `sglang`'s.
    pub fn without_command(self) -> ProfileName {
        match self {
            ProfileName::Auto => ProfileName::Sglang,
            p => p,
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

/// The `vllm` profile: `VLLM_*` and `FLASHINFER_*` minus vLLM's volatile
/// names; the front-end and per-node arguments are left out by the vLLM
/// launch's canonical form (see `fingerprint::vllm`).
pub const VLLM: Profile = Profile {
    name: ProfileName::Vllm,
    env_prefixes: crate::engine::vllm::launch::ENV_PREFIXES,
    volatile_env: crate::engine::vllm::launch::VOLATILE_ENV,
    volatile_env_tp4: &[],
    ignored_args: &[],
};

/// The `trtllm` profile: `TLLM_*` and `TRTLLM_*` minus TensorRT-LLM's
/// volatile names; the front end's arguments are left out by the launch's
/// canonical form (see `launch::trtllm`).
pub const TRTLLM: Profile = Profile {
    name: ProfileName::Trtllm,
    env_prefixes: crate::engine::trtllm::launch::ENV_PREFIXES,
    volatile_env: crate::engine::trtllm::launch::VOLATILE_ENV,
    volatile_env_tp4: &[],
    ignored_args: &[],
};

/// The fixed part of profile `name` (`auto` before it is resolved: sglang).
pub fn profile(name: ProfileName) -> &'static Profile {
    match name {
        ProfileName::Sglang | ProfileName::Auto => &SGLANG,
        ProfileName::Seed => &SEED,
        ProfileName::Vllm => &VLLM,
        ProfileName::Trtllm => &TRTLLM,
    }
}

/// Variables left out of the cluster fingerprint by default (see
/// [`Launch::cluster_fingerprint`]): selected by the `sglang` profile, yet
/// they legitimately differ between the nodes of one launch.
///
/// [`Launch::cluster_fingerprint`]: super::Launch::cluster_fingerprint
/// `SGLANG_CACHE_DIR`: where this node keeps its cache; `NCCL_SOCKET_IFNAME`
/// and `NCCL_IB_HCA`: the names of this node's network interfaces and HCAs.
/// (`SGLANG_HOST_IP` is volatile already.)
pub const DEFAULT_NODE_LOCAL_ENV: &[&str] =
    &["SGLANG_CACHE_DIR", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"];

/// The node-local env names of a launch's share settings: the defaults
/// plus `--node-local-env`.
pub fn node_local(share: &crate::share::Settings) -> Vec<String> {
    share.node_local(DEFAULT_NODE_LOCAL_ENV)
}
