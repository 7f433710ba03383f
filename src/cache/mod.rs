//! The autotune cache on disk: which files are cache files, their sidecars,
//! what a launch prunes before the engine starts, and how a set of files is
//! signed for a launch once tuning is done.
//!
//! Layout under the root: the engine's [`Shape`] (its [`Layout`], in its
//! folder under `engine/`) says which directories hold cache files and what
//! each name in them is, with keepwrap's sidecar `<stem>.launch` beside
//! each cache file. Only paths of that shape are judged (`runs/` is left
//! alone); anything else under the root is never touched, and reported
//! once.
//!
//! - [`fsx`]: no-follow primitives relative to a directory descriptor;
//! - `layout`: names, and the walk over the tree;
//! - `sidecar`: the sidecar format and the set id;
//! - `judge`: the decisions, without I/O;
//! - `prune`, `sign`: the two operations;
//! - `trash`: `<root>/.keepwrap/trash/`, where prune moves a directory whose
//!   every entry goes (one rename instead of unlinking 16 files whose
//!   blocks the file system must free), emptied in a background thread.
//!
//! The set rule: at sign time every cache file present is signed as one set
//! (id = sha256 over fingerprint + sorted members). Each member's sidecar
//! records its own bytes; the member list is written once, last, in the
//! launch's set manifest `.keepwrap/sets/<fingerprint>.json`. Prune keeps a
//! file only if its set is whole: the manifest lists it with the bytes its
//! sidecar records, and every member it lists is present, its bytes
//! matching. Otherwise every member is removed, so no launch ever loads part
//! of a set (a crash between two sidecar writes, or before the manifest,
//! included).

use crate::digest::Fingerprint;
use std::io;
use std::path::{Component, Path, PathBuf};

pub mod dirents;
pub mod forget;
pub mod fsx;
mod json;
mod judge;
mod layout;
pub use layout::{is_version_dir, Layout, RankId, Role, Shape, CACHE_EXT, SIDECAR_EXT};
mod prune;
pub use prune::{Empty, Stash, MAX_CACHE_FILE, MAX_SIDECAR};
mod sidecar;
mod sign;
pub use sign::Settle;
mod signed;
pub use signed::{read_signed, SignedFile};
mod survey;
pub use survey::{survey, FileInfo, FileState};
mod trash;

pub use trash::{empty_trash, TrashJob, TRASH_DIR};

#[cfg(test)]
mod tests;

pub use crate::digest::sha256_hex;
pub use json::{json_object_entries, python_nan_to_zero, META_KEYS};
pub use judge::{judge_sidecar, judge_sidecar_for, Reason};
pub use sidecar::{
    is_sha256_hex, manifest_name, now_ns, open_sets, read_manifest, remove_manifest, set_id,
    validate_manifest, write_manifest, Member, SetManifest, Sidecar, Stamp, MAX_MANIFEST,
};

/// What prune did, for the summary line and the outcome line.
#[derive(Debug, Default, Clone)]
pub struct PruneReport {
    /// Cache files kept: signed for this launch, bytes unchanged, set whole.
    pub kept: Vec<PathBuf>,
    /// The identity of each file of `kept` as prune checked it (same order).
    pub kept_ids: Vec<FileId>,
    /// Directories (relative to the root) whose kept cache files are not
    /// all hard links of one file, as unify leaves a directory: signed
    /// without unify.
    pub split: Vec<PathBuf>,
    /// Cache files removed.
    pub removed: usize,
    /// Cache files of whole sets signed for other launches, moved to the
    /// store.
    pub stored: usize,
    /// Orphan sidecars and `.autotuner_*.tmp` / `.keepwrap-*.tmp` leftovers removed.
    pub leftovers: usize,
    /// Cache files that should go but could not be removed (a directory
    /// named `*.json`, an unlink error); each was logged as a warning.
    pub left: usize,
    /// `kept` is every cache file left in the tree: every directory of the
    /// layout was listed, and every other cache file went. The watch then
    /// need not walk the tree again before the engine's start.
    pub whole: bool,
}

/// What sign did.
#[derive(Debug, Default, Clone)]
pub struct SignReport {
    /// Cache files in the signed set (relative to the root), sorted.
    pub signed: Vec<PathBuf>,
    /// The set was already recorded on every member: nothing was written.
    pub unchanged: bool,
    /// The set id (sha256 hex).
    pub set_id: String,
    /// With [`Settle::Later`]: members were signed without their stamp
    /// (their change time was too fresh to vouch for them); at this wall
    /// clock time (ns) it has settled, and [`Settle::Restamp`] can record
    /// it.
    pub settle_at: Option<i64>,
    /// Each member of `signed` (same order) as it was when its bytes were
    /// read, from the file descriptor they were read from: a file that
    /// differs from it changed after the sign hashed it.
    pub hashed: Vec<FileId>,
}

