//! No-follow file operations relative to a directory descriptor.
//!
//! Everything keepwrap writes, renames or deletes in a tree another process
//! (the engine, or another user) can also write goes through here: names are
//! single path components resolved against an open directory, a final
//! symlink is never followed (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`; `unlinkat`
//! and `renameat` act on the link itself), and nothing blocks on a FIFO
//! (`O_NONBLOCK`, then `fstat` must say regular file).

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};

/// What a directory entry is, without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    Device,
}

impl Kind {
    pub fn from_mode(mode: u32) -> Kind {
        match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            SFlag::S_IFIFO => Kind::Fifo,
            SFlag::S_IFSOCK => Kind::Socket,
            _ => Kind::Device,
        }
    }

    /// `symlink`, `FIFO`, ... for "not a regular file (...)".
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "regular file",
            Kind::Dir => "directory",
            Kind::Symlink => "symlink",
            Kind::Fifo => "FIFO",
            Kind::Socket => "socket",
            Kind::Device => "device",
        }
    }
}

fn err(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// Open a directory given by the caller (a final symlink is followed: the
/// cache root may well be a link to a bigger disk).
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    openat(
        AT_FDCWD,
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)
}

/// Open the subdirectory `name` of `dir`; fails on a symlink (`ELOOP`) or a
/// non-directory (`ENOTDIR`).
pub fn open_dir_at<P: ?Sized + nix::NixPath>(dir: BorrowedFd<'_>, name: &P) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)
}

/// Open the directory `rel` (relative, no `..`) below `root`, never
/// following a symlink: one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
/// where the kernel has it (Linux 5.6), else one component at a time.
pub fn open_dir_path(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    match open_beneath(root, rel) {
        Some(opened) => opened,
        None => walk_dir_path(root, rel, open_dir_at::<[u8]>),
    }
}

/// Set once `openat2` is refused as a call (an older kernel, or a seccomp
/// filter that answers EPERM): the walk does every open from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// `rel` opened by one `openat2`, or None where the walk must open it: an
/// empty or not plain path (the walk answers those), no `openat2`, or a
/// rename the kernel saw race the lookup.
fn open_beneath(root: BorrowedFd<'_>, rel: &Path) -> Option<io::Result<OwnedFd>> {
    use nix::fcntl::{openat2, OpenHow, ResolveFlag};
    if NO_OPENAT2.load(Ordering::Relaxed)
        || !rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        || !rel.components().any(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    match openat2(root, rel, how) {
        Ok(fd) => Some(Ok(fd)),
        Err(Errno::ENOSYS | Errno::EPERM | Errno::EINVAL) => {
            NO_OPENAT2.store(true, Ordering::Relaxed);
            None
        }
        Err(Errno::EAGAIN | Errno::EXDEV) => None,
        Err(e) => Some(Err(err(e))),
    }
}

/// Walk `rel` below `root` one plain component at a time, each opened from
/// its parent by `step`; `root` itself (a new descriptor) for an empty path.
pub(super) fn walk_dir_path(
    root: BorrowedFd<'_>,
    rel: &Path,
    step: impl Fn(BorrowedFd<'_>, &[u8]) -> io::Result<OwnedFd>,
) -> io::Result<OwnedFd> {
    let mut cur: Option<OwnedFd> = None;
    for c in rel.components() {
        let name = match c {
            Component::Normal(n) => n,
            Component::CurDir => continue,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "path is not a plain relative path",
                ))
            }
        };
        let next = {
            let base = cur.as_ref().map(|f| f.as_fd()).unwrap_or(root);
            step(base, name.as_bytes())?
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => root.try_clone_to_owned(),
    }
}

/// `fstatat(..., AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at<P: ?Sized + nix::NixPath>(dir: BorrowedFd<'_>, name: &P) -> io::Result<FileStat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(err)
}

/// `fstat` of an open descriptor.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<FileStat> {
    fstat(fd).map_err(err)
}

