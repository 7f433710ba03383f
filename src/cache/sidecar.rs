//! The sidecar `<stem>.launch` beside a cache file: what keepwrap hashed,
//! for which launch, and the identity of the file it hashed; and the set's
//! manifest, `<root>/.keepwrap/sets/<fingerprint>.json`, the one place its
//! member list is written.
//!
//! A sidecar (format 3; its size does not depend on the set's):
//!
//! ```json
//! {
//!   "format": 3,
//!   "keepwrap": "0.1.0",
//!   "fingerprint": "<64 hex: the launch>",
//!   "path": "0.6.18/sm121/3f9c0a1b2c3d4e5f/rank_tp0_pp0_dp0.json",
//!   "sha256": "<64 hex of the cache file's bytes>",
//!   "size": 20480,
//!   "signed_at": 1796049314,
//!   "signed_at_utc": "2026-11-30T14:35:14Z",
//!   "stat": {"ino": 1234567, "mtime_ns": 1796049313123456789, "ctime_ns": 1796049313123456789}
//! }
//! ```
//!
//! A sidecar says nothing of sets: which files form the launch's set, and
//! with which bytes, is what its manifest lists, written last with one
//! atomic rename. A file is a member when the manifest lists it with the
//! bytes its sidecar records; a sign killed before the manifest leaves the
//! set committed before, and a file it does not list is not kept.
//! (Format 2 also carried the id of the set and of the set committed
//! before; they are ignored.)
//!
//! `stat` (optional) is the identity of the very file whose bytes were
//! hashed, recorded only once its change time was settled (see [`Stamp`]);
//! a file that still has it is the file that was hashed: the sidecar is
//! what lets prune trust a file without reading it.
//!
//! The set manifest (one per launch: a newer set of the launch replaces it):
//!
//! ```json
//! {"format": 2, "keepwrap": "0.1.0", "fingerprint": "<64 hex>", "id": "<64 hex>",
//!  "signed_at": 1796049314,
//!  "members": [{"path": "...", "sha256": "...", "size": 20480}, ...]}
//! ```
//!
//! The id is the hash of the fingerprint and the members, so a manifest
//! proves itself: no other member list has its id. It is the one type
//! that describes a set: the store's `.set.json` is one, and a share
//! node's `manifest.json` and the fleet's `sets/<id>.json` are envelopes
//! of their own fields around one (the fleet's without `keepwrap` and
//! `signed_at`, so that its bytes depend on its files alone).
//!
//! The fingerprints here are any launch's, as a sidecar or a manifest
//! names one (a string read from a file), not only the running launch's.

use std::borrow::Cow;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fsx;
use super::Shape;

/// One file of a signed set: path relative to the root, sha256 hex, size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

/// The identity of a cache file as it was hashed: a file with the same
/// inode, modification time and change time (and size) still holds those
/// bytes. The change time cannot be set by a user: any write, rename,
/// `chmod` or `utimensat` sets it to the current time, so an edited,
/// replaced or planted file has another one, provided the change time was
/// already in the past when the file was looked at (else a change in the
/// same clock tick could keep it: see [`Stamp::settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stamp {
    pub ino: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// How far in the past a change time must be, when the file is looked at,
/// for any later change to give another one: the kernel stamps files with
/// a clock that lags by at most one tick (10 ms at the slowest `HZ`), at
/// the file system's granularity. Sub-second file systems: 100 ms;
/// a change time with no nanoseconds may come from a file system with
/// 1 or 2 s granularity: 3 s.
const SETTLE_FINE_NS: i64 = 100_000_000;
const SETTLE_COARSE_NS: i64 = 3_000_000_000;

