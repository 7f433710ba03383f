//! Moving a set's members between the cache tree and an entry, and
//! reading and writing the store's JSON files.

use std::collections::HashMap;

use super::*;

/// A directory holding members: at their paths below it (the cache tree,
/// a tree entry), or all of them directly in it (a flat entry).
#[derive(Clone, Copy)]
pub(super) struct Side<'a> {
    pub(super) fd: BorrowedFd<'a>,
    pub(super) flat: bool,
    /// The shape of the cache tree: which paths are members.
    pub(super) shape: Shape,
}

/// The directory a member's files are in: the side's own, or one below it.
pub(super) enum Held<'a> {
    Here(BorrowedFd<'a>),
    Below(OwnedFd),
}

impl Held<'_> {
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Held::Here(fd) => *fd,
            Held::Below(fd) => fd.as_fd(),
        }
    }
}

impl<'a> Side<'a> {
    pub(super) fn tree(fd: BorrowedFd<'a>, shape: Shape) -> Side<'a> {
        Side {
            fd,
            flat: false,
            shape,
        }
    }

    pub(super) fn of(fd: BorrowedFd<'a>, man: &Manifest) -> Side<'a> {
        Side {
            fd,
            flat: man.flat,
            shape: man.shape,
        }
    }

    /// Where the files of the member at `path` are: only for a path shaped
    /// like the engine's cache, so that the store never moves anything else.
    pub(super) fn dir(&self, path: &str) -> Option<Held<'a>> {
        if self.flat {
            return cache::is_cache_file(Path::new(path), self.shape)
                .then_some(Held::Here(self.fd));
        }
        member_dir(self.fd, path, self.shape).map(Held::Below)
    }

    /// [`Side::dir`], creating the missing directories of a tree.
    pub(super) fn ensure(&self, path: &str) -> io::Result<Held<'a>> {
        if self.flat {
            return Ok(Held::Here(self.fd));
        }
        fsx::ensure_dir_path(self.fd, Path::new(split(path).0), DIR_MODE).map(Held::Below)
    }
}

/// Where a member's two files are, relative to a base directory: only
/// for a path shaped like the engine's cache (`<version>/sm<arch>/<key16>/
/// rank_*.json`), so that the store never moves anything else.
pub(super) fn member_dir(base: BorrowedFd<'_>, path: &str, shape: Shape) -> Option<OwnedFd> {
    if !cache::is_cache_file(Path::new(path), shape) {
        return None;
    }
    fsx::open_dir_path(base, Path::new(split(path).0)).ok()
}

/// Move the files of `members` found under `from` to the same paths under
/// `to`. Returns the number of files moved, or the first error (files moved
/// before it stay moved). Directories fsynced once each.
pub(super) fn move_members(from: Side<'_>, to: Side<'_>, members: &[Member]) -> io::Result<usize> {
    move_members_with(from, to, members, true)
}

/// [`move_members`]; with `fsync` false no directory is fsynced (the
/// caller makes the moves durable at once, [`Store::sync`]).
pub(super) fn move_members_with(
    from: Side<'_>,
    to: Side<'_>,
    members: &[Member],
    fsync: bool,
) -> io::Result<usize> {
    let mut moved = 0;
    // Each directory opened (or created) once: members of one directory
    // are many (8 ranks, 64), and opening a path costs a call a level.
    let mut sources: HashMap<&str, Option<Held<'_>>> = HashMap::new();
    let mut touched: BTreeMap<&str, Held<'_>> = BTreeMap::new();
    for m in members {
        let (parent, name) = split(&m.path);
        let src = sources.entry(parent).or_insert_with(|| from.dir(&m.path));
        let Some(src) = src else {
            continue;
        };
        for n in names(name) {
            if !fsx::exists_at(src.fd(), n.as_c_str()) {
                continue;
            }
            let dst = match touched.entry(parent) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(to.ensure(&m.path)?),
            };
            fsx::rename_noreplace(src.fd(), n.as_c_str(), dst.fd(), n.as_c_str())?;
            moved += 1;
            crate::failpoint::hit("store");
        }
    }
    // Each rename is atomic in the file system's journal: a file is in one
    // directory or the other even after a power loss. fsync only for
    // durability, once per destination directory.
    if fsync {
        for dst in touched.values() {
            let _ = fsx::fsync_dir(dst.fd());
        }
    }
    Ok(moved)
}

/// The members not in one of the directories `whole` (moved with one
/// rename each): those that move file by file.
pub(super) fn outside(members: &[Member], whole: &std::collections::HashSet<&str>) -> Vec<Member> {
    members
        .iter()
        .filter(|m| !whole.contains(split(&m.path).0))
        .cloned()
        .collect()
}

