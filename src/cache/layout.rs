//! Which names under the root are what, and the no-follow walk over the tree.
//!
//! Only paths shaped like the engine's cache are the engine's: the
//! directories of its [`Layout`], and in its folders of cache files the
//! cache files with keepwrap's `.launch` sidecars, the engine's and
//! keepwrap's `.keepwrap-*.tmp` temp files, and `runs/`. Everything else
//! under the root (a `--cache-dir` pointed at a model directory, a volume
//! with other things on it) is never judged, moved nor removed.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::fsx::{self, Kind};

/// What a directory entry's name makes it, before its type is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `rank_*.json`: a cache file to judge.
    Cache,
    /// `rank_*.launch`: keepwrap's sidecar.
    Sidecar,
    /// `.autotuner_*.tmp`: FlashInfer's temp file, left by a crash.
    AutotunerTmp,
    /// `.keepwrap-*.tmp`: keepwrap's own temp file, left by a crash.
    KeepwrapTmp,
    /// Anything else: left alone.
    Other,
}

pub const CACHE_EXT: &[u8] = b".json";
pub const SIDECAR_EXT: &[u8] = b".launch";

/// One engine's cache tree below its root: which directories are its
/// layout and what each file name in a folder of cache files is. Each
/// engine implements it in its own folder (`engine/<name>/layout.rs`);
/// the cache, the store, the share and the fleet are given a [`Shape`]
/// and ask it.
pub trait Layout: Sync {
    /// The shape's name, for messages and comparisons.
    fn name(&self) -> &'static str;

    /// The depth of the folders that hold the files (the root is 0).
    fn key_depth(&self) -> usize;

    /// What the user should check when entries of another shape are found.
    fn root_hint(&self) -> &'static str;

    /// What the name of an entry of a folder of cache files makes it.
    fn role(&self, name: &[u8]) -> Role;

    /// Is `name` the name of a directory of the engine's layout at `depth`
    /// (the root is 0)?
    fn is_layout_dir(&self, depth: usize, name: &[u8]) -> bool;

    /// The root's own directories that are the engine's without being
    /// walked (a store the engine manages itself).
    fn is_unwalked(&self, _depth: usize, _name: &[u8]) -> bool {
        false
    }

    /// Is `name` a file of the engine's, at `depth` above the folders of
    /// cache files, that is neither judged nor kept (the engine rewrites
    /// it when it is missing)?
    fn is_engines_file(&self, _depth: usize, _name: &[u8]) -> bool {
        false
    }

    /// Whether the bytes of the cache file `name` are what the engine
    /// writes under that name, beyond being a JSON object: Err says why
    /// not (the file is not signed, nor the rest of its folder).
    fn check_file(&self, _name: &[u8], _bytes: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// The file (relative to the root) that says which build a cache file
    /// at `path` was tuned under, for a layout whose cache files carry no
    /// stamp of their own (the fleet matches a set to a machine by it);
    /// None when the file stamps itself.
    fn stamp_of(&self, _path: &str) -> Option<String> {
        None
    }

    /// Whether `bytes` are the stamp the engine would write at
    /// `stamp_path` ([`Layout::stamp_of`]): Err says why not.
    fn check_stamp(&self, _stamp_path: &str, _bytes: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// What a cache file that stamps itself in the engine's own form says
    /// it was tuned under: the GPU model and the build (alike for every
    /// file of one set), or why it says none. None: FlashInfer's
    /// `_metadata` stamp.
    fn stamp_in(&self, _path: &str, _bytes: &[u8]) -> Option<Result<(String, String), String>> {
        None
    }

    /// Why prune removes an engine's temp file ([`Role::AutotunerTmp`]).
    fn tmp_reason(&self) -> &'static str {
        "FlashInfer temp file left by a crash"
    }

    /// Whether a cache file's name must say its rank for the file to be
    /// published to other nodes (a set of per-rank files).
    fn names_ranks(&self) -> bool {
        false
    }

    /// Whether the engine compares this tree's files whole across the
    /// nodes of a launch and deletes all of them on any difference, so
    /// that every node must hold the same set: the union of every node's
    /// files (the lowest node's where two differ), rather than its own.
    fn same_on_every_node(&self) -> bool {
        false
    }

    /// The rank a cache file's name gives it, for a union of a folder's
    /// rank files; None when the name is not a rank file's.
    fn rank_of(&self, _name: &str) -> Option<RankId> {
        None
    }

    /// The names of rank files, as a line shows them.
    fn rank_name_form(&self) -> &'static str {
        "no rank files"
    }
}