impl Stamp {
    pub fn of(st: &nix::sys::stat::FileStat) -> Stamp {
        Stamp {
            ino: st.st_ino,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// When (wall clock, ns) any change to the file is sure to give it
    /// another change time.
    pub fn settled_at(&self) -> i64 {
        let margin = if self.ctime_ns % 1_000_000_000 == 0 {
            SETTLE_COARSE_NS
        } else {
            SETTLE_FINE_NS
        };
        self.ctime_ns.saturating_add(margin)
    }

    /// Was the change time settled at wall-clock time `now_ns` (read
    /// before the file was looked at)?
    pub fn settled(&self, now_ns: i64) -> bool {
        self.settled_at() <= now_ns
    }
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The wall clock in ns since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat: Option<Stamp>,
}

impl Sidecar {
    /// Does it record the bytes `m` lists?
    pub fn records(&self, m: &Member) -> bool {
        self.sha256 == m.sha256 && self.size == m.size
    }
}

/// The first look at a sidecar: enough to reject one for another launch
/// or of another format.
#[derive(Deserialize)]
pub struct Head<'a> {
    pub format: u64,
    #[serde(borrow)]
    pub fingerprint: Option<Cow<'a, str>>,
}

/// A set's manifest (`.keepwrap/sets/<fingerprint>.json`): the one type
/// that describes a set, wherever it is (the store's `.set.json`; around
/// it, the envelope of a share node's `manifest.json` and of the fleet's
/// `sets/<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetManifest {
    pub format: u32,
    /// The keepwrap that signed it (empty, and not written, in a set whose
    /// bytes must depend on its files alone: the fleet's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub keepwrap: String,
    pub fingerprint: String,
    pub id: String,
    /// When it was signed, seconds since the epoch (0, and not written, in
    /// the fleet's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub signed_at: u64,
    pub members: Vec<Member>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// sha256 hex over the fingerprint and the sorted member list: the same
/// files with the same bytes signed for the same launch give the same id.
pub fn set_id(fingerprint: &str, members: &[Member]) -> String {
    set_id_of(fingerprint, members.iter().map(Member::as_ref))
}

/// [`set_id`] over members as `(path, sha256, size)`.
fn set_id_of<'m>(fingerprint: &str, members: impl Iterator<Item = MemberRef<'m>>) -> String {
    let mut h = Sha256::new();
    h.update(b"keepwrap set v1\0");
    h.update(fingerprint.as_bytes());
    h.update(b"\0");
    // The size in decimal, written into a buffer of its own (no
    // allocation a member: a set may have 100,000).
    let mut digits = [0u8; 20];
    for (path, sha256, size) in members {
        h.update(path.as_bytes());
        h.update(b"\0");
        h.update(sha256.as_bytes());
        h.update(b"\0");
        let mut rest = &mut digits[..];
        let _ = write!(rest, "{size}");
        let n = 20 - rest.len();
        h.update(&digits[..n]);
        h.update(b"\n");
    }
    crate::digest::hex(h.finalize())
}

/// A member as `(path, sha256, size)`, borrowed.
type MemberRef<'m> = (&'m str, &'m str, u64);

impl Member {
    fn as_ref(&self) -> MemberRef<'_> {
        (&self.path, &self.sha256, self.size)
    }
}

pub use crate::digest::is_sha256_hex;

/// A member path as signed: relative, plain components, and a cache file
/// of a tree of `shape`.
pub fn is_member_path(p: &str, shape: Shape) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && super::is_cache_file(std::path::Path::new(p), shape)
}

/// Check a sidecar is well formed: its sha256 is hex. Err: what is wrong.
pub fn validate(s: &Sidecar) -> Result<(), String> {
    if !is_sha256_hex(&s.sha256) {
        return Err("sha256 is not 64 lowercase hex".into());
    }
    Ok(())
}

/// Check a set manifest is well formed and self-consistent: signed for
/// `fingerprint`, the members strictly sorted, each path a cache file
/// path, each sha256 hex, and the id the hash of fingerprint + members.
pub fn validate_manifest(m: &SetManifest, fingerprint: &str, shape: Shape) -> Result<(), String> {
    let head = (m.format, m.fingerprint.as_str(), m.id.as_str());
    check_manifest(
        head,
        fingerprint,
        shape,
        m.members.iter().map(Member::as_ref),
    )
}

/// [`validate_manifest`] of a manifest's `(format, fingerprint, id)` and
/// its members as `(path, sha256, size)`.
fn check_manifest<'m, I>(
    (format, fp, id): (u32, &str, &str),
    fingerprint: &str,
    shape: Shape,
    members: I,
) -> Result<(), String>
where
    I: Iterator<Item = MemberRef<'m>> + Clone,
{
    if format != crate::SET_FORMAT {
        return Err(format!("format {format}"));
    }
    if fp != fingerprint {
        return Err("signed for another launch".into());
    }
    let mut prev: Option<&str> = None;
    for (path, sha256, _) in members.clone() {
        if !is_member_path(path, shape) {
            return Err(format!("member {path:?} is not a cache file path"));
        }
        if !is_sha256_hex(sha256) {
            return Err(format!("member {path} has no valid sha256"));
        }
        if prev.is_some_and(|p| p >= path) {
            return Err("members are not sorted".into());
        }
        prev = Some(path);
    }
    if set_id_of(fp, members) != id {
        return Err("id does not match its members".into());
    }
    Ok(())
}

/// Serialize a sidecar (pretty JSON plus a final newline).
pub fn to_bytes(s: &Sidecar) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(s).expect("a sidecar serializes");
    v.push(b'\n');
    v
}

/// Where set manifests live, below the root.
pub const SETS_DIR: &str = "sets";
/// Larger manifests are not read (100,000 members is about 15 MB).
pub const MAX_MANIFEST: u64 = 256 << 20;

/// The manifest's file name for a launch.
pub fn manifest_name(fingerprint: &str) -> String {
    format!("{fingerprint}.json")
}

/// `<root>/.keepwrap/sets`, opened (never through a symlink); created when
/// `create`.
pub fn open_sets(root: BorrowedFd<'_>, create: bool) -> io::Result<OwnedFd> {
    // Never through a symlink, never one another user can write.
    let mode = create.then_some(0o755);
    let state = fsx::open_state_dir_at(root, crate::STATE_DIR, mode)?;
    fsx::open_state_dir_at(state.as_fd(), SETS_DIR, mode)
}

