//! Prune's second pass: the sets. Files trusted on their own are judged
//! as sets; sets of other launches are checked byte by byte and stored
//! whole, or removed.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::*;

impl State<'_, '_> {
    /// Judge the sets of the files trusted on their own; keep the whole
    /// ones, remove the others.
    pub(super) fn resolve(&mut self) {
        let Some(root) = self.root.take() else { return };
        let mut cands = std::mem::take(&mut self.cands);
        // A file the launch refuses is removed before the sets are judged:
        // the rest of its set is then incomplete, never kept in part.
        if let Some(refuse) = self.refuse {
            cands.retain(|(path, _, _)| match refuse(path) {
                Some(why) => {
                    self.rejected.push(path.clone());
                    self.remove_path(&root, path, &Reason::Refused(why));
                    false
                }
                None => true,
            });
        }
        let views: Vec<Candidate<'_>> = cands
            .iter()
            .map(|(p, sc, _)| Candidate {
                path: p.as_str(),
                sidecar: sc,
            })
            .collect();
        if !cands.is_empty() {
            self.load_manifest(&root, self.fingerprint);
        }
        let verdicts = judge::resolve_sets(&views, &self.manifests);
        // The directory of the last file kept, its first inode number, and
        // whether another file kept there is another inode.
        let mut dir: Option<(&str, u64, bool)> = None;
        for ((path, _, ino), verdict) in cands.iter().zip(verdicts) {
            match verdict {
                None => {
                    crate::events::Event::Kept {
                        path: path.to_string(),
                    }
                    .emit();
                    self.report.kept.push(PathBuf::from(path));
                    self.report.kept_ids.push(*ino);
                    let ino = &ino.ino;
                    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
                    // only rank files are unified (a managed store's
                    // entries are one file per shape, never linked)
                    if self.shape.rank_of(name).is_none() {
                        continue;
                    }
                    match &mut dir {
                        Some((d, first, split)) if *d == parent => *split |= *first != *ino,
                        _ => {
                            self.note_split(dir.take());
                            dir = Some((parent, *ino, false));
                        }
                    }
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
                    self.remove_path(&root, path, &reason);
                }
            }
        }
        self.note_split(dir);
        self.resolve_foreign(&root);
        self.root = Some(root);
    }

    /// A directory whose kept files are not all one file (hard links of
    /// one inode, as unify leaves them): counted in the report.
    fn note_split(&mut self, dir: Option<(&str, u64, bool)>) {
        if let Some((d, _, true)) = dir {
            self.report.split.push(PathBuf::from(d));
        }
    }

    /// Read and check the set manifest of launch `fp`, once: this launch's
    /// or another's, as a sidecar names it.
    pub(super) fn load_manifest(&mut self, root: &OwnedFd, fp: &str) {
        if self.manifests.contains_key(fp) {
            return;
        }
        let shape = self.shape;
        let m = sidecar::read_manifest(self.sets_of(root), fp, shape);
        self.manifests.insert(fp.to_string(), m);
    }

