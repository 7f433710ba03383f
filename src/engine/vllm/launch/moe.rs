//! MoE or dense: whether a launch runs mixture-of-experts layers, decided
//! conservatively from its arguments and the model's `config.json`.

use std::ffi::OsString;

use serde_json::Value;

use super::recognise::option_value;
use super::ParallelSizes;

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
