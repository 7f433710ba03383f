//! FlashInfer's managed store (`autotune_v2`, flashinfer-python 0.7.4):
//! the layout of its tree, its two hashes recomputed as FlashInfer computes
//! them, the bytes it writes, and the check of a store read back from disk.
//!
//! ```text
//! <root>/v2/<env16>/manifest.json
//! <root>/v2/<env16>/entries/<stem>.json
//! ```
//!
//! `env16` is the first 16 hex digits of the sha256 of the manifest written
//! as `json.dumps(manifest, sort_keys=True, separators=(",", ":"))`
//! ([`env16`]); `<stem>` the first 24 hex digits of the sha256 of an entry's
//! `key`, UTF-8 ([`entry_stem`]). Both files are written as
//! `json.dump(obj, f, indent=2, sort_keys=True)` ([`file_bytes`]) through a
//! temp file `.autotune_<random>.tmp` in the same directory. The facts and
//! where in FlashInfer's and vLLM's code each is read: docs/managed-store.md.

pub mod check;
pub mod kept;
pub mod layout;

pub use check::{check, check_dirs, Finding};
pub use layout::STORE;

use serde_json::Value;

use crate::launch::canonical::{self, Style};

/// The store's schema directory below its root.
pub const SCHEMA_DIR: &[u8] = b"v2";
/// The value of the manifest's `cache_schema`.
pub const SCHEMA: &str = "v2";
/// The manifest in an environment's directory.
pub const MANIFEST: &[u8] = b"manifest.json";
/// The folder of entry files in an environment's directory.
pub const ENTRIES: &[u8] = b"entries";
/// Hex digits of an environment directory's name.
pub const ENV_DIGITS: usize = 16;
/// Hex digits of an entry file's stem.
pub const STEM_DIGITS: usize = 24;
/// The prefix and suffix of FlashInfer's temp files (`tempfile.mkstemp`:
/// eight characters of `[a-z0-9_]` between them).
pub const TMP_PREFIX: &[u8] = b".autotune_";
pub const TMP_SUFFIX: &[u8] = b".tmp";

