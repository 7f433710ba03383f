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
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};

mod change;
mod state;

pub use change::*;
pub use state::*;

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
    openat_noatime(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
    )
    .map_err(err)
}

/// `openat` for reading, with `O_NOATIME` where the kernel allows it (the
/// owner of the file, or `CAP_FOWNER`; else `EPERM`, and the open is tried
/// again without): reading a sidecar or listing a directory does not
/// dirty its inode for its access time, which `relatime` does at the first
/// read after every change (a write to the inode table per file on the
/// first launch after a sign).
fn openat_noatime<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    flags: OFlag,
) -> nix::Result<OwnedFd> {
    match openat(dir, name, flags | OFlag::O_NOATIME, Mode::empty()) {
        Err(Errno::EPERM) => openat(dir, name, flags, Mode::empty()),
        r => r,
    }
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

/// How a file that must be regular is opened for reading: no symlink
/// followed, no blocking on a FIFO, no controlling terminal.
const READ_REGULAR: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// Open `name` in `dir` for reading: no symlink followed, no blocking on a
/// FIFO, and an error unless it is a regular file (`InvalidInput` with the
/// kind's name).
pub fn open_regular_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
) -> io::Result<(File, FileStat)> {
    let fd = openat_noatime(dir, name, READ_REGULAR);
    let (fd, st) = regular_or_refuse(fd, "")?;
    Ok((File::from(fd), st))
}

/// Does every change to a file in the directory `dir` give the file a new
/// change time, a change through a writable shared mapping included? The
/// kernel notes the first write to each page of such a mapping (and again
/// after each writeback) where the file system writes pages back; on a
/// file system held in memory (tmpfs, ramfs) it does not, and a mapping
/// can change a file, once it has read it, without any new time. Not
/// known (`fstatfs` failed): no.
pub fn changes_noticed(dir: BorrowedFd<'_>) -> bool {
    const TMPFS: u64 = 0x0102_1994;
    const RAMFS: u64 = 0x8584_58f6;
    match nix::sys::statfs::fstatfs(dir) {
        Ok(st) => {
            let kind = (st.filesystem_type().0 as u64) & 0xffff_ffff;
            kind != TMPFS && kind != RAMFS
        }
        Err(_) => false,
    }
}

/// Take a read lease on the open file `fd`: while it is held, no process
/// holds the file open for writing (nor mapped writable): it is refused if
/// one does, and an open for writing waits for it. `Ok(false)` where the
/// file system (or the kernel's `fs.leases-enable`) has no leases; `Err`
/// when it is refused: a process holds the file open for writing
/// (`EAGAIN`), or this process may not take one on it (another user's
/// file). Give it back with [`end_read_lease`]; closing the file does too.
pub fn read_lease(fd: BorrowedFd<'_>) -> io::Result<bool> {
    match crate::sys::read_lease(fd, true) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Give back the lease [`read_lease`] took.
pub fn end_read_lease(fd: BorrowedFd<'_>) {
    let _ = crate::sys::read_lease(fd, false);
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

/// Read `name` in `dir`, a regular file by its directory entry (the
/// listing's type), into `buf` (cleared first), at most `max` bytes
/// (`InvalidData` beyond), without an `fstat`: no symlink followed, no
/// blocking on a FIFO (which reads empty), a directory refused by `read`.
/// A short read is taken as the end, as [`read_open`] takes it. Returns
/// the open file (for an `fstat` when its identity matters).
pub fn read_listed_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    buf: &mut Vec<u8>,
    max: u64,
) -> io::Result<File> {
    let fd = openat_noatime(dir, name, READ_REGULAR).map_err(|e| {
        if e == Errno::ELOOP {
            io::Error::new(io::ErrorKind::InvalidInput, "a symlink")
        } else {
            err(e)
        }
    })?;
    let mut file = File::from(fd);
    buf.clear();
    buf.resize(4096, 0);
    let n = loop {
        match file.read(buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.clear();
                return Err(e);
            }
        }
    };
    if n < buf.len() {
        buf.truncate(n);
        return Ok(file);
    }
    // Larger than a sidecar should be: read as a regular file of the size
    // its `fstat` gives (refused beyond `max` without reading it).
    let st = fstat(&file).map_err(err)?;
    let kind = Kind::from_mode(st.st_mode);
    if kind != Kind::File {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {}", kind.name()),
        ));
    }
    file.seek(io::SeekFrom::Start(0))?;
    read_open(&mut file, &st, buf, max)?;
    Ok(file)
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