/// Is `rel` (relative to the root) a cache file keepwrap guards in a tree
/// of `shape`: shaped like the engine's (SGLang's
/// `<version>/sm<arch>/<key16>/rank_*.json`).
pub fn is_cache_file(rel: &Path, shape: Shape) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut depth = 0;
    let mut comps = rel.components().peekable();
    while let Some(c) = comps.next() {
        let Component::Normal(name) = c else {
            return false;
        };
        let name = name.as_bytes();
        if comps.peek().is_some() {
            if !shape.is_layout_dir(depth, name) {
                return false;
            }
            depth += 1;
        } else {
            return depth == shape.key_depth() && shape.role(name) == layout::Role::Cache;
        }
    }
    false
}

/// A whole set signed for another launch, still in place, to be stored.
#[derive(Debug, Clone)]
pub struct ForeignSet {
    /// Its launch's set manifest.
    pub manifest: SetManifest,
    /// The directory (relative to the root) that holds exactly this set:
    /// its members and their sidecars, nothing else. It may move whole.
    pub dir: Option<String>,
    /// Every directory (relative to the root, below a directory of the
    /// root) that holds nothing but members of this set and their
    /// sidecars, as prune listed it: each may move into the store with one
    /// rename, as it is.
    pub whole_dirs: Vec<String>,
    /// Each member whose bytes prune checked against its sidecar (size,
    /// sha256, a JSON object) just before: its path, and the identity of
    /// the cache file and of the sidecar as they were read.
    pub checked: Vec<(String, [FileId; 2])>,
}

/// Which file, as read: a file replaced or rewritten since has another
/// identity (inode, size or modification time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
}

impl FileId {
    pub fn of(st: &nix::sys::stat::FileStat) -> FileId {
        FileId {
            ino: st.st_ino,
            size: st.st_size.max(0) as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
        }
    }
}

/// Remove every cache file this launch must not load; log one line per
/// decision and one summary line. A missing root gives an empty report.
/// What went to `<root>/.keepwrap/trash/` is deleted by a background thread
/// (all signals blocked in it) started before returning. Every whole set
/// signed for another launch is handed to `stash` (which moves it out of
/// the tree, or fails with every member back in place, and then they are
/// removed), each member logged as `stored <path>: signed for another
/// launch (fingerprint ...)`.
pub fn prune_stashing(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    stash: prune::Stash<'_>,
) -> io::Result<PruneReport> {
    prune::prune(
        root,
        shape,
        fingerprint,
        Empty::Background,
        Some(stash),
        None,
    )
    .map(|(r, _)| r)
}

/// [`prune_stashing`] (its `stash` optional), the trash left for the
/// returned job to empty: a launch runs it once the engine has started, so
/// that the engine never waits for blocks to be freed. A job dropped
/// without running empties the trash in a background thread. Files signed
/// for this launch that `refuse` names are removed (one `removed P: WHY`
/// line each) instead of kept.
pub fn prune_then_empty<'s>(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    stash: Option<prune::Stash<'s>>,
    refuse: Option<prune::Refuse<'s>>,
) -> io::Result<(PruneReport, TrashJob)> {
    prune::prune(root, shape, fingerprint, Empty::Later, stash, refuse)
}

/// Sign every cache file present under the root for this launch, as one set.
/// Writes nothing when the same set is already recorded (`unchanged`). A
/// missing root gives an empty, unchanged report.
pub fn sign(root: &Path, shape: Shape, fingerprint: &Fingerprint) -> io::Result<SignReport> {
    sign::sign(root, shape, fingerprint, sign::Settle::Wait)
}

/// [`sign`], with `settle` saying what to do with files whose change
/// times are too fresh to vouch for them: wait for them, sign them without
/// a stamp, or only record the stamps of the set already signed.
pub fn sign_with(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    settle: Settle,
) -> io::Result<SignReport> {
    sign::sign(root, shape, fingerprint, settle)
}

/// Why another user can write the cache root itself (following a final
/// symlink, as the walk opens it), if one can: then nothing in it can ever
/// be signed, as prune and sign judge it.
pub fn root_untrusted(root: &Path) -> Option<&'static str> {
    let st = nix::sys::stat::stat(root).ok()?;
    layout::dir_untrusted(&st, nix::unistd::geteuid().as_raw())
}