/// The directories (relative to the entry) that hold the members of a
/// stored set, once each.
pub(super) fn entry_parents(man: &Manifest) -> Vec<&str> {
    if man.flat {
        return vec![""];
    }
    member_parents(man)
}

/// The directories (relative to the root) that hold the members of a set,
/// once each.
pub(super) fn member_parents(man: &Manifest) -> Vec<&str> {
    let mut parents: Vec<&str> = man.set.members.iter().map(|m| split(&m.path).0).collect();
    parents.sort_unstable();
    parents.dedup();
    parents
}

/// Files of `members` under `from` whose path under `to` is taken.
pub(super) fn conflicts(from: Side<'_>, to: Side<'_>, members: &[Member]) -> Vec<String> {
    let mut out = Vec::new();
    for m in members {
        let Some(src) = from.dir(&m.path) else {
            continue;
        };
        let dst = to.dir(&m.path);
        for n in names(split(&m.path).1) {
            if fsx::exists_at(src.fd(), n.as_c_str())
                && dst
                    .as_ref()
                    .is_some_and(|d| fsx::exists_at(d.fd(), n.as_c_str()))
            {
                out.push(m.path.clone());
            }
        }
    }
    out
}

/// Read the record `name` of `dir` (`shown`: the directory for the log,
/// `.keepwrap/launches` say). None when there is none; a record that is not
/// a regular file, too large or not valid JSON is ignored with one warning.
pub(super) fn read_json<T: for<'de> Deserialize<'de>>(
    dir: BorrowedFd<'_>,
    shown: &str,
    name: &str,
    max: u64,
) -> Option<T> {
    fsx::read_state_json(dir, &format!("{shown}/{name}"), name, max, "it is not used")
}

pub(super) fn write_json<T: Serialize>(
    dir: BorrowedFd<'_>,
    name: &str,
    value: &T,
) -> io::Result<()> {
    write_json_with(dir, name, value, true)
}

/// [`write_json`]; with `sync` false, nothing is fsynced (the caller
/// orders durability itself).
pub(super) fn write_json_with<T: Serialize>(
    dir: BorrowedFd<'_>,
    name: &str,
    value: &T,
    sync: bool,
) -> io::Result<()> {
    let mut bytes = canonical::to_python_json(value, Style::INDENT2)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    bytes.push(b'\n');
    let name = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fsx::write_atomic_at_with(dir, &name, &bytes, 0o644, sync)?;
    if sync {
        fsx::fsync_dir(dir)?;
    }
    Ok(())
}

/// The manifest of a flat entry, from the launch's set manifest `set`
/// (checked whole: its id is the hash of its members): None unless every
/// member is in one directory.
pub(super) fn flat_manifest(set: SetManifest, stored_at: u64, shape: Shape) -> Option<Manifest> {
    let man = Manifest {
        set,
        stored_at,
        flat: true,
        shape,
    };
    man.origin().is_some().then_some(man)
}

/// The manifest of the entry (or staging, or restoring directory) `dir`
/// (`shown` for the log): a set manifest, of a flat entry when its first
/// member's file is right inside `dir` (then its members share one
/// directory), else of a tree (inside `dir` at its path). None when there is none; any other is not used, with one
/// warning.
pub(super) fn read_manifest_at(dir: BorrowedFd<'_>, shown: &str, shape: Shape) -> Option<Manifest> {
    // As large as the launch's own manifest may be: it is that file, moved.
    let v: Value = read_json(dir, shown, MANIFEST, cache::MAX_MANIFEST)?;
    let bad = |why: String| {
        fsx::warn_state_file(
            &format!("{shown}/{MANIFEST}"),
            &io::Error::new(io::ErrorKind::InvalidData, why),
            "it is not used",
        );
        None
    };
    let format = v.get("format").and_then(Value::as_u64);
    if format != Some(u64::from(crate::SET_FORMAT)) {
        return bad(format!(
            "format {format:?}, which this version does not read"
        ));
    }
    let set = match serde_json::from_value::<SetManifest>(v) {
        Ok(m) => m,
        Err(e) => return bad(format!("not valid: {e}")),
    };
    // Laid out for `shape` (the store's engine), else for another
    // engine's cache tree: that set is judged by its own.
    let fp = set.fingerprint.clone();
    let shape = match cache::validate_manifest(&set, &fp, shape) {
        Ok(()) => shape,
        Err(e) => match Shape::ALL
            .into_iter()
            .find(|&s| cache::validate_manifest(&set, &fp, s).is_ok())
        {
            Some(s) => s,
            None => return bad(format!("not valid: {e}")),
        },
    };
    // Stored when its manifest moved or was written in (nothing changes
    // the entry's directory since).
    let stored_at = fsx::stat_fd(dir).map_or(0, |st| st.st_mtime.max(0) as u64);
    if is_flat(dir, &set) {
        return flat_manifest(set, stored_at, shape)
            .or_else(|| bad("its members are not in one directory".into()));
    }
    Some(Manifest {
        set,
        stored_at,
        flat: false,
        shape,
    })
}

