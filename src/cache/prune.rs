//! Prune: before the engine starts, remove every cache file this launch must
//! not load.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use tracing::{debug, info, warn};

use super::fsx::{self, Kind};
use super::judge::{self, Candidate, MemberWhy, Reason};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::sidecar::Sidecar;
use super::trash::{self, Trash};
use super::PruneReport;

/// Larger sidecars are not read (a set of 10,000 members is ~1.3 MB).
pub const MAX_SIDECAR: u64 = 64 << 20;
/// Larger cache files are not read (real ones are KB to a few MB).
pub const MAX_CACHE_FILE: u64 = 256 << 20;

struct State<'f> {
    fingerprint: &'f str,
    report: PruneReport,
    /// Reused buffers: sidecar name, sidecar bytes, cache file bytes.
    sname: Vec<u8>,
    sbuf: Vec<u8>,
    cbuf: Vec<u8>,
    cname: Vec<u8>,
    /// Files trusted on their own, waiting for the set check.
    cands: Vec<(String, Sidecar)>,
    /// Files signed for this launch but removed on their own (changed
    /// after signing, ...): "not trusted" rather than "missing" in the set
    /// line of the other members.
    rejected: Vec<String>,
    /// What to remove in the directory being visited: entry index, why.
    plan: Vec<(usize, Act)>,
    trash: TrashState,
    /// Always Some, but during `resolve`.
    root: Option<OwnedFd>,
}

enum Act {
    Cache(Reason),
    Leftover(&'static str),
}

enum TrashState {
    Unopened,
    Open(Trash),
    Unavailable,
}

/// `background`: empty the trash in a background thread (else now, before
/// returning).
pub fn prune_with(root: &Path, fingerprint: &str, background: bool) -> io::Result<PruneReport> {
    let fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(PruneReport::default()),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("open cache root {}: {e}", root.display()),
            ))
        }
    };
    let root_fd = fd
        .try_clone()
        .map_err(|e| io::Error::new(e.kind(), format!("dup cache root {}: {e}", root.display())))?;
    let mut st = State {
        fingerprint,
        report: PruneReport::default(),
        sname: Vec::with_capacity(64),
        sbuf: Vec::with_capacity(4096),
        cbuf: Vec::new(),
        cname: Vec::with_capacity(64),
        cands: Vec::new(),
        rejected: Vec::new(),
        plan: Vec::new(),
        trash: TrashState::Unopened,
        root: Some(root_fd),
    };
    layout::walk(fd, &mut |dir, listing| st.visit(dir, listing));
    st.resolve();
    if let Some(root) = st.root.take() {
        if background {
            trash::spawn_empty(root);
        } else {
            trash::empty_at(root.as_fd());
        }
    }
    let r = &st.report;
    if r.left > 0 {
        info!(
            "prune: kept {}, removed {} cache files and {} leftovers, left {} that could not be removed",
            r.kept.len(),
            r.removed,
            r.leftovers,
            r.left
        );
    } else {
        info!(
            "prune: kept {}, removed {} cache files and {} leftovers",
            r.kept.len(),
            r.removed,
            r.leftovers
        );
    }
    Ok(st.report)
}

fn cstr_buf<'a>(buf: &'a mut Vec<u8>, name: &[u8]) -> &'a [u8] {
    buf.clear();
    buf.extend_from_slice(name);
    buf.as_slice()
}

