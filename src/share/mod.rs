//! Multi-node launches: a directory every node mounts (`--share DIR`: NFS,
//! CephFS, a ReadWriteMany volume) through which the nodes of one engine
//! agree on one union of all their rank files, so SGLang's stock entry gate
//! keeps the cache when every rank is on a different node.
//!
//! # Layout
//!
//! `<share>/keepwrap/<cluster fingerprint>/node<R>/` holds node R's signed
//! rank files under their paths relative to the cache root
//! (`<version>/sm<arch>/<key16>/rank_tp<T>_pp<P>_dp<D>.json`) and
//! `manifest.json` ([`Manifest`]), which lists them with their sha256. The
//! cluster fingerprint ([`Launch::cluster_fingerprint`]) is the launch
//! fingerprint without `--node-rank` and the node-local variables: every node
//! of one engine computes the same value.
//!
//! # Publishing (at commit)
//!
//! Files first, each written to a temp name, fsynced and renamed (a file
//! whose bytes are already there is not rewritten), then the manifest the
//! same way. A reader never sees a torn file under its final name. Old
//! publications (older than `--store-max-age`, the store's age limit) are removed at the same time.
//!
//! # Reading (before the engine starts)
//!
//! Every node `0..N-1` must have a manifest for this cluster fingerprint,
//! node rank and node count, and every file it lists must have the size and
//! sha256 the manifest says. A node whose publication is being replaced gives
//! a mismatch: it is read once more, and if it still does not verify it
//! counts as not published (fail closed). Only when every node verifies is
//! the union taken, per cache directory, with [`unify::unify`] (same format
//! and conflict rule as on one node); this node's rank files are then
//! written with the union's bytes and signed for this launch, so the local
//! prune and sign stay the only source of trust.
//!
//! All share I/O runs in a short-lived thread bounded by `--share-timeout`:
//! a hung mount cannot stall the start nor the supervisor loop (the thread
//! is abandoned; a syscall stuck on a hard NFS mount may still keep the
//! process from exiting until the mount answers).

mod settings;

pub use settings::Settings;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::sys::stat::{mkdirat, Mode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::{self, fsx};
use crate::clock::now_secs;
use crate::digest::{sha256_hex, short};
use crate::launch::fingerprint::Launch;
use crate::unify::{self, Outcome, RankFile, RankId};

/// Version of the manifest format. A manifest with another version is not
/// read (its node counts as not published).
pub const MANIFEST_FORMAT: u32 = 1;
/// The manifest's file name in a node's directory.
pub const MANIFEST: &str = "manifest.json";
/// keepwrap's directory in the share.
pub const TOP: &str = "keepwrap";
/// The default age limit of publications (`--store-max-age`'s default).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_MANIFEST: u64 = 16 << 20;

/// `manifest.json`: what one node published.
///
/// ```json
/// {"format": 1, "cluster_fingerprint": "9f2c...", "node_rank": 1, "nnodes": 4,
///  "published_at": 1767225600, "published_at_utc": "2026-01-01T00:00:00Z",
///  "keepwrap": "0.1.0",
///  "files": [{"path": "0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json",
///             "sha256": "5e1a...", "size": 51234,
///             "metadata": {"flashinfer_version": "0.7.2", "...": "..."}}]}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub cluster_fingerprint: String,
    pub node_rank: u32,
    pub nnodes: u32,
    /// Seconds since the epoch.
    pub published_at: u64,
    pub published_at_utc: String,
    pub keepwrap: String,
    pub files: Vec<FileEntry>,
}

/// One published rank file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the cache root (and to the node's directory in the share).
    pub path: String,
    pub sha256: String,
    pub size: u64,
    /// The file's `_metadata` (null when it has none).
    pub metadata: Option<Value>,
}

/// This node's place in a multi-node launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub nnodes: u32,
    pub rank: u32,
}

/// `--nnodes` (default 1) and `--node-rank` (default 0) from the command
/// (`FLAG VALUE` or `FLAG=VALUE`, the last one wins, up to a bare `--`).
pub fn node_of(argv: &[OsString]) -> Result<Node, String> {
    let (mut nnodes, mut rank) = (1u32, 0u32);
    let mut i = 1;
    while i < argv.len() {
        let tok = argv[i].as_bytes();
        if tok == b"--" {
            break;
        }
        for (flag, slot) in [(&b"--nnodes"[..], &mut nnodes), (b"--node-rank", &mut rank)] {
            let value = if tok == flag {
                i += 1;
                argv.get(i).map(|v| v.as_bytes())
            } else if tok.len() > flag.len() && tok.starts_with(flag) && tok[flag.len()] == b'=' {
                Some(&tok[flag.len() + 1..])
            } else {
                continue;
            };
            let name = String::from_utf8_lossy(flag);
            let value = value.ok_or_else(|| format!("{name} has no value"))?;
            *slot = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    format!("{name} {} is not a number", String::from_utf8_lossy(value))
                })?;
            break;
        }
        i += 1;
    }
    if nnodes == 0 || rank >= nnodes {
        return Err(format!(
            "--node-rank {rank} is out of range for --nnodes {nnodes}"
        ));
    }
    Ok(Node { nnodes, rank })
}

