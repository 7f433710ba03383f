//! Publishing (at commit): a node's signed rank files and its manifest,
//! written so that a reader never sees a torn file; old publications removed.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::cache::{self, fsx, Member, SetManifest, Shape};
use crate::clock::now_secs;
use crate::digest::sha256_hex;

use super::{
    checked_path, cstring, mkdirs, open_share, read_manifest, Manifest, Node, MANIFEST,
    MANIFEST_FORMAT, TOP,
};

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
pub fn collect(root: &Path, signed: &[PathBuf], shape: Shape) -> Vec<(String, Vec<u8>)> {
    let Ok(root_fd) = fsx::open_root(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for rel in signed {
        let Some(path) = rel.to_str() else { continue };
        let Some((dir, name)) = checked_path(path, shape) else {
            continue;
        };
        let mut bytes = Vec::new();
        let read = fsx::open_dir_path(root_fd.as_fd(), Path::new(dir))
            .and_then(|d| fsx::read_at(d.as_fd(), name, &mut bytes, cache::MAX_CACHE_FILE));
        match read {
            Ok(_) => out.push((path.to_string(), bytes)),
            Err(e) => crate::events::Event::ShareNotPublishing {
                path: path.to_string(),
                error: e.to_string(),
            }
            .emit(),
        }
    }
    out
}

/// Publish `p` into the share: files first, then the manifest, each
/// atomically. Returns how many files were (re)written.
pub fn publish_to(share: &Path, p: &Publication, shape: Shape) -> io::Result<usize> {
    let share_fd = open_share(share)?;
    let node_rel = format!("{TOP}/{}/node{}", p.cluster, p.node.rank);
    let node_dir = mkdirs(share_fd.as_fd(), &node_rel)?;
    let old = read_manifest(node_dir.as_fd()).ok();

    let mut entries = Vec::with_capacity(p.files.len());
    let mut written = 0;
    let mut existing = Vec::new();
    for (path, bytes) in &p.files {
        let Some((dir, name)) = checked_path(path, shape) else {
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
        entries.push(Member {
            path: path.clone(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
        });
    }
    // A set's members are sorted by path, each once.
    entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    entries.dedup_by(|a, b| a.path == b.path);
    let now = SystemTime::now();
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        node_rank: p.node.rank,
        nnodes: p.node.nnodes,
        published_at_utc: humantime::format_rfc3339_seconds(now).to_string(),
        set: SetManifest {
            format: crate::SET_FORMAT,
            keepwrap: env!("CARGO_PKG_VERSION").to_string(),
            id: cache::set_id(&p.cluster, &entries),
            fingerprint: p.cluster.clone(),
            signed_at: now_secs(),
            members: entries,
        },
    };
    let bytes = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
    fsx::write_atomic_at(node_dir.as_fd(), &cstring(MANIFEST)?, &bytes, 0o644)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {MANIFEST}: {e}")))?;
    fsx::fsync_dir(node_dir.as_fd())?;

    // Files of the previous publication that this one no longer lists.
    if let Some(old) = old {
        let now_listed: BTreeSet<&str> = manifest
            .set
            .members
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        for f in old
            .set
            .members
            .iter()
            .filter(|f| !now_listed.contains(f.path.as_str()))
        {
            if let Some((dir, name)) = checked_path(&f.path, shape) {
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
                .map(|m| m.set.signed_at)
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
                Err(e) => crate::events::Event::ShareCannotRemoveOld {
                    dir: path.to_path_buf(),
                    error: e.to_string(),
                }
                .emit(),
            }
        }
        let _ = std::fs::remove_dir(cluster.path());
    }
    removed
}
