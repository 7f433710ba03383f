//! Restoring: a stored set, verified, moves back to its paths.

use super::*;

impl Store {
    /// The stored set of `fp`, if there is one.
    pub fn manifest(&self, fp: &str) -> Option<Manifest> {
        if !is_fp(fp) {
            return None;
        }
        let dir = fsx::open_dir_at(self.store.as_fd(), fp).ok()?;
        self.entry_manifest(dir.as_fd(), &format!("{STATE_DIR}/store/{fp}"), fp)
    }

    /// The manifest of the entry `dir` of launch `fp` (`shown` for the
    /// log): its `.set.json`, or, when it has none, the launch's set
    /// manifest (a flat set whose directory moved in and whose manifest
    /// had not yet when keepwrap was killed). A `.set.json` that is there
    /// but not used is not replaced by anything: the entry is not used.
    pub(super) fn entry_manifest(
        &self,
        dir: BorrowedFd<'_>,
        shown: &str,
        fp: &str,
    ) -> Option<Manifest> {
        if let Some(man) = read_manifest_at(dir, shown, self.shape) {
            return Some(man);
        }
        if fsx::exists_at(dir, MANIFEST) {
            return None;
        }
        self.flat_or_tree_manifest(dir, shown, fp)
            .map(|(man, _)| man)
    }

    /// Is the set under `dir` whole and intact: every member's bytes as
    /// signed and a JSON object, every sidecar signed for its launch with
    /// those bytes? Stash checks before a set enters the store, restore
    /// before it leaves (a same-size edit included).
    pub(super) fn verify(&self, dir: BorrowedFd<'_>, man: &Manifest) -> Result<(), String> {
        // The manifest lists the very set its id names: never a part of it.
        if cache::set_id(&man.set.fingerprint, &man.set.members) != man.set.id {
            return Err("the manifest does not list the members of its set".into());
        }
        if man.flat {
            // The directory moves back whole: nothing in it but the set.
            let list = fsx::list_dir(dir).map_err(|e| e.to_string())?;
            // Each name the set may hold, once: a listing of N files is
            // judged in N lookups, not N times N comparisons.
            let allowed: std::collections::HashSet<Vec<u8>> = man
                .set
                .members
                .iter()
                .flat_map(|m| names(split(&m.path).1))
                .map(|x| x.into_bytes())
                .collect();
            let ours = |n: &[u8]| n == MANIFEST.as_bytes() || allowed.contains(n);
            if let Some((n, _)) = list.iter().find(|(n, _)| !ours(n)) {
                return Err(format!("{} is not the set's", String::from_utf8_lossy(n)));
            }
        }
        let side = Side::of(dir, man);
        let mut buf = Vec::new();
        for m in &man.set.members {
            let d = side
                .dir(&m.path)
                .ok_or_else(|| format!("{}: missing", m.path))?;
            let d = d.fd();
            let [json, launch] = names(split(&m.path).1);
            fsx::read_at(d, json.as_c_str(), &mut buf, cache::MAX_CACHE_FILE)
                .map_err(|e| format!("{}: {e}", m.path))?;
            if buf.len() as u64 != m.size || cache::sha256_hex(&buf) != m.sha256 {
                return Err(format!("{}: changed after signing", m.path));
            }
            cache::json_object_entries(&buf)
                .map_err(|_| format!("{}: not a JSON object", m.path))?;
            fsx::read_at(d, launch.as_c_str(), &mut buf, cache::MAX_SIDECAR)
                .map_err(|e| format!("{}: sidecar: {e}", m.path))?;
            let sc = cache::judge_sidecar_for(&buf, Some(&man.set.fingerprint), |p| p == m.path)
                .map_err(|r| format!("{}: {r}", m.path))?;
            if !sc.records(m) {
                return Err(format!("{}: signed with other bytes", m.path));
            }
        }
        Ok(())
    }

    /// Check the stored set of `fp` whole, every member's bytes included (for
    /// `keepwrap status --verify`): why it is not intact, if it is not.
    pub fn verify_entry(&self, fp: &str) -> Result<(), String> {
        let man = self.manifest(fp).ok_or("no readable manifest")?;
        if man.set.fingerprint != fp {
            return Err("its manifest names another launch".into());
        }
        if let Some(why) = self.untrusted_in_entry(fp, &man) {
            return Err(why);
        }
        let dir = fsx::open_dir_at(self.store.as_fd(), fp).map_err(|e| e.to_string())?;
        self.verify(dir.as_fd(), &man)
    }

