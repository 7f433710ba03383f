//! Prune: before the engine starts, remove every cache file this launch must
//! not load.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::fsx::{self, Kind};
use super::judge::{self, Candidate, MemberWhy, Reason};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::sidecar::{Head, Sidecar};
use super::{ForeignSet, PruneReport};

/// Moves a whole set signed for another launch out of the tree (into the
/// store). On error every member must be back in place: prune removes them.
pub type Stash<'s> = &'s mut dyn FnMut(BorrowedFd<'_>, &ForeignSet) -> io::Result<()>;

/// Larger sidecars are not read (a set of 10,000 members is ~1.3 MB).
pub const MAX_SIDECAR: u64 = 64 << 20;
/// Larger cache files are not read (real ones are KB to a few MB).
pub const MAX_CACHE_FILE: u64 = 256 << 20;

struct State<'f, 's> {
    fingerprint: &'f str,
    /// Where whole sets of other launches go; None: they are removed.
    stash: Option<Stash<'s>>,
    /// Files of other launches trusted on their own, waiting for their set.
    foreign: Vec<(String, Sidecar)>,
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
}

pub fn prune(root: &Path, fingerprint: &str, stash: Option<Stash<'_>>) -> io::Result<PruneReport> {
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
        stash,
        foreign: Vec::new(),
        report: PruneReport::default(),
        sname: Vec::with_capacity(64),
        sbuf: Vec::with_capacity(4096),
        cbuf: Vec::new(),
        cname: Vec::with_capacity(64),
        cands: Vec::new(),
        rejected: Vec::new(),
    };
    layout::walk(fd, &mut |dir, listing| st.visit(dir, listing));
    st.resolve(&root_fd);
    let r = &st.report;
    if r.stored > 0 {
        info!(
            "prune: kept {}, stored {}, removed {} cache files and {} leftovers{}",
            r.kept.len(),
            r.stored,
            r.removed,
            r.leftovers,
            if r.left > 0 {
                format!(", left {} that could not be removed", r.left)
            } else {
                String::new()
            }
        );
    } else if r.left > 0 {
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

impl State<'_, '_> {
    fn visit(&mut self, dir: &DirView<'_>, listing: &Listing) {
        for e in &listing.ents {
            let name = listing.name(e);
            match layout::role(name) {
                Role::Cache => match e.kind {
                    Kind::Dir => {
                        warn!(
                            "left {}: a directory named *.json, which keepwrap does not remove",
                            Rel(dir.rel, name)
                        );
                        self.report.left += 1;
                    }
                    Kind::File => self.judge_file(dir, name),
                    k => self.remove(dir.fd, dir.rel, name, &Reason::NotRegular(k)),
                },
                Role::Sidecar if e.kind != Kind::Dir => {
                    let stem = &name[..name.len() - layout::SIDECAR_EXT.len()];
                    self.cname.clear();
                    self.cname.extend_from_slice(stem);
                    self.cname.extend_from_slice(layout::CACHE_EXT);
                    let beside = listing.find(&self.cname).map(|c| c.kind);
                    if beside.is_none() || beside == Some(Kind::Dir) {
                        self.leftover(dir, name, "orphan sidecar (no cache file beside)");
                    }
                }
                Role::AutotunerTmp if e.kind != Kind::Dir => {
                    self.leftover(dir, name, "FlashInfer temp file left by a crash");
                }
                Role::KeepwrapTmp if e.kind != Kind::Dir => {
                    self.leftover(dir, name, "keepwrap temp file left by a crash");
                }
                _ => {}
            }
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

    /// Remove cache file `name` of `dir` (and its sidecar), one log line.
    fn remove(&mut self, fd: BorrowedFd<'_>, rel: &[u8], name: &[u8], reason: &Reason) {
        match fsx::unlink_at(fd, cstr_buf(&mut self.cname, name)) {
            Ok(()) => {
                self.report.removed += 1;
                if matches!(reason, Reason::Untrusted(_)) {
                    warn!("removed {}: {}", Rel(rel, name), reason);
                } else {
                    info!("removed {}: {}", Rel(rel, name), reason);
                }
            }
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

    fn judge_file(&mut self, dir: &DirView<'_>, name: &[u8]) {
        if let Some(u) = dir.untrusted {
            return self.remove(dir.fd, dir.rel, name, &Reason::Untrusted(u.0.clone()));
        }
        layout::sidecar_name(name, &mut self.sname);
        let sname = &self.sname[..self.sname.len() - 1];
        if let Err(e) = fsx::read_at(dir.fd, sname, &mut self.sbuf, MAX_SIDECAR) {
            let reason = if e.kind() == io::ErrorKind::NotFound {
                Reason::NoSidecar
            } else {
                Reason::SidecarUnreadable(e.to_string())
            };
            return self.remove(dir.fd, dir.rel, name, &reason);
        }
        let rel = Rel(dir.rel, name);
        let is_rel = |p: &str| {
            let p = p.as_bytes();
            p.len() == dir.rel.len() + name.len() && p.starts_with(dir.rel) && p.ends_with(name)
        };
        let mut foreign = false;
        let sc = match judge::judge_sidecar(&self.sbuf, self.fingerprint, is_rel) {
            Ok(sc) => sc,
            Err(Reason::OtherLaunch(fp8)) if self.stash.is_some() => {
                // Judge it for its own launch: a whole set may be stored.
                let own = serde_json::from_slice::<Head<'_>>(&self.sbuf)
                    .ok()
                    .and_then(|h| h.fingerprint.map(|f| f.into_owned()))
                    .unwrap_or_default();
                match judge::judge_sidecar(&self.sbuf, &own, is_rel) {
                    Ok(sc) => {
                        foreign = true;
                        sc
                    }
                    Err(reason) => {
                        let reason = Reason::OtherLaunchBad(fp8, Box::new(reason));
                        return self.remove(dir.fd, dir.rel, name, &reason);
                    }
                }
            }
            Err(reason) => return self.remove(dir.fd, dir.rel, name, &reason),
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
            Ok(()) if foreign => self.foreign.push((path, sc)),
            Ok(()) => self.cands.push((path, sc)),
            Err(reason) if foreign => {
                let fp8 = sc.fingerprint.chars().take(8).collect();
                let reason = Reason::OtherLaunchBad(fp8, Box::new(reason));
                self.remove(dir.fd, dir.rel, name, &reason);
            }
            Err(reason) => {
                self.rejected.push(path);
                self.remove(dir.fd, dir.rel, name, &reason);
            }
        }
    }

    /// Judge the sets of the files trusted on their own; keep the whole
    /// ones, remove the others.
    fn resolve(&mut self, root: &OwnedFd) {
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
        self.resolve_foreign(root);
    }

    /// Remove the cache file at `path` (relative to the root).
    fn remove_path(&mut self, root: &OwnedFd, path: &str, reason: &Reason) {
        let (parent, name) = split(path);
        match fsx::open_dir_path(root.as_fd(), Path::new(parent)) {
            Ok(d) => {
                let prefix = &path.as_bytes()[..path.len() - name.len()];
                self.remove(d.as_fd(), prefix, name.as_bytes(), reason);
            }
            Err(e) => {
                self.report.left += 1;
                warn!("cannot remove {path} ({reason}): open directory {parent}: {e}");
            }
        }
    }

    /// Sets of other launches: store the whole ones, remove the others.
    fn resolve_foreign(&mut self, root: &OwnedFd) {
        let foreign = std::mem::take(&mut self.foreign);
        if foreign.is_empty() {
            return;
        }
        let views: Vec<Candidate<'_>> = foreign
            .iter()
            .map(|(p, sc)| Candidate {
                path: p.as_str(),
                sidecar: sc,
            })
            .collect();
        let verdicts = judge::resolve_sets(&views);
        let mut whole: Vec<&Sidecar> = Vec::new();
        for ((path, sc), verdict) in foreign.iter().zip(verdicts) {
            let fp8: String = sc.fingerprint.chars().take(8).collect();
            match verdict {
                None => {
                    if !whole.iter().any(|w| w.set.id == sc.set.id) {
                        whole.push(sc);
                    }
                }
                Some(reason) => {
                    let reason = Reason::OtherLaunchBad(fp8, Box::new(reason));
                    self.remove_path(root, path, &reason);
                }
            }
        }
        for sc in whole {
            let set = ForeignSet {
                fingerprint: sc.fingerprint.clone(),
                set: sc.set.clone(),
                signed_at: sc.signed_at,
            };
            let fp8: String = sc.fingerprint.chars().take(8).collect();
            let stash = self
                .stash
                .as_mut()
                .expect("foreign files only with a stash");
            match stash(root.as_fd(), &set) {
                Ok(()) => {
                    for m in &set.set.members {
                        info!(
                            "stored {}: signed for another launch (fingerprint {fp8}...)",
                            m.path
                        );
                    }
                    self.report.stored += set.set.members.len();
                }
                Err(e) => {
                    warn!(
                        "cannot store the {} cache files signed for launch {fp8}...: {e}; removing them",
                        set.set.members.len()
                    );
                    for m in &set.set.members {
                        self.remove_path(root, &m.path, &Reason::OtherLaunch(fp8.clone()));
                    }
                }
            }
        }
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
