//! Changing a directory: unlink, rename, atomic writes, directories
//! made and removed, listings.

use super::*;

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
    let names = match list_dir(dir) {
        Ok(names) => names,
        Err(e) => {
            on_err(b".", &e);
            return 0;
        }
    };
    let mut removed = 0;
    for (name, kind) in names {
        let flag = if kind == Kind::Dir {
            match open_dir_at(dir, name.as_slice()) {
                Ok(sub) => removed += remove_contents(sub.as_fd(), on_err),
                Err(e) => on_err(&name, &e),
            }
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        match unlinkat(dir, name.as_slice(), flag) {
            Ok(()) | Err(Errno::ENOENT) => removed += 1,
            Err(e) => on_err(&name, &err(e)),
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

pub(super) const TMP_PREFIX: &[u8] = b".keepwrap-";
pub(super) const TMP_SUFFIX: &[u8] = b".tmp";

pub(super) static UNIQUE: AtomicU64 = AtomicU64::new(0);

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

pub(super) fn tmp_name() -> Vec<u8> {
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

/// Write `bytes` once (a temp file of `dir`, mode `mode`, fsynced), make
/// each of `names` in `dir` a hard link to it ([`link_onto_at`]: each
/// atomically), `each` run after each link, then remove the temp file and
/// fsync `dir` once. An error names the file it was writing.
pub fn write_linked_at<S: AsRef<str>>(
    dir: BorrowedFd<'_>,
    bytes: &[u8],
    mode: u32,
    names: &[S],
    mut each: impl FnMut(),
) -> io::Result<()> {
    let writing =
        |name: &str, e: io::Error| io::Error::new(e.kind(), format!("writing {name}: {e}"));
    let first = names.first().map_or("", |n| n.as_ref());
    let file = write_temp_at(dir, bytes, mode, true).map_err(|e| writing(first, e))?;
    let linked = names.iter().try_for_each(|name| -> io::Result<()> {
        let name = name.as_ref();
        let cname = std::ffi::CString::new(name).map_err(|_| {
            writing(
                name,
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL in its name"),
            )
        })?;
        link_onto_at(dir, &file, &cname).map_err(|e| writing(name, e))?;
        each();
        Ok(())
    });
    let _ = unlink_at(dir, file.as_slice());
    linked?;
    fsync_dir(dir)
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

/// Remove `name` of `dir`: a file or symlink, or a directory with
/// everything in it, never following a symlink. What cannot be removed
/// stays (a missing `name` is fine).
pub fn remove_tree_at(dir: BorrowedFd<'_>, name: &[u8]) {
    let Ok(st) = lstat_at(dir, name) else { return };
    if Kind::from_mode(st.st_mode) != Kind::Dir {
        let _ = unlink_at(dir, name);
        return;
    }
    if let Ok(sub) = open_dir_at(dir, name) {
        remove_contents(sub.as_fd(), &mut |_, _| {});
    }
    let _ = unlinkat(dir, name, UnlinkatFlags::RemoveDir);
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
    let mut out = Vec::new();
    // `getdents64` straight into a buffer on the stack: an open, the reads
    // and a close (the C library's `opendir` adds an fstat, two fcntl and a
    // rewind).
    let mut buf = [0u8; 4096];
    crate::cache::dirents::for_each(fd.as_fd(), &mut buf, &mut |e| {
        let kind = match e.kind {
            Some(kind) => kind,
            // DT_UNKNOWN: a file system without d_type.
            None => match fstatat(dir, e.name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Kind::from_mode(st.st_mode),
                Err(_) => return true,
            },
        };
        out.push((e.name.to_vec(), kind));
        true
    })?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
