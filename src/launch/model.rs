//! What the fingerprint covers of a model: the engine's own cache key hashes
//! the model path string, not what is there, so new weights of another
//! shape under the same path would reuse the old tactics. Never the
//! weights: for a local directory the sha256 of its `config.json` (and
//! `hf_quant_config.json` when present), for a hub id the snapshot revision
//! the local hub cache resolves it to.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::digest::sha256_hex;

/// Model files larger than this are not hashed (a config is a few KiB).
const MAX_BYTES: u64 = 16 << 20;

fn read_capped(path: &Path, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    let f = match super::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    f.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!("larger than {cap} bytes")));
    }
    Ok(Some(bytes))
}

fn file_hash(path: &Path) -> Option<Value> {
    match read_capped(path, MAX_BYTES) {
        Ok(Some(b)) => Some(Value::String(sha256_hex(&b))),
        Ok(None) => None,
        Err(_) => Some(Value::String("unreadable".into())),
    }
}

/// The hub cache directory, from the child's environment.
pub fn hub_cache(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |n: &str| env(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|h| h.join("huggingface/hub")))
        .or_else(|| {
            // `os.path.expanduser("~")`: HOME when set (empty too), else the
            // password database's home
            let home = env("HOME").map(std::ffi::OsString::from);
            crate::launch::home::expanduser(
                std::ffi::OsStr::new("~/.cache/huggingface/hub"),
                home.as_deref(),
                &crate::launch::home::passwd_home,
            )
        })
}