fn cstring(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))
}

/// `(dir, name)` of a published path that is safe to use: plain relative
/// components (no `.`, `..`, hidden or empty ones), a cache file, and a rank
/// file name.
fn checked_path(path: &str) -> Option<(&str, &str)> {
    let (dir, name) = match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    let plain = |c: &str| !c.is_empty() && !c.starts_with('.');
    // vLLM's file names are judged by the tree's shape (is_cache_file).
    let sglang = cache::layout_vllm::shape() == cache::layout_vllm::Shape::Sglang;
    if !path.split('/').all(plain)
        || !cache::is_cache_file(Path::new(path))
        || (sglang && RankId::from_file_name(name).is_none())
    {
        return None;
    }
    Some((dir, name))
}

/// Open (creating as needed) the directory `rel` below `base`, one component
/// at a time, never following a symlink.
pub(crate) fn mkdirs(base: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    let mut cur = base.try_clone_to_owned()?;
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        match mkdirat(cur.as_fd(), comp, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => {
                return Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("mkdir {comp}: {e}"),
                ))
            }
        }
        cur = fsx::open_dir_at(cur.as_fd(), comp)?;
    }
    Ok(cur)
}

/// Open the share directory itself (a final symlink is followed, as for the
/// cache root). A missing share is said plainly: it is usually a mount that
/// is not there.
fn open_share(share: &Path) -> io::Result<OwnedFd> {
    fsx::open_root(share).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                e.kind(),
                "the share directory does not exist (not mounted?)",
            )
        } else {
            e
        }
    })
}

// ---------------------------------------------------------------------------
// Publishing

/// What a node publishes: its signed rank files (path relative to the cache
/// root, bytes).
#[derive(Debug, Clone)]
pub struct Publication {
    pub cluster: String,
    pub node: Node,
    pub files: Vec<(String, Vec<u8>)>,
}

/// Read this node's signed rank files (among `signed`, relative to `root`)
/// for a publication. Files that cannot be read are left out (logged).
pub fn collect(root: &Path, signed: &[PathBuf]) -> Vec<(String, Vec<u8>)> {
    let Ok(root_fd) = fsx::open_root(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for rel in signed {
        let Some(path) = rel.to_str() else { continue };
        let Some((dir, name)) = checked_path(path) else {
            continue;
        };
        let mut bytes = Vec::new();
        let read = fsx::open_dir_path(root_fd.as_fd(), Path::new(dir))
            .and_then(|d| fsx::read_at(d.as_fd(), name, &mut bytes, cache::MAX_CACHE_FILE));
        match read {
            Ok(_) => out.push((path.to_string(), bytes)),
            Err(e) => crate::events::share::share_not_publishing(path, e),
        }
    }
    out
}

fn metadata_of(bytes: &[u8]) -> Option<Value> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(mut m)) => m.shift_remove(unify::METADATA),
        _ => None,
    }
}

/// Publish `p` into the share: files first, then the manifest, each
/// atomically. Returns how many files were (re)written.
pub fn publish_to(share: &Path, p: &Publication) -> io::Result<usize> {
    let share_fd = open_share(share)?;
    let node_rel = format!("{TOP}/{}/node{}", p.cluster, p.node.rank);
    let node_dir = mkdirs(share_fd.as_fd(), &node_rel)?;
    let old = read_manifest(node_dir.as_fd()).ok();

    let mut entries = Vec::with_capacity(p.files.len());
    let mut written = 0;
    let mut existing = Vec::new();
    for (path, bytes) in &p.files {
        let Some((dir, name)) = checked_path(path) else {
            continue;
        };
        let dfd = mkdirs(node_dir.as_fd(), dir)?;
        let same = fsx::read_at(dfd.as_fd(), name, &mut existing, cache::MAX_CACHE_FILE).is_ok()
            && existing == *bytes;
        if !same {
            fsx::write_atomic_at(dfd.as_fd(), &cstring(name)?, bytes, 0o644)
                .map_err(|e| io::Error::new(e.kind(), format!("writing {path}: {e}")))?;
            fsx::fsync_dir(dfd.as_fd())?;
            written += 1;
        }
        entries.push(FileEntry {
            path: path.clone(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
            metadata: metadata_of(bytes),
        });
    }
    let now = SystemTime::now();
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        cluster_fingerprint: p.cluster.clone(),
        node_rank: p.node.rank,
        nnodes: p.node.nnodes,
        published_at: now_secs(),
        published_at_utc: humantime::format_rfc3339_seconds(now).to_string(),
        keepwrap: env!("CARGO_PKG_VERSION").to_string(),
        files: entries,
    };
    let bytes = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
    fsx::write_atomic_at(node_dir.as_fd(), &cstring(MANIFEST)?, &bytes, 0o644)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {MANIFEST}: {e}")))?;
    fsx::fsync_dir(node_dir.as_fd())?;

    // Files of the previous publication that this one no longer lists.
    if let Some(old) = old {
        let now_listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
        for f in old
            .files
            .iter()
            .filter(|f| !now_listed.contains(f.path.as_str()))
        {
            if let Some((dir, name)) = checked_path(&f.path) {
                if let Ok(d) = fsx::open_dir_path(node_dir.as_fd(), Path::new(dir)) {
                    let _ = fsx::unlink_at(d.as_fd(), name);
                }
            }
        }
    }
    Ok(written)
}

