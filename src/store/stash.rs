//! Storing: a whole set moves from the cache tree into the store.

use std::collections::HashMap;

use super::*;

impl Store {
    /// Move a whole set signed for another launch into the store (for
    /// [`cache::prune_stashing`]). On error every member is back in place.
    pub fn stash(&self, root: BorrowedFd<'_>, set: &ForeignSet) -> io::Result<()> {
        if !is_fp(&set.manifest.fingerprint) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the fingerprint is not 64 hex digits",
            ));
        }
        if let Some(dir) = &set.dir {
            // A directory right below the root (vLLM's `<sha256>/` under
            // VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR) moves file by file.
            if set.checked.len() == set.manifest.members.len() && dir.contains('/') {
                return self.stash_dir(root, set, dir);
            }
        }
        let staging = format!("{}.in-{}", set.manifest.fingerprint, fsx::unique_name());
        let dir = fsx::mkdir_open_at(self.store.as_fd(), staging.as_str(), 0o700)?;
        let man = Manifest {
            set: set.manifest.clone(),
            stored_at: now_secs(),
            flat: false,
            shape: self.shape,
        };
        let (from, to) = (
            Side::tree(root, self.shape),
            Side::tree(dir.as_fd(), self.shape),
        );
        let res = write_json(dir.as_fd(), MANIFEST, &man.set)
            .and_then(|()| fsx::fsync_dir(self.store.as_fd()))
            .and_then(|()| {
                // Durable with the rest of the prune's moves (one sync).
                self.unsynced.set(true);
                self.move_in(root, dir.as_fd(), set)
            })
            .and_then(|()| {
                // What enters the store is what was signed: a file the
                // engine replaced meanwhile does not. The very files prune
                // checked (their inode numbers, by directory), else every
                // byte.
                if set.checked.len() == man.set.members.len() {
                    moved_as_checked(dir.as_fd(), set)
                } else {
                    self.verify(dir.as_fd(), &man)
                }
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))
            })
            .and_then(|()| self.install(&staging, &set.manifest.fingerprint));
        if let Err(e) = res {
            // Back in place, whatever was moved: a directory that moved
            // whole as it is (with anything planted in it meanwhile), the
            // rest file by file.
            self.move_out_whole(root, dir.as_fd(), set);
            let _ = move_members(to, from, &man.set.members);
            fsx::remove_tree_at(self.store.as_fd(), staging.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// Move the members of `set` into the staging tree `to`, each at its
    /// path: a directory of `set.whole_dirs` with one rename (prune listed
    /// it: it holds nothing but members and their sidecars, and the
    /// listing after the move proves it still does), the others file by
    /// file. The staging directory's `.set.json` is inside already: a kill
    /// at any point leaves each file in the tree or in staging, and
    /// recovery moves the staged ones back by that manifest, file by file,
    /// whichever way they came.
    fn move_in(
        &self,
        root: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        set: &ForeignSet,
    ) -> io::Result<()> {
        let mut made: HashMap<&str, OwnedFd> = HashMap::new();
        let ups = self.move_in_ups(root, to, set)?;
        for d in &set.whole_dirs {
            let (up, name) = split(d);
            if ups.contains(up) {
                continue;
            }
            let src = self.up_dir(root, up)?;
            let dst = match made.entry(up) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(fsx::ensure_dir_path(to, Path::new(up), DIR_MODE)?)
                }
            };
            fsx::rename_noreplace(src.as_fd(), name, dst.as_fd(), name)?;
            crate::failpoint::hit("store");
        }
        let whole: std::collections::HashSet<&str> =
            set.whole_dirs.iter().map(String::as_str).collect();
        let rest = outside(&set.manifest.members, &whole);
        move_members_with(
            Side::tree(root, self.shape),
            Side::tree(to, self.shape),
            &rest,
            false,
        )
        .map(|_| ())
    }

    /// The directories one level up from the set's whole directories
    /// (`<version>/<sm>/`) that hold nothing but whole directories of the
    /// set: each moves into the staging tree `to` with one rename, its
    /// whole directories with it. Listed before the move and again after
    /// it (in the staging tree, where nothing of the cache tree reaches
    /// it): an entry that is not one of the set's whole directories,
    /// planted before the move or after it, is an error (the caller puts
    /// everything back). Returns the directories moved.
    fn move_in_ups<'a>(
        &self,
        root: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        set: &'a ForeignSet,
    ) -> io::Result<std::collections::HashSet<&'a str>> {
        let mut by_up: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
        for d in &set.whole_dirs {
            let (up, name) = split(d);
            by_up.entry(up).or_default().push(name.as_bytes());
        }
        let mut moved = std::collections::HashSet::new();
        for (up, mut names) in by_up {
            let (top, last) = split(up);
            if top.is_empty() || last.is_empty() {
                continue;
            }
            names.sort_unstable();
            let only_these = |dir: BorrowedFd<'_>| {
                fsx::list_dir(dir).is_ok_and(|list| {
                    list.len() == names.len()
                        && list
                            .iter()
                            .zip(&names)
                            .all(|((n, k), want)| *k == fsx::Kind::Dir && n.as_slice() == *want)
                })
            };
            let Ok(src) = self.up_dir(root, up) else {
                continue;
            };
            if !only_these(src.as_fd()) {
                continue;
            }
            let Ok(from) = fsx::open_dir_path(root, Path::new(top)) else {
                continue;
            };
            let dst = fsx::ensure_dir_path(to, Path::new(top), DIR_MODE)?;
            // The cached descriptor of `up` now reaches into the staging
            // tree: never used for the cache tree again.
            self.updir.borrow_mut().take();
            fsx::rename_noreplace(from.as_fd(), last, dst.as_fd(), last)?;
            crate::failpoint::hit("store");
            moved.insert(up);
            let inside = fsx::open_dir_at(dst.as_fd(), last)?;
            if !only_these(inside.as_fd()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{up}: an entry that is not the set's"),
                ));
            }
        }
        Ok(moved)
    }

    /// Undo [`Store::move_in_ups`]: each directory of the staging tree
    /// `from` one level up from the set's whole directories goes back
    /// whole where its place is free (what it holds goes back with it),
    /// else what it holds entry by entry ([`put_back_up`]).
    fn move_out_ups(&self, root: BorrowedFd<'_>, from: BorrowedFd<'_>, set: &ForeignSet) {
        put_back_ups(root, from, set.whole_dirs.iter().map(String::as_str));
        self.updir.borrow_mut().take();
    }

    /// Undo [`Store::move_in`]'s directory renames: each directory of
    /// `set.whole_dirs` found in the staging tree `from` goes back whole
    /// (when its place is free, an empty directory made there meanwhile
    /// removed first, as a restore does; else its files go back one by one
    /// after).
    fn move_out_whole(&self, root: BorrowedFd<'_>, from: BorrowedFd<'_>, set: &ForeignSet) {
        self.move_out_ups(root, from, set);
        for d in &set.whole_dirs {
            let (up, name) = split(d);
            let (Ok(dst), Ok(src)) = (
                self.up_dir(root, up),
                fsx::open_dir_path(from, Path::new(up)),
            ) else {
                continue;
            };
            // What else it holds (a file planted before the move) goes back
            // with it: the staging tree is removed after.
            put_back_up(src.as_fd(), dst.as_fd(), name);
        }
    }

    /// [`Store::stash`] of a set that is the whole content of directory
    /// `dir` (its members and their sidecars), its bytes just checked by
    /// prune, as a flat entry: the directory moves into the store as
    /// `store/<fp>`, then the launch's set manifest moves into it as its
    /// `.set.json`: two renames, nothing created. The directory moved whole
    /// (one rename) is the set whole; a crash between the two leaves an
    /// entry without `.set.json`, which the next recovery puts back in the
    /// tree by the launch's set manifest still in `.keepwrap/sets`
    /// ([`Store::recover`]; before that, [`Store::entry_manifest`] reads it
    /// by that manifest, and every entry is checked byte by byte before it
    /// leaves the store). When the launch has an entry already (an older set), the
    /// directory moves in as a staging directory, which replaces the entry
    /// once its manifest is inside (a crash before: recovery puts it back
    /// by the set manifest). Nothing is fsynced here: [`Store::sync`] once
    /// after prune.
    pub(super) fn stash_dir(
        &self,
        root: BorrowedFd<'_>,
        set: &ForeignSet,
        dir: &str,
    ) -> io::Result<()> {
        let (parent, name) = split(dir);
        if name.is_empty() || parent.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a directory below the root",
            ));
        }
        let fp = set.manifest.fingerprint.as_str();
        if origin_of(&set.manifest.members) != Some(dir) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the set is not the content of one directory",
            ));
        }
        let sets = self.sets()?;
        let src = self.up_dir(root, parent)?;
        // Straight to its entry; through a staging directory when the
        // launch has one already.
        let staging = match fsx::rename_noreplace(src.as_fd(), name, self.store.as_fd(), fp) {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let staging = format!("{fp}.in-{}", fsx::unique_name());
                fsx::rename_noreplace(src.as_fd(), name, self.store.as_fd(), staging.as_str())?;
                Some(staging)
            }
            Err(e) => return Err(e),
        };
        let at = staging.as_deref().unwrap_or(fp);
        self.unsynced.set(true);
        crate::failpoint::hit("store");
        let res = fsx::open_dir_at(self.store.as_fd(), at).and_then(|moved| {
            // What moved is what prune checked, and nothing else.
            same_as_checked(moved.as_fd(), set.checked.iter())
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            let from = cache::manifest_name(fp);
            fsx::rename_noreplace(sets, from.as_str(), moved.as_fd(), MANIFEST)?;
            crate::failpoint::hit("store");
            match &staging {
                Some(staging) => self.install_with(staging, fp, false),
                None => Ok(()),
            }
        });
        if let Err(e) = res {
            // Back in place: the directory whole, else file by file.
            let man = Manifest {
                set: set.manifest.clone(),
                stored_at: now_secs(),
                flat: true,
                shape: self.shape,
            };
            let inside = fsx::open_dir_at(self.store.as_fd(), at)
                .is_ok_and(|d| fsx::exists_at(d.as_fd(), MANIFEST));
            let _ = self.unstage_flat(self.store.as_fd(), at, &man, inside);
            fsx::remove_tree_at(self.store.as_fd(), at.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// Make what [`Store::stash`] did durable (one fsync of the store and
    /// of the state directory; on ext4 and the like one journal commit).
    /// Nothing to do when nothing moved.
    pub fn sync(&self) {
        if self.unsynced.replace(false) {
            let _ = fsx::fsync_dir(self.store.as_fd());
            let _ = fsx::fsync_dir(self.state.as_fd());
            if let Some(Some(sets)) = self.sets.get() {
                let _ = fsx::fsync_dir(sets.as_fd());
            }
        }
    }

    /// Rename a complete staging directory to `store/<fp>`, replacing an
    /// older entry.
    pub(super) fn install(&self, staging: &str, fp: &str) -> io::Result<()> {
        self.install_with(staging, fp, true)
    }

    /// [`Store::install`]; the store directory fsynced only with `sync`.
    pub(super) fn install_with(&self, staging: &str, fp: &str, sync: bool) -> io::Result<()> {
        match fsx::rename_noreplace(self.store.as_fd(), staging, self.store.as_fd(), fp) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let trash = format!("trash-{}", fsx::unique_name());
                fsx::rename_between(self.store.as_fd(), fp, self.state.as_fd(), trash.as_str())?;
                crate::events::Event::StoreReplaced {
                    fingerprint: fp.to_string(),
                }
                .emit();
                crate::failpoint::hit("store");
                fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
                fsx::rename_noreplace(self.store.as_fd(), staging, self.store.as_fd(), fp)?;
            }
            res => res?,
        }
        crate::failpoint::hit("store");
        if sync {
            fsx::fsync_dir(self.store.as_fd())?;
        }
        Ok(())
    }
}