/// A rank's place in the launch, from its file name ([`Layout::rank_of`]).
/// Ordered by `(tp, pp, dp)`: the lowest wins a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RankId {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tp{} pp{} dp{}", self.tp, self.pp, self.dp)
    }
}

/// The shape of the tree keepwrap guards: one engine's [`Layout`], a value
/// passed from where the engine is known to every function that judges a
/// path. Two shapes are equal when their layouts are the same.
#[derive(Clone, Copy)]
pub struct Shape(&'static dyn Layout);

impl Shape {
    /// The shape of `layout`.
    pub const fn of(layout: &'static dyn Layout) -> Shape {
        Shape(layout)
    }

    /// The depth of the folders that hold the files (the root is 0).
    pub fn key_depth(self) -> usize {
        self.0.key_depth()
    }

    /// What the user should check when entries of another shape are found.
    pub fn root_hint(self) -> &'static str {
        self.0.root_hint()
    }

    /// What the name of an entry of a folder of cache files makes it, in
    /// this shape.
    pub fn role(self, name: &[u8]) -> Role {
        self.0.role(name)
    }

    /// Is `name` the name of a directory of the engine's layout at `depth`
    /// (the root is 0), in this shape?
    pub fn is_layout_dir(self, depth: usize, name: &[u8]) -> bool {
        self.0.is_layout_dir(depth, name)
    }

    /// See [`Layout::tmp_reason`].
    pub fn tmp_reason(self) -> &'static str {
        self.0.tmp_reason()
    }

    /// See [`Layout::names_ranks`].
    pub fn names_ranks(self) -> bool {
        self.0.names_ranks()
    }

    /// See [`Layout::same_on_every_node`].
    pub fn same_on_every_node(self) -> bool {
        self.0.same_on_every_node()
    }

    /// See [`Layout::rank_of`].
    pub fn rank_of(self, name: &str) -> Option<RankId> {
        self.0.rank_of(name)
    }

    /// See [`Layout::check_file`].
    pub fn check_file(self, name: &[u8], bytes: &[u8]) -> Result<(), String> {
        self.0.check_file(name, bytes)
    }

    /// See [`Layout::stamp_of`].
    pub fn stamp_of(self, path: &str) -> Option<String> {
        self.0.stamp_of(path)
    }

    /// See [`Layout::check_stamp`].
    pub fn check_stamp(self, stamp_path: &str, bytes: &[u8]) -> Result<(), String> {
        self.0.check_stamp(stamp_path, bytes)
    }

    /// See [`Layout::stamp_in`].
    pub fn stamp_in(self, path: &str, bytes: &[u8]) -> Option<Result<(String, String), String>> {
        self.0.stamp_in(path, bytes)
    }

    /// See [`Layout::rank_name_form`].
    pub fn rank_name_form(self) -> &'static str {
        self.0.rank_name_form()
    }

    /// Is an entry of a directory at `depth` keepwrap's or the engine's, by
    /// its name and kind (a directory of the layout, a file of a folder of
    /// cache files, `runs/`, keepwrap's `.keepwrap/` at the root)? What is
    /// not is left alone, and reported.
    pub fn is_engines(self, depth: usize, name: &[u8], kind: Kind) -> bool {
        if depth < self.key_depth() {
            return (depth == 0 && name == crate::STATE_DIR.as_bytes())
                || (kind == Kind::Dir && self.0.is_unwalked(depth, name))
                || (kind == Kind::File && self.0.is_engines_file(depth, name))
                || (matches!(kind, Kind::Dir | Kind::Symlink) && self.is_layout_dir(depth, name));
        }
        match self.role(name) {
            Role::Other => name == b"runs",
            _ => kind != Kind::Dir || self.role(name) == Role::Cache,
        }
    }
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for Shape {}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

/// A FlashInfer version directory: `0.7.2`, `0.6.1.post2`, `unknown`.
pub fn is_version_dir(name: &[u8]) -> bool {
    name == b"unknown"
        || (name.first().is_some_and(u8::is_ascii_digit)
            && name.contains(&b'.')
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(b)))
}

/// `rank_tp0_pp0_dp0.json` -> `rank_tp0_pp0_dp0.launch`, into `out`
/// (NUL-terminated for the syscalls).
pub fn sidecar_name(cache_name: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&cache_name[..cache_name.len() - CACHE_EXT.len()]);
    out.extend_from_slice(SIDECAR_EXT);
    out.push(0);
}