fn looks_like_hub_id(v: &str) -> bool {
    !v.is_empty()
        && !v.starts_with(['/', '.', '~'])
        && v.matches('/').count() <= 1
        && !v.contains("..")
        && !v.ends_with('/')
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What the fingerprint records of the model `value` names (an argument's
/// value), given `revision` (`--revision`), the engine's working directory
/// and environment.
pub fn describe(
    value: &str,
    revision: Option<&str>,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Value {
    describe_in(value, revision, cwd, env, Reads::Model, None)
}

/// What an argument's value names, and so which of its files count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// A model: a local directory's `config.json` and
    /// `hf_quant_config.json`, or a hub id's revision.
    Model,
    /// A LoRA adapter: its `adapter_config.json` (rank, target modules), or
    /// a hub id's revision.
    Adapter,
    /// A file the engine reads: its bytes.
    File,
    /// A directory the engine restores a checkpoint from: its listing.
    Listing,
}

impl Reads {
    fn files(self) -> &'static [&'static str] {
        match self {
            Reads::Model => &["config.json", "hf_quant_config.json"],
            Reads::Adapter => &["adapter_config.json"],
            Reads::File | Reads::Listing => &[],
        }
    }
}

/// [`describe`] for what `reads` says, the hub cache being `download_dir`
/// when the launch names one (`--download-dir`: the engine downloads there
/// and looks there first).
pub fn describe_in(
    value: &str,
    revision: Option<&str>,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    reads: Reads,
    download_dir: Option<&str>,
) -> Value {
    let path = cwd.join(value);
    match reads {
        Reads::File => {
            return json!({"file": file_hash(&path).unwrap_or_else(|| "absent".into())});
        }
        Reads::Listing => {
            let l = if path.is_dir() {
                crate::launch::engine::files_digest(&path).unwrap_or_else(|| "unreadable".into())
            } else {
                "absent".into()
            };
            return json!({ "listing": l });
        }
        Reads::Model | Reads::Adapter => {}
    }
    let dir = path;
    if dir.is_dir() {
        let mut m = Map::new();
        let (first, rest) = reads.files().split_first().unwrap_or((&"config.json", &[]));
        m.insert(
            first.to_string(),
            file_hash(&dir.join(first)).unwrap_or_else(|| "absent".into()),
        );
        for f in rest {
            if let Some(h) = file_hash(&dir.join(f)) {
                m.insert(f.to_string(), h);
            }
        }
        return Value::Object(m);
    }
    if !looks_like_hub_id(value) {
        return json!({"path": "no such directory"});
    }
    let rev = revision.filter(|r| !r.is_empty() && *r != "None");
    if let Some(r) = rev.filter(|r| is_commit(r)) {
        return json!({ "hub_revision": r });
    }
    let cache = match download_dir.filter(|d| !d.is_empty()) {
        Some(d) => cwd.join(d),
        None => match hub_cache(env) {
            Some(c) => c,
            None => return json!({"hub": "no hub cache"}),
        },
    };
    let refs = rev.unwrap_or("main");
    if refs.contains("..") || refs.starts_with('/') {
        return json!({"hub": "not in the local hub cache"});
    }
    let path = cache
        .join(format!("models--{}", value.replace('/', "--")))
        .join("refs")
        .join(refs);
    match read_capped(&path, 4096) {
        Ok(Some(b)) => {
            let s = String::from_utf8_lossy(&b).trim().to_string();
            json!({ "hub_revision": s })
        }
        Ok(None) => json!({"hub": "not in the local hub cache"}),
        Err(_) => json!({"hub": "unreadable"}),
    }
}

/// The path in a LoRA adapter argument: `PATH`, `NAME=PATH`, or JSON with
/// `lora_path` (SGLang `--lora-paths`) or `path` (vLLM `--lora-modules`).
pub fn lora_path(value: &str) -> Option<String> {
    if value.trim_start().starts_with('{') {
        let v: Value = serde_json::from_str(value).ok()?;
        return v
            .get("lora_path")
            .or_else(|| v.get("path"))
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    Some(match value.split_once('=') {
        Some((_, p)) => p.to_string(),
        None => value.to_string(),
    })
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
pub const SGLANG_FILE_OPTIONS: &[(&str, &str, Reads, Option<&str>)] = &[
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

/// What the fingerprint records of every value of a multi-valued adapter
/// option (`--lora-paths`): each adapter's path and its description.
pub fn describe_adapters(
    values: &[String],
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    download_dir: Option<&str>,
) -> Option<Value> {
    let m: Map<String, Value> = values
        .iter()
        .filter_map(|v| lora_path(v))
        .map(|p| {
            let d = describe_in(&p, None, cwd, env, Reads::Adapter, download_dir);
            (p, d)
        })
        .collect();
    (!m.is_empty()).then_some(Value::Object(m))
}

/// The models and files of an SGLang launch `parsed` names, by option.
pub fn sglang_models(
    parsed: &crate::launch::args::Parsed,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Value)> {
    let download = parsed.value("download_dir");
    let mut out: Vec<(&'static str, Value)> = SGLANG_FILE_OPTIONS
        .iter()
        .filter_map(|(opt, dest, reads, rev)| {
            let v = parsed.value(dest)?;
            let rev = rev.and_then(|r| parsed.value(r));
            Some((*opt, describe_in(v, rev, cwd, env, *reads, download)))
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

/// One line of `--explain` for a model description (an adapter list as
/// `PATH (DESCRIPTION)` each).
pub fn explain(desc: &Value) -> String {
    let short = |v: &Value| {
        let s = v.as_str().unwrap_or("");
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            format!("<sha256:{}>", &s[..12])
        } else {
            s.to_string()
        }
    };
    match desc.as_object() {
        Some(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::Object(_) => format!(
                    "{} ({})",
                    serde_json::to_string(k).unwrap_or_default(),
                    explain(v)
                ),
                _ => format!("{k} {}", short(v)),
            })
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_paths_in_every_form() {
        assert_eq!(lora_path("/a").as_deref(), Some("/a"));
        assert_eq!(lora_path("name=/a=b").as_deref(), Some("/a=b"));
        assert_eq!(
            lora_path(r#"{"lora_name": "n", "lora_path": "/p", "pinned": true}"#).as_deref(),
            Some("/p")
        );
        assert_eq!(
            lora_path(r#"{"name": "n", "path": "/q"}"#).as_deref(),
            Some("/q")
        );
        assert_eq!(lora_path("{not json"), None);
    }

    #[test]
    fn local_dir_hub_cache_and_neither() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        std::fs::create_dir(&m).unwrap();
        std::fs::write(m.join("config.json"), b"{}").unwrap();
        let none = |_: &str| None;
        let d = describe("m", None, t.path(), &none);
        assert_eq!(d, json!({"config.json": sha256_hex(b"{}")}));
        std::fs::write(m.join("hf_quant_config.json"), b"q").unwrap();
        let d2 = describe(m.to_str().unwrap(), None, Path::new("/"), &none);
        assert_eq!(d2["hf_quant_config.json"], json!(sha256_hex(b"q")));

        let hub = t.path().join("hub");
        let refs = hub.join("models--org--name/refs");
        std::fs::create_dir_all(&refs).unwrap();
        std::fs::write(refs.join("main"), b"abc123\n").unwrap();
        let h = hub.to_str().unwrap().to_string();
        let env = move |n: &str| (n == "HF_HUB_CACHE").then(|| h.clone());
        assert_eq!(
            describe("org/name", None, t.path(), &env),
            json!({"hub_revision": "abc123"})
        );
        assert_eq!(
            describe("org/other", None, t.path(), &env),
            json!({"hub": "not in the local hub cache"})
        );
        assert_eq!(
            describe("/no/such", None, t.path(), &env),
            json!({"path": "no such directory"})
        );
    }
}