/// [`put_back_up`] for each directory (`<version>/<sm>`) of the staging
/// tree `from` above the set's directories `dirs`, once each, into the
/// tree `root`, the directory above it (`<version>`) made when gone.
pub(super) fn put_back_ups<'a>(
    root: BorrowedFd<'_>,
    from: BorrowedFd<'_>,
    dirs: impl IntoIterator<Item = &'a str>,
) {
    let ups: std::collections::BTreeSet<&str> = dirs.into_iter().map(|d| split(d).0).collect();
    for up in ups {
        let (top, last) = split(up);
        if top.is_empty() || last.is_empty() || !fsx::exists_at(from, Path::new(up)) {
            continue;
        }
        let (Ok(src), Ok(dst)) = (
            fsx::open_dir_path(from, Path::new(top)),
            fsx::ensure_dir_path(root, Path::new(top), DIR_MODE),
        ) else {
            continue;
        };
        put_back_up(src.as_fd(), dst.as_fd(), last);
    }
}

/// Put the directory `last` of the staging directory `from` back into
/// the tree's directory `to`: whole, with one rename, when its place is
/// free (an empty directory made there meanwhile removed first); else (an
/// engine made it anew and wrote in it) each of its entries with one
/// rename where its name is free there, so that what else it holds (a
/// file or a directory planted in it before or after the move) is not
/// removed with the staging tree. An entry whose name is taken stays for
/// the caller (a set's member: moved back by its manifest, or refused).
/// True when it went back whole.
pub(super) fn put_back_up(from: BorrowedFd<'_>, to: BorrowedFd<'_>, last: &str) -> bool {
    let _ = nix::unistd::unlinkat(to, last, nix::unistd::UnlinkatFlags::RemoveDir);
    match fsx::rename_noreplace(from, last, to, last) {
        Ok(()) => {
            crate::failpoint::hit("store");
            true
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if let (Ok(src), Ok(dst)) = (fsx::open_dir_at(from, last), fsx::open_dir_at(to, last)) {
                move_entries(src.as_fd(), dst.as_fd());
            }
            false
        }
        Err(_) => false,
    }
}

