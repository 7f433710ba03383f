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
    describe_in(
        value,
        revision,
        cwd,
        env,
        Reads::Model,
        None,
        Hub::HuggingFace,
    )
}

/// The hub a model id is downloaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hub {
    HuggingFace,
    /// ModelScope (each engine has its switch).
    ModelScope,
}

/// What the fingerprint records of a hub id that no local cache resolves:
/// the engine downloads whatever the hub holds at its start.
pub const NOT_IN_HUB_CACHE: &str = "not in the local hub cache";

/// The local copy of ModelScope model `id` that the engine's
/// `snapshot_download` (modelscope 1.40, modelscope-hub 0.5) would reuse,
/// under `base` (`--download-dir`, else `$MODELSCOPE_CACHE`, else
/// `~/.cache/modelscope`): older SDKs' flat layouts when the hub's own are
/// absent, then `models/<org>/<name with . as ___>/` (also below `hub/`,
/// the older default), then `models/<org>--<name>/snapshots/<revision>`
/// (`master`, `main`, or the only one when no revision is given).
fn modelscope_dir(base: &Path, id: &str, revision: Option<&str>) -> Option<PathBuf> {
    let (owner, name) = id.split_once('/')?;
    if owner.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    let non_empty = |p: &Path| {
        std::fs::read_dir(p)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
    };
    let safe = name.replace('.', "___");
    let models = base.join("models");
    let flat = models.join(format!("{owner}--{name}"));
    let hub_known = [flat.clone(), models.join(owner).join(&safe)];
    if !hub_known.iter().any(|p| non_empty(p)) {
        let legacy = [
            base.join(owner).join(name),
            base.join(owner).join(&safe),
            base.join("hub").join(owner).join(name),
            base.join("hub").join(owner).join(&safe),
            models.join(owner).join(name),
        ];
        if let Some(p) = legacy.into_iter().find(|p| non_empty(p)) {
            return Some(p);
        }
    }
    let older = [
        models.join(owner).join(&safe),
        base.join("hub/models").join(owner).join(&safe),
    ];
    if let Some(p) = older.into_iter().find(|p| non_empty(p)) {
        return Some(p);
    }
    let snapshots = flat.join("snapshots");
    if let Some(r) = revision {
        let p = snapshots.join(r);
        return (!r.contains('/') && r != ".." && non_empty(&p)).then_some(p);
    }
    for r in ["master", "main"] {
        if non_empty(&snapshots.join(r)) {
            return Some(snapshots.join(r));
        }
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .take(2)
        .collect();
    (all.len() == 1).then(|| all.remove(0))
}

/// ModelScope's cache base from the child's environment.
fn modelscope_base(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let home = env("HOME").map(std::ffi::OsString::from);
    let expand = |p: &str| {
        crate::launch::home::expanduser(
            std::ffi::OsStr::new(p),
            home.as_deref(),
            &crate::launch::home::passwd_home,
        )
    };
    match env("MODELSCOPE_CACHE").filter(|v| !v.is_empty()) {
        Some(v) => expand(&v),
        None => expand("~/.cache/modelscope"),
    }
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
    hub: Hub,
) -> Value {
    let path = cwd.join(value);
    match reads {
        Reads::File => {
            return json!({"file": file_hash(&path).unwrap_or_else(|| "absent".into())});
        }
        Reads::Listing => {
            let l = if path.is_dir() {
                crate::launch::package::files_digest(&path).unwrap_or_else(|| "unreadable".into())
            } else {
                "absent".into()
            };
            return json!({ "listing": l });
        }
        Reads::Model | Reads::Adapter => {}
    }
    let dir = path;
    if dir.is_dir() {
        return local_files(&dir, reads);
    }
    if !looks_like_hub_id(value) {
        return json!({"path": "no such directory"});
    }
    let rev = revision.filter(|r| !r.is_empty() && *r != "None");
    if hub == Hub::ModelScope && reads == Reads::Model {
        // snapshot_download(model_id, cache_dir=download_dir, revision=...)
        let base = match download_dir.filter(|d| !d.is_empty()) {
            Some(d) => Some(cwd.join(d)),
            None => modelscope_base(env),
        };
        return match base.and_then(|b| modelscope_dir(&b, value, rev)) {
            Some(d) => json!({ "modelscope": local_files(&d, reads) }),
            None => json!({ "modelscope": NOT_IN_HUB_CACHE }),
        };
    }
    hub_revision(value, rev, cwd, env, download_dir)
}

/// What counts of a local directory: the files `reads` names.
fn local_files(dir: &Path, reads: Reads) -> Value {
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
    Value::Object(m)
}

/// Why a model description cannot be trusted, if so: a hub id that no
/// local cache resolves (the engine downloads whatever the hub then
/// holds), or a ModelScope copy without its `config.json`.
pub fn unresolved(option: &str, desc: &Value) -> Option<String> {
    let hub = desc.get("hub").and_then(Value::as_str);
    let ms = desc.get("modelscope");
    if let Some(h) = hub.filter(|h| *h == NOT_IN_HUB_CACHE || *h == "no hub cache") {
        return Some(format!("{option}: {h}"));
    }
    if ms.and_then(Value::as_str) == Some(NOT_IN_HUB_CACHE) {
        return Some(format!("{option}: {NOT_IN_HUB_CACHE} (ModelScope)"));
    }
    if ms
        .and_then(|m| m.get("config.json"))
        .and_then(Value::as_str)
        == Some("absent")
    {
        return Some(format!(
            "{option}: the ModelScope cache's copy has no config.json"
        ));
    }
    // an adapter list: each adapter's description
    desc.as_object()?
        .iter()
        .filter(|(_, v)| v.is_object())
        .find_map(|(k, v)| unresolved(&format!("{option} {k}"), v))
}

/// The revision the local Hugging Face hub cache resolves hub id `value`
/// to.
fn hub_revision(
    value: &str,
    rev: Option<&str>,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    download_dir: Option<&str>,
) -> Value {
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
        return json!({ "hub": NOT_IN_HUB_CACHE });
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
        Ok(None) => json!({ "hub": NOT_IN_HUB_CACHE }),
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
            let d = describe_in(
                &p,
                None,
                cwd,
                env,
                Reads::Adapter,
                download_dir,
                Hub::HuggingFace,
            );
            (p, d)
        })
        .collect();
    (!m.is_empty()).then_some(Value::Object(m))
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
    fn modelscope_layouts_in_snapshot_downloads_order() {
        let t = tempfile::tempdir().unwrap();
        let b = t.path();
        let put = |p: PathBuf| {
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("config.json"), b"{}").unwrap();
            p
        };
        assert_eq!(modelscope_dir(b, "Qwen/Qwen3.5-8B", None), None);
        assert_eq!(modelscope_dir(b, "no-owner", None), None);
        let snap = put(b.join("models/Qwen--Qwen3.5-8B/snapshots/v1"));
        // the only snapshot, or the one asked for
        assert_eq!(
            modelscope_dir(b, "Qwen/Qwen3.5-8B", None),
            Some(snap.clone())
        );
        assert_eq!(modelscope_dir(b, "Qwen/Qwen3.5-8B", Some("v2")), None);
        let master = put(b.join("models/Qwen--Qwen3.5-8B/snapshots/master"));
        assert_eq!(modelscope_dir(b, "Qwen/Qwen3.5-8B", None), Some(master));
        assert_eq!(modelscope_dir(b, "Qwen/Qwen3.5-8B", Some("v1")), Some(snap));
        // the older SDKs' `<org>/<name with . as ___>` wins over snapshots
        let older = put(b.join("hub/models/Qwen/Qwen3___5-8B"));
        assert_eq!(modelscope_dir(b, "Qwen/Qwen3.5-8B", None), Some(older));
        // a flat legacy copy only when the hub's own layouts are absent
        let t2 = tempfile::tempdir().unwrap();
        let flat = t2.path().join("Qwen/Qwen3.5-8B");
        std::fs::create_dir_all(&flat).unwrap();
        std::fs::write(flat.join("config.json"), b"{}").unwrap();
        assert_eq!(
            modelscope_dir(t2.path(), "Qwen/Qwen3.5-8B", None),
            Some(flat)
        );
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
            json!({ "hub": NOT_IN_HUB_CACHE })
        );
        assert_eq!(
            describe("/no/such", None, t.path(), &env),
            json!({"path": "no such directory"})
        );
    }
}
