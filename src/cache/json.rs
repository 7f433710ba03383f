//! Is a cache file one JSON object, as Python's `json` reads it, whose
//! metadata keys have the types FlashInfer reads? Without I/O, and without
//! allocating for the entries.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::judge::Reason;

/// Why bytes are not a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonErr {
    Invalid(String),
    NotObject(&'static str),
    /// A key of [`META_KEYS`] holds the wrong JSON type: (key, its type).
    BadMeta(&'static str, &'static str),
}

impl JsonErr {
    pub fn into_reason(self) -> Reason {
        match self {
            JsonErr::Invalid(e) => Reason::InvalidJson(e),
            JsonErr::NotObject(w) => Reason::NotObject(w),
            JsonErr::BadMeta(key, is) => Reason::BadMeta { key, is },
        }
    }
}

/// Keys FlashInfer writes besides the entries.
pub const META_KEYS: [&str; 3] = ["_metadata", "_records", "_generation"];

/// The JSON type each of [`META_KEYS`] must hold: FlashInfer reads
/// `_metadata` and `_records` as dicts and `_generation` as a string.
pub(super) fn meta_wants(key: &str) -> &'static str {
    if key == "_generation" {
        "a string"
    } else {
        "an object"
    }
}

fn type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Entries counted, and the first meta key of the wrong type.
type Counted = (usize, Option<(&'static str, &'static str)>);

struct CountEntries;

impl<'de> Visitor<'de> for CountEntries {
    type Value = Counted;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counted, A::Error> {
        let mut n = 0;
        let mut bad = None;
        while let Some(key) = map.next_key::<KeyIsMeta>()? {
            let Some(meta) = key.0 else {
                map.next_value::<Skip>()?;
                n += 1;
                continue;
            };
            // Small (a few fields), or MegaMoE's records: parse them whole.
            let v = map.next_value::<serde_json::Value>()?;
            let is = type_name(&v);
            if is != meta_wants(meta) && bad.is_none() {
                bad = Some((meta, is));
            }
        }
        Ok((n, bad))
    }
}

/// Any JSON value, skipped without allocating, but through
/// `deserialize_any` so that serde_json's nesting limit (128) applies:
/// `IgnoredAny` skips any depth, and Python's `json` (FlashInfer's loader)
/// raises RecursionError on a deep file, which would fail the engine's boot.
struct Skip;

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
}

/// A map key, reduced to "which of [`META_KEYS`] is it" without allocating.
struct KeyIsMeta(Option<&'static str>);

impl<'de> de::Deserialize<'de> for KeyIsMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyIsMeta;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyIsMeta, E> {
                Ok(KeyIsMeta(META_KEYS.iter().copied().find(|k| *k == s)))
            }
        }
        d.deserialize_str(V)
    }
}

fn what_json(bytes: &[u8]) -> &'static str {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

fn count_entries(bytes: &[u8]) -> Result<Counted, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let n = de::Deserializer::deserialize_map(&mut de, CountEntries)?;
    de.end()?;
    Ok(n)
}

/// Python's `json` writes and reads `NaN`, `Infinity` and `-Infinity`
/// (`allow_nan=True` is its default); serde_json does not. Replace those
/// bare tokens (outside strings) by `0` so a file the engine loads is not
/// judged invalid here. None when there is none.
pub fn python_nan_to_zero(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.windows(3).any(|w| w == b"NaN") && !bytes.windows(8).any(|w| w == b"Infinity") {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut in_str, mut changed) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            out.push(b);
            if b == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1]);
                i += 1;
            } else if b == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        let token: &[u8] = if rest.starts_with(b"NaN") {
            b"NaN"
        } else if rest.starts_with(b"-Infinity") {
            b"-Infinity"
        } else if rest.starts_with(b"Infinity") {
            b"Infinity"
        } else {
            b""
        };
        if !token.is_empty() {
            out.push(b'0');
            i += token.len();
            changed = true;
            continue;
        }
        if b == b'"' {
            in_str = true;
        }
        out.push(b);
        i += 1;
    }
    changed.then_some(out)
}

/// If `bytes` are one JSON object (as Python's `json` reads it) whose
/// [`META_KEYS`] have the types FlashInfer reads, the number of its other
/// keys.
pub fn json_object_entries(bytes: &[u8]) -> Result<usize, JsonErr> {
    let counted = match count_entries(bytes) {
        Ok(c) => Ok(c),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            Err(JsonErr::NotObject(what_json(bytes)))
        }
        Err(e) => match python_nan_to_zero(bytes) {
            Some(fixed) => match count_entries(&fixed) {
                Ok(c) => Ok(c),
                Err(_) => Err(JsonErr::Invalid(e.to_string())),
            },
            None => Err(JsonErr::Invalid(e.to_string())),
        },
    }?;
    match counted {
        (n, None) => Ok(n),
        (_, Some((key, is))) => Err(JsonErr::BadMeta(key, is)),
    }
}
