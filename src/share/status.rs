//! `share-status`: what every node published, by cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::process::ExitCode;

use crate::clock::now_secs;
use crate::publish::{Dir, Storage};

use super::{io_error, node_key, read_manifest, TOP};

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
    let store = Dir::new(share);
    drop(store.open()?);
    // Every node that holds anything, under `keepwrap/<cluster>/node<R>/`.
    let mut nodes: BTreeSet<(String, u32)> = BTreeSet::new();
    for o in store.list(&format!("{TOP}/")).map_err(io_error)? {
        let mut parts = o.key.splitn(4, '/').skip(1);
        if let (Some(cluster), Some(node), Some(_)) = (parts.next(), parts.next(), parts.next()) {
            if let Some(rank) = node.strip_prefix("node").and_then(|r| r.parse().ok()) {
                nodes.insert((cluster.to_string(), rank));
            }
        }
    }
    let mut out = Vec::new();
    for (cluster, rank) in nodes {
        let m = read_manifest(&store, &node_key(&cluster, rank)).map_err(|e| e.to_string());
        out.push(match m {
            Ok(m) => NodePublication {
                problem: (m.set.fingerprint != cluster || m.node_rank != rank)
                    .then(|| "the manifest names another cluster or node".to_string()),
                cluster_fingerprint: cluster,
                node_rank: rank,
                nnodes: m.nnodes,
                published_at: Some(m.set.signed_at),
                published_at_utc: Some(m.published_at_utc),
                files: m.set.members.len(),
                bytes: m.set.members.iter().map(|f| f.size).sum(),
            },
            Err(why) => NodePublication {
                cluster_fingerprint: cluster,
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
                    "{cluster} node {}/{} published {utc} ({}): {}, {}\n",
                    p.node_rank,
                    p.nnodes,
                    crate::store::ago(*at, now),
                    crate::events::counted(p.files, "file", "files"),
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