/// Remove every node publication in the share older than `max_age` (by its
/// manifest's `published_at`; a node directory without a readable manifest
/// by its modification time), manifest first, and cluster directories left
/// empty. Returns how many node publications were removed.
pub fn remove_old(share: &Path, max_age: Duration) -> usize {
    let top = share.join(TOP);
    let Ok(clusters) = std::fs::read_dir(&top) else {
        return 0;
    };
    let now = now_secs();
    let limit = max_age.as_secs();
    let mut removed = 0;
    for cluster in clusters.flatten() {
        if !cluster.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(nodes) = std::fs::read_dir(cluster.path()) else {
            continue;
        };
        for node in nodes.flatten() {
            let name = node.file_name();
            if !name.as_bytes().starts_with(b"node") || !node.file_type().is_ok_and(|t| t.is_dir())
            {
                continue;
            }
            let path = node.path();
            let published = fsx::open_root(&path)
                .ok()
                .and_then(|fd| read_manifest(fd.as_fd()).ok())
                .map(|m| m.published_at)
                .or_else(|| {
                    use std::os::unix::fs::MetadataExt;
                    node.metadata().ok().map(|m| m.mtime().max(0) as u64)
                });
            let Some(published) = published else { continue };
            if now.saturating_sub(published) <= limit {
                continue;
            }
            let _ = std::fs::remove_file(path.join(MANIFEST));
            match std::fs::remove_dir_all(&path) {
                Ok(()) => removed += 1,
                Err(e) => crate::events::share::share_cannot_remove_old(&path, e),
            }
        }
        let _ = std::fs::remove_dir(cluster.path());
    }
    removed
}

// ---------------------------------------------------------------------------
// Reading

fn read_manifest(node_dir: BorrowedFd<'_>) -> Result<Manifest, String> {
    let mut buf = Vec::new();
    match fsx::read_at(node_dir, MANIFEST, &mut buf, MAX_MANIFEST) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err("no manifest".into()),
        Err(e) => return Err(format!("cannot read its manifest ({e})")),
    }
    serde_json::from_slice(&buf).map_err(|e| format!("its manifest is not valid ({e})"))
}

/// One node's verified publication: its rank files, path and bytes.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    pub rank: u32,
    pub files: Vec<(String, Vec<u8>)>,
}

/// Read node `rank`'s publication and verify it. The error says why the
/// node counts as not published.
fn read_node(cluster_dir: BorrowedFd<'_>, cluster: &str, node: Node) -> Result<NodeFiles, String> {
    let dir = match fsx::open_dir_at(cluster_dir, format!("node{}", node.rank).as_str()) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err("no manifest".into()),
        Err(e) => return Err(format!("cannot open its directory ({e})")),
    };
    let m = read_manifest(dir.as_fd())?;
    if m.format != MANIFEST_FORMAT {
        return Err(format!(
            "manifest format {} (this keepwrap reads {MANIFEST_FORMAT})",
            m.format
        ));
    }
    if m.cluster_fingerprint != cluster || m.node_rank != node.rank || m.nnodes != node.nnodes {
        return Err(format!(
            "its manifest is for node {} of {} of cluster {}",
            m.node_rank,
            m.nnodes,
            short(&m.cluster_fingerprint)
        ));
    }
    let mut files = Vec::with_capacity(m.files.len());
    for f in &m.files {
        let (sub, name) = checked_path(&f.path)
            .ok_or_else(|| format!("its manifest lists a bad path {:?}", f.path))?;
        let mut bytes = Vec::new();
        fsx::open_dir_path(dir.as_fd(), Path::new(sub))
            .and_then(|d| fsx::read_at(d.as_fd(), name, &mut bytes, cache::MAX_CACHE_FILE))
            .map_err(|e| format!("{}: cannot read it ({e})", f.path))?;
        if bytes.len() as u64 != f.size || sha256_hex(&bytes) != f.sha256 {
            return Err(format!(
                "{}: its bytes differ from the manifest (a publication in progress?)",
                f.path
            ));
        }
        files.push((f.path.clone(), bytes));
    }
    Ok(NodeFiles {
        rank: node.rank,
        files,
    })
}