/// A path relative to the root, shown without allocating: `prefix` is the
/// directory (`""` or ending in `/`), `name` the entry.
#[derive(Clone, Copy)]
pub struct Rel<'a>(pub &'a [u8], pub &'a [u8]);

fn write_bytes(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    for chunk in b.utf8_chunks() {
        f.write_str(chunk.valid())?;
        for byte in chunk.invalid() {
            write!(f, "\\x{byte:02x}")?;
        }
    }
    Ok(())
}

impl fmt::Display for Rel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bytes(f, self.0)?;
        write_bytes(f, self.1)
    }
}

impl Rel<'_> {
    /// The path as UTF-8 (None if it is not).
    pub fn to_string_exact(self) -> Option<String> {
        let a = std::str::from_utf8(self.0).ok()?;
        let b = std::str::from_utf8(self.1).ok()?;
        let mut s = String::with_capacity(a.len() + b.len());
        s.push_str(a);
        s.push_str(b);
        Some(s)
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, Copy)]
pub struct Ent {
    off: u32,
    len: u32,
    pub kind: Kind,
    /// `d_ino`: the inode number the name was bound to when listed.
    pub ino: u64,
}

/// The entries of one directory: names packed in one buffer.
#[derive(Default)]
pub struct Listing {
    names: Vec<u8>,
    pub ents: Vec<Ent>,
}

impl Listing {
    pub fn name(&self, e: &Ent) -> &[u8] {
        &self.names[e.off as usize..(e.off + e.len) as usize]
    }

    /// Is there an entry called `name` (any kind)? The listing is sorted by
    /// name after [`read_listing`].
    pub fn find(&self, name: &[u8]) -> Option<&Ent> {
        self.ents
            .binary_search_by(|e| self.name(e).cmp(name))
            .ok()
            .map(|i| &self.ents[i])
    }
}

/// Why a directory is not trusted: another user can write it.
#[derive(Debug, Clone)]
pub struct Untrusted(pub String);

/// Who can write the directory with this `fstat`: None if only us (or
/// root), else why not.
pub fn dir_untrusted(st: &nix::sys::stat::FileStat, euid: u32) -> Option<&'static str> {
    let mode = st.st_mode;
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        Some("world-writable without the sticky bit")
    } else if st.st_uid != euid && st.st_uid != 0 {
        Some("owned by another user")
    } else {
        None
    }
}

/// A directory being visited.
pub struct DirView<'a> {
    pub fd: BorrowedFd<'a>,
    /// Path relative to the root: `""` for the root, else ending in `/`.
    pub rel: &'a [u8],
    /// Set when this directory (or one above it) is writable by another user.
    pub untrusted: Option<&'a Untrusted>,
    /// The parent directory and this directory's name in it (None for the root).
    pub parent: Option<(BorrowedFd<'a>, &'a [u8])>,
    /// 0 for the root, [`Shape::key_depth`] for a folder of cache files.
    pub depth: usize,
    /// The shape of the tree.
    pub shape: Shape,
}

impl DirView<'_> {
    /// What an entry called `name` is here: its [`Shape::role`] in a
    /// `<key16>/` directory, [`Role::Other`] anywhere else.
    pub fn role(&self, name: &[u8]) -> Role {
        if self.depth == self.shape.key_depth() {
            self.shape.role(name)
        } else {
            Role::Other
        }
    }
}

