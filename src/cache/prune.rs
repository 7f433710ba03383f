//! Prune: before the engine starts, remove every cache file this launch must
//! not load.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::fsx::{self, split, Kind};
use super::judge::{self, Candidate, Manifests, MemberWhy, Reason};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::sidecar::{self, SetRecord, Sidecar, Stamp};
use super::trash::{self, Trash, TrashJob};
use super::{FileId, ForeignSet, PruneReport};

/// Moves a whole set signed for another launch out of the tree (into the
/// store). On error every member must be back in place: prune removes them.
pub type Stash<'s> = &'s mut dyn FnMut(BorrowedFd<'_>, &ForeignSet) -> io::Result<()>;

/// Larger sidecars are not read (a sidecar is about 550 bytes).
pub const MAX_SIDECAR: u64 = 64 << 20;
/// Larger cache files are not read (real ones are KB to a few MB).
pub const MAX_CACHE_FILE: u64 = 256 << 20;

/// Lines of one kind (`kept ...`, `stored ...`) logged at info level; the
/// rest at debug level, counted in one line.
pub const PER_FILE_LINES: usize = 16;

struct State<'f, 's> {
    fingerprint: &'f str,
    /// Where whole sets of other launches go; None: they are removed.
    stash: Option<Stash<'s>>,
    /// Files of other launches whose sidecar is trusted (and size right),
    /// waiting for their set; their bytes are checked once the set is whole.
    foreign: Vec<Foreign>,
    /// Directories (relative path, no trailing `/`) holding nothing but
    /// such files and their sidecars: how many files.
    pure: HashMap<String, usize>,
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
    /// Entries under the root that are not the engine's (left alone), and
    /// the first of them.
    untouched: usize,
    untouched_first: Option<String>,
    /// The set manifests read, by fingerprint (each read and checked once).
    manifests: Manifests,
    /// `.keepwrap/sets`, opened once (None inside: there is none).
    sets: Option<Option<OwnedFd>>,
    /// The directory above the last set's (relative path): sets of one
    /// such directory follow each other.
    updir: Option<(String, Rc<OwnedFd>)>,
}

struct Foreign {
    path: String,
    sc: Sidecar,
    /// The sidecar as read.
    sidecar_id: FileId,
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

/// When the trash is emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    /// Before returning.
    Now,
    /// In a background thread started before returning.
    Background,
    /// When the returned [`TrashJob`] runs (after the engine's start).
    Later,
}

/// `empty`: when the trash is emptied (with [`Empty::Later`], the returned
/// job does it). `stash`: where whole sets of other launches go (None: they
/// are removed like the rest).
pub fn prune(
    root: &Path,
    fingerprint: &str,
    empty: Empty,
    stash: Option<Stash<'_>>,
) -> io::Result<(PruneReport, TrashJob)> {
    let fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok((PruneReport::default(), TrashJob::none()))
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("open cache root {}: {e}", crate::logging::Shown(root)),
            ))
        }
    };
    let root_fd = fd.try_clone().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("dup cache root {}: {e}", crate::logging::Shown(root)),
        )
    })?;
    let mut st = State {
        fingerprint,
        stash,
        foreign: Vec::new(),
        pure: HashMap::new(),
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
        untouched: 0,
        untouched_first: None,
        manifests: Manifests::new(),
        sets: None,
        updir: None,
    };
    layout::walk(fd, &mut |dir, listing| st.visit(dir, listing));
    st.resolve();
    let mut job = TrashJob::none();
    if let Some(root) = st.root.take() {
        match empty {
            Empty::Now => {
                trash::empty_at(root.as_fd());
            }
            Empty::Background => trash::spawn_empty(root),
            Empty::Later => job = TrashJob::of(root),
        }
    }
    if let Some(first) = &st.untouched_first {
        let n = st.untouched;
        crate::events::cache::untouched(n, first, layout::shape().root_hint());
    }
    let r = &st.report;
    crate::events::cache::pruned(r.kept.len(), r.stored, r.removed, r.leftovers, r.left);
    Ok((st.report, job))
}