impl State<'_> {
    fn visit(&mut self, dir: &DirView<'_>, listing: &Listing) {
        self.plan.clear();
        // Can the whole directory go to the trash with one rename? Only if
        // everything in it goes.
        // (Not a directory named *.json: that one is left, as warned.)
        let mut whole = dir
            .parent
            .is_some_and(|(_, name)| layout::role(name) != Role::Cache);
        for (i, e) in listing.ents.iter().enumerate() {
            let name = listing.name(e);
            match layout::role(name) {
                Role::Cache => match e.kind {
                    Kind::Dir => {
                        warn!(
                            "left {}: a directory named *.json, which keepwrap does not remove",
                            Rel(dir.rel, name)
                        );
                        self.report.left += 1;
                        whole = false;
                    }
                    Kind::File => match self.judge_file(dir, listing, name) {
                        Some(reason) => self.plan.push((i, Act::Cache(reason))),
                        None => whole = false,
                    },
                    k => self.plan.push((i, Act::Cache(Reason::NotRegular(k)))),
                },
                Role::Sidecar if e.kind != Kind::Dir => {
                    let stem = &name[..name.len() - layout::SIDECAR_EXT.len()];
                    self.cname.clear();
                    self.cname.extend_from_slice(stem);
                    self.cname.extend_from_slice(layout::CACHE_EXT);
                    let beside = listing.find(&self.cname).map(|c| c.kind);
                    if beside.is_none() || beside == Some(Kind::Dir) {
                        self.plan
                            .push((i, Act::Leftover("orphan sidecar (no cache file beside)")));
                    }
                    // else it goes (or stays) with its cache file
                }
                Role::Other if e.kind == Kind::Symlink && layout::walks_into(name) => {
                    self.symlinked_dir(dir, name);
                }
                Role::AutotunerTmp if e.kind != Kind::Dir => {
                    self.plan
                        .push((i, Act::Leftover("FlashInfer temp file left by a crash")));
                }
                Role::KeepwrapTmp if e.kind != Kind::Dir => {
                    self.plan
                        .push((i, Act::Leftover("keepwrap temp file left by a crash")));
                }
                _ => whole = false,
            }
        }
        if self.plan.is_empty() {
            return;
        }
        let plan = std::mem::take(&mut self.plan);
        if whole && self.trash_dir(dir) {
            for (i, act) in &plan {
                let name = listing.name(&listing.ents[*i]);
                match act {
                    Act::Cache(reason) => self.log_removed(dir.rel, name, reason),
                    Act::Leftover(why) => {
                        self.report.leftovers += 1;
                        info!("removed {}: {}", Rel(dir.rel, name), why);
                    }
                }
            }
        } else {
            for (i, act) in &plan {
                let name = listing.name(&listing.ents[*i]);
                match act {
                    Act::Cache(reason) => self.remove(dir.fd, dir.rel, name, reason),
                    Act::Leftover(why) => self.leftover(dir, name, why),
                }
            }
        }
        self.plan = plan;
    }

    /// Move the directory being visited into the trash.
    fn trash_dir(&mut self, dir: &DirView<'_>) -> bool {
        let Some((parent, name)) = dir.parent else {
            return false;
        };
        if let TrashState::Unopened = self.trash {
            let Some(root) = &self.root else { return false };
            self.trash = match Trash::open(root.as_fd()) {
                Ok(t) => TrashState::Open(t),
                Err(e) => {
                    warn!("cannot use .keepwrap/trash ({e}): removing files one by one");
                    TrashState::Unavailable
                }
            };
        }
        let TrashState::Open(t) = &self.trash else {
            return false;
        };
        match t.take(parent, name) {
            Ok(()) => true,
            Err(e) => {
                debug!(
                    "cannot move {} to .keepwrap/trash ({e}): removing files one by one",
                    Rel(dir.rel, b"")
                );
                false
            }
        }
    }

    fn log_removed(&mut self, rel: &[u8], name: &[u8], reason: &Reason) {
        self.report.removed += 1;
        if matches!(reason, Reason::Untrusted(_)) {
            warn!("removed {}: {}", Rel(rel, name), reason);
        } else {
            info!("removed {}: {}", Rel(rel, name), reason);
        }
    }

    fn leftover(&mut self, dir: &DirView<'_>, name: &[u8], why: &str) {
        match fsx::unlink_at(dir.fd, cstr_buf(&mut self.sname, name)) {
            Ok(()) => {
                self.report.leftovers += 1;
                info!("removed {}: {}", Rel(dir.rel, name), why);
            }
            Err(e) => warn!("cannot remove {} ({}): {}", Rel(dir.rel, name), why, e),
        }
    }

    /// A symlink to a directory inside the tree: the engine would load
    /// cache files through it that keepwrap never judges (the walk does not
    /// follow symlinks). Remove the link itself, never its target.
    fn symlinked_dir(&mut self, dir: &DirView<'_>, name: &[u8]) {
        let cname = cstr_buf(&mut self.sname, name);
        // Following the link only to look at what it points to.
        let to_dir = nix::sys::stat::fstatat(dir.fd, cname, nix::fcntl::AtFlags::empty())
            .is_ok_and(|st| Kind::from_mode(st.st_mode) == Kind::Dir);
        if !to_dir {
            return;
        }
        let why = "a symlink to a directory, through which the engine would load cache files keepwrap does not judge";
        match fsx::unlink_at(dir.fd, cstr_buf(&mut self.sname, name)) {
            Ok(()) => {
                self.report.leftovers += 1;
                warn!(
                    "removed {}: {why} (its target is left alone)",
                    Rel(dir.rel, name)
                );
            }
            Err(e) => warn!("cannot remove {} ({why}): {e}", Rel(dir.rel, name)),
        }
    }

    /// Remove cache file `name` of `dir` (and its sidecar), one log line.
    fn remove(&mut self, fd: BorrowedFd<'_>, rel: &[u8], name: &[u8], reason: &Reason) {
        match fsx::unlink_at(fd, cstr_buf(&mut self.cname, name)) {
            Ok(()) => self.log_removed(rel, name, reason),
            Err(e) => {
                self.report.left += 1;
                warn!("cannot remove {} ({}): {}", Rel(rel, name), reason, e);
                return;
            }
        }
        layout::sidecar_name(name, &mut self.sname);
        let sname = &self.sname[..self.sname.len() - 1];
        if let Err(e) = fsx::unlink_at(fd, sname) {
            if e.raw_os_error() != Some(nix::errno::Errno::EISDIR as i32) {
                warn!("cannot remove {}: {}", Rel(rel, sname), e);
            }
        }
    }

    /// Judge a regular cache file: Some(reason) to remove it, None when it
    /// is trusted on its own (a candidate for the set check).
    fn judge_file(&mut self, dir: &DirView<'_>, listing: &Listing, name: &[u8]) -> Option<Reason> {
        if let Some(u) = dir.untrusted {
            return Some(Reason::Untrusted(u.0.clone()));
        }
        layout::sidecar_name(name, &mut self.sname);
        let sname = &self.sname[..self.sname.len() - 1];
        // The listing says already when there is no sidecar (no open).
        match listing.find(sname).map(|e| e.kind) {
            None => return Some(Reason::NoSidecar),
            Some(Kind::File) => {}
            Some(k) => return Some(Reason::SidecarUnreadable(format!("a {}", k.name()))),
        }
        if let Err(e) = fsx::read_at(dir.fd, sname, &mut self.sbuf, MAX_SIDECAR) {
            let reason = if e.kind() == io::ErrorKind::NotFound {
                Reason::NoSidecar
            } else {
                Reason::SidecarUnreadable(e.to_string())
            };
            return Some(reason);
        }
        let rel = Rel(dir.rel, name);
        let is_rel = |p: &str| {
            let p = p.as_bytes();
            p.len() == dir.rel.len() + name.len() && p.starts_with(dir.rel) && p.ends_with(name)
        };
        let sc = match judge::judge_sidecar(&self.sbuf, self.fingerprint, is_rel) {
            Ok(sc) => sc,
            Err(reason) => return Some(reason),
        };
        // judge_sidecar matched the path, so it is UTF-8.
        let path = rel.to_string_exact().unwrap_or_default();
        let verdict = match fsx::read_at(
            dir.fd,
            cstr_buf(&mut self.cname, name),
            &mut self.cbuf,
            MAX_CACHE_FILE,
        ) {
            Err(e) => Err(Reason::Unreadable(e.to_string())),
            Ok(_) => judge::judge_bytes(&sc, &self.cbuf),
        };
        match verdict {
            Ok(()) => {
                self.cands.push((path, sc));
                None
            }
            Err(reason) => {
                self.rejected.push(path);
                Some(reason)
            }
        }
    }

    /// Judge the sets of the files trusted on their own; keep the whole
    /// ones, remove the others.
    fn resolve(&mut self) {
        let Some(root) = self.root.take() else { return };
        let cands = std::mem::take(&mut self.cands);
        let views: Vec<Candidate<'_>> = cands
            .iter()
            .map(|(p, sc)| Candidate {
                path: p.as_str(),
                sidecar: sc,
            })
            .collect();
        let verdicts = judge::resolve_sets(&views);
        for ((path, _), verdict) in cands.iter().zip(verdicts) {
            match verdict {
                None => {
                    info!("kept {path}: signed for this launch");
                    self.report.kept.push(PathBuf::from(path));
                }
                Some(mut reason) => {
                    if let Reason::SetIncomplete { member, why } = &mut reason {
                        if *why == MemberWhy::NotTrusted
                            && !self.rejected.iter().any(|r| r == member)
                            && !exists(root.as_fd(), member)
                        {
                            *why = MemberWhy::Missing;
                        }
                    }
                    let (parent, name) = split(path);
                    match fsx::open_dir_path(root.as_fd(), Path::new(parent)) {
                        Ok(d) => {
                            let prefix = &path.as_bytes()[..path.len() - name.len()];
                            self.remove(d.as_fd(), prefix, name.as_bytes(), &reason);
                        }
                        Err(e) => {
                            self.report.left += 1;
                            warn!("cannot remove {path} ({reason}): open directory {parent}: {e}");
                        }
                    }
                }
            }
        }
        self.root = Some(root);
    }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

fn exists(root: BorrowedFd<'_>, rel: &str) -> bool {
    let (parent, name) = split(rel);
    match fsx::open_dir_path(root, Path::new(parent)) {
        Ok(d) => fsx::lstat_at(d.as_fd(), name.as_bytes()).is_ok(),
        Err(_) => false,
    }
}