/// Read and check the manifest of launch `fingerprint`. Err: why there is
/// none to trust, as the log says it.
pub fn read_manifest(
    sets: Option<BorrowedFd<'_>>,
    fingerprint: &str,
    shape: Shape,
) -> Result<SetManifest, String> {
    let buf = read_manifest_bytes(sets, fingerprint)?;
    let m: SetManifest = serde_json::from_slice(&buf).map_err(|e| format!("not valid ({e})"))?;
    validate_manifest(&m, fingerprint, shape).map_err(|e| format!("not valid ({e})"))?;
    Ok(m)
}

/// The bytes of launch `fingerprint`'s set manifest in `sets`: `missing`
/// when there is none (or no `sets`), else why it cannot be read.
fn read_manifest_bytes(sets: Option<BorrowedFd<'_>>, fingerprint: &str) -> Result<Vec<u8>, String> {
    if !is_sha256_hex(fingerprint) {
        return Err("missing".into());
    }
    let Some(sets) = sets else {
        return Err("missing".into());
    };
    let mut buf = Vec::new();
    match fsx::read_at(
        sets,
        manifest_name(fingerprint).as_str(),
        &mut buf,
        MAX_MANIFEST,
    ) {
        Ok(_) => Ok(buf),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err("missing".into()),
        Err(e) => Err(format!("unreadable ({e})")),
    }
}

/// The member paths a launch's set manifest lists, sorted, kept in one
/// string: enough to tell whether a path is a member without a parsed
/// copy of every member (a manifest of 100,000 members is 18.5 MB, and
/// its full parse most of a remove's memory).
#[derive(Debug, Default)]
pub struct MemberPaths {
    text: String,
    /// Where each path is in `text`.
    spans: Vec<std::ops::Range<usize>>,
}

impl MemberPaths {
    pub fn contains(&self, path: &str) -> bool {
        self.spans
            .binary_search_by(|r| self.text[r.clone()].cmp(path))
            .is_ok()
    }
}

/// The member paths of launch `fingerprint`'s set manifest, when it is
/// valid ([`validate_manifest`]): read with no copy of each member.
pub fn read_member_paths(
    sets: Option<BorrowedFd<'_>>,
    fingerprint: &str,
    shape: Shape,
) -> Option<MemberPaths> {
    /// [`SetManifest`] borrowed from its bytes (strings with escapes are
    /// copied).
    #[derive(Deserialize)]
    struct Borrowed<'a> {
        format: u32,
        #[serde(borrow, default, rename = "keepwrap")]
        _keepwrap: Cow<'a, str>,
        #[serde(borrow)]
        fingerprint: Cow<'a, str>,
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(default, rename = "signed_at")]
        _signed_at: u64,
        #[serde(borrow)]
        members: Vec<BorrowedMember<'a>>,
    }
    #[derive(Deserialize)]
    struct BorrowedMember<'a> {
        #[serde(borrow)]
        path: Cow<'a, str>,
        #[serde(borrow)]
        sha256: Cow<'a, str>,
        size: u64,
    }
    let buf = read_manifest_bytes(sets, fingerprint).ok()?;
    let m: Borrowed<'_> = serde_json::from_slice(&buf).ok()?;
    let members = m.members.iter().map(|b| (&*b.path, &*b.sha256, b.size));
    let head = (m.format, &*m.fingerprint, &*m.id);
    check_manifest(head, fingerprint, shape, members).ok()?;
    let mut out = MemberPaths {
        text: String::with_capacity(m.members.iter().map(|p| p.path.len()).sum()),
        spans: Vec::with_capacity(m.members.len()),
    };
    for p in &m.members {
        let start = out.text.len();
        out.text.push_str(&p.path);
        out.spans.push(start..out.text.len());
    }
    Some(out)
}

/// Write the manifest atomically (temp file, fsync, rename, fsync of the
/// directory).
pub fn write_manifest(sets: BorrowedFd<'_>, m: &SetManifest) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(m).expect("a manifest serializes");
    bytes.push(b'\n');
    let name = std::ffi::CString::new(manifest_name(&m.fingerprint))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fsx::write_atomic_at(sets, &name, &bytes, 0o644)?;
    fsx::fsync_dir(sets)
}

/// Remove the manifest of launch `fingerprint` when it lists the set `id`
/// (that set was evicted); one of a newer set of the launch (signed in the
/// tree while the evicted one was stored) stays.
pub fn remove_manifest(root: BorrowedFd<'_>, fingerprint: &str, id: &str, shape: Shape) {
    let Ok(sets) = open_sets(root, false) else {
        return;
    };
    if read_manifest(Some(sets.as_fd()), fingerprint, shape).is_ok_and(|m| m.id == id) {
        let _ = fsx::unlink_at(sets.as_fd(), manifest_name(fingerprint).as_str());
    }
}