    /// Bring the stored set of `fp` back to its paths. None when there is
    /// none, or it cannot be (logged; a corrupt entry is deleted).
    pub fn restore(&self, fp: &Fingerprint) -> Option<Restored> {
        let man = self.manifest(fp)?;
        let dir = fsx::open_dir_at(self.store.as_fd(), fp.as_str()).ok()?;
        if *fp != man.set.fingerprint {
            crate::events::Event::EntryMisnamed {
                fingerprint: fp.to_string(),
            }
            .emit();
            self.delete_entry(fp);
            return None;
        }
        // Laid out for another engine's cache tree: never this launch's.
        if man.shape != self.shape {
            crate::events::Event::EntryNotIntact {
                fingerprint: fp.to_string(),
                reason: "its files are laid out for another engine's cache".to_string(),
            }
            .emit();
            self.delete_entry(fp);
            return None;
        }
        // From: a set another user could have planted or edited is not
        // trusted, whatever its sidecars say.
        if let Some(why) = self.untrusted_in_entry(fp, &man) {
            crate::events::Event::EntryUntrusted {
                fingerprint: fp.to_string(),
                reason: why.to_string(),
            }
            .emit();
            self.delete_entry(fp);
            return None;
        }
        // Every byte as signed: a rank file edited in the store (its size
        // unchanged) is never loaded by the engine.
        if let Err(why) = self.verify(dir.as_fd(), &man) {
            crate::events::Event::EntryNotIntact {
                fingerprint: fp.to_string(),
                reason: why.to_string(),
            }
            .emit();
            self.delete_entry(fp);
            return None;
        }
        // Into: never a directory another user can write.
        if let Some((parent, why)) = self.untrusted_destination(&man) {
            crate::events::Event::RestoreDestinationUntrusted {
                fingerprint: fp.to_string(),
                dir: parent.to_string(),
                reason: why.to_string(),
            }
            .emit();
            return None;
        }
        let root = Side::tree(self.root_fd.as_fd(), self.shape);
        let taken = conflicts(Side::of(dir.as_fd(), &man), root, &man.set.members);
        if let Some(t) = taken.first() {
            crate::events::Event::RestoreInTheWay {
                fingerprint: fp.to_string(),
                path: t.to_string(),
            }
            .emit();
            return None;
        }
        drop(dir);
        let restoring = format!("restoring-{fp}");
        if let Err(e) = fsx::rename_noreplace(
            self.store.as_fd(),
            fp.as_str(),
            self.state.as_fd(),
            restoring.as_str(),
        ) {
            crate::events::Event::CannotRestore {
                fingerprint: fp.to_string(),
                error: e.to_string(),
            }
            .emit();
            return None;
        }
        crate::failpoint::hit("store");
        if man.flat {
            // Its manifest back among the set manifests (the one there, if
            // any, is of a set of this launch prune did not keep), then the
            // directory in place.
            if let Err(e) = self.unstage_flat(self.state.as_fd(), &restoring, &man, true) {
                crate::events::Event::RestoreMoveFailed {
                    fingerprint: fp.to_string(),
                    error: e.to_string(),
                }
                .emit();
                self.unrestore(&restoring, &man);
                return None;
            }
            fsx::remove_tree_at(self.state.as_fd(), restoring.as_bytes());
            self.unsynced.set(true);
            self.sync();
            return Some(Restored::of(&man));
        }
        let dir = fsx::open_dir_at(self.state.as_fd(), restoring.as_str()).ok()?;
        // A directory that holds exactly its members moves back whole (its
        // files keep their change times, so the sign at done finds each
        // with the stamp its sidecar records, and hashes none of them
        // again); the others file by file. Durable at once, with one sync
        // below.
        let whole = self.move_out_dirs(dir.as_fd(), &man);
        let rest = outside(&man.set.members, &whole);
        if let Err(e) = move_members_with(Side::tree(dir.as_fd(), self.shape), root, &rest, false) {
            crate::events::Event::RestoreMoveFailed {
                fingerprint: fp.to_string(),
                error: e.to_string(),
            }
            .emit();
            drop(dir);
            self.unrestore(&restoring, &man);
            return None;
        }
        drop(dir);
        self.unsynced.set(true);
        self.sync();
        fsx::remove_tree_at(self.state.as_fd(), restoring.as_bytes());
        Some(Restored::of(&man))
    }

