//! Recovery: finish or undo what a killed keepwrap left halfway.

use super::*;

impl Store {
    /// Finish or undo what a killed keepwrap left halfway. Run under the
    /// lock, before prune. Returns the number of sets recovered. What a
    /// keepwrap killed mid-eviction left to delete (`trash-*`), and the
    /// staging a killed fleet restore left (moved into the trash), are not
    /// deleted here (it grows with what was left, and the engine must not
    /// wait for it): [`Store::leftover_trash`] hands it over, to delete
    /// after the start.
    pub fn recover(&self) -> usize {
        let mut n = 0;
        if let Ok(list) = fsx::list_dir(self.store.as_fd()) {
            // Opened once, when the store has an entry.
            let mut sets = None;
            for (name, _) in list {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                if let Some((fp, _)) = name.split_once(".in-") {
                    self.recover_staging(&name, fp);
                    n += 1;
                } else if is_fp(&name) && self.recover_flat_entry(&mut sets, &name) {
                    n += 1;
                }
            }
        }
        if let Ok(list) = fsx::list_dir(self.state.as_fd()) {
            for (name, kind) in list {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                if let Some(fp) = name.strip_prefix("restoring-") {
                    self.recover_restoring(&name, fp);
                    n += 1;
                } else if name.starts_with("trash-") {
                    self.leftover.borrow_mut().push(name);
                } else if kind == fsx::Kind::Dir && is_stale_staging(&name) {
                    // Out of the way under the lock (no later launch can be
                    // using it), deleted after the start with the trash.
                    let trash = format!("trash-{}", fsx::unique_name());
                    let state = self.state.as_fd();
                    if fsx::rename_between(state, name.as_str(), state, trash.as_str()).is_ok() {
                        crate::events::Event::FleetStaleStaging {
                            dir: self.root().join(STATE_DIR).join(&name),
                        }
                        .emit();
                        self.leftover.borrow_mut().push(trash);
                    }
                } else if fsx::is_keepwrap_tmp(name.as_bytes()) {
                    let _ = fsx::unlink_at(self.state.as_fd(), name.as_bytes());
                }
            }
        }
        n
    }

    /// A flat stash killed between its two renames (the directory into
    /// `store/<fp>`, then the launch's set manifest into it as its
    /// `.set.json`) left an entry without `.set.json` while that manifest
    /// is still among the set manifests. Undo the stash: the directory
    /// goes back to its place whole, with whatever was planted in it
    /// before the move (which its restore would find "not the set's" and
    /// delete with the entry), and prune judges the set again. When it
    /// cannot go back (its place taken), the entry stays as it is. True
    /// when the entry was such a one.
    fn recover_flat_entry(&self, sets: &mut Option<Option<OwnedFd>>, fp: &str) -> bool {
        let sets = sets.get_or_insert_with(|| cache::open_sets(self.root_fd.as_fd(), false).ok());
        let Some(sets) = sets else {
            return false;
        };
        if !fsx::exists_at(sets.as_fd(), cache::manifest_name(fp).as_str()) {
            return false;
        }
        let Ok(dir) = fsx::open_dir_at(self.store.as_fd(), fp) else {
            return false;
        };
        if fsx::exists_at(dir.as_fd(), MANIFEST) {
            return false;
        }
        let Ok(set) = cache::read_manifest(Some(sets.as_fd()), fp, self.shape) else {
            return false;
        };
        // Only a flat entry (its first member's file right inside it): a
        // tree entry whose `.set.json` went is not one a stash left.
        if !is_flat(dir.as_fd(), &set) {
            return false;
        }
        let Some(man) = flat_manifest(set, now_secs(), self.shape) else {
            return false;
        };
        drop(dir);
        match self.unstage_flat(self.store.as_fd(), fp, &man, false) {
            Ok(k) => {
                crate::events::Event::RecoveryStoreUndone {
                    fingerprint: fp.to_string(),
                    files: k,
                }
                .emit();
                // Its place was taken (by a directory the engine made
                // anew): its members went back one by one; what else it
                // holds goes where its name is free, and the entry only
                // when nothing is left in it.
                if let (Ok(from), Some(to)) = (
                    fsx::open_dir_at(self.store.as_fd(), fp),
                    man.origin()
                        .and_then(|o| fsx::open_dir_path(self.root_fd.as_fd(), Path::new(o)).ok()),
                ) {
                    super::stash::move_entries(from.as_fd(), to.as_fd());
                    let _ = nix::unistd::unlinkat(
                        self.store.as_fd(),
                        fp,
                        nix::unistd::UnlinkatFlags::RemoveDir,
                    );
                }
            }
            Err(e) => crate::events::Event::RecoveryStoreFailed {
                fingerprint: fp.to_string(),
                error: e.to_string(),
            }
            .emit(),
        }
        let _ = fsx::fsync_dir(self.store.as_fd());
        true
    }