/// Why a file of the store cannot be trusted: one line a user can grep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("not a JSON object")]
    NotObject,
    #[error("has no \"{0}\"")]
    Lacks(&'static str),
    #[error("its \"key\" is not a string")]
    KeyNotString,
    #[error("its \"cache_schema\" is not \"v2\"")]
    NotSchema,
    #[error("holds the number {0}, which FlashInfer reads back as another")]
    Number(String),
    #[error("named {name}, not the hash of its key ({want})")]
    StemNotKeyHash { name: String, want: String },
    #[error("named {name}, not the hash of its manifest.json ({want})")]
    DirNotManifestHash { name: String, want: String },
    #[error("has no manifest.json: the environment it is for cannot be told")]
    NoManifest,
    #[error("a {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("a {0}, not a directory")]
    NotDir(&'static str),
    #[error("cannot be read: {0}")]
    Unreadable(String),
    #[error("a temp file FlashInfer left, never read by it")]
    Temp,
    #[error("not a file of FlashInfer's managed store")]
    Stray,
}

/// The environment hash FlashInfer names the directory of a manifest by,
/// recomputed from the manifest file's bytes: its object written
/// compact and sorted (`ensure_ascii`), sha256, the first 16 hex digits.
/// Err: why FlashInfer cannot have written the file (not a JSON object,
/// no `"cache_schema": "v2"`, a number Python would read back as
/// another, which would hash otherwise).
pub fn env16(manifest: &[u8]) -> Result<String, Why> {
    let value = parse(manifest)?;
    let Value::Object(map) = &value else {
        return Err(Why::NotObject);
    };
    if map.get("cache_schema").and_then(Value::as_str) != Some(SCHEMA) {
        return Err(Why::NotSchema);
    }
    let text = canonical::value_to_python_json(&as_python(&value)?, Style::COMPACT_SORTED);
    Ok(prefix(crate::digest::sha256_hex(&text), ENV_DIGITS))
}

/// The stem of the entry file of `key` (FlashInfer's `file_key`, the `str()`
/// of the key's fields): the first 24 hex digits of the sha256 of its UTF-8.
pub fn entry_stem(key: &str) -> String {
    prefix(crate::digest::sha256_hex(key.as_bytes()), STEM_DIGITS)
}

/// The bytes FlashInfer writes for `value` (a manifest or an entry):
/// `json.dump(value, f, indent=2, sort_keys=True)`, no newline at the end.
pub fn file_bytes(value: &Value) -> Vec<u8> {
    canonical::value_to_python_json(
        value,
        Style {
            layout: canonical::Layout::Indent2,
            sort_keys: true,
        },
    )
}

/// What an entry file holds that FlashInfer's lookup needs: a JSON object
/// with a string `key`, a `runner` and a `tactic`. Ok: the key.
pub fn entry_key(entry: &[u8]) -> Result<String, Why> {
    let Value::Object(mut map) = parse(entry)? else {
        return Err(Why::NotObject);
    };
    for field in ["runner", "tactic"] {
        if !map.contains_key(field) {
            return Err(Why::Lacks(field));
        }
    }
    match map.remove("key") {
        Some(Value::String(key)) => Ok(key),
        Some(_) => Err(Why::KeyNotString),
        None => Err(Why::Lacks("key")),
    }
}

/// Is `name` FlashInfer's temp file (`.autotune_<[a-z0-9_]+>.tmp`)?
pub fn is_tmp(name: &[u8]) -> bool {
    name.strip_prefix(TMP_PREFIX)
        .and_then(|n| n.strip_suffix(TMP_SUFFIX))
        .is_some_and(|mid| {
            !mid.is_empty()
                && mid
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
        })
}

/// `n` lowercase hex digits.
pub fn is_hex_name(name: &[u8], n: usize) -> bool {
    name.len() == n && crate::digest::is_lower_hex(name)
}

fn prefix(mut hex: String, n: usize) -> String {
    hex.truncate(n);
    hex
}

fn parse(bytes: &[u8]) -> Result<Value, Why> {
    serde_json::from_slice(bytes).map_err(|e| Why::NotJson(e.to_string()))
}

/// `value` as Python's `json.load` holds it, for the canonical writer:
/// strings in its sentinel form (a real U+10FFFF doubled), and each number
/// as Python writes it back, or Err where that is not its text (`1.50`,
/// `-0`, `1e400`): FlashInfer's own manifest holds strings only.
fn as_python(value: &Value) -> Result<Value, Why> {
    Ok(match value {
        Value::String(s) => Value::String(canonical::py_str_from_str(s).into_owned()),
        Value::Number(n) => {
            let text = n.to_string();
            if python_number(&text).as_deref() != Some(text.as_str()) {
                return Err(Why::Number(text));
            }
            value.clone()
        }
        Value::Array(items) => Value::Array(items.iter().map(as_python).collect::<Result<_, _>>()?),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((canonical::py_str_from_str(k).into_owned(), as_python(v)?)))
                .collect::<Result<_, Why>>()?,
        ),
        Value::Null | Value::Bool(_) => value.clone(),
    })
}

/// How Python's `json` writes back the number it read as `text`: an int's
/// digits (up to its 4300-digit limit), a float's `repr`.
fn python_number(text: &str) -> Option<String> {
    if text.contains(['.', 'e', 'E']) {
        let f: f64 = text.parse().ok()?;
        return f.is_finite().then(|| canonical::py_float_repr(f));
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 4300 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let trimmed = digits.trim_start_matches('0');
    Some(match (trimmed.is_empty(), text.starts_with('-')) {
        (true, _) => "0".to_string(),
        (false, true) => format!("-{trimmed}"),
        (false, false) => trimmed.to_string(),
    })
}

#[cfg(test)]
mod tests;
