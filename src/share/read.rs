//! Reading (before the engine starts): every node's manifest and files,
//! verified against each other; a node that does not verify counts as not
//! published.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::cache::{self, Shape};
use crate::digest::{sha256_hex, short};
use crate::publish::{Dir, Storage};

use super::{
    checked_path, node_key, union_of, DirUnion, Manifest, Node, MANIFEST, MANIFEST_FORMAT,
    MAX_MANIFEST,
};

/// Why a node counts as not published: its manifest or one of its files is
/// missing, unreadable, or does not match.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotPublished {
    #[error("no manifest")]
    NoManifest,
    #[error("cannot read its manifest ({0})")]
    CannotReadManifest(Arc<io::Error>),
    #[error("its manifest is not valid ({0})")]
    InvalidManifest(Arc<serde_json::Error>),
    #[error("manifest format {0} (this keepwrap reads {MANIFEST_FORMAT})")]
    Format(u32),
    /// The manifest is another node's, or another cluster's (its
    /// fingerprint's first digits).
    #[error("its manifest is for node {rank} of {nnodes} of cluster {cluster}")]
    OtherNode {
        rank: u32,
        nnodes: u32,
        cluster: String,
    },
    #[error("its manifest's set is not valid ({0})")]
    InvalidSet(String),
    #[error("its manifest lists a bad path {0:?}")]
    BadPath(String),
    #[error("{path}: cannot read it ({error})")]
    CannotReadFile { path: String, error: Arc<io::Error> },
    #[error("{0}: its bytes differ from the manifest (a publication in progress?)")]
    Differs(String),
}

/// The manifest of the node whose key is `node` (see [`node_key`]).
pub(super) fn read_manifest(store: &dyn Storage, node: &str) -> Result<Manifest, NotPublished> {
    let key = format!("{node}/{MANIFEST}");
    let bytes = match store.get(&key, MAX_MANIFEST) {
        Ok(Some(o)) => o.bytes,
        Ok(None) => return Err(NotPublished::NoManifest),
        Err(e) => {
            return Err(NotPublished::CannotReadManifest(Arc::new(
                io::Error::other(e.what),
            )))
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| NotPublished::InvalidManifest(Arc::new(e)))
}

/// One node's verified publication: its rank files, path and bytes.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    pub rank: u32,
    pub files: Vec<(String, Vec<u8>)>,
}

/// Read node `rank`'s publication and verify it. The error says why the
/// node counts as not published.
fn read_node(
    store: &dyn Storage,
    cluster: &str,
    node: Node,
    shape: Shape,
) -> Result<NodeFiles, NotPublished> {
    let dir = node_key(cluster, node.rank);
    let m = read_manifest(store, &dir)?;
    if m.format != MANIFEST_FORMAT {
        return Err(NotPublished::Format(m.format));
    }
    if m.set.fingerprint != cluster || m.node_rank != node.rank || m.nnodes != node.nnodes {
        return Err(NotPublished::OtherNode {
            rank: m.node_rank,
            nnodes: m.nnodes,
            cluster: short(&m.set.fingerprint).to_string(),
        });
    }
    // A set whole by its id: never a part of what the node published.
    cache::validate_manifest(&m.set, cluster, shape).map_err(NotPublished::InvalidSet)?;
    let mut files = Vec::with_capacity(m.set.members.len());
    for f in &m.set.members {
        checked_path(&f.path, shape).ok_or_else(|| NotPublished::BadPath(f.path.clone()))?;
        let cannot = |error: io::Error| NotPublished::CannotReadFile {
            path: f.path.clone(),
            error: Arc::new(error),
        };
        let bytes = store
            .get(&format!("{dir}/{}", f.path), cache::MAX_CACHE_FILE)
            .map_err(|e| cannot(io::Error::other(e.what)))?
            .ok_or_else(|| cannot(io::Error::from(nix::errno::Errno::ENOENT)))?
            .bytes;
        if bytes.len() as u64 != f.size || sha256_hex(&bytes) != f.sha256 {
            return Err(NotPublished::Differs(f.path.clone()));
        }
        files.push((f.path.clone(), bytes));
    }
    Ok(NodeFiles {
        rank: node.rank,
        files,
    })
}

/// What the share holds for this cluster.
#[derive(Debug, Clone)]
pub enum Gathered {
    /// Some nodes' publications are missing or do not verify: `(node, why)`.
    Incomplete(Vec<(u32, NotPublished)>),
    /// Every node verified: the union of each cache directory.
    Complete(Vec<DirUnion>),
}

/// Read and verify every node's publication of `cluster`, and when all are
/// there, take the union of each cache directory (`me` is this node's rank).
/// An error means the share itself cannot be read.
pub fn gather(share: &Path, cluster: &str, me: Node, shape: Shape) -> io::Result<Gathered> {
    Ok(match gather_nodes(share, cluster, me, shape)? {
        Err(missing) => Gathered::Incomplete(missing),
        Ok(nodes) => Gathered::Complete(union_of(nodes, me.rank, shape)),
    })
}

/// Every node's verified publication of `cluster`, or the nodes whose
/// publication is missing or does not verify, with why.
#[allow(clippy::type_complexity)]
pub fn gather_nodes(
    share: &Path,
    cluster: &str,
    me: Node,
    shape: Shape,
) -> io::Result<Result<Vec<NodeFiles>, Vec<(u32, NotPublished)>>> {
    let store = Dir::new(share);
    drop(store.open()?);
    let mut nodes = Vec::with_capacity(me.nnodes as usize);
    let mut missing = Vec::new();
    for rank in 0..me.nnodes {
        let node = Node {
            nnodes: me.nnodes,
            rank,
        };
        // A publication being replaced fails to verify: read it once more.
        let read = read_node(&store, cluster, node, shape)
            .or_else(|_| read_node(&store, cluster, node, shape));
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

/// Say which nodes have not published, and why (one line).
pub fn report_incomplete(missing: &[(u32, NotPublished)], nnodes: u32) {
    let which: Vec<String> = missing.iter().map(|(r, _)| r.to_string()).collect();
    let why: Vec<String> = missing
        .iter()
        .map(|(r, w)| format!("node {r}: {w}"))
        .collect();
    crate::events::Event::ShareIncomplete {
        missing: which.join(", ").to_string(),
        nodes: nnodes,
        reason: why.join("; ").to_string(),
    }
    .emit();
}
