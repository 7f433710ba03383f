//! The store: whole sets of cache files signed for other launches, kept
//! apart inside the cache root and brought back when their launch returns.
//!
//! Everything lives in `<root>/.keepwrap/` (hidden: neither the engine nor
//! keepwrap's cache walk reads it), on the cache's own file system, so every
//! move is a `rename`:
//!
//! ```text
//! .keepwrap/lock                  the lock (root/lock.rs)
//! .keepwrap/stats.json            statistics (root/stats.rs)
//! .keepwrap/running/              the markers of running launches
//!                                 (root/running/)
//! .keepwrap/sets/<fp>.json        a launch's set manifest in the tree
//!                                 (cache/sidecar.rs)
//! .keepwrap/seen/<fp>.json        what the engine of these words last ran
//!                                 as (keeper/last_seen.rs)
//! .keepwrap/fleet.json            the fleet's state (fleet/state.rs)
//! .keepwrap/pinned/<fp>/          `--pin`: hard links of the pinned set,
//!                                 put back after each boot (keeper/pin.rs)
//! .keepwrap/trash/                what prune removes, emptied in the
//!                                 background (cache/trash.rs)
//! .keepwrap/launches/<fp>.json    a signed launch: redacted inputs, times
//! .keepwrap/store/<fp>/.set.json  a stored set's manifest
//! .keepwrap/store/<fp>/<name>     a flat entry: the set's one directory,
//!                                 its files and sidecars
//! .keepwrap/store/<fp>/<path>     a tree entry: its files and sidecars at
//!                                 their paths
//! .keepwrap/store/<fp>.in-<id>/   a set being stored (staging)
//! .keepwrap/restoring-<fp>/       a set being restored
//! .keepwrap/trash-<id>/           an entry being deleted
//! ```
//!
//! A set that is the whole content of one directory (the usual case: one
//! `<key16>` directory of rank files) is stored flat: the directory itself
//! moves into the store with one rename, and the launch's set manifest
//! (`.keepwrap/sets/<fp>.json`) moves into it as its `.set.json`; nothing
//! is created, so storing costs two renames whatever the file system's
//! inode allocator does. Any other set is stored as a tree, with a copy of
//! the same set manifest as its `.set.json`: each directory that holds
//! nothing but the set's files with one rename, the other members file by
//! file; a restore moves such a directory back the same way (its files keep
//! their stamps: the sign at done reads none of them again). Every entry's
//! manifest is the cache's one set format ([`SetManifest`]), checked
//! whole (its id hashes its members); which layout an entry has, its
//! directory says: rank files right inside it are a flat entry, anything
//! else a tree. A manifest of another format is not trusted.
//!
//! Crash safety: a set enters the store through a staging directory that
//! is renamed to `store/<fp>` only once every member is inside; a restore
//! first renames `store/<fp>` to `restoring-<fp>`, then moves the members
//! out. [`Store::recover`] runs first on every launch, under the lock:
//! staging rolls BACK (every member returns to its path, and prune judges
//! the set again), restoring rolls FORWARD, trash is deleted. A move never
//! replaces an existing entry (`RENAME_NOREPLACE`); when a path is taken by
//! a file that is not the set's, the set is not put together from parts.
//! A flat set moves straight to `store/<fp>` (through staging only when
//! the launch has an entry already): an entry without its `.set.json` (the
//! directory moved, the manifest not yet) is whole, its manifest the
//! launch's set manifest in `.keepwrap/sets/`; a flat staging or restoring
//! directory without its `.set.json` is put back or in place by that
//! manifest.
//!
//! What runs for the launch itself (restore, record, touch) takes its
//! [`Fingerprint`]; a fingerprint taken as a string (`fp`) is any launch's,
//! as an entry, a record or a manifest on disk names it.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::fsx::split;
use crate::cache::{self, fsx, ForeignSet, Member, SetManifest, Shape};
use crate::digest::Fingerprint;
use crate::launch::canonical::{self, Style};
use crate::STATE_DIR;

mod evict;
pub use evict::Evicted;
pub use recover::FLEET_STAGING;
mod moves;
mod records;
mod recover;
mod restore;
mod stash;

use moves::*;

/// The manifest inside a stored set's directory.
const MANIFEST: &str = ".set.json";
/// The format of the launch records.
const FORMAT: u32 = 1;
const DIR_MODE: u32 = 0o755;

/// How much the store may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_size: u64,
    pub max_age: Duration,
}

/// A stored set: its set manifest (`.set.json`) and where its members are.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub set: SetManifest,
    /// When it was stored (the entry directory's modification time: its
    /// manifest moved or was written into it last).
    pub stored_at: u64,
    /// A flat entry: the members are directly in the entry's directory
    /// (they share one directory in the tree).
    pub flat: bool,
    /// The cache tree its member paths are laid out for (the engine's):
    /// each stored set is judged and moved by its own, whichever engine
    /// opened the store.
    pub shape: Shape,
}

impl Manifest {
    /// The one directory (relative to the root) every member is in, for a
    /// flat entry.
    fn origin(&self) -> Option<&str> {
        origin_of(&self.set.members)
    }
}

