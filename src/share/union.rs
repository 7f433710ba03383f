//! The union of every node's verified rank files, per cache directory
//! (pure: no file is read or written here).

use std::collections::{BTreeMap, BTreeSet};

use crate::cache::Shape;
use crate::unify::{self, Outcome, RankFile};

use super::{checked_path, NodeFiles};

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

/// The union, per cache directory, of every node's rank files. Where two
/// nodes publish the same file name, the lowest node's file counts.
pub fn union_of(nodes: Vec<NodeFiles>, me: u32, shape: Shape) -> Vec<DirUnion> {
    struct Dir {
        files: BTreeMap<String, Vec<u8>>,
        nodes: BTreeSet<u32>,
        mine: Vec<String>,
    }
    let mut dirs: BTreeMap<String, Dir> = BTreeMap::new();
    for node in nodes {
        for (path, bytes) in node.files {
            let Some((dir, name)) = checked_path(&path, shape) else {
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
                outcome: unify::unify(&files, shape),
            }
        })
        .collect()
}
