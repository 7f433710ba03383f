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
    let dir = cwd.join(value);
    if dir.is_dir() {
        let mut m = Map::new();
        m.insert(
            "config.json".into(),
            file_hash(&dir.join("config.json")).unwrap_or_else(|| "absent".into()),
        );
        if let Some(h) = file_hash(&dir.join("hf_quant_config.json")) {
            m.insert("hf_quant_config.json".into(), h);
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
    let Some(cache) = hub_cache(env) else {
        return json!({"hub": "no hub cache"});
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

/// One line of `--explain` for a model description.
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
            .map(|(k, v)| format!("{k} {}", short(v)))
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