fn read_listing(dir: BorrowedFd<'_>, rel: &[u8], out: &mut Listing, buf: &mut [u8]) -> bool {
    out.names.clear();
    out.ents.clear();
    let mut pending_unknown = Vec::new();
    let read = super::dirents::for_each(dir, buf, &mut |e| {
        let kind = e.kind.unwrap_or_else(|| {
            pending_unknown.push(out.ents.len());
            Kind::File
        });
        let off = out.names.len() as u32;
        out.names.extend_from_slice(e.name);
        out.ents.push(Ent {
            off,
            len: e.name.len() as u32,
            kind,
            ino: e.ino,
        });
        true
    });
    if let Err(e) = read {
        crate::events::Event::CannotReadDir {
            dir: Rel(rel, b"").to_string(),
            error: e.to_string(),
        }
        .emit();
        return false;
    }
    // File systems without d_type: lstat those entries.
    if !pending_unknown.is_empty() {
        let mut cname = Vec::new();
        for i in pending_unknown {
            let e = out.ents[i];
            cname.clear();
            cname.extend_from_slice(out.name(&e));
            match fsx::lstat_at(dir, cname.as_slice()) {
                Ok(st) => out.ents[i].kind = Kind::from_mode(st.st_mode),
                Err(err) => {
                    // Gone meanwhile, most likely; a File is judged and
                    // its open fails with the reason.
                    crate::events::Event::CannotStat {
                        path: Rel(rel, &cname).to_string(),
                        error: err.to_string(),
                    }
                    .emit();
                }
            }
        }
    }
    let names = &out.names;
    out.ents.sort_unstable_by(|a, b| {
        names[a.off as usize..(a.off + a.len) as usize]
            .cmp(&names[b.off as usize..(b.off + b.len) as usize])
    });
    true
}

/// Walk the engine's layout below `root` (already open), a tree of
/// `shape`: `visit` is called
/// once per directory (the root, `<version>/`, `sm<arch>/`, `<key16>/`)
/// with its listing, before walking into its subdirectories. Walks into
/// nothing else: not `runs/`, nor a directory of another shape, nor a
/// symlink. I/O errors are logged and the subtree skipped. Returns whether
/// every directory of the layout was listed (no error skipped one).
pub fn walk(root: OwnedFd, shape: Shape, visit: &mut dyn FnMut(&DirView<'_>, &Listing)) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    let mut rel = Vec::new();
    let mut cx = WalkCx {
        euid,
        buf: super::dirents::large_buf(),
        complete: true,
        shape,
    };
    walk_dir(root, None, &mut rel, None, &mut cx, 0, visit);
    cx.complete
}

/// What every directory of a walk shares: who we are, the listing buffer,
/// whether no directory was skipped, the shape of the tree.
struct WalkCx {
    euid: u32,
    buf: Vec<u8>,
    complete: bool,
    shape: Shape,
}

fn walk_dir(
    dir: OwnedFd,
    parent: Option<(BorrowedFd<'_>, &[u8])>,
    rel: &mut Vec<u8>,
    inherited: Option<&Untrusted>,
    cx: &mut WalkCx,
    depth: usize,
    visit: &mut dyn FnMut(&DirView<'_>, &Listing),
) {
    let own = match fsx::stat_fd(dir.as_fd()) {
        Ok(st) => dir_untrusted(&st, cx.euid).map(|why| {
            let shown = if rel.is_empty() {
                ".".to_string()
            } else {
                Rel(&rel[..rel.len() - 1], b"").to_string()
            };
            Untrusted(format!(
                "in a directory another user can write ({shown}: {why})"
            ))
        }),
        Err(e) => {
            crate::events::Event::CannotStatDir {
                dir: Rel(rel, b"").to_string(),
                error: e.to_string(),
            }
            .emit();
            cx.complete = false;
            return;
        }
    };
    let untrusted = inherited.or(own.as_ref());
    let mut listing = Listing::default();
    if !read_listing(dir.as_fd(), rel, &mut listing, &mut cx.buf) {
        cx.complete = false;
        return;
    }
    visit(
        &DirView {
            fd: dir.as_fd(),
            rel,
            untrusted,
            parent,
            depth,
            shape: cx.shape,
        },
        &listing,
    );
    let mut cname = Vec::new();
    for e in &listing.ents {
        let name = listing.name(e);
        if e.kind != Kind::Dir || !cx.shape.is_layout_dir(depth, name) {
            continue;
        }
        cname.clear();
        cname.extend_from_slice(name);
        let child = match fsx::open_dir_at(dir.as_fd(), cname.as_slice()) {
            Ok(c) => c,
            Err(err) => {
                if err.raw_os_error() != Some(libc_enoent()) {
                    crate::events::Event::CannotOpenDir {
                        dir: Rel(rel, name).to_string(),
                        error: err.to_string(),
                    }
                    .emit();
                    cx.complete = false;
                }
                continue;
            }
        };
        let len = rel.len();
        rel.extend_from_slice(name);
        rel.push(b'/');
        walk_dir(
            child,
            Some((dir.as_fd(), name)),
            rel,
            untrusted,
            cx,
            depth + 1,
            visit,
        );
        rel.truncate(len);
    }
}

fn libc_enoent() -> i32 {
    nix::errno::Errno::ENOENT as i32
}
