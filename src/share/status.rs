//! `share-status`: what every node published, by cluster.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cache::fsx;
use crate::clock::now_secs;

use super::{open_share, read_manifest, TOP};

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
                .and_then(|fd| read_manifest(fd.as_fd()).map_err(|e| e.to_string()));
            out.push(match m {
                Ok(m) => NodePublication {
                    problem: (m.set.fingerprint != cluster || m.node_rank != rank)
                        .then(|| "the manifest names another cluster or node".to_string()),
                    cluster_fingerprint: cluster.clone(),
                    node_rank: rank,
                    nnodes: m.nnodes,
                    published_at: Some(m.set.signed_at),
                    published_at_utc: Some(m.published_at_utc),
                    files: m.set.members.len(),
                    bytes: m.set.members.iter().map(|f| f.size).sum(),
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