    /// `.keepwrap/sets` below the root, opened the first time it is asked
    /// for (None: there is none, or it cannot be opened).
    pub(super) fn sets_of(&mut self, root: &OwnedFd) -> Option<BorrowedFd<'_>> {
        self.sets
            .get_or_insert_with(|| sidecar::open_sets(root.as_fd(), false).ok())
            .as_ref()
            .map(|f| f.as_fd())
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
                crate::events::Event::CannotRemove {
                    path: path.to_string(),
                    reason: reason.to_string(),
                    error: format!("open directory {parent}: {e}"),
                }
                .emit();
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
            .map(|f| Candidate {
                path: f.path.as_str(),
                sidecar: &f.sc,
            })
            .collect();
        for f in &foreign {
            self.load_manifest(root, &f.sc.fingerprint);
        }
        let verdicts = judge::resolve_sets(&views, &self.manifests);
        // The sets whole (one per launch: its manifest's), in the order first seen.
        let mut sets: Vec<Vec<&Foreign>> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (f, verdict) in foreign.iter().zip(verdicts) {
            match verdict {
                None => {
                    let k = *index.entry(f.sc.fingerprint.as_str()).or_insert_with(|| {
                        sets.push(Vec::new());
                        sets.len() - 1
                    });
                    sets[k].push(f);
                }
                Some(reason) => {
                    let fp8 = crate::digest::short(&f.sc.fingerprint).digits().to_string();
                    let reason = Reason::OtherLaunchBad(fp8, Box::new(reason));
                    self.remove_path(root, &f.path, &reason);
                }
            }
        }
        for files in sets {
            self.store_set(root, &files);
        }
    }

    /// A set of another launch, whole by its sidecars: check its bytes, then
    /// store it (or remove it).
    fn store_set(&mut self, root: &OwnedFd, files: &[&Foreign]) {
        let sc = &files[0].sc;
        let fp8 = crate::digest::short(&sc.fingerprint).digits().to_string();
        // Its directory, when it holds exactly this set: it moves (to the
        // store or to the trash) with one rename.
        let parent = split(&files[0].path).0;
        let dir = (!parent.is_empty()
            && files.iter().all(|f| split(&f.path).0 == parent)
            && self.pure.get(parent) == Some(&files.len()))
        .then(|| parent.to_string());
        let checked = match self.check_set(root, files) {
            Ok(checked) => checked,
            Err((bad, why)) => return self.drop_set(root, files, dir, &fp8, bad, why),
        };
        let Some(Ok(manifest)) = self.manifests.get(&sc.fingerprint) else {
            // (Not whole without its manifest: resolve_sets said so already.)
            let why = Reason::SetManifest("missing".into());
            for f in files {
                let reason = Reason::OtherLaunchBad(fp8.clone(), Box::new(why.clone()));
                self.remove_path(root, &f.path, &reason);
            }
            return;
        };
        let set = ForeignSet {
            manifest: manifest.clone(),
            whole_dirs: self.whole_dirs(files),
            dir,
            checked: files
                .iter()
                .zip(checked)
                .map(|(f, ids)| (f.path.clone(), ids))
                .collect(),
        };
        self.stash_set(root, &set, &fp8);
    }

    /// The directories (below a directory of the root) that hold nothing
    /// but files of this set and their sidecars: prune listed each, and
    /// every file of another launch it found there is one of `files`.
    fn whole_dirs(&self, files: &[&Foreign]) -> Vec<String> {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for f in files {
            *count.entry(split(&f.path).0).or_default() += 1;
        }
        count
            .into_iter()
            .filter(|(d, n)| d.contains('/') && self.pure.get(*d) == Some(n))
            .map(|(d, _)| d.to_string())
            .collect()
    }

    /// The bytes of a set, member by member; the first that fails fails the
    /// set (its index and why). The identities checked: file, sidecar.
    fn check_set(
        &mut self,
        root: &OwnedFd,
        files: &[&Foreign],
    ) -> Result<Vec<[FileId; 2]>, (usize, Reason)> {
        let mut checked = Vec::with_capacity(files.len());
        let mut open: Option<(&str, OwnedFd)> = None;
        for (i, f) in files.iter().enumerate() {
            let (p, name) = split(&f.path);
            if open.as_ref().is_none_or(|(q, _)| *q != p) {
                match self.open_rel(root, p) {
                    Ok(d) => open = Some((p, d)),
                    Err(e) => return Err((i, Reason::Unreadable(e.to_string()))),
                }
            }
            let Some((_, d)) = &open else { break };
            match check_file(d.as_fd(), name.as_bytes(), &f.sc, &mut self.cbuf) {
                Ok(id) => checked.push([id, f.sidecar_id]),
                Err(reason) => return Err((i, reason)),
            }
        }
        Ok(checked)
    }

    /// A set whose member `bad` failed its check: every member goes (its
    /// directory with one rename when it holds exactly the set).
    fn drop_set(
        &mut self,
        root: &OwnedFd,
        files: &[&Foreign],
        dir: Option<String>,
        fp8: &str,
        bad: usize,
        why: Reason,
    ) {
        let member = files[bad].path.clone();
        let reasons: Vec<Reason> = (0..files.len())
            .map(|i| {
                let why = if i == bad {
                    why.clone()
                } else {
                    Reason::SetIncomplete {
                        member: member.clone(),
                        why: MemberWhy::NotTrusted,
                    }
                };
                Reason::OtherLaunchBad(fp8.to_string(), Box::new(why))
            })
            .collect();
        if let Some(dir) = &dir {
            if self.trash_path(root, dir) {
                for (f, reason) in files.iter().zip(&reasons) {
                    let (p, name) = split(&f.path);
                    let prefix = &f.path.as_bytes()[..p.len() + 1];
                    self.log_removed(prefix, name.as_bytes(), reason);
                }
                return;
            }
        }
        for (f, reason) in files.iter().zip(&reasons) {
            self.remove_path(root, &f.path, reason);
        }
    }

    /// Hand a whole, checked set to the stash; if that fails, remove it.
    fn stash_set(&mut self, root: &OwnedFd, set: &ForeignSet, fp8: &str) {
        let stash = self
            .stash
            .as_mut()
            .expect("foreign files only with a stash");
        match stash(root.as_fd(), set) {
            Ok(()) => {
                for m in &set.manifest.members {
                    crate::events::Event::Stored {
                        path: m.path.to_string(),
                        other_fingerprint: set.manifest.fingerprint.clone(),
                    }
                    .emit();
                    self.report.stored += 1;
                }
            }
            Err(e) => {
                crate::events::Event::CannotStore {
                    files: set.manifest.members.len(),
                    fingerprint: fp8.to_string(),
                    error: e.to_string(),
                }
                .emit();
                for m in &set.manifest.members {
                    self.remove_path(root, &m.path, &Reason::OtherLaunch(fp8.to_string()));
                }
            }
        }
    }

    /// The directory `up` (relative to the root), kept open for the next
    /// set.
    fn up_dir(&mut self, root: &OwnedFd, up: &str) -> io::Result<Rc<OwnedFd>> {
        if let Some((p, fd)) = &self.updir {
            if p == up {
                return Ok(fd.clone());
            }
        }
        let fd = Rc::new(fsx::open_dir_path(root.as_fd(), Path::new(up))?);
        self.updir = Some((up.to_string(), fd.clone()));
        Ok(fd)
    }

    /// Open the directory `rel` (relative to the root) from the one above it.
    fn open_rel(&mut self, root: &OwnedFd, rel: &str) -> io::Result<OwnedFd> {
        let (up, name) = split(rel);
        if up.is_empty() {
            return fsx::open_dir_path(root.as_fd(), Path::new(rel));
        }
        let upfd = self.up_dir(root, up)?;
        fsx::open_dir_at(upfd.as_fd(), name)
    }

    /// Move the directory at `rel` (relative to the root) into the trash.
    fn trash_path(&mut self, root: &OwnedFd, rel: &str) -> bool {
        let (p, name) = split(rel);
        let Ok(parent) = self.up_dir(root, p) else {
            return false;
        };
        let mut shown = rel.as_bytes().to_vec();
        shown.push(b'/');
        self.take_to_trash(root.as_fd(), parent.as_fd(), name.as_bytes(), &shown)
    }
}

fn exists(root: BorrowedFd<'_>, rel: &str) -> bool {
    let (parent, name) = split(rel);
    match fsx::open_dir_path(root, Path::new(parent)) {
        Ok(d) => fsx::lstat_at(d.as_fd(), name.as_bytes()).is_ok(),
        Err(_) => false,
    }
}