/// Why the directory `rel` below the open root (or the root itself, or a
/// directory between them) is one another user can write, if it is: the
/// same rule by which prune and sign distrust the files in it. Never
/// follows a symlink below the root.
pub fn untrusted_dir(root: std::os::fd::BorrowedFd<'_>, rel: &Path) -> io::Result<Option<String>> {
    use std::os::fd::AsFd;
    let euid = nix::unistd::geteuid().as_raw();
    let check = |fd: std::os::fd::BorrowedFd<'_>, shown: &Path| -> io::Result<Option<String>> {
        let st = fsx::stat_fd(fd)?;
        Ok(layout::dir_untrusted(&st, euid).map(|why| {
            let shown = if shown.as_os_str().is_empty() {
                Path::new(".")
            } else {
                shown
            };
            format!(
                "in a directory another user can write ({}: {why})",
                shown.display()
            )
        }))
    };
    if let Some(why) = check(root, Path::new(""))? {
        return Ok(Some(why));
    }
    let mut cur: Option<std::os::fd::OwnedFd> = None;
    let mut shown = PathBuf::new();
    for c in rel.components() {
        let Component::Normal(name) = c else {
            continue;
        };
        use std::os::unix::ffi::OsStrExt;
        let next = {
            let base = cur.as_ref().map(|f| f.as_fd()).unwrap_or(root);
            fsx::open_dir_at(base, name.as_bytes())?
        };
        shown.push(name);
        if let Some(why) = check(next.as_fd(), &shown)? {
            return Ok(Some(why));
        }
        cur = Some(next);
    }
    Ok(None)
}

/// The parsers, for the fuzz targets in `fuzz/` (not a stable API).
#[doc(hidden)]
pub mod fuzzing {
    /// Judge sidecar bytes for `fingerprint`, beside any file: the parsed
    /// sidecar's path when it is trusted.
    pub fn judge_sidecar(bytes: &[u8], fingerprint: &str) -> Option<String> {
        super::judge::judge_sidecar_for(bytes, Some(fingerprint), |_| true)
            .ok()
            .map(|sc| sc.path)
    }

    /// Judge cache file bytes: its entry count when it is one.
    pub fn cache_file_entries(bytes: &[u8]) -> Option<usize> {
        super::judge::json_object_entries(bytes).ok()
    }
}

/// Why the entries of a landed file are not counted: what the `landed`
/// line says instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uncounted {
    /// Too large to parse in the supervisor loop (MiB).
    #[error("{0} MiB, entries not counted")]
    TooLarge(u64),
    /// Not a cache file prune would keep, and why.
    #[error("{0}")]
    Judged(Reason),
    /// Gone before it was read: removed or renamed by the engine (its
    /// entry gate, a temporary file renamed over).
    #[error("gone before it was read")]
    Gone,
}

/// Number of entries (keys other than `_metadata`, `_records`,
/// `_generation`) in a cache file, if it parses as one; else why not, as
/// the log says it (`not valid JSON (...)`, `unreadable (...)`). Does not
/// follow a final symlink.
pub fn entry_count(path: &Path) -> Result<usize, Uncounted> {
    landed(path, None).map(|l| l.entries)
}

/// A cache file that landed, as its progress line tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    pub entries: usize,
    /// Its bytes are the ones its sidecar signed for the launch: the
    /// engine saved again what it loaded, and tuned nothing new.
    pub as_signed: bool,
}

/// [`entry_count`], and (with `fingerprint`) whether the file is still as
/// signed for that launch by the sidecar beside it.
pub fn landed(path: &Path, fingerprint: Option<&Fingerprint>) -> Result<Landed, Uncounted> {
    // Counting runs in the supervisor loop as files land: a huge file is
    // judged by prune and sign, not parsed here.
    const COUNTED_MAX: u64 = 32 << 20;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.len() > COUNTED_MAX {
            return Err(Uncounted::TooLarge(meta.len() >> 20));
        }
    }
    let mut buf = Vec::new();
    fsx::read_at(nix::fcntl::AT_FDCWD, path, &mut buf, prune::MAX_CACHE_FILE).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Uncounted::Gone
        } else {
            Uncounted::Judged(Reason::Unreadable(e.to_string()))
        }
    })?;
    let entries =
        judge::json_object_entries(&buf).map_err(|e| Uncounted::Judged(e.into_reason()))?;
    let as_signed = fingerprint.is_some_and(|fp| {
        let mut sbuf = Vec::new();
        fsx::read_at(
            nix::fcntl::AT_FDCWD,
            &path.with_extension("launch"),
            &mut sbuf,
            prune::MAX_SIDECAR,
        )
        .is_ok()
            && judge::judge_sidecar(&sbuf, fp, |_| true)
                .is_ok_and(|sc| judge::judge_bytes(&sc, &buf).is_ok())
    });
    Ok(Landed { entries, as_signed })
}