/// The union of one cache directory over every node.
#[derive(Debug, Clone)]
pub struct DirUnion {
    /// Relative to the cache root.
    pub dir: String,
    /// This node's rank file names in it (from its own manifest).
    pub mine: Vec<String>,
    /// How many nodes published files in it.
    pub nodes: usize,
    pub outcome: Outcome,
}

/// What the share holds for this cluster.
#[derive(Debug, Clone)]
pub enum Gathered {
    /// Some nodes' publications are missing or do not verify: `(node, why)`.
    Incomplete(Vec<(u32, String)>),
    /// Every node verified: the union of each cache directory.
    Complete(Vec<DirUnion>),
}

/// Read and verify every node's publication of `cluster`, and when all are
/// there, take the union of each cache directory (`me` is this node's rank).
/// An error means the share itself cannot be read.
pub fn gather(share: &Path, cluster: &str, me: Node) -> io::Result<Gathered> {
    Ok(match gather_nodes(share, cluster, me)? {
        Err(missing) => Gathered::Incomplete(missing),
        Ok(nodes) => Gathered::Complete(union_of(nodes, me.rank)),
    })
}

/// Every node's verified publication of `cluster`, or the nodes whose
/// publication is missing or does not verify, with why.
#[allow(clippy::type_complexity)]
pub fn gather_nodes(
    share: &Path,
    cluster: &str,
    me: Node,
) -> io::Result<Result<Vec<NodeFiles>, Vec<(u32, String)>>> {
    let share_fd = open_share(share)?;
    let cluster_dir = match fsx::open_dir_at(share_fd.as_fd(), TOP)
        .and_then(|top| fsx::open_dir_at(top.as_fd(), cluster))
    {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Err((0..me.nnodes)
                .map(|r| (r, "no manifest".to_string()))
                .collect()))
        }
        Err(e) => return Err(e),
    };
    let mut nodes = Vec::with_capacity(me.nnodes as usize);
    let mut missing = Vec::new();
    for rank in 0..me.nnodes {
        let node = Node {
            nnodes: me.nnodes,
            rank,
        };
        // A publication being replaced fails to verify: read it once more.
        let read = read_node(cluster_dir.as_fd(), cluster, node)
            .or_else(|_| read_node(cluster_dir.as_fd(), cluster, node));
        match read {
            Ok(n) => nodes.push(n),
            Err(why) => missing.push((rank, why)),
        }
    }
    if !missing.is_empty() {
        return Ok(Err(missing));
    }
    Ok(Ok(nodes))
}

/// The union, per cache directory, of every node's rank files. Where two
/// nodes publish the same file name, the lowest node's file counts.
pub fn union_of(nodes: Vec<NodeFiles>, me: u32) -> Vec<DirUnion> {
    struct Dir {
        files: BTreeMap<String, Vec<u8>>,
        nodes: BTreeSet<u32>,
        mine: Vec<String>,
    }
    let mut dirs: BTreeMap<String, Dir> = BTreeMap::new();
    for node in nodes {
        for (path, bytes) in node.files {
            let Some((dir, name)) = checked_path(&path) else {
                continue;
            };
            let d = dirs.entry(dir.to_string()).or_insert_with(|| Dir {
                files: BTreeMap::new(),
                nodes: BTreeSet::new(),
                mine: Vec::new(),
            });
            d.nodes.insert(node.rank);
            if node.rank == me {
                d.mine.push(name.to_string());
            }
            d.files.entry(name.to_string()).or_insert(bytes);
        }
    }
    dirs.into_iter()
        .map(|(dir, d)| {
            let files: Vec<RankFile> = d
                .files
                .into_iter()
                .map(|(name, bytes)| RankFile { name, bytes })
                .collect();
            DirUnion {
                dir,
                mine: d.mine,
                nodes: d.nodes.len(),
                outcome: unify::unify(&files),
            }
        })
        .collect()
}