/// Move each entry of the directory `from` into `to` with one rename
/// where its name is free there; the others stay.
pub(super) fn move_entries(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    for (name, _) in fsx::list_dir(from).unwrap_or_default() {
        let _ = fsx::rename_noreplace(from, name.as_slice(), to, name.as_slice());
    }
}

/// [`same_as_checked`] for a set moved member by member into the tree of
/// a staging directory (created by this launch, mode 0700): each directory
/// of it holds exactly the members checked there, each the very file
/// checked.
fn moved_as_checked(staging: BorrowedFd<'_>, set: &ForeignSet) -> Result<(), String> {
    let mut checked: Vec<&(String, [cache::FileId; 2])> = set.checked.iter().collect();
    checked.sort_by(|a, b| split(&a.0).0.cmp(split(&b.0).0));
    for group in checked.chunk_by(|a, b| split(&a.0).0 == split(&b.0).0) {
        let parent = split(&group[0].0).0;
        let dir =
            fsx::open_dir_path(staging, Path::new(parent)).map_err(|e| format!("{parent}: {e}"))?;
        same_as_checked(dir.as_fd(), group.iter().copied())?;
    }
    Ok(())
}

/// Does the moved directory hold exactly the set's members and their
/// sidecars, each the very file prune checked? One listing of the
/// directory (its entries' names and inode numbers, `getdents`), no `lstat`
/// by path where the inode numbers agree.
///
/// Why that is enough. Prune checked each cache file (its stamp or its
/// bytes) and read each sidecar, and recorded the inode of each; then the
/// directory moved into the store by one rename, so that nothing can reach
/// its files through the cache tree any more. This listing, taken after
/// the move, sees every name the directory holds:
/// - a file planted in it, before the move or after it (through its path
///   in the store or a descriptor held open), is an entry that is not the
///   set's, or one too many: refused;
/// - a member replaced by `rename` over it (as the engine saves its files)
///   is its name bound to another inode: the new file is created while the
///   old one still holds its number (a rename over it frees the old inode
///   only when the new one is in place), so the numbers differ: refused
///   (a sidecar's identity is the number prune's listing bound its name
///   to: one that differs is refused whatever an `lstat` says). A
///   member deleted first and then written anew may get the freed number
///   back (ext4 and xfs reuse it) and is then not seen here, like a member
///   rewritten in place (below). Where they differ for
///   another reason (a file system whose listing numbers differ from
///   `stat`'s, such as some overlay set-ups), the entry is `lstat`ed and
///   compared whole (inode, size, modification time), as before;
/// - a member rewritten in place (the same inode) between prune's check
///   and this listing is not seen here (an `lstat` saw it only when its
///   size or modification time changed, and no check sees a write made
///   later through a descriptor opened before). Nothing in the store is
///   trusted on stash's word: before a set leaves the store every byte and
///   every sidecar is checked again ([`Store::verify`]), so such a file
///   never reaches the engine. Only a process of the same user can write
///   them in place (a directory another user can write never reaches the
///   store), and the engine never does: it saves by rename.
pub(super) fn same_as_checked<'a>(
    moved: BorrowedFd<'_>,
    checked: impl ExactSizeIterator<Item = &'a (String, [cache::FileId; 2])>,
) -> Result<(), String> {
    // The expected names, sorted, with the identity checked.
    let mut want: Vec<(CString, cache::FileId, &str)> = Vec::with_capacity(2 * checked.len());
    for (path, ids) in checked {
        for (n, id) in names(split(path).1).into_iter().zip(ids) {
            want.push((n, *id, path.as_str()));
        }
    }
    want.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut seen = vec![false; want.len()];
    // Entries whose inode number is not the one checked: `lstat`ed after.
    let mut recheck = Vec::new();
    let mut stranger = None;
    let mut buf = [0u8; 4096];
    cache::dirents::for_each(moved, &mut buf, &mut |e| {
        let found = want
            .binary_search_by(|w| w.0.as_bytes().cmp(e.name))
            .ok()
            .filter(|&i| !seen[i]);
        let Some(i) = found else {
            stranger = Some(String::from_utf8_lossy(e.name).into_owned());
            return false;
        };
        seen[i] = true;
        if e.ino != want[i].1.ino {
            recheck.push(i);
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if let Some(name) = stranger {
        return Err(format!("{name} is not the set's"));
    }
    let n = seen.iter().filter(|s| **s).count();
    if n != want.len() {
        return Err(format!(
            "{n} entries in the directory, not the {} of the set",
            want.len()
        ));
    }
    for i in recheck {
        let (name, id, path) = &want[i];
        let st = fsx::lstat_at(moved, name.as_c_str()).map_err(|e| format!("{path}: {e}"))?;
        if fsx::Kind::from_mode(st.st_mode) != fsx::Kind::File || cache::FileId::of(&st) != *id {
            return Err(format!("{path}: changed after signing"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A directory holding one member, checked as prune checks it: the
    /// cache file by its `lstat`, the sidecar by the inode number listed.
    fn member() -> (tempfile::TempDir, Vec<(String, [cache::FileId; 2])>) {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("rank_tp0_pp0_dp0.json"), "{}").unwrap();
        std::fs::write(t.path().join("rank_tp0_pp0_dp0.launch"), "{}").unwrap();
        let file = std::fs::symlink_metadata(t.path().join("rank_tp0_pp0_dp0.json")).unwrap();
        let sidecar = std::fs::symlink_metadata(t.path().join("rank_tp0_pp0_dp0.launch")).unwrap();
        let ids = [
            cache::FileId {
                ino: file.ino(),
                size: file.size(),
                mtime: (file.mtime(), file.mtime_nsec()),
            },
            cache::FileId {
                ino: sidecar.ino(),
                size: 2,
                mtime: (i64::MIN, 0),
            },
        ];
        (t, vec![("k/rank_tp0_pp0_dp0.json".to_string(), ids)])
    }

    fn check(
        t: &tempfile::TempDir,
        checked: &[(String, [cache::FileId; 2])],
    ) -> Result<(), String> {
        let dir =
            fsx::open_dir_path(fsx::open_root(t.path()).unwrap().as_fd(), Path::new(".")).unwrap();
        same_as_checked(dir.as_fd(), checked.iter())
    }

    #[test]
    fn the_very_files_checked_pass() {
        let (t, checked) = member();
        assert_eq!(check(&t, &checked), Ok(()));
    }

    #[test]
    fn a_sidecar_replaced_after_it_was_read_is_refused() {
        let (t, checked) = member();
        std::fs::write(t.path().join("new"), "{}").unwrap();
        std::fs::rename(
            t.path().join("new"),
            t.path().join("rank_tp0_pp0_dp0.launch"),
        )
        .unwrap();
        let why = check(&t, &checked).unwrap_err();
        assert!(why.contains("changed after signing"), "{why}");
    }

    #[test]
    fn a_cache_file_replaced_or_a_file_planted_is_refused() {
        let (t, checked) = member();
        std::fs::write(t.path().join("new"), "{}").unwrap();
        std::fs::rename(t.path().join("new"), t.path().join("rank_tp0_pp0_dp0.json")).unwrap();
        assert!(check(&t, &checked).is_err());
        let (t, checked) = member();
        std::fs::write(t.path().join("rank_tp1_pp0_dp0.json"), "{}").unwrap();
        let why = check(&t, &checked).unwrap_err();
        assert!(why.contains("is not the set's"), "{why}");
    }
}
