//! The decisions, without I/O: is a sidecar for this launch, do the bytes
//! still match, is a set whole.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::fsx::Kind;
use super::sidecar::{self, Head, SetManifest, Sidecar};
use crate::digest::{sha256_hex, short};
use crate::SIDECAR_FORMAT;

/// Why a cache file is removed (the text after `removed <path>: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    NoSidecar,
    SidecarUnreadable(String),
    SidecarGarbage(String),
    SidecarFuture(u64),
    /// Signed by an older keepwrap, whose sidecars carried the whole set.
    SidecarOld(u64),
    /// First 8 hex digits of the other fingerprint.
    OtherLaunch(String),
    SizeChanged {
        now: u64,
        signed: u64,
    },
    ShaChanged {
        now: String,
        signed: String,
    },
    InvalidJson(String),
    NotObject(&'static str),
    /// `_metadata` or `_records` not an object, `_generation` not a string:
    /// FlashInfer's loader would raise on it.
    BadMeta {
        key: &'static str,
        is: &'static str,
    },
    Unreadable(String),
    NotRegular(Kind),
    Untrusted(String),
    SetIncomplete {
        member: String,
        why: MemberWhy,
    },
    /// The set's manifest (`.keepwrap/sets/<fp>.json`) is missing, not
    /// valid, or of another set: why.
    SetManifest(String),
    /// Signed for another launch (first 8 hex digits), and not storable.
    OtherLaunchBad(String, Box<Reason>),
}

/// Why a member fails its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberWhy {
    /// Not present, or present but not trusted on its own (unsigned,
    /// changed, ...).
    NotTrusted,
    /// Missing from the tree.
    Missing,
    /// Present and trusted on its own, but its sidecar names another set.
    OtherSet,
    /// Its own set is incomplete.
    Dropped,
    /// Trusted on its own, but with other bytes than the set records.
    OtherBytes,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoSidecar => f.write_str("no sidecar (unsigned)"),
            Reason::SidecarUnreadable(e) => write!(f, "sidecar unreadable ({e})"),
            Reason::SidecarGarbage(e) => write!(f, "sidecar is not valid ({e})"),
            Reason::SidecarFuture(n) => {
                write!(
                    f,
                    "sidecar format {n} is newer than this keepwrap's ({SIDECAR_FORMAT})"
                )
            }
            Reason::SidecarOld(n) => write!(
                f,
                "sidecar format {n} is older than this keepwrap's ({SIDECAR_FORMAT})"
            ),
            Reason::SetManifest(why) => write!(f, "set incomplete (set manifest {why})"),
            Reason::OtherLaunch(fp) => write!(f, "signed for another launch (fingerprint {fp}...)"),
            Reason::SizeChanged { now, signed } => {
                write!(f, "changed after signing (size {now} != signed {signed})")
            }
            Reason::ShaChanged { now, signed } => {
                write!(
                    f,
                    "changed after signing (sha256 {}... != signed {}...)",
                    short(now).digits(),
                    short(signed).digits()
                )
            }
            Reason::InvalidJson(e) => write!(f, "not valid JSON ({e})"),
            Reason::NotObject(what) => write!(f, "not a JSON object ({what})"),
            Reason::BadMeta { key, is } => write!(
                f,
                "not a FlashInfer cache file ({key} is {is}, not {})",
                meta_wants(key)
            ),
            Reason::Unreadable(e) => write!(f, "unreadable ({e})"),
            Reason::NotRegular(k) => write!(f, "not a regular file ({})", k.name()),
            Reason::Untrusted(why) => f.write_str(why),
            Reason::OtherLaunchBad(fp, why) => {
                write!(f, "signed for another launch (fingerprint {fp}...), {why}")
            }
            Reason::SetIncomplete { member, why } => {
                let why = match why {
                    MemberWhy::NotTrusted => "not trusted",
                    MemberWhy::Missing => "missing",
                    MemberWhy::OtherSet => "signed in another set",
                    MemberWhy::Dropped => "in an incomplete set",
                    MemberWhy::OtherBytes => "signed with other bytes",
                };
                write!(f, "set incomplete ({member}: {why})")
            }
        }
    }
}

/// Judge a sidecar's bytes for the cache file beside it (`is_rel` says
/// whether a path relative to the root is that file): Ok with the parsed
/// sidecar when it was signed for `fingerprint` and is well formed.
pub fn judge_sidecar(
    bytes: &[u8],
    fingerprint: &str,
    is_rel: impl Fn(&str) -> bool,
) -> Result<Sidecar, Reason> {
    judge_sidecar_for(bytes, Some(fingerprint), is_rel)
}

/// [`judge_sidecar`] for the launch `fingerprint`, or (None) for whichever
/// launch the sidecar names.
pub fn judge_sidecar_for(
    bytes: &[u8],
    fingerprint: Option<&str>,
    is_rel: impl Fn(&str) -> bool,
) -> Result<Sidecar, Reason> {
    let head: Head<'_> =
        serde_json::from_slice(bytes).map_err(|e| Reason::SidecarGarbage(e.to_string()))?;
    if head.format > u64::from(SIDECAR_FORMAT) {
        return Err(Reason::SidecarFuture(head.format));
    }
    if head.format == 0 {
        return Err(Reason::SidecarGarbage("format 0".into()));
    }
    if head.format < u64::from(SIDECAR_FORMAT) {
        return Err(Reason::SidecarOld(head.format));
    }
    match head.fingerprint.as_deref() {
        None => return Err(Reason::SidecarGarbage("no fingerprint".into())),
        Some(fp) if fingerprint.is_some_and(|want| fp != want) => {
            return Err(Reason::OtherLaunch(short(fp).digits().to_string()));
        }
        Some(_) => {}
    }
    let sc: Sidecar =
        serde_json::from_slice(bytes).map_err(|e| Reason::SidecarGarbage(e.to_string()))?;
    if !is_rel(&sc.path) {
        return Err(Reason::SidecarGarbage(format!(
            "signed for another file, {}",
            sc.path
        )));
    }
    sidecar::validate(&sc).map_err(Reason::SidecarGarbage)?;
    Ok(sc)
}

