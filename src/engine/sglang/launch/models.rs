//! The models and files an SGLang launch names, as the fingerprint
//! covers them.

use std::path::Path;

use serde_json::Value;

use super::args::Parsed;
use crate::launch::model::{describe_adapters, describe_in, Hub, Reads};

/// SGLang's switch: `get_bool_env_var("SGLANG_USE_MODELSCOPE")`, `true`
/// or `1` in any case.
pub fn hub(env: &dyn Fn(&str) -> Option<String>) -> Hub {
    match env("SGLANG_USE_MODELSCOPE").map(|v| v.to_ascii_lowercase()) {
        Some(v) if v == "true" || v == "1" => Hub::ModelScope,
        _ => Hub::HuggingFace,
    }
}

/// The options of SGLang 0.5.23 (`python/sglang/srt/server_args.py`,
/// `arg_groups/fields/*.py`) whose files the engine reads to build its
/// model or kernels, each with its attribute, what it names, and the
/// attribute of its revision. Every other option that names a file or a
/// directory counts as written and no more: a tokenizer, chat and
/// completion templates, TLS files, KV-cache scaling factors
/// (`--quantization-param-path`: values, no shapes), KV offload connector
/// configs (`--lmcache-config-file`, `--flexkv-config-file`), an n-gram
/// corpus, the watermark, dump, trace, export and offload directories, and
/// the ktransformers CPU weights (`--kt-weight-path`). A tokenizer shapes
/// no kernel (the model's config decides the vocabulary size).
pub const FILE_OPTIONS: &[(&str, &str, Reads, Option<&str>)] = &[
    ("--model-path", "model_path", Reads::Model, Some("revision")),
    (
        "--speculative-draft-model-path",
        "speculative_draft_model_path",
        Reads::Model,
        Some("speculative_draft_model_revision"),
    ),
    // read instead of the model's (the draft's) config.json
    (
        "--decrypted-config-file",
        "decrypted_config_file",
        Reads::File,
        None,
    ),
    (
        "--decrypted-draft-config-file",
        "decrypted_draft_config_file",
        Reads::File,
        None,
    ),
    // DeepEP's tuned kernel config: JSON text (counted as written) or a file
    ("--deepep-config", "deepep_config", Reads::File, None),
    // what speculative decoding verifies per step
    (
        "--speculative-dspark-sps-table-path",
        "speculative_dspark_sps_table_path",
        Reads::File,
        None,
    ),
    (
        "--speculative-dspark-confidence-sts-path",
        "speculative_dspark_confidence_sts_path",
        Reads::File,
        None,
    ),
    (
        "--speculative-adaptive-config",
        "speculative_adaptive_config",
        Reads::File,
        None,
    ),
    (
        "--dllm-algorithm-config",
        "dllm_algorithm_config",
        Reads::File,
        None,
    ),
    (
        "--pdmux-config-path",
        "pdmux_config_path",
        Reads::File,
        None,
    ),
    ("--rl-quant-profile", "rl_quant_profile", Reads::File, None),
    ("--uno-lora-path", "uno_lora_path", Reads::Adapter, None),
    (
        "--modelopt-checkpoint-restore-path",
        "modelopt_checkpoint_restore_path",
        Reads::Listing,
        None,
    ),
];

/// The models and files of an SGLang launch `parsed` names, by option.
pub fn models(
    parsed: &Parsed,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Value)> {
    let download = parsed.value("download_dir");
    let hub = hub(env);
    let mut out: Vec<(&'static str, Value)> = FILE_OPTIONS
        .iter()
        .filter_map(|(opt, dest, reads, rev)| {
            let v = parsed.value(dest)?;
            let rev = rev.and_then(|r| parsed.value(r));
            Some((*opt, describe_in(v, rev, cwd, env, *reads, download, hub)))
        })
        .collect();
    if let Some(g) = parsed
        .groups
        .iter()
        .rev()
        .find(|g| g.known && g.key == "lora_paths")
    {
        if let Some(d) = describe_adapters(&g.values, cwd, env, download) {
            out.push(("--lora-paths", d));
        }
    }
    out
}
