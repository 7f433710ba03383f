//! One set on every node: for a tree whose files the engine's gate
//! compares whole across the ranks of every node (each file's name and
//! bytes), and deletes all of on any difference. Before the start, when
//! every node's publication verifies, this node's files become the union
//! of every node's (where two nodes publish one path with other bytes, the
//! lowest node's), written here, and this node's files outside it are
//! removed: every node then holds the same files, byte for byte.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::cache::{self, fsx};
use crate::stops::Stopped;

use super::{bounded, checked_path, gather_nodes, mkdirs, report_incomplete, NodeFiles, Share};

/// Every node's files as one set: path to bytes, the lowest node's where
/// two nodes publish one path (pure).
pub fn same_set(mut nodes: Vec<NodeFiles>) -> BTreeMap<String, Vec<u8>> {
    nodes.sort_by_key(|n| n.rank);
    let mut set = BTreeMap::new();
    for node in nodes {
        for (path, bytes) in node.files {
            set.entry(path).or_insert(bytes);
        }
    }
    set
}

/// Each node's files the engine would read as what they are named
/// ([`cache::Shape::check_file`]: an entry whose name is the hash of its
/// key): a file planted in a publication, or edited and its manifest with
/// it, never makes the union, and one line names each (the same on every
/// node, so every node's set stays the same).
fn usable(mut nodes: Vec<NodeFiles>, shape: cache::Shape) -> Vec<NodeFiles> {
    for node in &mut nodes {
        node.files.retain(|(path, bytes)| {
            let name = path.rsplit('/').next().unwrap_or(path);
            match shape.check_file(name.as_bytes(), bytes) {
                Ok(()) => true,
                Err(why) => {
                    crate::events::Event::ShareFileRefused {
                        node: node.rank,
                        path: path.clone(),
                        why,
                    }
                    .emit();
                    false
                }
            }
        });
    }
    nodes
}

impl Share {
    /// Every node's verified publication, read on a thread bounded by
    /// `--share-timeout`; None (one line says why) when the share is slow,
    /// unreadable or some node has not published. Err: a stop signal.
    pub fn gather_all(&self) -> Result<Option<Vec<NodeFiles>>, Stopped> {
        let (dir, cluster, me, timeout) = self.parts();
        let (d, c, shape) = (dir.to_path_buf(), cluster.to_string(), self.shape());
        Ok(
            match bounded(timeout, move || gather_nodes(&d, &c, me, shape))? {
                None => {
                    crate::events::Event::ShareSlow {
                        dir: dir.to_path_buf(),
                        timeout,
                    }
                    .emit();
                    None
                }
                Some(Err(e)) => {
                    crate::events::Event::ShareUnreadable {
                        dir: dir.to_path_buf(),
                        error: e.to_string(),
                    }
                    .emit();
                    None
                }
                Some(Ok(Err(missing))) => {
                    report_incomplete(&missing, me.nnodes);
                    None
                }
                Some(Ok(Ok(nodes))) => Some(nodes),
            },
        )
    }

    /// Before the engine starts: when every node's publication verifies,
    /// make this node's files (`kept`: what prune kept, relative to
    /// `root`) the same set as every node's ([`same_set`]) and sign the
    /// tree for `fingerprint`. The files signed, when anything was written
    /// or removed; None: nothing changed here, or the share could not be
    /// used (said why).
    pub fn take_same(
        &self,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
        kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        let Some(nodes) = self.gather_all()? else {
            return Ok(None);
        };
        let set = same_set(usable(nodes, self.shape()));
        let (written, removed) = match make_same(root, &set, kept, self.shape()) {
            Ok(n) => n,
            Err(e) => {
                crate::events::Event::ShareCannotWriteUnion {
                    dir: root.display().to_string(),
                    error: e.to_string(),
                }
                .emit();
                return Ok(None);
            }
        };
        crate::events::Event::ShareSameSet {
            files: set.len(),
            nodes: self.parts().2.nnodes,
            written,
            removed,
        }
        .emit();
        if written == 0 && removed == 0 {
            return Ok(None);
        }
        Ok(self.sign_taken(root, fingerprint))
    }
}

/// Write each file of `set` whose bytes this node lacks, and remove each
/// kept file outside it (with its sidecar). `(written, removed)`.
fn make_same(
    root: &Path,
    set: &BTreeMap<String, Vec<u8>>,
    kept: &[PathBuf],
    shape: cache::Shape,
) -> io::Result<(usize, usize)> {
    let root_fd = fsx::open_root(root)?;
    let mut buf = Vec::new();
    let mut written = 0;
    for (path, bytes) in set {
        let Some((dir, name)) = checked_path(path, shape) else {
            continue;
        };
        let dfd = mkdirs(root_fd.as_fd(), dir)?;
        let same = fsx::read_at(dfd.as_fd(), name, &mut buf, cache::MAX_CACHE_FILE).is_ok()
            && buf == *bytes;
        if !same {
            fsx::write_linked_at(dfd.as_fd(), bytes, 0o644, &[name], || {})?;
            written += 1;
            crate::failpoint::hit("share-same");
        }
    }
    let mut removed = 0;
    for rel in kept {
        if rel.to_str().is_some_and(|p| set.contains_key(p)) {
            continue;
        }
        for p in [root.join(rel), root.join(rel.with_extension("launch"))] {
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                r => r?,
            }
        }
        removed += 1;
    }
    Ok((written, removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_node_wins_a_path_both_publish() {
        let node = |rank, files: &[(&str, &str)]| NodeFiles {
            rank,
            files: files
                .iter()
                .map(|(p, b)| (p.to_string(), b.as_bytes().to_vec()))
                .collect(),
        };
        let set = same_set(vec![
            node(1, &[("a", "one"), ("c", "c1")]),
            node(0, &[("a", "zero"), ("b", "b0")]),
        ]);
        let got: Vec<(&str, &[u8])> = set.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
        assert_eq!(
            got,
            vec![("a", &b"zero"[..]), ("b", &b"b0"[..]), ("c", &b"c1"[..])]
        );
    }
}