/// Open `name` in `dir` for reading: no symlink followed, no blocking on a
/// FIFO, and an error unless it is a regular file (`InvalidInput` with the
/// kind's name).
pub fn open_regular_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
) -> io::Result<(File, FileStat)> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    let (fd, st) = regular_or_refuse(fd, "")?;
    Ok((File::from(fd), st))
}

/// The file `opened` by an `openat` with `O_NOFOLLOW`, with its `fstat`, or
/// `InvalidInput` naming what it is instead of a regular file (a symlink,
/// a FIFO, ...), each message followed by `suffix`.
fn regular_or_refuse(
    opened: nix::Result<OwnedFd>,
    suffix: &str,
) -> io::Result<(OwnedFd, FileStat)> {
    let fd = opened.map_err(|e| {
        if e == Errno::ELOOP {
            io::Error::new(io::ErrorKind::InvalidInput, format!("a symlink{suffix}"))
        } else {
            err(e)
        }
    })?;
    let st = fstat(&fd).map_err(err)?;
    let kind = Kind::from_mode(st.st_mode);
    if kind != Kind::File {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {}{suffix}", kind.name()),
        ));
    }
    Ok((fd, st))
}

/// Read the regular file `name` in `dir` into `buf` (cleared first), at most
/// `max` bytes (`InvalidData` beyond). Returns its `fstat`.
pub fn read_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    buf: &mut Vec<u8>,
    max: u64,
) -> io::Result<FileStat> {
    let (mut file, st) = open_regular_at(dir, name)?;
    read_open(&mut file, &st, buf, max)?;
    Ok(st)
}

/// Read the file opened by [`open_regular_at`] (with its `fstat`) into
/// `buf` (cleared first), at most `max` bytes (`InvalidData` beyond).
pub fn read_open(file: &mut File, st: &FileStat, buf: &mut Vec<u8>, max: u64) -> io::Result<()> {
    buf.clear();
    let size = st.st_size.max(0) as u64;
    if size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{size} bytes, more than {max}"),
        ));
    }
    // One read() in the common case: a short read that reaches the size
    // fstat gave is taken as EOF (a file growing meanwhile is read short,
    // and then fails its checks: fail closed).
    buf.resize(size as usize + 1, 0);
    let mut n = 0;
    loop {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n == buf.len() {
                    if n as u64 > max {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("more than {max} bytes"),
                        ));
                    }
                    buf.resize(n + 4096.min((max + 1) as usize - n), 0);
                } else if n as u64 >= size {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.clear();
                return Err(e);
            }
        }
    }
    buf.truncate(n);
    Ok(())
}

/// Remove the entry `name` of `dir` (a symlink is removed itself, never its
/// target). A missing entry is not an error.
pub fn unlink_at<P: ?Sized + nix::NixPath>(dir: BorrowedFd<'_>, name: &P) -> io::Result<()> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Rename `from` onto `to` within `dir`; a symlink at `to` is replaced, not
/// followed.
pub fn rename_at<P1: ?Sized + nix::NixPath, P2: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    from: &P1,
    to: &P2,
) -> io::Result<()> {
    renameat(dir, from, dir, to).map_err(err)
}

