//! The sidecar `<stem>.launch` beside a cache file: what keepwrap signed,
//! for which launch, and the set the file was signed in.
//!
//! ```json
//! {
//!   "format": 1,
//!   "keepwrap": "0.1.0",
//!   "fingerprint": "<64 hex: the launch>",
//!   "path": "0.6.18/sm121/3f9c0a1b2c3d4e5f/rank_tp0_pp0_dp0.json",
//!   "sha256": "<64 hex of the cache file's bytes>",
//!   "size": 20480,
//!   "signed_at": 1796049314,
//!   "signed_at_utc": "2026-11-30T14:35:14Z",
//!   "set": {
//!     "id": "<64 hex: set_id(fingerprint, members)>",
//!     "members": [
//!       {"path": "0.6.18/sm121/3f9c0a1b2c3d4e5f/rank_tp0_pp0_dp0.json", "sha256": "...", "size": 20480},
//!       {"path": "0.6.18/sm121/3f9c0a1b2c3d4e5f/rank_tp1_pp0_dp0.json", "sha256": "...", "size": 20391}
//!     ]
//!   }
//! }
//! ```

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::layout;

/// One file of a signed set: path relative to the root, sha256 hex, size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

/// A set of cache files signed together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRecord {
    pub id: String,
    pub members: Vec<Member>,
}

/// The whole sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub format: u32,
    pub keepwrap: String,
    pub fingerprint: String,
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub signed_at: u64,
    pub signed_at_utc: String,
    pub set: SetRecord,
}

/// The first look at a sidecar: enough to reject one for another launch
/// without building the member list.
#[derive(Deserialize)]
pub struct Head<'a> {
    pub format: u64,
    #[serde(borrow)]
    pub fingerprint: Option<Cow<'a, str>>,
}

/// sha256 hex over the fingerprint and the sorted member list: the same
/// files with the same bytes signed for the same launch give the same id.
pub fn set_id(fingerprint: &str, members: &[Member]) -> String {
    let mut h = Sha256::new();
    h.update(b"keepwrap set v1\0");
    h.update(fingerprint.as_bytes());
    h.update(b"\0");
    for m in members {
        h.update(m.path.as_bytes());
        h.update(b"\0");
        h.update(m.sha256.as_bytes());
        h.update(b"\0");
        h.update(m.size.to_string().as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A member path as signed: relative, plain components, and a cache file.
pub fn is_member_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && super::is_cache_file(std::path::Path::new(p))
        && layout::role(p.rsplit('/').next().unwrap_or(p).as_bytes()) == layout::Role::Cache
}

/// Check the sidecar's set record is well formed and self-consistent: the
/// members strictly sorted, each path a cache file path, each sha256 hex,
/// this file among them with the sha256 and size recorded for it, and the
/// id the hash of fingerprint + members. Err: what is wrong.
pub fn validate(s: &Sidecar) -> Result<(), String> {
    if !is_sha256_hex(&s.sha256) {
        return Err("sha256 is not 64 lowercase hex".into());
    }
    let mut me = None;
    for (i, m) in s.set.members.iter().enumerate() {
        if !is_member_path(&m.path) {
            return Err(format!("set member {:?} is not a cache file path", m.path));
        }
        if !is_sha256_hex(&m.sha256) {
            return Err(format!("set member {} has no valid sha256", m.path));
        }
        if i > 0 && s.set.members[i - 1].path >= m.path {
            return Err("set members are not sorted".into());
        }
        if m.path == s.path {
            me = Some(m);
        }
    }
    match me {
        None => return Err("this file is not in its own set".into()),
        Some(m) if m.sha256 != s.sha256 || m.size != s.size => {
            return Err("set records other bytes for this file".into());
        }
        Some(_) => {}
    }
    if set_id(&s.fingerprint, &s.set.members) != s.set.id {
        return Err("set id does not match its members".into());
    }
    Ok(())
}

/// Serialize a sidecar (pretty JSON plus a final newline).
pub fn to_bytes(s: &Sidecar) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(s).expect("a sidecar serializes");
    v.push(b'\n');
    v
}