/// Is `dir` a flat entry of `set`: its first member's file right inside it
/// (the members of a flat entry share one directory)?
pub(super) fn is_flat(dir: BorrowedFd<'_>, set: &SetManifest) -> bool {
    set.members
        .first()
        .is_some_and(|m| fsx::exists_at(dir, split(&m.path).1))
}

/// Does `dir` hold a cache file or sidecar of `shape` directly (a flat
/// set's directory, not a tree)?
pub(super) fn holds_cache_files(dir: BorrowedFd<'_>, shape: Shape) -> bool {
    fsx::list_dir(dir).is_ok_and(|list| {
        list.iter()
            .any(|(n, _)| matches!(shape.role(n), cache::Role::Cache | cache::Role::Sidecar))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(fp: &str, members: Vec<cache::Member>) -> cache::SetManifest {
        cache::SetManifest {
            format: crate::SET_FORMAT,
            keepwrap: "0.1.0".into(),
            fingerprint: fp.to_string(),
            id: cache::set_id(fp, &members),
            signed_at: 1,
            members,
        }
    }

    /// A stored set of 100,000 members: its `.set.json` is larger than
    /// the 16 MiB of the store's other state files, and is read all the
    /// same (it is the launch's manifest, moved, read up to its own cap).
    #[test]
    fn the_manifest_of_a_stored_set_of_100_000_files_is_read() {
        let fp = "ab".repeat(32);
        let members: Vec<cache::Member> = (0..100_000)
            .map(|i| cache::Member {
                path: format!("0.6.18/sm121/{:016x}/rank_tp{}_pp0_dp0.json", i / 8, i % 8),
                sha256: "cd".repeat(32),
                size: 20_480,
            })
            .collect();
        let set = set_of(&fp, members);
        let t = tempfile::tempdir().unwrap();
        let bytes = serde_json::to_vec_pretty(&set).unwrap();
        assert!(bytes.len() as u64 > fsx::STATE_FILE_MAX, "{}", bytes.len());
        std::fs::write(t.path().join(MANIFEST), bytes).unwrap();
        let dir = fsx::open_root(t.path()).unwrap();
        let man = read_manifest_at(dir.as_fd(), "entry", crate::engine::SGLANG).expect("read");
        assert_eq!(man.set.members.len(), 100_000);
        assert_eq!(man.set.id, set.id);
    }

    /// One store serves every engine's stored sets: a set laid out for
    /// vLLM's flat root, stored in a root an SGLang store opens, is listed
    /// (and so evicted by size and age) as vLLM's, and never restored by
    /// the SGLang launch of its fingerprint (a planted or copied entry: no
    /// SGLang launch has a vLLM launch's fingerprint).
    #[test]
    fn a_stored_set_is_judged_by_the_tree_its_paths_name() {
        let t = tempfile::tempdir().unwrap();
        let fp = "ef".repeat(32);
        let key = "12".repeat(32);
        let bytes = b"{\"a\": 1}\n";
        let members = vec![cache::Member {
            path: format!("{key}/autotune_configs_dp0_rank0.json"),
            sha256: cache::sha256_hex(bytes),
            size: bytes.len() as u64,
        }];
        let set = set_of(&fp, members);
        let store = Store::open(t.path(), crate::engine::SGLANG).unwrap();
        let entry = t.path().join(format!("{STATE_DIR}/store/{fp}"));
        std::fs::create_dir_all(&entry).unwrap();
        std::fs::write(entry.join("autotune_configs_dp0_rank0.json"), bytes).unwrap();
        std::fs::write(entry.join(MANIFEST), serde_json::to_vec(&set).unwrap()).unwrap();
        let entries = store.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manifest.shape, crate::engine::VLLM_FLAT);
        assert!(entries[0].manifest.flat);
        assert!(store
            .restore(&crate::digest::Fingerprint::parse(&fp).unwrap())
            .is_none());
        assert!(!t.path().join(&key).exists());
        // Refused as not intact for this launch, it went, as such an entry does.
        assert!(!entry.exists());
    }
}
