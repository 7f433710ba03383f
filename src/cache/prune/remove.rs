//! Prune's removals: what the first pass plans to remove goes, a whole
//! directory with one rename into the trash or entry by entry, a cache
//! file with its sidecar; each removal one line, counted by its reason.

use super::*;

impl State<'_, '_> {
    /// Remove what the plan says: the whole directory with one rename into
    /// the trash when everything in it goes, else entry by entry.
    pub(super) fn carry_out(
        &mut self,
        dir: &DirView<'_>,
        listing: &Listing,
        plan: &[(usize, Act)],
        whole: bool,
    ) {
        if whole && self.trash_dir(dir) {
            for (i, act) in plan {
                let name = listing.name(&listing.ents[*i]);
                match act {
                    Act::Cache(reason) => self.log_removed(dir.rel, name, reason),
                    Act::Leftover(why) => {
                        self.report.leftovers += 1;
                        crate::events::Event::RemovedLeftover {
                            path: Rel(dir.rel, name).to_string(),
                            reason: why.to_string(),
                        }
                        .emit();
                    }
                }
            }
        } else {
            for (i, act) in plan {
                let name = listing.name(&listing.ents[*i]);
                match act {
                    Act::Cache(reason) => self.remove(dir.fd, dir.rel, name, reason),
                    Act::Leftover(why) => self.leftover(dir, name, why),
                }
            }
        }
    }

    /// Move the directory being visited into the trash.
    fn trash_dir(&mut self, dir: &DirView<'_>) -> bool {
        let Some((parent, name)) = dir.parent else {
            return false;
        };
        let Some(root) = self.root.take() else {
            return false;
        };
        let moved = self.take_to_trash(root.as_fd(), parent, name, dir.rel);
        self.root = Some(root);
        moved
    }

    /// Move the directory `name` of `parent` (`rel`, for the log) into the
    /// trash, opening the trash first if needed.
    pub(super) fn take_to_trash(
        &mut self,
        root: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        name: &[u8],
        rel: &[u8],
    ) -> bool {
        if let TrashState::Unopened = self.trash {
            self.trash = match Trash::open(root) {
                Ok(t) => TrashState::Open(t),
                Err(e) => {
                    crate::events::Event::TrashUnusable {
                        error: e.to_string(),
                    }
                    .emit();
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
                crate::events::Event::TrashMoveFailed {
                    dir: Rel(rel, b"").to_string(),
                    error: e.to_string(),
                }
                .emit();
                false
            }
        }
    }

    /// The line of a removed cache file (at debug level, but for one in a
    /// directory another user can write, one changed after it was signed
    /// and one the launch's own rule refuses), counted by its reason's
    /// kind for the summary.
    pub(super) fn log_removed(&mut self, rel: &[u8], name: &[u8], reason: &Reason) {
        self.report.removed += 1;
        let (key, words) = reason.kind();
        self.reasons.add(key, words);
        let path = Rel(rel, name).to_string();
        let reason = reason.to_string();
        if key == "untrusted" {
            crate::events::Event::RemovedUntrusted { path, reason }.emit();
        } else {
            let own = key == "refused" || key == "changed";
            crate::events::Event::Removed { path, reason, own }.emit();
        }
    }

    fn leftover(&mut self, dir: &DirView<'_>, name: &[u8], why: &str) {
        self.remove_leftover(dir, name, why, |path, reason| {
            crate::events::Event::RemovedLeftover { path, reason }
        });
    }

    /// Unlink `name` of `dir`, counted as a leftover, with one line: the
    /// `removed` event, or why it could not be removed.
    fn remove_leftover(
        &mut self,
        dir: &DirView<'_>,
        name: &[u8],
        why: &str,
        removed: impl FnOnce(String, String) -> crate::events::Event,
    ) {
        let path = Rel(dir.rel, name).to_string();
        match fsx::unlink_at(dir.fd, cstr_buf(&mut self.sname, name)) {
            Ok(()) => {
                self.report.leftovers += 1;
                removed(path, why.to_string()).emit();
            }
            Err(e) => crate::events::Event::CannotRemove {
                path,
                reason: why.to_string(),
                error: e.to_string(),
            }
            .emit(),
        }
    }

    /// A symlink to a directory inside the tree: the engine would load
    /// cache files through it that keepwrap never judges (the walk does not
    /// follow symlinks). Remove the link itself, never its target.
    pub(super) fn symlinked_dir(&mut self, dir: &DirView<'_>, name: &[u8]) {
        let cname = cstr_buf(&mut self.sname, name);
        // Following the link only to look at what it points to.
        let to_dir = nix::sys::stat::fstatat(dir.fd, cname, nix::fcntl::AtFlags::empty())
            .is_ok_and(|st| Kind::from_mode(st.st_mode) == Kind::Dir);
        if !to_dir {
            return;
        }
        let why = "a symlink to a directory, through which the engine would load cache files keepwrap does not judge";
        self.remove_leftover(dir, name, why, |path, reason| {
            crate::events::Event::RemovedSymlink { path, reason }
        });
    }

    /// Remove cache file `name` of `dir` (and its sidecar), one log line.
    pub(super) fn remove(&mut self, fd: BorrowedFd<'_>, rel: &[u8], name: &[u8], reason: &Reason) {
        match fsx::unlink_at(fd, cstr_buf(&mut self.cname, name)) {
            Ok(()) => self.log_removed(rel, name, reason),
            Err(e) => {
                self.report.left += 1;
                crate::events::Event::CannotRemove {
                    path: Rel(rel, name).to_string(),
                    reason: reason.to_string(),
                    error: e.to_string(),
                }
                .emit();
                return;
            }
        }
        layout::sidecar_name(name, &mut self.sname);
        let sname = &self.sname[..self.sname.len() - 1];
        if let Err(e) = fsx::unlink_at(fd, sname) {
            if e.raw_os_error() != Some(nix::errno::Errno::EISDIR as i32) {
                crate::events::Event::CannotRemoveSidecar {
                    path: Rel(rel, sname).to_string(),
                    error: e.to_string(),
                }
                .emit();
            }
        }
    }
}
