//! Prune: before the engine starts, remove every cache file this launch must
//! not load. Here the first pass: the walk, each file judged on its own;
//! `sets.rs` the second pass (the sets), `remove.rs` the removals.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;

use super::fsx::{self, split, Kind};
use super::judge::{self, Candidate, Manifests, MemberWhy, Reason};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::sidecar::{self, Sidecar, Stamp};
use super::trash::{self, Trash, TrashJob};
use super::{FileId, ForeignSet, PruneReport, Shape};
use crate::digest::Fingerprint;

mod remove;
mod sets;

/// Moves a whole set signed for another launch out of the tree (into the
/// store). On error every member must be back in place: prune removes them.
pub type Stash<'s> = &'s mut dyn FnMut(BorrowedFd<'_>, &ForeignSet) -> io::Result<()>;

/// A rule of the launch's own over files prune would keep for it (a path
/// relative to the root): why it must not load the file, if it must not.
/// Applied before the file's line is logged, so that a file gets one
/// verdict: removed, with why.
pub type Refuse<'r> = &'r dyn Fn(&str) -> Option<String>;

/// Larger sidecars are not read (a sidecar is about 470 bytes).
pub const MAX_SIDECAR: u64 = 64 << 20;
/// Larger cache files are not read (real ones are KB to a few MB).
pub const MAX_CACHE_FILE: u64 = 256 << 20;

struct State<'f, 's> {
    fingerprint: &'f Fingerprint,
    /// The shape of the tree (the manifests' members are judged by it).
    shape: Shape,
    /// Where whole sets of other launches go; None: they are removed.
    stash: Option<Stash<'s>>,
    /// Files this launch must not load although signed for it.
    refuse: Option<Refuse<'s>>,
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
    /// Files trusted on their own, waiting for the set check, with the
    /// identity of the file checked.
    cands: Vec<(String, Sidecar, FileId)>,
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
    /// Whether a stamp may vouch for a file of the directory being
    /// visited ([`fsx::changes_noticed`]), once asked.
    noticed: Option<bool>,
    /// A member of this launch's committed set that is not trusted: the
    /// set cannot be whole, so every other file of this launch goes too,
    /// without being read (never a partial hit). Its path.
    doomed: Option<String>,
    /// The paths this launch's set manifest lists, once a file of this
    /// launch was rejected (empty when it has no valid one).
    listed: Option<sidecar::MemberPaths>,
    /// The cache files removed, by the kind of their reason.
    reasons: crate::events::Tally,
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
/// are removed like the rest). `refuse`: files signed for this launch it
/// must not load all the same.
pub fn prune<'s>(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    empty: Empty,
    stash: Option<Stash<'s>>,
    refuse: Option<Refuse<'s>>,
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
        shape,
        stash,
        refuse,
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
        noticed: None,
        doomed: None,
        listed: None,
        reasons: crate::events::Tally::default(),
    };
    let listed = layout::walk(fd, shape, &mut |dir, listing| st.visit(dir, listing));
    st.resolve();
    st.report.whole = listed && st.report.left == 0;
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
        crate::events::Event::Untouched {
            entries: n,
            first: first.to_string(),
            hint: shape.root_hint().to_string(),
        }
        .emit();
    }
    let r = &st.report;
    crate::events::Event::Pruned {
        kept: r.kept.len(),
        stored: r.stored,
        removed: r.removed,
        reasons: st.reasons.clone(),
        leftovers: r.leftovers,
        left: r.left,
    }
    .emit();
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
        self.noticed = None;
        self.count_untouched(dir, listing);
        if dir.depth < dir.shape.key_depth() {
            // Above the rank files: only links where the engine would find
            // a directory of its layout.
            for e in &listing.ents {
                let name = listing.name(e);
                if e.kind == Kind::Symlink && dir.shape.is_layout_dir(dir.depth, name) {
                    self.symlinked_dir(dir, name);
                }
            }
            return;
        }
        let (whole, pure, nforeign) = self.plan_dir(dir, listing);
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
        self.carry_out(dir, listing, &plan, whole);
        self.plan = plan;
    }

    /// What is not the engine's is left alone, and counted for one warning
    /// at the end.
    fn count_untouched(&mut self, dir: &DirView<'_>, listing: &Listing) {
        for e in &listing.ents {
            let name = listing.name(e);
            if !dir.shape.is_engines(dir.depth, name, e.kind) {
                self.untouched += 1;
                if self.untouched_first.is_none() {
                    self.untouched_first = Some(Rel(dir.rel, name).to_string());
                }
            }
        }
    }

    /// Plan what goes in a directory of rank files (into `self.plan`).
    /// Returns: can the whole directory go, does it hold nothing but files
    /// of other launches waiting for their set, and how many of those.
    fn plan_dir(&mut self, dir: &DirView<'_>, listing: &Listing) -> (bool, bool, usize) {
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
                        crate::events::Event::LeftDirectory {
                            path: Rel(dir.rel, name).to_string(),
                            reason: "a directory named *.json, which keepwrap does not remove",
                        }
                        .emit();
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
                    self.plan.push((i, Act::Leftover(dir.shape.tmp_reason())));
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
        (whole, pure, nforeign)
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
        let sidecar_ino = match listing.find(sname).map(|e| (e.kind, e.ino)) {
            None => return Some(Reason::NoSidecar),
            Some((Kind::File, ino)) => ino,
            Some((k, _)) => return Some(Reason::SidecarUnreadable(format!("a {}", k.name()))),
        };
        // The listing said a regular file: read without an `fstat` (the
        // identity of a sidecar matters only for another launch's set).
        let sidecar = match fsx::read_listed_at(dir.fd, sname, &mut self.sbuf, MAX_SIDECAR) {
            Ok(file) => file,
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
        let judged = if self.stash.is_some() {
            // One of another launch is judged for its own launch: a whole
            // set may be stored.
            judge::judge_sidecar_or_foreign(&self.sbuf, self.fingerprint, is_rel)
        } else {
            judge::judge_sidecar(&self.sbuf, self.fingerprint, is_rel).map(|sc| (sc, false))
        };
        let (mut sc, foreign) = match judged {
            Ok(judged) => judged,
            Err(reason) => return Some(reason),
        };
        // In memory (tmpfs), a map written after it read the file changes
        // it with no new change time: no stamp vouches for it, it is read.
        if sc.stat.is_some()
            && !*self
                .noticed
                .get_or_insert_with(|| fsx::changes_noticed(dir.fd))
        {
            sc.stat = None;
        }
        // judge_sidecar matched the path, so it is UTF-8.
        let path = rel.to_string_exact().unwrap_or_default();
        drop(sidecar);
        if foreign {
            // Its bytes (or its stamp) are checked only once its set is
            // whole by the sidecars (a set is stored or removed whole: one
            // changed member is enough to know). The sidecar's identity is
            // the inode number this listing bound its name to (no
            // `fstat`): the listing of the directory after it moves into
            // the store must show the same number, else the sidecar was
            // replaced (by the one read, or after it) and the set is not
            // stored ([`crate::store`]'s `same_as_checked`: a number that
            // differs is refused, as no `lstat` gives this identity's
            // modification time).
            self.foreign.push(Foreign {
                path,
                sc,
                sidecar_id: FileId {
                    ino: sidecar_ino,
                    size: self.sbuf.len() as u64,
                    mtime: (i64::MIN, 0),
                },
            });
            return None;
        }
        if let Some(member) = &self.doomed {
            // The set of this launch lost a member: this file goes with it,
            // whatever its bytes (not read; another size than signed is
            // said as such, from one `lstat`).
            let cname = cstr_buf(&mut self.cname, name);
            if let Ok(st) = fsx::lstat_at(dir.fd, cname) {
                let size = st.st_size.max(0) as u64;
                if Kind::from_mode(st.st_mode) == Kind::File && size != sc.size {
                    self.rejected.push(path);
                    return Some(Reason::SizeChanged {
                        now: size,
                        signed: sc.size,
                    });
                }
            }
            return Some(Reason::SetIncomplete {
                member: member.clone(),
                why: MemberWhy::NotTrusted,
            });
        }
        // The very file that was hashed at signing (same inode, times and
        // size; its change time was settled then, so no change since could
        // keep it): its bytes are the ones signed, and were a JSON object.
        // Anything else is read and hashed.
        let verdict = check_file(dir.fd, cstr_buf(&mut self.cname, name), &sc, &mut self.cbuf);
        match verdict {
            Ok(id) => {
                self.cands.push((path, sc, id));
                None
            }
            Err(reason) => {
                if self.lists(&path) {
                    self.doomed = Some(path.clone());
                }
                self.rejected.push(path);
                Some(reason)
            }
        }
    }

    /// Does this launch's set manifest list `path` (read once)?
    fn lists(&mut self, path: &str) -> bool {
        if self.listed.is_none() {
            let listed = self.root.take().and_then(|root| {
                let (fingerprint, shape) = (self.fingerprint, self.shape);
                let paths =
                    sidecar::read_member_paths(self.sets_of(&root), fingerprint.as_str(), shape);
                self.root = Some(root);
                paths
            });
            self.listed = Some(listed.unwrap_or_default());
        }
        self.listed.as_ref().is_some_and(|l| l.contains(path))
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
    // (No stamp recorded: nothing to compare an `lstat` with.)
    if sc.stat.is_some() {
        if let Ok(st) = fsx::lstat_at(dir, name) {
            let size = st.st_size.max(0) as u64;
            if Kind::from_mode(st.st_mode) == Kind::File && stamped(sc, &st) {
                return Ok(FileId::of(&st));
            }
            // Another size than signed: changed, whatever its bytes (not
            // read). What is not a regular file is refused by the open.
            if Kind::from_mode(st.st_mode) == Kind::File && size != sc.size {
                return Err(Reason::SizeChanged {
                    now: size,
                    signed: sc.size,
                });
            }
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