/// Run `f` on a short-lived thread and wait at most `timeout` for it. `None`
/// on timeout (the thread is abandoned). Runs inline if no thread starts.
pub(crate) fn bounded<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::sync_channel(1);
    let f = std::sync::Arc::new(std::sync::Mutex::new(Some(f)));
    let g = f.clone();
    let spawned = std::thread::Builder::new()
        .name("keepwrap-share".into())
        .spawn(move || {
            crate::signals::block_signals_in_thread();
            if let Some(f) = g.lock().ok().and_then(|mut f| f.take()) {
                let _ = tx.send(f());
            }
        });
    match spawned {
        Ok(_) => rx.recv_timeout(timeout).ok(),
        Err(_) => f.lock().ok().and_then(|mut f| f.take()).map(|f| f()),
    }
}

// ---------------------------------------------------------------------------
// The launch's side

/// The share of one launch.
pub struct Share {
    dir: PathBuf,
    cluster: String,
    node: Node,
    max_age: Duration,
    timeout: Duration,
    running: Option<JoinHandle<()>>,
    pending: Option<Publication>,
}

impl Share {
    /// The share of this launch, or `None` (with one line saying why) when
    /// there is none to use.
    pub fn new(
        args: &Settings,
        launch: &Launch,
        argv: &[OsString],
        unify: bool,
        max_age: Duration,
    ) -> Option<Share> {
        let dir = args.dir.clone()?;
        if !unify {
            crate::events::share::share_unify_off(&dir);
            return None;
        }
        Share::for_node(args, launch, node_of(argv), max_age)
    }

    /// [`Share::new`] for a launch whose place among the nodes is `node`.
    pub fn for_node(
        args: &Settings,
        launch: &Launch,
        node: Result<Node, String>,
        max_age: Duration,
    ) -> Option<Share> {
        let dir = args.dir.clone()?;
        let node = match node {
            Ok(n) => n,
            Err(e) => {
                crate::events::share::share_unusable(&dir, e);
                return None;
            }
        };
        if node.nnodes == 1 {
            crate::events::share::share_single_node(&dir);
            return None;
        }
        let cluster = String::from(launch.cluster_fingerprint(&args.node_local()));
        crate::events::share::share_cluster(&cluster, node.rank, node.nnodes, &dir);
        Some(Share {
            dir,
            cluster,
            node,
            max_age,
            timeout: args.share_timeout,
            running: None,
            pending: None,
        })
    }

    /// Before the engine starts: when every node's publication verifies,
    /// write the union of each cache directory over this node's rank files
    /// and sign the cache for `fingerprint`. Returns the signed files when
    /// anything was signed; `None` means single-node behaviour (said why).
    pub fn take_union(&self, root: &Path, fingerprint: &str) -> Option<Vec<PathBuf>> {
        let (share, cluster, node) = (self.dir.clone(), self.cluster.clone(), self.node);
        let started = Instant::now();
        let gathered = match bounded(self.timeout, move || gather(&share, &cluster, node)) {
            None => {
                crate::events::share::share_slow(&self.dir, self.timeout);
                return None;
            }
            Some(Err(e)) => {
                crate::events::share::share_unreadable(&self.dir, e);
                return None;
            }
            Some(Ok(g)) => g,
        };
        let dirs = match gathered {
            Gathered::Incomplete(missing) => {
                let which: Vec<String> = missing.iter().map(|(r, _)| r.to_string()).collect();
                let why: Vec<String> = missing
                    .iter()
                    .map(|(r, w)| format!("node {r}: {w}"))
                    .collect();
                crate::events::share::share_incomplete(
                    &which.join(", "),
                    self.node.nnodes,
                    &why.join("; "),
                );
                return None;
            }
            Gathered::Complete(dirs) => dirs,
        };
        let mut wrote = 0;
        for d in &dirs {
            wrote += apply(root, d);
        }
        crate::events::share::share_union_taken(started.elapsed());
        if wrote == 0 {
            return None;
        }
        match cache::sign(root, fingerprint) {
            Ok(r) if r.failed == 0 => {
                crate::events::share::share_signed(r.signed.len(), self.node.nnodes, fingerprint);
                Some(r.signed)
            }
            Ok(_) => None,
            Err(e) => {
                crate::events::share::share_cannot_sign(root, e);
                None
            }
        }
    }

    /// The share directory, this launch's cluster fingerprint and place.
    pub fn parts(&self) -> (&Path, &str, Node, Duration) {
        (&self.dir, &self.cluster, self.node, self.timeout)
    }

