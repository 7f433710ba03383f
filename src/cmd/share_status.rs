//! `keepwrap share-status --json`.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::clock::now_secs;

use super::print;

/// `keepwrap share-status --json`: every node publication of the share, by
/// cluster, with the nodes that have not published.
pub fn share_status_json(share: &Path) -> ExitCode {
    let pubs = match crate::share::status_or_report(share) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let now = now_secs();
    let clusters: Vec<Value> = crate::share::by_cluster(&pubs)
        .into_iter()
        .map(|(cluster, nodes)| {
            let n = nodes.iter().map(|p| p.nnodes).max().unwrap_or(0);
            let mut rows: Vec<Value> = nodes
                .iter()
                .map(|p| {
                    let state = if p.published_at.is_some() && p.problem.is_none() {
                        "published"
                    } else {
                        "unusable"
                    };
                    json!({
                        "node_rank": p.node_rank,
                        "nnodes": p.nnodes,
                        "state": state,
                        "published_at": p.published_at,
                        "published_at_utc": p.published_at_utc,
                        "age_secs": p.published_at.map(|t| now.saturating_sub(t)),
                        "files": p.files,
                        "size": p.bytes,
                        "problem": p.problem,
                    })
                })
                .collect();
            for r in 0..n {
                if !nodes.iter().any(|p| p.node_rank == r) {
                    rows.push(json!({"node_rank": r, "nnodes": n, "state": "not published"}));
                }
            }
            rows.sort_by_key(|v| v["node_rank"].as_u64());
            json!({"cluster_fingerprint": cluster, "nnodes": n, "nodes": rows})
        })
        .collect();
    let out = json!({"share": share.display().to_string(), "now": now, "clusters": clusters});
    let mut text = serde_json::to_vec_pretty(&out).expect("a Value serializes");
    text.push(b'\n');
    if print(&text) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
