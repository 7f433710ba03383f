//! The launch's side: the share of one launch, which takes the union before
//! the engine starts and publishes this node's files at commit, each on a
//! thread bounded by `--share-timeout`.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cache::{self, fsx, Shape};
use crate::publish::{Job, Waited};
use crate::stops::Stopped;
use crate::unify::Outcome;

use super::{
    bounded, collect, gather, mkdirs, publish_to, remove_old, report_incomplete, DirUnion,
    Gathered, Node, Publication, Settings,
};

/// The share of one launch.
pub struct Share {
    dir: PathBuf,
    cluster: String,
    node: Node,
    /// The shape of the cache tree: which published paths are files of it.
    shape: Shape,
    max_age: Duration,
    timeout: Duration,
    running: Option<Job>,
    pending: Option<Publication>,
}

impl Share {
    /// The share of this launch, or `None` (with one line saying why) when
    /// there is none to use. `cluster` gives the launch's cluster
    /// fingerprint, asked only of a launch that has a share.
    pub fn new(
        args: &Settings,
        cluster: impl FnOnce() -> String,
        node: Result<Node, String>,
        shape: Shape,
        unify: bool,
        max_age: Duration,
    ) -> Option<Share> {
        let dir = args.dir.clone()?;
        if !unify {
            crate::events::Event::ShareUnifyOff {
                dir: dir.to_path_buf(),
            }
            .emit();
            return None;
        }
        Share::for_node(args, cluster, node, shape, max_age)
    }

