//! What the fingerprint leaves out of the environment: the prefixes it
//! selects and the variables that change nothing that is tuned.

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