/// Remove everything inside the directory `dir` (not `dir` itself), never
/// following a symlink. Returns how many entries were removed; errors are
/// logged by `on_err(name, error)` and skipped.
pub fn remove_contents(dir: BorrowedFd<'_>, on_err: &mut dyn FnMut(&[u8], &io::Error)) -> usize {
    let mut removed = 0;
    let names: Vec<(Vec<u8>, bool)> = match dir.try_clone_to_owned().and_then(|fd| {
        let mut d = nix::dir::Dir::from_fd(fd).map_err(err)?;
        Ok(d.iter()
            .filter_map(|e| e.ok())
            .map(|e| {
                (
                    e.file_name().to_bytes().to_vec(),
                    e.file_type() == Some(nix::dir::Type::Directory),
                )
            })
            .filter(|(n, _)| n != b"." && n != b"..")
            .collect())
    }) {
        Ok(n) => n,
        Err(e) => {
            on_err(b".", &e);
            return 0;
        }
    };
    for (name, is_dir) in names {
        if is_dir {
            match open_dir_at(dir, name.as_slice()) {
                Ok(sub) => removed += remove_contents(sub.as_fd(), on_err),
                Err(e) => on_err(&name, &e),
            }
            match unlinkat(dir, name.as_slice(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => removed += 1,
                Err(e) => on_err(&name, &err(e)),
            }
        } else {
            match unlinkat(dir, name.as_slice(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => removed += 1,
                Err(Errno::EISDIR) => {
                    // d_type unknown: a directory after all
                    if let Ok(sub) = open_dir_at(dir, name.as_slice()) {
                        removed += remove_contents(sub.as_fd(), on_err);
                    }
                    if let Err(e) = unlinkat(dir, name.as_slice(), UnlinkatFlags::RemoveDir) {
                        on_err(&name, &err(e));
                    }
                }
                Err(e) => on_err(&name, &err(e)),
            }
        }
    }
    removed
}

/// `fsync` a directory (after renames into it).
pub fn fsync_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
    fsync(dir).map_err(err)
}

/// Is `name` a temp file keepwrap writes (`.keepwrap-*.tmp`)?
pub fn is_keepwrap_tmp(name: &[u8]) -> bool {
    name.len() > TMP_PREFIX.len() + TMP_SUFFIX.len()
        && name.starts_with(TMP_PREFIX)
        && name.ends_with(TMP_SUFFIX)
}

const TMP_PREFIX: &[u8] = b".keepwrap-";
const TMP_SUFFIX: &[u8] = b".tmp";

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A name no other call returns, in this process or in another one that
/// runs now: the pid, a counter, and the clock's nanoseconds.
pub fn unique_name() -> String {
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:08x}", std::process::id())
}

fn tmp_name() -> Vec<u8> {
    format!(".keepwrap-{}.tmp", unique_name()).into_bytes()
}

/// Write `bytes` to `name` in `dir` atomically: a fresh temp file
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, `.keepwrap-*.tmp`) in the same directory,
/// write, fsync, rename onto `name` (a symlink there is replaced, never
/// followed). The caller fsyncs the directory once after its renames
/// ([`fsync_dir`]). On error the temp file is removed.
pub fn write_atomic_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    bytes: &[u8],
    mode: u32,
) -> io::Result<()> {
    write_atomic_at_with(dir, name, bytes, mode, true)
}

/// [`write_atomic_at`]; the file is fsynced before the rename only with
/// `sync`.
pub fn write_atomic_at_with(
    dir: BorrowedFd<'_>,
    name: &CStr,
    bytes: &[u8],
    mode: u32,
    sync: bool,
) -> io::Result<()> {
    let tmp = write_temp_at(dir, bytes, mode, sync)?;
    let res = rename_at(dir, tmp.as_slice(), name);
    if res.is_err() {
        let _ = unlink_at(dir, tmp.as_slice());
    }
    res
}

/// Write `bytes` to a fresh temp file (`.keepwrap-*.tmp`, `O_EXCL`, no
/// symlink followed) in `dir`, fsynced when `sync`; returns its name. On
/// error it is removed.
pub fn write_temp_at(
    dir: BorrowedFd<'_>,
    bytes: &[u8],
    mode: u32,
    sync: bool,
) -> io::Result<Vec<u8>> {
    let mut tries = 0;
    let (tmp, fd) = loop {
        let tmp = tmp_name();
        match openat(
            dir,
            tmp.as_slice(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(fd) => break (tmp, fd),
            Err(Errno::EEXIST) if tries < 16 => tries += 1,
            Err(e) => return Err(err(e)),
        }
    };
    let mut file = File::from(fd);
    let res = file
        .write_all(bytes)
        .and_then(|()| if sync { file.sync_all() } else { Ok(()) });
    match res {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = unlink_at(dir, tmp.as_slice());
            Err(e)
        }
    }
}