    /// [`Share::new`] for a launch whose place among the nodes is `node`.
    pub fn for_node<E: std::fmt::Display>(
        args: &Settings,
        cluster: impl FnOnce() -> String,
        node: Result<Node, E>,
        shape: Shape,
        max_age: Duration,
    ) -> Option<Share> {
        let dir = args.dir.clone()?;
        let node = match node {
            Ok(n) => n,
            Err(e) => {
                crate::events::Event::ShareUnusable {
                    dir: dir.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                return None;
            }
        };
        if node.nnodes == 1 {
            crate::events::Event::ShareSingleNode {
                dir: dir.to_path_buf(),
            }
            .emit();
            return None;
        }
        let cluster = cluster();
        crate::events::Event::ShareCluster {
            cluster_fingerprint: cluster.to_string(),
            node: node.rank,
            nodes: node.nnodes,
            dir: dir.to_path_buf(),
        }
        .emit();
        Some(Share {
            dir,
            cluster,
            node,
            shape,
            max_age,
            timeout: args.share_timeout,
            running: None,
            pending: None,
        })
    }

    /// Before the engine starts: when every node's publication verifies,
    /// write the union of each cache directory over this node's rank files
    /// and sign the cache for `fingerprint`. Returns the signed files when
    /// anything was signed; `None` means single-node behaviour (said why);
    /// Err: a stop signal ended the wait.
    pub fn take_union(
        &self,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        let (share, cluster, node, shape) = (
            self.dir.clone(),
            self.cluster.clone(),
            self.node,
            self.shape,
        );
        let started = Instant::now();
        let gathered = match bounded(self.timeout, move || gather(&share, &cluster, node, shape))? {
            None => {
                crate::events::Event::ShareSlow {
                    dir: self.dir.to_path_buf(),
                    timeout: self.timeout,
                }
                .emit();
                return Ok(None);
            }
            Some(Err(e)) => {
                crate::events::Event::ShareUnreadable {
                    dir: self.dir.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                return Ok(None);
            }
            Some(Ok(g)) => g,
        };
        let dirs = match gathered {
            Gathered::Incomplete(missing) => {
                report_incomplete(&missing, self.node.nnodes);
                return Ok(None);
            }
            Gathered::Complete(dirs) => dirs,
        };
        let mut wrote = 0;
        for d in &dirs {
            wrote += apply(root, d, self.shape());
        }
        crate::events::Event::ShareUnionTaken {
            took: started.elapsed(),
        }
        .emit();
        if wrote == 0 {
            return Ok(None);
        }
        Ok(self.sign_taken(root, fingerprint))
    }

    /// The tree signed for `fingerprint` once the share's files were
    /// written into it (one line says so, or why not): the files signed.
    pub(super) fn sign_taken(
        &self,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
    ) -> Option<Vec<PathBuf>> {
        match cache::sign(root, self.shape, fingerprint) {
            Ok(r) => {
                crate::events::Event::ShareSigned {
                    files: r.signed.len(),
                    nodes: self.node.nnodes,
                    fingerprint: fingerprint.to_string(),
                }
                .emit();
                Some(r.signed)
            }
            Err(e) => {
                crate::events::Event::ShareCannotSign {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                None
            }
        }
    }

    /// The share directory, this launch's cluster fingerprint and place.
    pub fn parts(&self) -> (&Path, &str, Node, Duration) {
        (&self.dir, &self.cluster, self.node, self.timeout)
    }

    /// The shape of the cache tree whose files the share holds.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// At commit: publish this node's signed rank files (in the background;
    /// a publication still running makes this one wait its turn).
    pub fn publish(&mut self, root: &Path, signed: &[PathBuf]) {
        let files = collect(root, signed, self.shape);
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
        let (dir, max_age, shape) = (self.dir.clone(), self.max_age, self.shape);
        let job = move || publish_and_clean(&dir, &p, max_age, shape);
        match Job::spawn("keepwrap-publish", job) {
            Ok(h) => self.running = Some(h),
            Err(e) => crate::events::Event::SharePublishNotStarted {
                error: e.to_string(),
            }
            .emit(),
        }
    }

    /// Before keepwrap exits: let the publication finish, at most
    /// `--share-timeout` (then the launch goes on without it).
    pub fn finish(&mut self) {
        let deadline = crate::clock::after(Instant::now(), self.timeout);
        while let Some(job) = self.running.take() {
            if job.wait(deadline, || false) != Waited::Done {
                crate::events::Event::SharePublishSlow {
                    dir: self.dir.to_path_buf(),
                    timeout: self.timeout,
                }
                .emit();
                return;
            }
            job.join();
            if let Some(p) = self.pending.take() {
                self.spawn(p);
            }
        }
    }
}

fn publish_and_clean(dir: &Path, p: &Publication, max_age: Duration, shape: Shape) {
    match publish_to(dir, p, shape) {
        Ok(written) => crate::events::Event::SharePublished {
            files: p.files.len(),
            node: p.node.rank,
            nodes: p.node.nnodes,
            rewritten: written,
            dir: dir.to_path_buf(),
        }
        .emit(),
        Err(e) => {
            crate::events::Event::ShareCannotPublish {
                dir: dir.to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            return;
        }
    }
    let removed = remove_old(dir, max_age);
    if removed > 0 {
        crate::events::Event::ShareOldRemoved {
            publications: removed,
            max_age,
        }
        .emit();
    }
}

/// Write one directory's union over this node's rank files (those its
/// manifest lists, and any other rank file there). Returns how many files
/// were written.
fn apply(root: &Path, d: &DirUnion, shape: Shape) -> usize {
    let u = match &d.outcome {
        Outcome::Leave(reason) => {
            crate::events::Event::ShareLeft {
                dir: d.dir.to_string(),
                reason: reason.to_string(),
            }
            .emit();
            return 0;
        }
        Outcome::Unified(u) => u,
    };
    let mut names: BTreeSet<String> = d.mine.iter().cloned().collect();
    if let Ok(rd) = std::fs::read_dir(root.join(&d.dir)) {
        names.extend(
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| shape.rank_of(n).is_some()),
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
        fsx::write_linked_at(dfd.as_fd(), &u.bytes, 0o644, &stale, || {})?;
        Ok(stale.len())
    })();
    match res {
        Ok(0) => {
            crate::events::Event::ShareAlreadyUnion {
                dir: d.dir.to_string(),
                files: names.len(),
                nodes: d.nodes,
                entries: u.entries,
            }
            .emit();
            0
        }
        Ok(n) => {
            crate::events::Event::ShareUnionWritten {
                dir: d.dir.to_string(),
                nodes: d.nodes,
                files: n,
                entries: u.entries,
                conflicts: u.conflicts.len(),
            }
            .emit();
            n
        }
        Err(e) => {
            crate::events::Event::ShareCannotWriteUnion {
                dir: d.dir.to_string(),
                error: e.to_string(),
            }
            .emit();
            0
        }
    }
}