    /// Move back to its place in the tree, with one rename, each directory
    /// of the tree entry being restored (`from`) that holds exactly the
    /// set's members there and their sidecars (listed just now; every byte
    /// was verified before), when its place is free (an empty directory
    /// there is removed first). Returns the directories (relative to the
    /// root) moved. A kill between two renames leaves the rest in
    /// `restoring-<fp>`, which recovery moves forward file by file.
    fn move_out_dirs<'m>(
        &self,
        from: BorrowedFd<'_>,
        man: &'m Manifest,
    ) -> std::collections::HashSet<&'m str> {
        let mut moved = std::collections::HashSet::new();
        let mut want: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
        for m in &man.set.members {
            let (parent, name) = split(&m.path);
            if parent.contains('/') && cache::is_cache_file(Path::new(&m.path), self.shape) {
                let list = want.entry(parent).or_default();
                list.extend(names(name).iter().map(|n| n.as_bytes().to_vec()));
            }
        }
        let mut ups: BTreeMap<&str, Option<(OwnedFd, OwnedFd)>> = BTreeMap::new();
        for (parent, mut names) in want {
            let (up, base) = split(parent);
            let Some((src, dst)) = ups
                .entry(up)
                .or_insert_with(|| {
                    let src = fsx::open_dir_path(from, Path::new(up)).ok()?;
                    let gone = !fsx::exists_at(self.root_fd.as_fd(), Path::new(up));
                    let dst =
                        fsx::ensure_dir_path(self.root_fd.as_fd(), Path::new(up), DIR_MODE).ok()?;
                    if gone {
                        // Stash moved it whole (`<version>/<sm>/`): made
                        // anew with its own mode (a group's, setgid), not
                        // keepwrap's.
                        copy_mode(src.as_fd(), dst.as_fd());
                    }
                    Some((src, dst))
                })
                .as_ref()
            else {
                continue;
            };
            let Ok(held) =
                fsx::open_dir_at(src.as_fd(), base).and_then(|d| fsx::list_dir(d.as_fd()))
            else {
                continue;
            };
            let mut held: Vec<Vec<u8>> = held.into_iter().map(|(n, _)| n).collect();
            held.sort_unstable();
            names.sort_unstable();
            if held != names {
                continue;
            }
            let _ = nix::unistd::unlinkat(dst.as_fd(), base, nix::unistd::UnlinkatFlags::RemoveDir);
            if fsx::rename_noreplace(src.as_fd(), base, dst.as_fd(), base).is_ok() {
                moved.insert(parent);
                crate::failpoint::hit("store");
            }
        }
        moved
    }

    /// Why the entry of `fp` is not to be trusted: a directory of it (or
    /// above it, up to `.keepwrap`) another user can write, by the rule the
    /// cache tree is judged by ([`cache::untrusted_dir`]).
    pub(super) fn untrusted_in_entry(&self, fp: &str, man: &Manifest) -> Option<String> {
        entry_parents(man).into_iter().find_map(|parent| {
            let rel = Path::new("store").join(fp).join(parent);
            match cache::untrusted_dir(self.state.as_fd(), &rel) {
                Ok(why) => why,
                Err(e) => Some(format!("cannot check {STATE_DIR}/{}: {e}", rel.display())),
            }
        })
    }

    /// The first directory a member would be restored into (its nearest
    /// existing ancestor: what is missing is created by keepwrap) that
    /// another user can write, with why.
    pub(super) fn untrusted_destination(&self, man: &Manifest) -> Option<(String, String)> {
        member_parents(man).into_iter().find_map(|parent| {
            let mut at = Path::new(parent);
            loop {
                match cache::untrusted_dir(self.root_fd.as_fd(), at) {
                    Ok(None) => return None,
                    Ok(Some(why)) => return Some((parent.to_string(), why)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => at = at.parent()?,
                    Err(e) => {
                        return Some((
                            parent.to_string(),
                            format!("cannot check {}: {e}", at.display()),
                        ))
                    }
                }
            }
        })
    }

    /// Delete the stored set of `fp`, which a set signed since in the tree
    /// for the same launch replaces (a cold start's, `--start-cold`); its
    /// launch record stays, the new set's. How many files it had, when
    /// there was one.
    pub fn delete_replaced(&self, fp: &Fingerprint) -> Option<usize> {
        let files = self.manifest(fp)?.set.members.len();
        self.delete_entry(fp);
        Some(files)
    }

    /// Delete the entry of `fp` (atomically gone: renamed to trash first).
    pub(super) fn delete_entry(&self, fp: &str) {
        if let Some(trash) = self.trash_entry(fp) {
            fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
        }
    }

    /// Move the entry of `fp` out of the store into a trash directory of
    /// `.keepwrap` (which recovery removes); its name, to delete.
    pub(super) fn trash_entry(&self, fp: &str) -> Option<String> {
        let trash = format!("trash-{}", fsx::unique_name());
        fsx::rename_between(self.store.as_fd(), fp, self.state.as_fd(), trash.as_str()).ok()?;
        let _ = fsx::fsync_dir(self.store.as_fd());
        Some(trash)
    }
}

/// Give directory `to` the permission bits of directory `from` (best
/// effort).
fn copy_mode(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    if let Ok(st) = nix::sys::stat::fstat(from) {
        let mode = nix::sys::stat::Mode::from_bits_truncate(st.st_mode & 0o7777);
        let _ = nix::sys::stat::fchmod(to, mode);
    }
}