/// Make `name` in `dir` one more hard link to the file `from` (in `dir`),
/// atomically: a new link under a fresh temp name, renamed onto `name` (a
/// symlink there is replaced, never followed). The caller fsyncs `dir`.
pub fn link_onto_at(dir: BorrowedFd<'_>, from: &[u8], name: &CStr) -> io::Result<()> {
    let mut tries = 0;
    let tmp = loop {
        let tmp = tmp_name();
        match nix::unistd::linkat(dir, from, dir, tmp.as_slice(), AtFlags::empty()) {
            Ok(()) => break tmp,
            Err(Errno::EEXIST) if tries < 16 => tries += 1,
            Err(e) => return Err(err(e)),
        }
    };
    let res = rename_at(dir, tmp.as_slice(), name);
    if res.is_err() {
        let _ = unlink_at(dir, tmp.as_slice());
    }
    res
}

/// Create directory `name` in `dir` (`mkdirat`); an existing directory (not
/// a symlink to one) is fine. Returns it opened, no symlink followed.
pub fn mkdir_open_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    mode: u32,
) -> io::Result<OwnedFd> {
    match nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(Errno::EEXIST) => open_dir_at(dir, name),
        Err(e) => Err(err(e)),
    }
}

/// Open the directory `rel` below `root`, creating missing components, one
/// component at a time, never following a symlink.
pub fn ensure_dir_path(root: BorrowedFd<'_>, rel: &Path, mode: u32) -> io::Result<OwnedFd> {
    walk_dir_path(root, rel, |base, name| mkdir_open_at(base, name, mode))
}

/// Rename `from` in `from_dir` to `to` in `to_dir` (same file system); the
/// entries themselves, never a symlink's target.
pub fn rename_between<P1: ?Sized + nix::NixPath, P2: ?Sized + nix::NixPath>(
    from_dir: BorrowedFd<'_>,
    from: &P1,
    to_dir: BorrowedFd<'_>,
    to: &P2,
) -> io::Result<()> {
    renameat(from_dir, from, to_dir, to).map_err(err)
}

/// Rename like [`rename_between`], but fail with `AlreadyExists` instead of
/// replacing an existing `to` (`RENAME_NOREPLACE`).
pub fn rename_noreplace<P1: ?Sized + nix::NixPath, P2: ?Sized + nix::NixPath>(
    from_dir: BorrowedFd<'_>,
    from: &P1,
    to_dir: BorrowedFd<'_>,
    to: &P2,
) -> io::Result<()> {
    let res = from.with_nix_path(|from| {
        to.with_nix_path(|to| crate::sys::renameat2_noreplace(from_dir, from, to_dir, to))
    });
    match res.and_then(|r| r) {
        Ok(r) => r,
        Err(e) => Err(err(e)),
    }
}

/// Does `name` exist in `dir` (any kind, no symlink followed)?
pub fn exists_at<P: ?Sized + nix::NixPath>(dir: BorrowedFd<'_>, name: &P) -> bool {
    lstat_at(dir, name).is_ok()
}

