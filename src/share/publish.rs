//! Publishing (at commit): a node's signed rank files and its manifest,
//! written through the share's storage so that a reader never sees a torn
//! file; old publications removed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::cache::{self, fsx, Member, SetManifest, Shape};
use crate::clock::now_secs;
use crate::digest::sha256_hex;
use crate::publish::{Dir, Failure, Put, Storage};

use super::{
    checked_path, node_key, read_manifest, Manifest, Node, MANIFEST, MANIFEST_FORMAT, MAX_MANIFEST,
    TOP,
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

pub(super) fn io_error(f: Failure) -> io::Error {
    io::Error::other(f.to_string())
}

/// Write `bytes` at `key` unless it holds them already: created when
/// absent, else replaced while it is still the object read. Whether it was
/// written.
fn put_bytes(store: &dyn Storage, key: &str, bytes: &[u8]) -> io::Result<bool> {
    for _ in 0..3 {
        let put = match store
            .get(key, cache::MAX_CACHE_FILE.max(MAX_MANIFEST))
            .map_err(io_error)?
        {
            Some(o) if o.bytes == bytes => return Ok(false),
            Some(o) => store.replace(key, bytes, &o.etag),
            None => store.put_if_absent(key, bytes),
        };
        if put.map_err(io_error)? == Put::Written {
            return Ok(true);
        }
    }
    Err(io::Error::other(format!(
        "{key}: another publication of this node keeps replacing it"
    )))
}

/// Publish `p` into the share: files first, then the manifest, each
/// atomically. Returns how many files were (re)written.
pub fn publish_to(share: &Path, p: &Publication, shape: Shape) -> io::Result<usize> {
    let store = Dir::new(share);
    drop(store.open()?);
    let node = node_key(&p.cluster, p.node.rank);
    let old = read_manifest(&store, &node).ok();

    let mut entries = Vec::with_capacity(p.files.len());
    let mut written = 0;
    for (path, bytes) in &p.files {
        if checked_path(path, shape).is_none() {
            continue;
        }
        if put_bytes(&store, &format!("{node}/{path}"), bytes)? {
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
    put_bytes(&store, &format!("{node}/{MANIFEST}"), &bytes)?;

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
            if checked_path(&f.path, shape).is_some() {
                let _ = store.delete(&format!("{node}/{}", f.path));
            }
        }
    }
    Ok(written)
}

/// Remove every node publication in the share older than `max_age` (by its
/// manifest's `published_at`; one without a readable manifest by the time
/// its newest file was written), manifest first. Returns how many node
/// publications were removed.
pub fn remove_old(share: &Path, max_age: Duration) -> usize {
    let store = Dir::new(share);
    let Ok(listed) = store.list(&format!("{TOP}/")) else {
        return 0;
    };
    // Each node's objects, under `keepwrap/<cluster>/node<R>`.
    let mut nodes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for o in listed {
        let mut parts = o.key.splitn(4, '/').skip(1);
        let (Some(cluster), Some(node), Some(_)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if node.starts_with("node") {
            nodes
                .entry(format!("{TOP}/{cluster}/{node}"))
                .or_default()
                .push((o.key, o.modified));
        }
    }
    let now = now_secs();
    let limit = max_age.as_secs();
    let mut removed = 0;
    for (node, objects) in nodes {
        let manifest_key = format!("{node}/{MANIFEST}");
        let published = read_manifest(&store, &node)
            .ok()
            .map(|m| m.set.signed_at)
            .or_else(|| {
                objects
                    .iter()
                    .filter_map(|(_, at)| {
                        humantime::parse_rfc3339_weak(at.trim_end_matches('Z')).ok()
                    })
                    .filter_map(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map(|d| d.as_secs())
                    .max()
            });
        let Some(published) = published else { continue };
        if now.saturating_sub(published) <= limit {
            continue;
        }
        let gone = store.delete(&manifest_key).and_then(|()| {
            objects
                .iter()
                .filter(|(k, _)| *k != manifest_key)
                .try_for_each(|(k, _)| store.delete(k))
        });
        match gone {
            Ok(()) => removed += 1,
            Err(e) => crate::events::Event::ShareCannotRemoveOld {
                dir: share.join(&node),
                error: e.to_string(),
            }
            .emit(),
        }
    }
    removed
}
