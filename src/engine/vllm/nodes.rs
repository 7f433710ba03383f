//! A multi-node vLLM launch: this node's place in it, and its share
//! (`--share DIR`), where each node publishes its own ranks' files and a
//! node that kept nothing takes its own back.

use std::path::{Path, PathBuf};

use crate::cache::Shape;
use crate::engine::fingerprint::Launch;
use crate::engine::vllm::launch::fingerprint::VllmLaunch;
use crate::share::{Node, Share};
use crate::stops::Stopped;

/// This node's place in a multi-node vLLM launch: `--nnodes N --node-rank
/// R` (TP/PP across nodes), or for data parallelism across nodes
/// `-dp D -dpl L` with `-dpr S` (or `-dpn S`): node S/L of D/L.
pub fn node(v: &VllmLaunch) -> Result<Node, String> {
    let s = v.sizes();
    let n = |x: Option<u64>, what: &str| {
        x.and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| format!("{what} cannot be read from the launch"))
    };
    let (nnodes, rank) = match (s.nnodes, s.dp_size_local) {
        (Some(nn), _) if nn > 1 => (n(s.nnodes, "--nnodes")?, n(s.node_rank, "--node-rank")?),
        (_, Some(local)) if local > 0 && s.dp.is_some_and(|d| d > local && d % local == 0) => {
            let start = s.dp_start_rank.or(s.dp_rank).unwrap_or(0);
            (
                n(s.dp.map(|d| d / local), "--data-parallel-size")?,
                n(Some(start / local), "--data-parallel-start-rank")?,
            )
        }
        _ => (1, 0),
    };
    if rank >= nnodes {
        return Err(format!("node {rank} is out of range for {nnodes} nodes"));
    }
    Ok(Node { nnodes, rank })
}

/// The share of a vLLM launch (`--share DIR`): each node publishes its own
/// ranks' signed files; no union is ever taken (vLLM's gate passes
/// per-rank files as they are).
pub(super) fn share(
    args: &crate::share::Settings,
    launch: &Launch,
    shape: Shape,
    max_age: std::time::Duration,
) -> Option<Share> {
    let v = launch.vllm()?;
    Share::for_node(args, || launch.cluster_of(args), node(v), shape, max_age)
}

/// Before the engine starts, on a node that kept nothing: when every node
/// of this launch has a verified publication, place this node's own
/// published rank files back and sign them ([`crate::publish::place`]).
/// Never a partial set: one node missing, or one file that does not
/// verify, and nothing is taken (one line says which). The files signed,
/// if any.
pub(super) fn take_own(
    share: &Share,
    root: &Path,
    fingerprint: &crate::digest::Fingerprint,
) -> Result<Option<Vec<PathBuf>>, Stopped> {
    let me = share.parts().2;
    let Some(nodes) = share.gather_all()? else {
        return Ok(None);
    };
    let Some(own) = nodes.into_iter().find(|n| n.rank == me.rank) else {
        return Ok(None);
    };
    if own.files.is_empty() {
        return Ok(None);
    }
    Ok(
        match crate::publish::place(root, share.shape(), fingerprint, &own.files) {
            Ok(signed) => {
                crate::events::Event::ShareRestoredOwn {
                    files: own.files.len(),
                    nodes: me.nnodes,
                }
                .emit();
                Some(signed)
            }
            Err(crate::publish::NotPlaced::Write(e)) => {
                crate::events::Event::ShareCannotWriteOwn {
                    error: e.to_string(),
                }
                .emit();
                None
            }
            Err(crate::publish::NotPlaced::Sign(e)) => {
                crate::events::Event::ShareCannotSign {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                None
            }
        },
    )
}

/// SGLang's [`crate::engine::sglang::RANK_FLAGS`] and vLLM's short aliases of the
/// first three, for a vLLM launch.
pub const RANK_FLAGS: [&str; 7] = [
    "--node-rank",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--dp-rank",
    "-r",
    "-dpn",
    "-dpr",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vllm::tests::launch;

    #[test]
    fn nodes() {
        let node = |a: &str| node(&launch(a));
        assert_eq!(node("vllm serve m -tp 2"), Ok(Node { nnodes: 1, rank: 0 }));
        assert_eq!(
            node("vllm serve m -tp 4 --nnodes 2 --node-rank 1 --headless"),
            Ok(Node { nnodes: 2, rank: 1 })
        );
        assert_eq!(
            node("vllm serve m -dp 4 -dpl 2 -dpr 2 --headless"),
            Ok(Node { nnodes: 2, rank: 1 })
        );
        assert_eq!(
            node("vllm serve m -dp 4 -dpl 2"),
            Ok(Node { nnodes: 2, rank: 0 })
        );
        assert!(node("vllm serve m -tp 4 --nnodes 2 --node-rank 2").is_err());
    }
}
