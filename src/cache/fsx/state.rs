//! keepwrap's own state files and directories under `<root>/.keepwrap/`.

use super::*;

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
/// tree is judged by, [`super::super::layout::dir_untrusted`]).
pub fn open_state_dir_at(
    dir: BorrowedFd<'_>,
    name: &str,
    create: Option<u32>,
) -> io::Result<OwnedFd> {
    let open = || {
        openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    };
    // Opened first: it is there at every launch but the first.
    let opened = match (open(), create) {
        (Err(Errno::ENOENT), Some(mode)) => {
            match nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(err(e)),
            }
            open()
        }
        (r, _) => r,
    };
    let fd = opened.map_err(|e| match e {
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
    if let Some(why) = super::super::layout::dir_untrusted(&st, nix::unistd::geteuid().as_raw()) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{name} is a directory another user can write ({why})"),
        ));
    }
    Ok(fd)
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

/// How a state file is opened for reading and writing: never through a
/// symlink, never blocking on a FIFO, never as a controlling terminal.
const STATE_RW: OFlag = OFlag::O_RDWR
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// Open the state file `name` of `dir` for reading and writing (a lock, a
/// launch marker), creating it (mode 0644) when missing, or only creating
/// it with `exclusive`: never through a symlink, never blocking on a FIFO,
/// and an error unless it is a regular file.
pub fn open_state_file_rw<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    exclusive: bool,
) -> io::Result<File> {
    let mut flags = STATE_RW | OFlag::O_CREAT;
    if exclusive {
        flags |= OFlag::O_EXCL;
    }
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o644));
    let (fd, _) = regular_or_refuse(fd, ", not a regular file")?;
    Ok(File::from(fd))
}

/// Open the spare file `name` of `dir` (a state file kept to be written
/// again instead of creating an inode), created (mode 0644) first with
/// `create`: never through a symlink, never blocking on a FIFO, and only a
/// regular file of this user with no other link. The file, and its size.
pub fn open_spare_at<P: ?Sized + nix::NixPath>(
    dir: BorrowedFd<'_>,
    name: &P,
    create: bool,
) -> io::Result<(File, u64)> {
    let mut flags = STATE_RW;
    if create {
        flags |= OFlag::O_CREAT;
    }
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o644));
    let (fd, st) = regular_or_refuse(fd, ", not a spare file")?;
    if st.st_nlink != 1 || st.st_uid != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::other(
            "not a spare file (another link, or another user's)",
        ));
    }
    Ok((File::from(fd), st.st_size.max(0) as u64))
}

/// Write `bytes` over `file` from its start; what is left of its old
/// content (`size` bytes) is cut only when longer (a truncation costs ten
/// writes).
pub fn overwrite(file: &File, bytes: &[u8], size: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)?;
    if size > bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

/// Read the JSON state file `name` of `dir` (`shown`: the file for the
/// log), at most `max` bytes. None when there is none; one that is not a
/// regular file, too large or not valid JSON is ignored with one warning
/// saying what follows (`then`).
pub fn read_state_json<T: for<'de> serde::Deserialize<'de>>(
    dir: BorrowedFd<'_>,
    shown: &str,
    name: &str,
    max: u64,
    then: &str,
) -> Option<T> {
    let buf = match read_state_file(dir, name, max) {
        Ok(buf) => buf?,
        Err(e) => {
            warn_state_file(shown, &e, then);
            return None;
        }
    };
    match serde_json::from_slice(&buf) {
        Ok(v) => Some(v),
        Err(e) => {
            let e = io::Error::new(io::ErrorKind::InvalidData, format!("not valid: {e}"));
            warn_state_file(shown, &e, then);
            None
        }
    }
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
    crate::events::Event::StateFileIgnored {
        file: shown.to_string(),
        error: e.to_string(),
        then: then.to_string(),
    }
    .emit();
}