    /// The eviction trash [`Store::recover`] found, to delete with
    /// [`Store::remove_evicted`] once the engine has started.
    pub fn leftover_trash(&self) -> Evicted {
        Evicted {
            entries: 0,
            trash: std::mem::take(&mut *self.leftover.borrow_mut()),
        }
    }

    /// The directory `up` below `root`, kept open for the next set.
    pub(super) fn up_dir(
        &self,
        root: BorrowedFd<'_>,
        up: &str,
    ) -> io::Result<std::sync::Arc<OwnedFd>> {
        let mut cached = self.updir.borrow_mut();
        if let Some((p, fd)) = cached.as_ref() {
            if p == up {
                return Ok(fd.clone());
            }
        }
        let fd = std::sync::Arc::new(fsx::open_dir_path(root, Path::new(up))?);
        *cached = Some((up.to_string(), fd.clone()));
        Ok(fd)
    }

    /// `.keepwrap/sets`, opened (and created) once.
    pub(super) fn sets(&self) -> io::Result<BorrowedFd<'_>> {
        self.sets
            .get_or_init(|| cache::open_sets(self.root_fd.as_fd(), true).ok())
            .as_ref()
            .map(AsFd::as_fd)
            .ok_or_else(|| io::Error::other(format!("cannot open {STATE_DIR}/sets")))
    }

    /// The manifest of a flat staging or restoring directory `dir` of
    /// launch `fp`: its own `.set.json`, or, when the directory moved and
    /// its manifest not yet, the launch's set manifest. The bool: it is
    /// inside.
    pub(super) fn flat_or_tree_manifest(
        &self,
        dir: BorrowedFd<'_>,
        shown: &str,
        fp: &str,
    ) -> Option<(Manifest, bool)> {
        if let Some(man) = read_manifest_at(dir, shown, self.shape) {
            return Some((man, true));
        }
        if !holds_cache_files(dir, self.shape) {
            return None;
        }
        let sets = self.sets().ok();
        let m = cache::read_manifest(sets, fp, self.shape).ok()?;
        flat_manifest(m, now_secs(), self.shape).map(|man| (man, false))
    }

    /// A set was being stored: put every member back at its path.
    pub(super) fn recover_staging(&self, name: &str, fp: &str) {
        let Ok(dir) = fsx::open_dir_at(self.store.as_fd(), name) else {
            return;
        };
        let shown = format!("{STATE_DIR}/store/{name}");
        let Some((man, inside)) = self.flat_or_tree_manifest(dir.as_fd(), &shown, fp) else {
            // A tree's manifest is written before any member moves; a flat
            // directory without one is put back by its launch's manifest.
            if holds_cache_files(dir.as_fd(), self.shape) {
                crate::events::Event::RecoveryStoreFailed {
                    fingerprint: fp.to_string(),
                    error: ("it has no manifest to put it back by").to_string(),
                }
                .emit();
            }
            fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
            return;
        };
        if man.flat {
            drop(dir);
            match self.unstage_flat(self.store.as_fd(), name, &man, inside) {
                Ok(k) => crate::events::Event::RecoveryStoreUndone {
                    fingerprint: fp.to_string(),
                    files: k,
                }
                .emit(),
                Err(e) => crate::events::Event::RecoveryStoreFailed {
                    fingerprint: fp.to_string(),
                    error: e.to_string(),
                }
                .emit(),
            }
            fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
            let _ = fsx::fsync_dir(self.store.as_fd());
            return;
        }
        let root = Side::tree(self.root_fd.as_fd(), man.shape);
        let taken = conflicts(Side::tree(dir.as_fd(), man.shape), root, &man.set.members);
        if !taken.is_empty() {
            crate::events::Event::RecoveryStoreTaken {
                fingerprint: fp.to_string(),
                taken: taken[0].to_string(),
            }
            .emit();
        } else {
            let whole = self.unstage_dirs(dir.as_fd(), &man);
            match move_members(Side::tree(dir.as_fd(), man.shape), root, &man.set.members) {
                Ok(k) => crate::events::Event::RecoveryStoreUndone {
                    fingerprint: fp.to_string(),
                    files: k + whole,
                }
                .emit(),
                Err(e) => crate::events::Event::RecoveryStoreFailed {
                    fingerprint: fp.to_string(),
                    error: e.to_string(),
                }
                .emit(),
            }
        }
        fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
        let _ = fsx::fsync_dir(self.store.as_fd());
    }

    /// Put back whole, with one rename, each directory of the staging tree
    /// `from` whose place in the tree is free (an empty directory there
    /// removed first): a directory that moved in whole returns as it was,
    /// with whatever was planted in it before the move (the staging tree
    /// is removed after). A directory above them that a stash moved whole
    /// (`<version>/<sm>/`) goes back first, whole, or entry by entry into
    /// one made anew meanwhile ([`super::stash::put_back_ups`]), so that
    /// what else it holds is not removed with the staging tree. Returns
    /// the number of member files moved.
    fn unstage_dirs(&self, from: BorrowedFd<'_>, man: &Manifest) -> usize {
        let mut moved = 0;
        // A directory above the set's moved whole by the stash goes back
        // whole (or its entries one by one into one made anew), with
        // whatever else it holds.
        let parents = member_parents(man);
        let staged = |p: &str| fsx::exists_at(from, Path::new(p));
        // A member's two files (the cache file, its sidecar).
        let files_in = |parent: &str| {
            let n = man
                .set
                .members
                .iter()
                .filter(|m| split(&m.path).0 == parent);
            2 * n.count()
        };
        let before: Vec<&str> = parents.iter().copied().filter(|p| staged(p)).collect();
        super::stash::put_back_ups(self.root_fd.as_fd(), from, parents.iter().copied());
        for parent in before.into_iter().filter(|p| !staged(p)) {
            moved += files_in(parent);
        }
        for parent in parents {
            let (up, base) = split(parent);
            if up.is_empty() || !fsx::exists_at(from, Path::new(parent)) {
                continue;
            }
            let (Ok(src), Ok(dst)) = (
                fsx::open_dir_path(from, Path::new(up)),
                // (A stash may have moved the directory above whole.)
                fsx::ensure_dir_path(self.root_fd.as_fd(), Path::new(up), DIR_MODE),
            ) else {
                continue;
            };
            if super::stash::put_back_up(src.as_fd(), dst.as_fd(), base) {
                moved += files_in(parent);
            }
        }
        moved
    }

    /// Put the flat directory `name` of `parent` (staging, restoring) back
    /// at its place in the tree, its manifest (`inside` it) back among the
    /// set manifests: the directory with one rename, or, when its place is
    /// taken by a directory, file by file unless a file is in the way.
    /// Returns the number of files moved.
    pub(super) fn unstage_flat(
        &self,
        parent: BorrowedFd<'_>,
        name: &str,
        man: &Manifest,
        inside: bool,
    ) -> io::Result<usize> {
        let origin = man
            .origin()
            .ok_or_else(|| io::Error::other("the set is not in one directory"))?;
        let dir = fsx::open_dir_at(parent, name)?;
        if inside {
            let to = cache::manifest_name(&man.set.fingerprint);
            let sets = self.sets()?;
            if fsx::rename_between(dir.as_fd(), MANIFEST, sets, to.as_str()).is_err() {
                let _ = fsx::unlink_at(dir.as_fd(), MANIFEST);
            }
            crate::failpoint::hit("store");
        }
        let (up, base) = split(origin);
        let dst = fsx::ensure_dir_path(self.root_fd.as_fd(), Path::new(up), DIR_MODE)?;
        // An empty directory left at its place (its files removed one by
        // one) does not stand in the way.
        let _ = nix::unistd::unlinkat(dst.as_fd(), base, nix::unistd::UnlinkatFlags::RemoveDir);
        match fsx::rename_noreplace(parent, name, dst.as_fd(), base) {
            Ok(()) => {
                let _ = fsx::fsync_dir(dst.as_fd());
                Ok(man.set.members.len() * 2)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let from = Side {
                    fd: dir.as_fd(),
                    flat: true,
                    shape: man.shape,
                };
                let root = Side::tree(self.root_fd.as_fd(), man.shape);
                if let Some(t) = conflicts(from, root, &man.set.members).first() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{t} is taken"),
                    ));
                }
                move_members(from, root, &man.set.members)
            }
            Err(e) => Err(e),
        }
    }

    /// A set was being restored: finish moving it in place; if a path is
    /// taken, put it back in the store.
    pub(super) fn recover_restoring(&self, name: &str, fp: &str) {
        let Ok(dir) = fsx::open_dir_at(self.state.as_fd(), name) else {
            return;
        };
        let shown = format!("{STATE_DIR}/{name}");
        let Some((man, inside)) = self.flat_or_tree_manifest(dir.as_fd(), &shown, fp) else {
            // Every member moved out: only the empty directories are left.
            fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
            return;
        };
        if man.flat {
            drop(dir);
            match self.unstage_flat(self.state.as_fd(), name, &man, inside) {
                Ok(k) => {
                    crate::events::Event::RecoveryRestoreFinished {
                        fingerprint: fp.to_string(),
                        files: k,
                    }
                    .emit();
                    fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
                    let _ = fsx::fsync_dir(self.state.as_fd());
                    return;
                }
                Err(e) => crate::events::Event::RecoveryRestoreFailed {
                    fingerprint: fp.to_string(),
                    error: e.to_string(),
                }
                .emit(),
            }
            self.unrestore(name, &man);
            return;
        }
        let root = Side::tree(self.root_fd.as_fd(), man.shape);
        let taken = conflicts(Side::tree(dir.as_fd(), man.shape), root, &man.set.members);
        if taken.is_empty() {
            match move_members(Side::tree(dir.as_fd(), man.shape), root, &man.set.members) {
                Ok(k) => {
                    crate::events::Event::RecoveryRestoreFinished {
                        fingerprint: fp.to_string(),
                        files: k,
                    }
                    .emit();
                    fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
                    let _ = fsx::fsync_dir(self.state.as_fd());
                    return;
                }
                Err(e) => crate::events::Event::RecoveryRestoreFailed {
                    fingerprint: fp.to_string(),
                    error: e.to_string(),
                }
                .emit(),
            }
        } else {
            crate::events::Event::RecoveryRestoreTaken {
                fingerprint: fp.to_string(),
                taken: taken[0].to_string(),
            }
            .emit();
        }
        self.unrestore(name, &man);
    }

    /// Move the members already in place back into `restoring-<fp>` (and a
    /// flat set's manifest) and return it to `store/<fp>`.
    pub(super) fn unrestore(&self, name: &str, man: &Manifest) {
        let Ok(dir) = fsx::open_dir_at(self.state.as_fd(), name) else {
            return;
        };
        let side = Side::of(dir.as_fd(), man);
        // Only files the set does not hold any more, and only when they are
        // its bytes (the cache file) or its sidecar.
        let placed: Vec<Member> = man
            .set
            .members
            .iter()
            .filter(|m| {
                let [json, _] = names(split(&m.path).1);
                let held = side
                    .dir(&m.path)
                    .is_some_and(|d| fsx::exists_at(d.fd(), json.as_c_str()));
                !held && self.in_place_matches(m, man.shape)
            })
            .cloned()
            .collect();
        let _ = move_members(Side::tree(self.root_fd.as_fd(), man.shape), side, &placed);
        if man.flat && !fsx::exists_at(dir.as_fd(), MANIFEST) {
            if let Ok(sets) = self.sets() {
                let from = cache::manifest_name(&man.set.fingerprint);
                let _ = fsx::rename_noreplace(sets, from.as_str(), dir.as_fd(), MANIFEST);
            }
        }
        drop(dir);
        match fsx::rename_noreplace(
            self.state.as_fd(),
            name,
            self.store.as_fd(),
            man.set.fingerprint.as_str(),
        ) {
            Ok(()) => {
                let _ = fsx::fsync_dir(self.store.as_fd());
            }
            Err(_) => {
                fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
            }
        }
        let _ = fsx::fsync_dir(self.state.as_fd());
    }

    pub(super) fn in_place_matches(&self, m: &Member, shape: Shape) -> bool {
        let Some(d) = member_dir(self.root_fd.as_fd(), &m.path, shape) else {
            return false;
        };
        let [json, _] = names(split(&m.path).1);
        let mut buf = Vec::new();
        fsx::read_at(d.as_fd(), json.as_c_str(), &mut buf, cache::MAX_CACHE_FILE).is_ok()
            && buf.len() as u64 == m.size
            && cache::sha256_hex(&buf) == m.sha256
    }
}

/// A fleet restore's staging directory in `<root>/.keepwrap`, before its
/// pid (`crate::fleet` makes it).
pub const FLEET_STAGING: &str = "fleet-staging.";

/// Whether `name`, an entry of `.keepwrap`, is the staging directory of a
/// restore that a killed keepwrap left (when keepwrap is not PID 1, the
/// next launch's pid differs): `fleet-staging.<pid>` whose pid is no live
/// keepwrap's, nor this one. The store's recovery, with the root's lock
/// held, moves each into its trash (deleted once the engine has started).
fn is_stale_staging(name: &str) -> bool {
    name.strip_prefix(FLEET_STAGING)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| pid != std::process::id() && !keepwrap_lives(pid))
}

/// Whether `pid` is a live keepwrap process (its command name says so).
fn keepwrap_lives(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim_ascii_end() == b"keepwrap",
        // Not in /proc (or no /proc): any process of that pid, even one
        // not ours to signal, counts as keepwrap.
        Err(_) => i32::try_from(pid).map_or(true, |p| {
            !matches!(crate::sys::kill(p, 0), Err(nix::errno::Errno::ESRCH))
        }),
    }
}