fn cstr_buf<'a>(buf: &'a mut Vec<u8>, name: &[u8]) -> &'a [u8] {
    buf.clear();
    buf.extend_from_slice(name);
    buf.as_slice()
}

impl State<'_, '_> {
    fn visit(&mut self, dir: &DirView<'_>, listing: &Listing) {
        self.plan.clear();
        // What is not the engine's is left alone, and counted for one
        // warning at the end.
        for e in &listing.ents {
            let name = listing.name(e);
            if !layout::is_engines(dir.depth, name, e.kind) {
                self.untouched += 1;
                if self.untouched_first.is_none() {
                    self.untouched_first = Some(Rel(dir.rel, name).to_string());
                }
            }
        }
        if dir.depth < layout::key_depth() {
            // Above the rank files: only links where the engine would find
            // a directory of its layout.
            for e in &listing.ents {
                let name = listing.name(e);
                if e.kind == Kind::Symlink && layout::is_layout_dir(dir.depth, name) {
                    self.symlinked_dir(dir, name);
                }
            }
            return;
        }
        // Can the whole directory go to the trash with one rename? Only if
        // everything in it goes.
        let mut whole = dir.parent.is_some();
        // Does it hold nothing but files of other launches waiting for
        // their set (and their sidecars)? Then a whole set may move with it.
        let mut pure = whole;
        let mut nforeign = 0;
        for (i, e) in listing.ents.iter().enumerate() {
            let name = listing.name(e);
            match dir.role(name) {
                Role::Cache => match e.kind {
                    Kind::Dir => {
                        crate::events::cache::left_directory(Rel(dir.rel, name));
                        self.report.left += 1;
                        whole = false;
                        pure = false;
                    }
                    Kind::File => {
                        let before = self.foreign.len();
                        match self.judge_file(dir, listing, name) {
                            Some(reason) => self.plan.push((i, Act::Cache(reason))),
                            None => {
                                whole = false;
                                if self.foreign.len() > before {
                                    nforeign += 1;
                                } else {
                                    pure = false;
                                }
                            }
                        }
                    }
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
                Role::AutotunerTmp if e.kind != Kind::Dir => {
                    self.plan
                        .push((i, Act::Leftover("FlashInfer temp file left by a crash")));
                }
                Role::KeepwrapTmp if e.kind != Kind::Dir => {
                    self.plan
                        .push((i, Act::Leftover("keepwrap temp file left by a crash")));
                }
                _ => {
                    whole = false;
                    pure = false;
                }
            }
        }
        if self.plan.is_empty() {
            if pure && nforeign > 0 {
                if let Ok(rel) = std::str::from_utf8(dir.rel) {
                    let rel = rel.strip_suffix('/').unwrap_or(rel);
                    self.pure.insert(rel.to_string(), nforeign);
                }
            }
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
                        crate::events::cache::removed_leftover(Rel(dir.rel, name), why);
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
        let Some(root) = self.root.take() else {
            return false;
        };
        let moved = self.take_to_trash(root.as_fd(), parent, name, dir.rel);
        self.root = Some(root);
        moved
    }

    /// Move the directory `name` of `parent` (`rel`, for the log) into the
    /// trash, opening the trash first if needed.
    fn take_to_trash(
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
                    crate::events::cache::trash_unusable(e);
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
                crate::events::cache::trash_move_failed(Rel(rel, b""), e);
                false
            }
        }
    }

    fn log_removed(&mut self, rel: &[u8], name: &[u8], reason: &Reason) {
        self.report.removed += 1;
        if matches!(reason, Reason::Untrusted(_)) {
            crate::events::cache::removed_untrusted(Rel(rel, name), reason);
        } else {
            crate::events::cache::removed(Rel(rel, name), reason);
        }
    }