/// The one directory (relative to the root) every member is in.
fn origin_of(members: &[Member]) -> Option<&str> {
    let first = split(&members.first()?.path).0;
    (!first.is_empty() && members.iter().all(|m| split(&m.path).0 == first)).then_some(first)
}

/// A signed launch (`launches/<fp>.json`): what went into its fingerprint
/// (env values and secret-named values as hashes only, as `fingerprint
/// --explain` shows them) and when it was signed and used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub format: u32,
    pub fingerprint: String,
    pub profile: String,
    /// `Launch::redacted_inputs()`.
    pub inputs: Value,
    pub first_signed: u64,
    pub last_signed: u64,
    pub last_used: u64,
    pub files: usize,
}

/// One entry of the store.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manifest: Manifest,
    /// Bytes of its files and sidecars.
    pub bytes: u64,
}

/// What a restore brought back.
#[derive(Debug, Clone)]
pub struct Restored {
    pub paths: Vec<PathBuf>,
    pub signed_at: u64,
}

impl Restored {
    fn of(man: &Manifest) -> Restored {
        Restored {
            paths: man
                .set
                .members
                .iter()
                .map(|m| PathBuf::from(&m.path))
                .collect(),
            signed_at: man.set.signed_at,
        }
    }
}

use crate::clock::now_secs;

fn is_fp(name: &str) -> bool {
    cache::is_sha256_hex(name)
}

/// The two names of a member in its directory: the cache file and its
/// sidecar.
fn names(name: &str) -> [CString; 2] {
    let stem = name.strip_suffix(".json").unwrap_or(name);
    [
        CString::new(name).unwrap_or_default(),
        CString::new(format!("{stem}.launch")).unwrap_or_default(),
    ]
}

/// "5 minutes ago", "2 days ago".
pub fn ago(then: u64, now: u64) -> String {
    let s = now.saturating_sub(then);
    let (n, unit) = if s < 60 {
        (s, "second")
    } else if s < 3600 {
        (s / 60, "minute")
    } else if s < 86400 {
        (s / 3600, "hour")
    } else {
        (s / 86400, "day")
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

pub struct Store {
    root: PathBuf,
    /// The shape of the cache tree: which paths are a set's members.
    shape: Shape,
    root_fd: OwnedFd,
    state: OwnedFd,
    store: OwnedFd,
    launches: OwnedFd,
    /// `.keepwrap/sets`, opened (created) when first needed.
    sets: std::cell::OnceCell<Option<OwnedFd>>,
    /// The directory above the last set stored flat (relative path): sets
    /// of one such directory follow each other.
    updir: std::cell::RefCell<Option<(String, std::sync::Arc<OwnedFd>)>>,
    /// Something moved into the store and is not fsynced yet.
    unsynced: std::cell::Cell<bool>,
    /// Eviction trash a killed keepwrap left (names in `.keepwrap`).
    leftover: std::cell::RefCell<Vec<String>>,
}

impl Store {
    /// Open (creating) `<root>/.keepwrap/` and its directories. The root
    /// must exist.
    pub fn open(root: &Path, shape: Shape) -> io::Result<Store> {
        let root_fd = fsx::open_root(root)?;
        let state = fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, Some(DIR_MODE))?;
        Store::open_in(root, shape, root_fd, state)
    }

    /// [`Store::open`] with the root and its `.keepwrap` already open.
    pub fn open_in(
        root: &Path,
        shape: Shape,
        root_fd: OwnedFd,
        state: OwnedFd,
    ) -> io::Result<Store> {
        Store::with_dirs(root, shape, root_fd, state, Some(DIR_MODE))
    }

    /// Open an existing store read-only; None when there is none.
    pub fn open_existing(root: &Path, shape: Shape) -> Option<Store> {
        let root_fd = fsx::open_root(root).ok()?;
        let state = fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, None).ok()?;
        Store::with_dirs(root, shape, root_fd, state, None).ok()
    }

    /// The store of `state` (`.keepwrap`), its directories opened (created
    /// with `mode`).
    fn with_dirs(
        root: &Path,
        shape: Shape,
        root_fd: OwnedFd,
        state: OwnedFd,
        mode: Option<u32>,
    ) -> io::Result<Store> {
        let store = fsx::open_state_dir_at(state.as_fd(), "store", mode)?;
        let launches = fsx::open_state_dir_at(state.as_fd(), "launches", mode)?;
        Ok(Store {
            root: root.to_path_buf(),
            shape,
            root_fd,
            state,
            store,
            launches,
            sets: std::cell::OnceCell::new(),
            updir: std::cell::RefCell::new(None),
            unsynced: std::cell::Cell::new(false),
            leftover: std::cell::RefCell::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The shape of the cache tree the store keeps sets of.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn state_fd(&self) -> BorrowedFd<'_> {
        self.state.as_fd()
    }
}

/// `1.0 GiB`, `3.2 MiB`, `512 B`.
pub fn size_text(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// `1GiB`, `500MiB`, `10k`, `1048576`: a size in bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; try 1GiB, 500MiB or 1048576"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("'{s}' is not a size; try 1GiB, 500MiB or 1048576")),
    };
    Ok((num * mult as f64) as u64)
}
