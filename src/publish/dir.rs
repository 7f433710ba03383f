//! A directory as storage (`--share DIR`: NFS, CephFS, a ReadWriteMany
//! volume): a key is a path below it, opened one component at a time
//! without following a link. An object is written to a temp name, fsynced,
//! then `link(2)`ed to its key, which fails when the key exists: a
//! put-if-absent that NFS honours. A replace takes the key's lock (a file
//! beside it, itself made by `link`), compares and renames over the key.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;

use crate::cache::fsx::{self, Kind};

use super::{Failure, Listed, Object, Put, Storage};

/// A lock older than this was left by a writer that died: it is removed
/// (the replace that found it is refused; the next one goes on).
const STALE_LOCK: Duration = Duration::from_secs(60);

/// The storage of one directory.
#[derive(Debug, Clone)]
pub struct Dir {
    root: PathBuf,
}

impl Dir {
    pub fn new(root: &Path) -> Dir {
        Dir {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory itself (a final symlink is followed, as for the
    /// cache root). A missing one is said plainly: it is usually a mount
    /// that is not there.
    pub fn open(&self) -> io::Result<OwnedFd> {
        fsx::open_root(&self.root).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    e.kind(),
                    "the share directory does not exist (not mounted?)",
                )
            } else {
                e
            }
        })
    }

    /// The parent directory of `key` (opened, made when `create`) and the
    /// key's last name.
    fn parent<'k>(&self, key: &'k str, create: bool) -> io::Result<(OwnedFd, &'k str)> {
        let (dir, name) = split(key)?;
        let root = self.open()?;
        let fd = if create {
            fsx::ensure_dir_path(root.as_fd(), Path::new(dir), 0o755)
        } else {
            fsx::open_dir_path(root.as_fd(), Path::new(dir))
        };
        Ok((fd?, name))
    }
}

/// `(dir, name)` of a key of plain names (none empty, hidden, `.` or `..`).
fn split(key: &str) -> io::Result<(&str, &str)> {
    let plain = |c: &str| !c.is_empty() && !c.starts_with('.') && !c.contains('\0');
    if !key.split('/').all(plain) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a key of plain names",
        ));
    }
    Ok(key.rsplit_once('/').unwrap_or(("", key)))
}

fn failure(key: &str, e: impl std::fmt::Display) -> Failure {
    Failure::new(key, None, e.to_string())
}

/// What changes whenever a file is replaced: its inode, change time and
/// size.
fn etag_of(st: &nix::sys::stat::FileStat) -> String {
    format!(
        "{}-{}.{}-{}",
        st.st_ino, st.st_ctime, st.st_ctime_nsec, st.st_size
    )
}

/// Link the fsynced temp file `tmp` of `dir` to `name` (never over an
/// existing entry), then remove the temp name.
fn link_temp(dir: BorrowedFd<'_>, tmp: &[u8], name: &str) -> io::Result<Put> {
    let linked = nix::unistd::linkat(dir, tmp, dir, name, nix::fcntl::AtFlags::empty());
    let _ = fsx::unlink_at(dir, tmp);
    match linked {
        Ok(()) => {
            fsx::fsync_dir(dir)?;
            Ok(Put::Written)
        }
        Err(Errno::EEXIST) => Ok(Put::Refused),
        Err(e) => Err(io::Error::from(e)),
    }
}