/// Remove `name` in `dir` and everything below it, never following a
/// symlink. A missing entry is not an error.
pub fn remove_tree_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let st = match lstat_at(dir, name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if Kind::from_mode(st.st_mode) != Kind::Dir {
        return unlink_at(dir, name);
    }
    let sub = open_dir_at(dir, name)?;
    for (child, _) in list_dir(sub.as_fd())? {
        remove_tree_at(sub.as_fd(), &child)?;
    }
    match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// A relative path `a/b/c` as its parent `a/b` and its name `c` (the
/// parent of a bare name is `""`).
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// The entries of directory `dir` (not `.`/`..`), with their kinds.
pub fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, Kind)>> {
    // A fresh open file description: a dup would share the read offset.
    let fd = open_dir_at(dir, ".")?;
    let mut d = nix::dir::Dir::from_fd(fd).map_err(err)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(err)?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = name.to_vec();
        let kind = match e.file_type() {
            Some(nix::dir::Type::File) => Kind::File,
            Some(nix::dir::Type::Directory) => Kind::Dir,
            Some(nix::dir::Type::Symlink) => Kind::Symlink,
            _ => match fstatat(dir, name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Kind::from_mode(st.st_mode),
                Err(_) => continue,
            },
        };
        out.push((name, kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

// ---- keepwrap's state under `<root>/.keepwrap/` ----------------------------
//
// Lock, statistics, launch records, store manifests, launch markers, trash:
// files keepwrap itself wrote, in a directory of the cache root, which
// anyone who can write the root can plant things in. They are opened
// without following a symlink and without blocking (a FIFO or a link to
// `/dev/zero` there must not stop the launch nor eat memory), read up to a
// cap, and their directories are never created or opened through a
// symlink nor trusted when another user can write them.

/// The largest state file keepwrap reads (a launch record of 60,000
/// arguments or a manifest of 10,000 members is about 2 MB).
pub const STATE_FILE_MAX: u64 = 16 << 20;

/// Open the directory `name` of `dir` as a state directory, creating it
/// first with mode `create` when given: never through a symlink (an error
/// saying so), and only when no other user can write it (the rule the cache
/// tree is judged by, [`super::layout::dir_untrusted`]).
pub fn open_state_dir_at(
    dir: BorrowedFd<'_>,
    name: &str,
    create: Option<u32>,
) -> io::Result<OwnedFd> {
    if let Some(mode) = create {
        match nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(err(e)),
        }
    }
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        // O_DIRECTORY|O_NOFOLLOW on a symlink: ELOOP or ENOTDIR.
        Errno::ELOOP | Errno::ENOTDIR => {
            let what = match lstat_at(dir, name) {
                Ok(st) if Kind::from_mode(st.st_mode) == Kind::Symlink => {
                    "a symlink, which keepwrap does not follow"
                }
                _ => "not a directory",
            };
            io::Error::new(io::ErrorKind::InvalidInput, format!("{name} is {what}"))
        }
        e => err(e),
    })?;
    let st = stat_fd(fd.as_fd())?;
    if let Some(why) = super::layout::dir_untrusted(&st, nix::unistd::geteuid().as_raw()) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{name} is a directory another user can write ({why})"),
        ));
    }
    Ok(fd)
}

/// `<root>/.keepwrap/<sub>` (`sub` a single name, or empty for
/// `.keepwrap` itself), created when missing, each level opened as
/// [`open_state_dir_at`] opens it. The root itself may be a symlink (the
/// user's choice of disk).
pub fn state_dir(root: &Path, sub: &str) -> io::Result<OwnedFd> {
    let root = open_root(root)?;
    let state = open_state_dir_at(root.as_fd(), crate::STATE_DIR, Some(0o755))?;
    if sub.is_empty() {
        return Ok(state);
    }
    open_state_dir_at(state.as_fd(), sub, Some(0o755))
}

/// Read the state file `name` of `dir`, at most `max` bytes: `Ok(None)` when
/// there is none. A symlink (never followed), a FIFO, a device or a
/// directory (never opened in a blocking way), or a larger file, is an
/// error saying which.
pub fn read_state_file<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    max: u64,
) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    match read_at(dir, name, &mut buf, max) {
        Ok(_) => Ok(Some(buf)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{e}, not a regular file"),
        )),
        Err(e) => Err(e),
    }
}

/// Open the state file `name` of `dir` for reading and writing (a lock, a
/// launch marker), creating it (mode 0644) when missing, or only creating
/// it with `exclusive`: never through a symlink, never blocking on a FIFO,
/// and an error unless it is a regular file.
pub fn open_state_file_rw<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    exclusive: bool,
) -> io::Result<File> {
    let mut flags = OFlag::O_RDWR
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    if exclusive {
        flags |= OFlag::O_EXCL;
    }
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o644));
    let (fd, _) = regular_or_refuse(fd, ", not a regular file")?;
    Ok(File::from(fd))
}

/// Log, once per process and path, that the state file `shown` (relative
/// to the root, e.g. `.keepwrap/stats.json`) cannot be used, and what the
/// launch does instead.
pub fn warn_state_file(shown: &str, e: &io::Error, then: &str) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if warned.iter().any(|w| w == shown) {
        return;
    }
    warned.push(shown.to_string());
    crate::events::cache::state_file_ignored(shown, e, then);
}