/// Judge the cache file's bytes against its sidecar.
pub fn judge_bytes(sc: &Sidecar, bytes: &[u8]) -> Result<(), Reason> {
    if bytes.len() as u64 != sc.size {
        return Err(Reason::SizeChanged {
            now: bytes.len() as u64,
            signed: sc.size,
        });
    }
    let now = sha256_hex(bytes);
    if now != sc.sha256 {
        return Err(Reason::ShaChanged {
            now,
            signed: sc.sha256.clone(),
        });
    }
    json_object_entries(bytes)
        .map(|_| ())
        .map_err(JsonErr::into_reason)
}

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
fn meta_wants(key: &str) -> &'static str {
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
fn python_nan_to_zero(bytes: &[u8]) -> Option<Vec<u8>> {
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

/// A cache file trusted on its own (sidecar for this launch, bytes match),
/// waiting for its set to be judged.
pub struct Candidate<'a> {
    pub path: &'a str,
    pub sidecar: &'a Sidecar,
}

/// The manifests of the candidates' launches, by fingerprint: the set each
/// launch signed last, or why there is none to trust.
pub type Manifests = HashMap<String, Result<SetManifest, String>>;

/// Judge the sets: a candidate is kept (None) only if its launch's
/// manifest lists it with the bytes its sidecar signs, and every member the
/// manifest lists is a candidate of that launch with the bytes the manifest
/// records, and no member of its set is removed because another set that
/// lists it is incomplete. The manifest is the commit point: a member whose
/// sidecar names a later set of the launch, and the manifest's as the set
/// committed when it was written (a sign killed before it wrote the later
/// set's manifest), is still a member of the set committed last. Otherwise Some(reason). Members of an incomplete
/// set are removed whatever set their own sidecar names, and that in turn
/// breaks their set: repeated until nothing changes, so no set is ever kept
/// in part. Each set is checked against its members once per round.
pub fn resolve_sets(cands: &[Candidate<'_>], manifests: &Manifests) -> Vec<Option<Reason>> {
    let index: HashMap<&str, usize> = cands.iter().enumerate().map(|(i, c)| (c.path, i)).collect();
    let mut out: Vec<Option<Reason>> = vec![None; cands.len()];
    // The manifests of the candidates' launches, once each: (fingerprint,
    // id, members).
    let mut sets: Vec<(&str, &str, &[sidecar::Member])> = Vec::new();
    {
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for (i, c) in cands.iter().enumerate() {
            let fp = c.sidecar.fingerprint.as_str();
            let m = match manifests.get(fp) {
                None => Err("missing"),
                Some(Err(why)) => Err(why.as_str()),
                Some(Ok(m)) => Ok(m),
            };
            let m = match m {
                Err(why) => {
                    out[i] = Some(Reason::SetManifest(why.to_string()));
                    continue;
                }
                Ok(m) => m,
            };
            if seen.insert(fp, ()).is_none() {
                sets.push((fp, m.id.as_str(), &m.members));
            }
            // A member, listed with the bytes its sidecar signs?
            let why = match m.members.binary_search_by(|x| x.path.as_str().cmp(c.path)) {
                _ if !c.sidecar.in_set(&m.id) => "names another set",
                Ok(k)
                    if m.members[k].sha256 == c.sidecar.sha256
                        && m.members[k].size == c.sidecar.size =>
                {
                    continue;
                }
                Ok(_) => "records other bytes for this file",
                Err(_) => "does not list this file",
            };
            out[i] = Some(Reason::SetManifest(why.to_string()));
        }
    }
    let mut broken = vec![false; sets.len()];
    loop {
        let mut changed = false;
        for (s, &(fp, id, members)) in sets.iter().enumerate() {
            if broken[s] {
                continue;
            }
            let failure = members
                .iter()
                .find_map(|m| match index.get(m.path.as_str()) {
                    None => Some((m.path.as_str(), MemberWhy::NotTrusted)),
                    Some(&j)
                        if cands[j].sidecar.fingerprint != fp || !cands[j].sidecar.in_set(id) =>
                    {
                        Some((m.path.as_str(), MemberWhy::OtherSet))
                    }
                    Some(&j) if out[j].is_some() => Some((m.path.as_str(), MemberWhy::Dropped)),
                    Some(&j)
                        if cands[j].sidecar.sha256 != m.sha256
                            || cands[j].sidecar.size != m.size =>
                    {
                        Some((m.path.as_str(), MemberWhy::OtherBytes))
                    }
                    Some(_) => None,
                });
            let Some((member, why)) = failure else {
                continue;
            };
            broken[s] = true;
            changed = true;
            let reason = Reason::SetIncomplete {
                member: member.to_string(),
                why,
            };
            // Every member it lists (the carriers of this set that it does
            // not list were removed above).
            for m in members {
                if let Some(&j) = index.get(m.path.as_str()) {
                    if out[j].is_none() {
                        out[j] = Some(reason.clone());
                    }
                }
            }
        }
        if !changed {
            return out;
        }
    }
}
