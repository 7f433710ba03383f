//! The decisions, without I/O: is a sidecar for this launch, do the bytes
//! still match, is a set whole.

use std::collections::HashMap;
use std::fmt;

use super::fsx::Kind;
use super::json::meta_wants;
pub use super::json::{json_object_entries, JsonErr};
use super::sidecar::{self, Head, SetManifest, Sidecar};
use crate::digest::{sha256_hex, short, Fingerprint};
use crate::{OLDEST_SIDECAR_FORMAT, SIDECAR_FORMAT};

/// Why a cache file is removed (the text after `removed <path>: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    NoSidecar,
    SidecarUnreadable(String),
    SidecarGarbage(String),
    SidecarFuture(u64),
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
    /// Signed for this launch and whole, but this launch must not load it
    /// (a caller's rule, e.g. vLLM's shared file under a MoE launch): why.
    Refused(String),
}

impl Reason {
    /// The kind of reason, as prune's summary counts it: its key in the
    /// JSON form and the words its line says.
    pub fn kind(&self) -> (&'static str, &'static str) {
        match self {
            Reason::NoSidecar => ("unsigned", "unsigned"),
            Reason::SidecarUnreadable(_) | Reason::SidecarGarbage(_) | Reason::SidecarFuture(_) => {
                ("bad_sidecar", "with a sidecar that cannot be used")
            }
            Reason::OtherLaunch(_) | Reason::OtherLaunchBad(..) => {
                ("other_launch", "signed for another launch")
            }
            Reason::SizeChanged { .. } | Reason::ShaChanged { .. } => {
                ("changed", "changed after signing")
            }
            Reason::InvalidJson(_) | Reason::NotObject(_) | Reason::BadMeta { .. } => {
                ("not_cache_file", "not a valid cache file")
            }
            Reason::Unreadable(_) => ("unreadable", "unreadable"),
            Reason::NotRegular(_) => ("not_regular", "not a regular file"),
            Reason::Untrusted(_) => ("untrusted", "in an untrusted directory"),
            Reason::SetIncomplete { .. } | Reason::SetManifest(_) => {
                ("set_incomplete", "of an incomplete set")
            }
            Reason::Refused(_) => ("refused", "refused for this launch"),
        }
    }
}

/// Why a member fails its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberWhy {
    /// Not present, or present but not trusted on its own (unsigned,
    /// changed, ...).
    NotTrusted,
    /// Missing from the tree.
    Missing,
    /// Present and trusted on its own, but signed for another launch.
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
            Reason::Refused(why) => f.write_str(why),
            Reason::SidecarUnreadable(e) => write!(f, "sidecar unreadable ({e})"),
            Reason::SidecarGarbage(e) => write!(f, "sidecar is not valid ({e})"),
            Reason::SidecarFuture(n) => {
                write!(
                    f,
                    "sidecar format {n} is newer than this keepwrap's ({SIDECAR_FORMAT})"
                )
            }
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
                    MemberWhy::OtherSet => "signed for another launch",
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
    fingerprint: &Fingerprint,
    is_rel: impl Fn(&str) -> bool,
) -> Result<Sidecar, Reason> {
    judge_sidecar_for(bytes, Some(fingerprint.as_str()), is_rel)
}

/// [`judge_sidecar`] for the launch `fingerprint`, or (None) for whichever
/// launch the sidecar names. A string: the fuzz targets judge for any.
pub fn judge_sidecar_for(
    bytes: &[u8],
    fingerprint: Option<&str>,
    is_rel: impl Fn(&str) -> bool,
) -> Result<Sidecar, Reason> {
    // One parse in the common case: the whole sidecar, then its format and
    // launch checked as its head's would be. Only when it does not parse
    // whole is its head read, to say why as before (its format, its
    // launch, else the error of the whole parse).
    let sc = match serde_json::from_slice::<Sidecar>(bytes) {
        Ok(sc) => {
            judge_head(u64::from(sc.format), Some(&sc.fingerprint), fingerprint)?;
            sc
        }
        Err(whole) => {
            let head: Head<'_> =
                serde_json::from_slice(bytes).map_err(|e| Reason::SidecarGarbage(e.to_string()))?;
            judge_head(head.format, head.fingerprint.as_deref(), fingerprint)?;
            return Err(Reason::SidecarGarbage(whole.to_string()));
        }
    };
    if !is_rel(&sc.path) {
        return Err(Reason::SidecarGarbage(format!(
            "signed for another file, {}",
            sc.path
        )));
    }
    sidecar::validate(&sc).map_err(Reason::SidecarGarbage)?;
    Ok(sc)
}

