//! Storing: a whole set moves from the cache tree into the store.

use super::*;

impl Store {
    /// Move a whole set signed for another launch into the store (for
    /// [`cache::prune_stashing`]). On error every member is back in place.
    pub fn stash(&self, root: BorrowedFd<'_>, set: &ForeignSet) -> io::Result<()> {
        if !is_fp(&set.fingerprint) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the fingerprint is not 64 hex digits",
            ));
        }
        if let Some(dir) = &set.dir {
            // A directory right below the root (vLLM's `<sha256>/` under
            // VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR) moves file by file.
            if set.checked.len() == set.set.members.len() && dir.contains('/') {
                return self.stash_dir(root, set, dir);
            }
        }
        let staging = format!("{}.in-{}", set.fingerprint, fsx::unique_name());
        let dir = fsx::mkdir_open_at(self.store.as_fd(), staging.as_str(), 0o700)?;
        let man = Manifest {
            format: FORMAT,
            fingerprint: set.fingerprint.clone(),
            set_id: set.set.id.clone(),
            signed_at: set.signed_at,
            stored_at: now_secs(),
            members: set.set.members.clone(),
            flat: false,
        };
        let (from, to) = (Side::tree(root), Side::tree(dir.as_fd()));
        let res = write_json(dir.as_fd(), MANIFEST, &man)
            .and_then(|()| fsx::fsync_dir(self.store.as_fd()))
            .and_then(|()| move_members(from, to, &man.members).map(|_| ()))
            .and_then(|()| {
                // What enters the store is what was signed: a file the
                // engine replaced meanwhile does not.
                self.verify(dir.as_fd(), &man)
                    .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))
            })
            .and_then(|()| self.install(&staging, &set.fingerprint));
        if let Err(e) = res {
            // Back in place, whatever was moved.
            let _ = move_members(to, from, &man.members);
            let _ = fsx::remove_tree_at(self.store.as_fd(), staging.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// [`Store::stash`] of a set that is the whole content of directory
    /// `dir` (its members and their sidecars), its bytes just checked by
    /// prune, as a flat entry: the directory moves into the store as the
    /// staging directory, then the launch's set manifest moves into it as
    /// its `.set.json`, then the staging directory becomes `store/<fp>`:
    /// three renames, nothing created. A crash after the first rename
    /// leaves a staging directory without `.set.json`, which recovery puts
    /// back by the set manifest still in `.keepwrap/sets`. Nothing is
    /// fsynced here: [`Store::sync`] once after prune.
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
        let fp = set.fingerprint.as_str();
        let man = Manifest {
            format: FLAT_FORMAT,
            fingerprint: fp.to_string(),
            set_id: set.set.id.clone(),
            signed_at: set.signed_at,
            stored_at: now_secs(),
            members: set.set.members.clone(),
            flat: true,
        };
        if man.origin() != Some(dir) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the set is not the content of one directory",
            ));
        }
        let sets = self.sets()?;
        let staging = format!("{fp}.in-{}", fsx::unique_name());
        let src = self.up_dir(root, parent)?;
        fsx::rename_noreplace(src.as_fd(), name, self.store.as_fd(), staging.as_str())?;
        self.unsynced.set(true);
        crate::failpoint::hit("store");
        let res = fsx::open_dir_at(self.store.as_fd(), staging.as_str()).and_then(|moved| {
            // What moved is what prune checked, and nothing else.
            self.same_as_checked(moved.as_fd(), set)
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            let from = cache::manifest_name(fp);
            fsx::rename_noreplace(sets, from.as_str(), moved.as_fd(), MANIFEST)?;
            crate::failpoint::hit("store");
            self.install_with(&staging, fp, false)
        });
        if let Err(e) = res {
            // Back in place: the directory whole, else file by file.
            let inside = fsx::open_dir_at(self.store.as_fd(), staging.as_str())
                .is_ok_and(|d| fsx::exists_at(d.as_fd(), MANIFEST));
            let _ = self.unstage_flat(self.store.as_fd(), &staging, &man, inside);
            let _ = fsx::remove_tree_at(self.store.as_fd(), staging.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// Does the moved directory hold exactly the set's members and their
    /// sidecars, each the very file prune checked?
    pub(super) fn same_as_checked(
        &self,
        moved: BorrowedFd<'_>,
        set: &ForeignSet,
    ) -> Result<(), String> {
        let list = fsx::list_dir(moved).map_err(|e| e.to_string())?;
        if list.len() != 2 * set.checked.len() {
            return Err(format!(
                "{} entries in the directory, not the {} of the set",
                list.len(),
                2 * set.checked.len()
            ));
        }
        for (path, ids) in &set.checked {
            for (n, want) in names(split(path).1).iter().zip(ids) {
                let st = fsx::lstat_at(moved, n.as_c_str()).map_err(|e| format!("{path}: {e}"))?;
                if fsx::Kind::from_mode(st.st_mode) != fsx::Kind::File
                    || cache::FileId::of(&st) != *want
                {
                    return Err(format!("{path}: changed after signing"));
                }
            }
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
                crate::events::store::store_replaced(fp);
                crate::failpoint::hit("store");
                let _ = fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
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