impl Storage for Dir {
    fn get(&self, key: &str, limit: u64) -> Result<Option<Object>, Failure> {
        let (dir, name) = match self.parent(key, false) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(failure(key, e)),
        };
        let mut bytes = Vec::new();
        match fsx::read_at(dir.as_fd(), name, &mut bytes, limit) {
            Ok(st) => Ok(Some(Object {
                bytes,
                etag: etag_of(&st),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(failure(key, e)),
        }
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Put, Failure> {
        let put = || -> io::Result<Put> {
            let (dir, name) = self.parent(key, true)?;
            if fsx::exists_at(dir.as_fd(), name) {
                return Ok(Put::Refused);
            }
            let tmp = fsx::write_temp_at(dir.as_fd(), bytes, 0o644, true)?;
            link_temp(dir.as_fd(), &tmp, name)
        };
        put().map_err(|e| failure(key, e))
    }

    fn replace(&self, key: &str, bytes: &[u8], etag: &str) -> Result<Put, Failure> {
        let replace = || -> io::Result<Put> {
            let (dir, name) = self.parent(key, true)?;
            let lock = format!(".{name}.lock");
            let tmp = fsx::write_temp_at(dir.as_fd(), b"", 0o644, false)?;
            if link_temp(dir.as_fd(), &tmp, &lock)? == Put::Refused {
                let stale = fsx::lstat_at(dir.as_fd(), lock.as_str())
                    .ok()
                    .and_then(|st| {
                        let at =
                            SystemTime::UNIX_EPOCH + Duration::from_secs(st.st_mtime.max(0) as u64);
                        SystemTime::now().duration_since(at).ok()
                    })
                    .is_some_and(|age| age > STALE_LOCK);
                if stale {
                    let _ = fsx::unlink_at(dir.as_fd(), lock.as_str());
                }
                return Ok(Put::Refused);
            }
            let swapped = (|| {
                let st = match fsx::lstat_at(dir.as_fd(), name) {
                    Ok(st) => st,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Put::Refused),
                    Err(e) => return Err(e),
                };
                if Kind::from_mode(st.st_mode) != Kind::File || etag_of(&st) != etag {
                    return Ok(Put::Refused);
                }
                let tmp = fsx::write_temp_at(dir.as_fd(), bytes, 0o644, true)?;
                if let Err(e) = fsx::rename_at(dir.as_fd(), tmp.as_slice(), name) {
                    let _ = fsx::unlink_at(dir.as_fd(), tmp.as_slice());
                    return Err(e);
                }
                fsx::fsync_dir(dir.as_fd())?;
                Ok(Put::Written)
            })();
            let _ = fsx::unlink_at(dir.as_fd(), lock.as_str());
            swapped
        };
        replace().map_err(|e| failure(key, e))
    }

    fn list(&self, prefix: &str) -> Result<Vec<Listed>, Failure> {
        let root = self.open().map_err(|e| failure(prefix, e))?;
        // The deepest directory every key of the prefix is in.
        let base = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let start = match fsx::open_dir_path(root.as_fd(), Path::new(base)) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Ok(Vec::new()),
            Err(e) => return Err(failure(prefix, e)),
        };
        let mut out = Vec::new();
        walk(start.as_fd(), base, prefix, &mut out).map_err(|e| failure(prefix, e))?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete(&self, key: &str) -> Result<(), Failure> {
        let delete = || -> io::Result<()> {
            let (dir, name) = match self.parent(key, false) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            fsx::unlink_at(dir.as_fd(), name)?;
            // Directories left empty go too (a directory holds no object).
            let root = self.open()?;
            let mut rel = key;
            while let Some((parent, _)) = rel.rsplit_once('/') {
                let (up, last) = parent.rsplit_once('/').unwrap_or(("", parent));
                let removed = fsx::open_dir_path(root.as_fd(), Path::new(up)).and_then(|d| {
                    nix::unistd::unlinkat(d.as_fd(), last, nix::unistd::UnlinkatFlags::RemoveDir)
                        .map_err(io::Error::from)
                });
                if removed.is_err() {
                    break;
                }
                rel = parent;
            }
            Ok(())
        };
        delete().map_err(|e| failure(key, e))
    }
}

/// Every object below `dir` (whose key is `rel`) whose key starts with
/// `prefix`; hidden names (temp files, locks) are none.
fn walk(dir: BorrowedFd<'_>, rel: &str, prefix: &str, out: &mut Vec<Listed>) -> io::Result<()> {
    for (name, kind) in fsx::list_dir(dir)? {
        let Ok(name) = String::from_utf8(name) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let key = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        // A directory is entered only when keys below it may match.
        let below = format!("{key}/");
        match kind {
            Kind::Dir if below.starts_with(prefix) || prefix.starts_with(&below) => {
                match fsx::open_dir_at(dir, name.as_str()) {
                    Ok(sub) => walk(sub.as_fd(), &key, prefix, out)?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            Kind::File if key.starts_with(prefix) => {
                let Ok(st) = fsx::lstat_at(dir, name.as_str()) else {
                    continue;
                };
                let at = SystemTime::UNIX_EPOCH + Duration::from_secs(st.st_mtime.max(0) as u64);
                out.push(Listed {
                    key,
                    modified: humantime::format_rfc3339_seconds(at).to_string(),
                    size: st.st_size.max(0) as u64,
                });
            }
            _ => {}
        }
    }
    Ok(())
}