    /// At commit: publish this node's signed rank files (in the background;
    /// a publication still running makes this one wait its turn).
    pub fn publish(&mut self, root: &Path, signed: &[PathBuf]) {
        let files = collect(root, signed);
        let p = Publication {
            cluster: self.cluster.clone(),
            node: self.node,
            files,
        };
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            self.pending = Some(p);
            return;
        }
        self.spawn(p);
    }

    fn spawn(&mut self, p: Publication) {
        let (dir, max_age) = (self.dir.clone(), self.max_age);
        let job = move || publish_and_clean(&dir, &p, max_age);
        match std::thread::Builder::new()
            .name("keepwrap-publish".into())
            .spawn(move || {
                crate::signals::block_signals_in_thread();
                job()
            }) {
            Ok(h) => self.running = Some(h),
            Err(e) => crate::events::share::share_publish_not_started(e),
        }
    }

    /// Before keepwrap exits: let the publication finish, at most
    /// `--share-timeout` (then the launch goes on without it).
    pub fn finish(&mut self) {
        let deadline = crate::clock::after(Instant::now(), self.timeout);
        loop {
            let busy = self.running.as_ref().is_some_and(|h| !h.is_finished());
            if !busy {
                if let Some(h) = self.running.take() {
                    let _ = h.join();
                }
                match self.pending.take() {
                    Some(p) => self.spawn(p),
                    None => return,
                }
            } else if Instant::now() >= deadline {
                crate::events::share::share_publish_slow(&self.dir, self.timeout);
                return;
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

fn publish_and_clean(dir: &Path, p: &Publication, max_age: Duration) {
    match publish_to(dir, p) {
        Ok(written) => crate::events::share::share_published(
            p.files.len(),
            p.node.rank,
            p.node.nnodes,
            written,
            dir,
        ),
        Err(e) => {
            crate::events::share::share_cannot_publish(dir, e);
            return;
        }
    }
    let removed = remove_old(dir, max_age);
    if removed > 0 {
        crate::events::share::share_old_removed(removed, max_age);
    }
}

/// Write one directory's union over this node's rank files (those its
/// manifest lists, and any other rank file there). Returns how many files
/// were written.
fn apply(root: &Path, d: &DirUnion) -> usize {
    let u = match &d.outcome {
        Outcome::Leave(reason) => {
            crate::events::share::share_left(&d.dir, reason);
            return 0;
        }
        Outcome::Unified(u) => u,
    };
    let mut names: BTreeSet<String> = d.mine.iter().cloned().collect();
    if let Ok(rd) = std::fs::read_dir(root.join(&d.dir)) {
        names.extend(
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| RankId::from_file_name(n).is_some()),
        );
    }
    if names.is_empty() {
        return 0;
    }
    let res = (|| -> io::Result<usize> {
        let root_fd = fsx::open_root(root)?;
        let dfd = mkdirs(root_fd.as_fd(), &d.dir)?;
        let mut buf = Vec::new();
        let stale: Vec<&String> = names
            .iter()
            .filter(|name| {
                !(fsx::read_at(dfd.as_fd(), name.as_str(), &mut buf, cache::MAX_CACHE_FILE).is_ok()
                    && buf == u.bytes)
            })
            .collect();
        if stale.is_empty() {
            return Ok(0);
        }
        // The union written once, every stale rank path a hard link to it
        // (as unify does).
        let union = fsx::write_temp_at(dfd.as_fd(), &u.bytes, 0o644, true)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", stale[0])))?;
        let linked = stale.iter().try_for_each(|name| {
            fsx::link_onto_at(dfd.as_fd(), &union, &cstring(name)?)
                .map_err(|e| io::Error::new(e.kind(), format!("writing {name}: {e}")))
        });
        let _ = fsx::unlink_at(dfd.as_fd(), union.as_slice());
        linked?;
        fsx::fsync_dir(dfd.as_fd())?;
        Ok(stale.len())
    })();
    match res {
        Ok(0) => {
            crate::events::share::share_already_union(&d.dir, names.len(), d.nodes, u.entries);
            0
        }
        Ok(n) => {
            crate::events::share::share_union_written(
                &d.dir,
                d.nodes,
                n,
                u.entries,
                u.conflicts.len(),
            );
            n
        }
        Err(e) => {
            crate::events::share::share_cannot_write_union(&d.dir, e);
            0
        }
    }
}

// ---------------------------------------------------------------------------
// Status

/// What one node published, as `share-status` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePublication {
    pub cluster_fingerprint: String,
    pub node_rank: u32,
    pub nnodes: u32,
    /// `None` when the node has a directory but no readable manifest.
    pub published_at: Option<u64>,
    pub published_at_utc: Option<String>,
    pub files: usize,
    pub bytes: u64,
    /// Why the manifest cannot be used, if it cannot.
    pub problem: Option<String>,
}

/// Every node publication in the share, by cluster then node. Reads
/// manifests only (no file digests).
pub fn status(share: &Path) -> io::Result<Vec<NodePublication>> {
    drop(open_share(share)?);
    let top = match std::fs::read_dir(share.join(TOP)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut clusters: Vec<_> = top
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    clusters.sort();
    for cluster in clusters {
        let Ok(rd) = std::fs::read_dir(share.join(TOP).join(&cluster)) else {
            continue;
        };
        let mut nodes: Vec<(u32, PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().into_string().ok()?;
                Some((n.strip_prefix("node")?.parse().ok()?, e.path()))
            })
            .collect();
        nodes.sort();
        for (rank, path) in nodes {
            let m = fsx::open_root(&path)
                .map_err(|e| e.to_string())
                .and_then(|fd| read_manifest(fd.as_fd()));
            out.push(match m {
                Ok(m) => NodePublication {
                    problem: (m.cluster_fingerprint != cluster || m.node_rank != rank)
                        .then(|| "the manifest names another cluster or node".to_string()),
                    cluster_fingerprint: cluster.clone(),
                    node_rank: rank,
                    nnodes: m.nnodes,
                    published_at: Some(m.published_at),
                    published_at_utc: Some(m.published_at_utc),
                    files: m.files.len(),
                    bytes: m.files.iter().map(|f| f.size).sum(),
                },
                Err(why) => NodePublication {
                    cluster_fingerprint: cluster.clone(),
                    node_rank: rank,
                    nnodes: 0,
                    published_at: None,
                    published_at_utc: None,
                    files: 0,
                    bytes: 0,
                    problem: Some(why),
                },
            });
        }
    }
    Ok(out)
}

/// The node publications of `share` (as `status`), or the error reported
/// on stderr and the exit code `share-status` ends with.
pub fn status_or_report(share: &Path) -> Result<Vec<NodePublication>, ExitCode> {
    status(share).map_err(|e| {
        eprintln!(
            "keepwrap: error: cannot read the share {}: {e}",
            share.display()
        );
        ExitCode::FAILURE
    })
}

/// `pubs` by cluster fingerprint, clusters in order, each cluster's
/// publications in the order of `pubs`.
pub fn by_cluster(pubs: &[NodePublication]) -> BTreeMap<&str, Vec<&NodePublication>> {
    let mut by_cluster: BTreeMap<&str, Vec<&NodePublication>> = BTreeMap::new();
    for p in pubs {
        by_cluster
            .entry(&p.cluster_fingerprint)
            .or_default()
            .push(p);
    }
    by_cluster
}

/// `keepwrap share-status --share DIR`: one line per node publication,
/// `CLUSTER node R/N published UTC (AGE ago): F files, B bytes`, and one per
/// node a cluster lacks: `CLUSTER node R/N not published`.
pub fn print_status(share: &Path) -> ExitCode {
    let pubs = match status_or_report(share) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let now = now_secs();
    let mut text = String::new();
    for (cluster, nodes) in by_cluster(&pubs) {
        let n = nodes.iter().map(|p| p.nnodes).max().unwrap_or(0);
        for p in &nodes {
            match (&p.published_at, &p.published_at_utc, &p.problem) {
                (Some(at), Some(utc), None) => text.push_str(&format!(
                    "{cluster} node {}/{} published {utc} ({}): {} files, {}\n",
                    p.node_rank,
                    p.nnodes,
                    crate::store::ago(*at, now),
                    p.files,
                    crate::store::size_text(p.bytes)
                )),
                (_, _, problem) => text.push_str(&format!(
                    "{cluster} node {}/{n} unusable: {}\n",
                    p.node_rank,
                    problem.as_deref().unwrap_or("no manifest")
                )),
            }
        }
        for r in 0..n {
            if !nodes.iter().any(|p| p.node_rank == r) {
                text.push_str(&format!("{cluster} node {r}/{n} not published\n"));
            }
        }
    }
    use std::io::Write;
    match std::io::stdout().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn node_of_reads_both_spellings() {
        assert_eq!(node_of(&os(&["p"])), Ok(Node { nnodes: 1, rank: 0 }));
        assert_eq!(
            node_of(&os(&["p", "--nnodes", "4", "--node-rank=3"])),
            Ok(Node { nnodes: 4, rank: 3 })
        );
        assert!(node_of(&os(&["p", "--nnodes", "2", "--node-rank", "2"])).is_err());
        assert!(node_of(&os(&["p", "--nnodes", "x"])).is_err());
        assert_eq!(
            node_of(&os(&["p", "--", "--nnodes", "4"])),
            Ok(Node { nnodes: 1, rank: 0 })
        );
    }

    #[test]
    fn the_cluster_fingerprint_leaves_out_the_node_rank_and_node_local_env() {
        use crate::launch::fingerprint::{Options, ProfileName};
        let opts = Options {
            profile: ProfileName::Sglang,
            env_prefixes: vec![],
            volatile_env: vec![],
            ignored_args: vec![],
        };
        let node_local: Vec<String> = crate::launch::fingerprint::DEFAULT_NODE_LOCAL_ENV
            .iter()
            .map(|s| s.to_string())
            .collect();
        let launch = |argv: &[&str], cache: &str| {
            let env = vec![
                (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from(cache)),
                (OsString::from("SGLANG_X"), OsString::from("1")),
            ];
            Launch::new(&opts, &os(argv), &env)
        };
        let a = launch(&["p", "--nnodes", "4", "--node-rank", "0"], "/a");
        let b = launch(&["p", "--nnodes", "4", "--node-rank=3"], "/b");
        let c = launch(&["p", "--nnodes", "2", "--node-rank", "0"], "/a");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(
            a.cluster_fingerprint(&node_local),
            b.cluster_fingerprint(&node_local)
        );
        assert_ne!(
            a.cluster_fingerprint(&node_local),
            c.cluster_fingerprint(&node_local)
        );
        assert_ne!(a.cluster_fingerprint(&[]), b.cluster_fingerprint(&[]));
        // Without node-rank nor node-local names it is the launch fingerprint.
        let d = launch(&["p", "--tp", "4"], "/a");
        assert_eq!(&d.cluster_fingerprint(&[]), d.fingerprint());
    }

    #[test]
    fn publications_older_than_the_age_limit_are_removed() {
        let share = tempfile::tempdir().unwrap();
        for (cluster, rank) in [("old", 0), ("old", 1), ("new", 0)] {
            let p = Publication {
                cluster: cluster.into(),
                node: Node { nnodes: 2, rank },
                files: vec![(
                    format!("0.7.2/sm121/0123456789abcdef/rank_tp{rank}_pp0_dp0.json"),
                    b"{}".to_vec(),
                )],
            };
            publish_to(share.path(), &p).unwrap();
        }
        for rank in 0..2 {
            let path = share
                .path()
                .join(format!("keepwrap/old/node{rank}/{MANIFEST}"));
            let mut m: Manifest = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            m.published_at -= 31 * 24 * 3600;
            std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        }
        assert_eq!(remove_old(share.path(), DEFAULT_MAX_AGE), 2);
        assert!(!share.path().join("keepwrap/old").exists());
        let left = status(share.path()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(
            (left[0].cluster_fingerprint.as_str(), left[0].files),
            ("new", 1)
        );
    }

    #[test]
    fn a_slow_share_is_given_up_on() {
        let t = Instant::now();
        let r = bounded(Duration::from_millis(20), || {
            std::thread::sleep(Duration::from_secs(2));
            1
        });
        assert_eq!(r, None);
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(bounded(Duration::from_secs(5), || 7), Some(7));
    }

    #[test]
    fn checked_path_refuses_escapes() {
        assert!(checked_path("0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json").is_some());
        assert!(checked_path("../x/rank_tp0_pp0_dp0.json").is_none());
        assert!(checked_path("/abs/rank_tp0_pp0_dp0.json").is_none());
        assert!(checked_path("a/.hidden/rank_tp0_pp0_dp0.json").is_none());
        assert!(checked_path("a/runs/rank_tp0_pp0_dp0.json").is_none());
        assert!(checked_path("a/manifest.json").is_none());
    }

    #[test]
    fn a_file_that_does_not_match_its_manifest_is_not_published() {
        let share = tempfile::tempdir().unwrap();
        let node = |rank| Node { nnodes: 2, rank };
        let file = |r: u32| {
            (
                format!("0.7.2/sm121/0123456789abcdef/rank_tp{r}_pp0_dp0.json"),
                format!("{{\"a{r}\": [1, 2], \"_generation\": \"x\"}}").into_bytes(),
            )
        };
        for r in 0..2 {
            let p = Publication {
                cluster: "c".into(),
                node: node(r),
                files: vec![file(r)],
            };
            publish_to(share.path(), &p).unwrap();
        }
        assert!(matches!(
            gather(share.path(), "c", node(0)).unwrap(),
            Gathered::Complete(ref d) if d.len() == 1
        ));
        // A file replaced under its manifest: node 1 is not published.
        std::fs::write(
            share
                .path()
                .join("keepwrap/c/node1/0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json"),
            b"{}",
        )
        .unwrap();
        match gather(share.path(), "c", node(0)).unwrap() {
            Gathered::Incomplete(m) => {
                assert_eq!(m.len(), 1);
                assert_eq!(m[0].0, 1);
                assert!(m[0].1.contains("differ from the manifest"), "{}", m[0].1);
            }
            g => panic!("{g:?}"),
        }
    }
}