    fn leftover(&mut self, dir: &DirView<'_>, name: &[u8], why: &str) {
        match fsx::unlink_at(dir.fd, cstr_buf(&mut self.sname, name)) {
            Ok(()) => {
                self.report.leftovers += 1;
                crate::events::cache::removed_leftover(Rel(dir.rel, name), why);
            }
            Err(e) => crate::events::cache::cannot_remove(Rel(dir.rel, name), why, e),
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
                crate::events::cache::removed_symlink(Rel(dir.rel, name), why);
            }
            Err(e) => crate::events::cache::cannot_remove(Rel(dir.rel, name), why, e),
        }
    }

    /// Remove cache file `name` of `dir` (and its sidecar), one log line.
    fn remove(&mut self, fd: BorrowedFd<'_>, rel: &[u8], name: &[u8], reason: &Reason) {
        match fsx::unlink_at(fd, cstr_buf(&mut self.cname, name)) {
            Ok(()) => self.log_removed(rel, name, reason),
            Err(e) => {
                self.report.left += 1;
                crate::events::cache::cannot_remove(Rel(rel, name), reason, e);
                return;
            }
        }
        layout::sidecar_name(name, &mut self.sname);
        let sname = &self.sname[..self.sname.len() - 1];
        if let Err(e) = fsx::unlink_at(fd, sname) {
            if e.raw_os_error() != Some(nix::errno::Errno::EISDIR as i32) {
                crate::events::cache::cannot_remove_sidecar(Rel(rel, sname), e);
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
        let sidecar_st = match fsx::read_at(dir.fd, sname, &mut self.sbuf, MAX_SIDECAR) {
            Ok(st) => st,
            Err(e) => {
                let reason = if e.kind() == io::ErrorKind::NotFound {
                    Reason::NoSidecar
                } else {
                    Reason::SidecarUnreadable(e.to_string())
                };
                return Some(reason);
            }
        };
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
                match judge::judge_sidecar_for(&self.sbuf, None, is_rel) {
                    Ok(sc) => {
                        foreign = true;
                        sc
                    }
                    Err(reason) => return Some(Reason::OtherLaunchBad(fp8, Box::new(reason))),
                }
            }
            Err(reason) => return Some(reason),
        };
        // judge_sidecar matched the path, so it is UTF-8.
        let path = rel.to_string_exact().unwrap_or_default();
        if foreign {
            // Its bytes (or its stamp) are checked only once its set is
            // whole by the sidecars (a set is stored or removed whole: one
            // changed member is enough to know).
            self.foreign.push(Foreign {
                path,
                sc,
                sidecar_id: FileId::of(&sidecar_st),
            });
            return None;
        }
        // The very file that was hashed at signing (same inode, times and
        // size; its change time was settled then, so no change since could
        // keep it): its bytes are the ones signed, and were a JSON object.
        // Anything else is read and hashed.
        let verdict = check_file(dir.fd, cstr_buf(&mut self.cname, name), &sc, &mut self.cbuf);
        match verdict {
            Ok(_) => {
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
        if !cands.is_empty() {
            self.load_manifest(&root, self.fingerprint);
        }
        let verdicts = judge::resolve_sets(&views, &self.manifests);
        for ((path, _), verdict) in cands.iter().zip(verdicts) {
            match verdict {
                None => {
                    crate::events::cache::kept(path, self.report.kept.len() < PER_FILE_LINES);
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
                    self.remove_path(&root, path, &reason);
                }
            }
        }
        more_lines(self.report.kept.len(), "kept");
        self.resolve_foreign(&root);
        self.root = Some(root);
    }

    /// Read and check the set manifest of launch `fp`, once.
    fn load_manifest(&mut self, root: &OwnedFd, fp: &str) {
        if self.manifests.contains_key(fp) {
            return;
        }
        let sets = self
            .sets
            .get_or_insert_with(|| sidecar::open_sets(root.as_fd(), false).ok());
        let m = sidecar::read_manifest(sets.as_ref().map(|f| f.as_fd()), fp);
        self.manifests.insert(fp.to_string(), m);
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
                crate::events::cache::cannot_remove(
                    path,
                    reason,
                    format_args!("open directory {parent}: {e}"),
                );
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
        let fps: Vec<String> = foreign.iter().map(|f| f.sc.fingerprint.clone()).collect();
        for fp in fps {
            self.load_manifest(root, &fp);
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
        let stored_before = self.report.stored;
        for files in sets {
            self.store_set(root, &files);
        }
        more_lines(self.report.stored - stored_before, "stored");
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
        // The bytes, member by member; the first that fails fails the set.
        let mut checked = Vec::with_capacity(files.len());
        let mut failed: Option<(usize, Reason)> = None;
        let mut open: Option<(&str, OwnedFd)> = None;
        for (i, f) in files.iter().enumerate() {
            let (p, name) = split(&f.path);
            if open.as_ref().is_none_or(|(q, _)| *q != p) {
                match self.open_rel(root, p) {
                    Ok(d) => open = Some((p, d)),
                    Err(e) => {
                        failed = Some((i, Reason::Unreadable(e.to_string())));
                        break;
                    }
                }
            }
            let Some((_, d)) = &open else { break };
            match check_file(d.as_fd(), name.as_bytes(), &f.sc, &mut self.cbuf) {
                Ok(id) => checked.push([id, f.sidecar_id]),
                Err(reason) => {
                    failed = Some((i, reason));
                    break;
                }
            }
        }
        drop(open);
        if let Some((bad, why)) = failed {
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
                    Reason::OtherLaunchBad(fp8.clone(), Box::new(why))
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
            return;
        }
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
            fingerprint: sc.fingerprint.clone(),
            set: SetRecord {
                id: manifest.id.clone(),
                members: manifest.members.clone(),
            },
            signed_at: sc.signed_at,
            dir,
            checked: files
                .iter()
                .zip(checked)
                .map(|(f, ids)| (f.path.clone(), ids))
                .collect(),
        };
        let stash = self
            .stash
            .as_mut()
            .expect("foreign files only with a stash");
        match stash(root.as_fd(), &set) {
            Ok(()) => {
                for m in &set.set.members {
                    crate::events::cache::stored(
                        &m.path,
                        &fp8,
                        self.report.stored < PER_FILE_LINES,
                    );
                    self.report.stored += 1;
                }
            }
            Err(e) => {
                crate::events::cache::cannot_store(set.set.members.len(), &fp8, e);
                for m in &set.set.members {
                    self.remove_path(root, &m.path, &Reason::OtherLaunch(fp8.clone()));
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

/// Is the open cache file the very file whose bytes `sc` signs: the one
/// hashed at signing, its identity recorded then (its change time settled,
/// so that no change since could keep it)? Its bytes are then the ones
/// signed, and were a JSON object.
fn stamped(sc: &Sidecar, st: &nix::sys::stat::FileStat) -> bool {
    sc.stat.is_some_and(|s| s == Stamp::of(st)) && st.st_size.max(0) as u64 == sc.size
}

/// Check the cache file `name` of `dir` against its sidecar `sc`: the very
/// file hashed at signing (its stamp, from one `lstat`: no open), else its
/// bytes (read, hashed, a JSON object). The identity of the file checked.
fn check_file(
    dir: BorrowedFd<'_>,
    name: &[u8],
    sc: &Sidecar,
    buf: &mut Vec<u8>,
) -> Result<FileId, Reason> {
    if let Ok(st) = fsx::lstat_at(dir, name) {
        if Kind::from_mode(st.st_mode) == Kind::File && stamped(sc, &st) {
            return Ok(FileId::of(&st));
        }
    }
    match fsx::open_regular_at(dir, name) {
        Err(e) => Err(Reason::Unreadable(e.to_string())),
        Ok((_, st)) if stamped(sc, &st) => Ok(FileId::of(&st)),
        Ok((mut file, st)) => match fsx::read_open(&mut file, &st, buf, MAX_CACHE_FILE) {
            Err(e) => Err(Reason::Unreadable(e.to_string())),
            Ok(()) => judge::judge_bytes(sc, buf).map(|()| FileId::of(&st)),
        },
    }
}

/// After [`PER_FILE_LINES`] lines of a kind, one line counts the rest.
fn more_lines(n: usize, what: &str) {
    if n > PER_FILE_LINES {
        crate::events::cache::more_files(what, n - PER_FILE_LINES);
    }
}

fn exists(root: BorrowedFd<'_>, rel: &str) -> bool {
    let (parent, name) = split(rel);
    match fsx::open_dir_path(root, Path::new(parent)) {
        Ok(d) => fsx::lstat_at(d.as_fd(), name.as_bytes()).is_ok(),
        Err(_) => false,
    }
}