/// A sidecar's format and launch (`fp`) against the launch `fingerprint`
/// (None: any).
fn judge_head(format: u64, fp: Option<&str>, fingerprint: Option<&str>) -> Result<(), Reason> {
    if format > u64::from(SIDECAR_FORMAT) {
        return Err(Reason::SidecarFuture(format));
    }
    if format < u64::from(OLDEST_SIDECAR_FORMAT) {
        return Err(Reason::SidecarGarbage(format!("format {format}")));
    }
    match fp {
        None => Err(Reason::SidecarGarbage("no fingerprint".into())),
        Some(fp) if fingerprint.is_some_and(|want| fp != want) => {
            Err(Reason::OtherLaunch(short(fp).digits().to_string()))
        }
        Some(_) => Ok(()),
    }
}

/// [`judge_sidecar`] for launch `fingerprint`, and a sidecar of another
/// launch judged for its own: Ok with the sidecar and whether it is of
/// another launch, or why not (for another launch,
/// [`Reason::OtherLaunchBad`]). The bytes are parsed once when well formed.
pub fn judge_sidecar_or_foreign(
    bytes: &[u8],
    fingerprint: &Fingerprint,
    is_rel: impl Fn(&str) -> bool,
) -> Result<(Sidecar, bool), Reason> {
    match judge_sidecar_for(bytes, None, &is_rel) {
        Ok(sc) => {
            let foreign = *fingerprint != sc.fingerprint;
            Ok((sc, foreign))
        }
        Err(why) => match judge_sidecar(bytes, fingerprint, &is_rel) {
            Err(Reason::OtherLaunch(fp8)) => Err(Reason::OtherLaunchBad(fp8, Box::new(why))),
            Err(reason) => Err(reason),
            Ok(sc) => Ok((sc, false)),
        },
    }
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
/// lists it is incomplete. The manifest is the commit point: a sign killed
/// before it wrote a grown set's manifest leaves the set committed last,
/// whose members still hold the bytes it lists, and the files it does not
/// list go. Otherwise Some(reason). Members of an incomplete set are
/// removed, and that in turn breaks any other set listing them: repeated
/// until nothing changes, so no set is ever kept in part. Each set is
/// checked against its members once per round.
pub fn resolve_sets(cands: &[Candidate<'_>], manifests: &Manifests) -> Vec<Option<Reason>> {
    let index: HashMap<&str, usize> = cands.iter().enumerate().map(|(i, c)| (c.path, i)).collect();
    let mut out: Vec<Option<Reason>> = vec![None; cands.len()];
    let sets = listed_members(cands, manifests, &mut out);
    let mut broken = vec![false; sets.len()];
    loop {
        let mut changed = false;
        for (s, &(fp, members)) in sets.iter().enumerate() {
            if broken[s] {
                continue;
            }
            let Some((member, why)) = first_failure(cands, &index, &out, fp, members) else {
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

/// A set to check: its launch's fingerprint, its members.
type SetView<'a> = (&'a str, &'a [sidecar::Member]);

/// The manifests of the candidates' launches, once each; a candidate its
/// launch's manifest does not list with the bytes its sidecar signs gets
/// its reason in `out`.
fn listed_members<'a>(
    cands: &[Candidate<'a>],
    manifests: &'a Manifests,
    out: &mut [Option<Reason>],
) -> Vec<SetView<'a>> {
    let mut sets: Vec<SetView<'a>> = Vec::new();
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
            sets.push((fp, &m.members));
        }
        // A member, listed with the bytes its sidecar signs?
        let why = match m.members.binary_search_by(|x| x.path.as_str().cmp(c.path)) {
            Ok(k) if c.sidecar.records(&m.members[k]) => continue,
            Ok(_) => "records other bytes for this file",
            Err(_) => "does not list this file",
        };
        out[i] = Some(Reason::SetManifest(why.to_string()));
    }
    sets
}

/// The first member of the set of launch `fp` that fails it, and why.
fn first_failure<'m>(
    cands: &[Candidate<'_>],
    index: &HashMap<&str, usize>,
    out: &[Option<Reason>],
    fp: &str,
    members: &'m [sidecar::Member],
) -> Option<(&'m str, MemberWhy)> {
    members
        .iter()
        .find_map(|m| match index.get(m.path.as_str()) {
            None => Some((m.path.as_str(), MemberWhy::NotTrusted)),
            Some(&j) if cands[j].sidecar.fingerprint != fp => {
                Some((m.path.as_str(), MemberWhy::OtherSet))
            }
            Some(&j) if out[j].is_some() => Some((m.path.as_str(), MemberWhy::Dropped)),
            Some(&j) if !cands[j].sidecar.records(m) => {
                Some((m.path.as_str(), MemberWhy::OtherBytes))
            }
            Some(_) => None,
        })
}
