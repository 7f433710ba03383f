//! Applying a union to a tree: each cache directory's rank files
//! rewritten atomically, without following a symlink.

use super::*;

/// What unifying the cache directories of a tree did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TreeReport {
    /// Directories whose rank files were rewritten as their union.
    pub rewritten: usize,
}

/// Unify, directory by directory, the rank files among `files` (paths
/// relative to `root`): each directory whose files agree on `_metadata` and
/// carry no `_records` gets the union written over every rank file,
/// atomically and without following a symlink. One log line per directory
/// says what happened or why its files were left as they are.
pub fn unify_tree<'a>(
    root: &Path,
    files: impl IntoIterator<Item = &'a Path>,
    shape: Shape,
) -> TreeReport {
    let mut by_dir: BTreeMap<&Path, Vec<&str>> = BTreeMap::new();
    for rel in files {
        let (Some(dir), Some(name)) = (rel.parent(), rel.file_name().and_then(|n| n.to_str()))
        else {
            continue;
        };
        if shape.rank_of(name).is_some() {
            by_dir.entry(dir).or_default().push(name);
        }
    }
    let mut report = TreeReport::default();
    if by_dir.is_empty() {
        return report;
    }
    let root_fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) => {
            crate::events::Event::CannotUnifyRoot {
                root: root.display().to_string(),
                error: e.to_string(),
            }
            .emit();
            return report;
        }
    };
    let total = by_dir.len();
    for (n, (dir, names)) in by_dir.into_iter().enumerate() {
        match unify_dir(root_fd.as_fd(), dir, &names, shape) {
            Ok(true) => report.rewritten += 1,
            Ok(false) => {}
            // Every other directory would fail the same way: one warning.
            Err(e) if no_room(&e) => {
                crate::events::Event::UnifyNoRoom {
                    dir: dir.display().to_string(),
                    error: e.to_string(),
                    others: total - n - 1,
                }
                .emit();
                break;
            }
            Err(e) => crate::events::Event::UnifyFailed {
                dir: dir.display().to_string(),
                error: e.to_string(),
            }
            .emit(),
        }
    }
    report
}

/// Are the rank files `names` of `dir` (two or more) hard links of one
/// regular file, as unify leaves a directory? Then they hold the same bytes,
/// which are their union: nothing to read, nothing to write. One `lstat` a
/// file; any error or any other file: no.
fn one_file(dir: BorrowedFd<'_>, names: &[&str]) -> bool {
    let mut first = None;
    names.len() >= 2
        && names.iter().all(|name| match fsx::lstat_at(dir, *name) {
            Ok(st) if fsx::Kind::from_mode(st.st_mode) == fsx::Kind::File => {
                *first.get_or_insert((st.st_dev, st.st_ino)) == (st.st_dev, st.st_ino)
            }
            _ => false,
        })
}

/// A write failed for want of room or of a writable file system.
pub(super) fn no_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Most conflicts named one per line; the rest are counted.
const CONFLICT_LINES: usize = 10;

pub(super) fn unify_dir(
    root: BorrowedFd<'_>,
    dir: &Path,
    names: &[&str],
    shape: Shape,
) -> io::Result<bool> {
    // Never rewrite files another user can swap or planted: they are not
    // signed either.
    if let Some(why) = cache::untrusted_dir(root, dir)? {
        crate::events::Event::UnifyLeft {
            dir: dir.display().to_string(),
            reason: format!("left as they are: {why}"),
        }
        .emit();
        return Ok(false);
    }
    let dfd = fsx::open_dir_path(root, dir)?;
    if one_file(dfd.as_fd(), names) {
        crate::events::Event::AlreadyUnified {
            dir: dir.display().to_string(),
            files: names.len(),
        }
        .emit();
        return Ok(false);
    }
    let mut files = Vec::with_capacity(names.len());
    let mut modes = Vec::with_capacity(names.len());
    for name in names {
        let mut bytes = Vec::new();
        let st = fsx::read_at(dfd.as_fd(), *name, &mut bytes, cache::MAX_CACHE_FILE)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        modes.push(st.st_mode & 0o7777);
        files.push(RankFile {
            name: name.to_string(),
            bytes,
        });
    }
    let unified = match unify(&files, shape) {
        Outcome::Leave(reason) => {
            crate::events::Event::UnifyLeft {
                dir: dir.display().to_string(),
                reason: reason.to_string(),
            }
            .emit();
            return Ok(false);
        }
        Outcome::Unified(u) => u,
    };
    if unified.already_identical {
        crate::events::Event::AlreadyUnified {
            dir: dir.display().to_string(),
            files: files.len(),
        }
        .emit();
        return Ok(false);
    }
    // The union is one content: written once (a temp file, fsynced), then
    // every rank path becomes a hard link to it, each atomically (a link
    // under a temp name renamed onto the rank file). The engine replaces a
    // rank file by rename (`os.replace` of its own temp file), which gives
    // that path a new inode and leaves the others' alone. One fsync of the
    // directory for all the renames.
    let mode = modes.iter().fold(0o7777, |a, m| a & m);
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    fsx::write_linked_at(dfd.as_fd(), &unified.bytes, mode, &names, || {
        crate::failpoint::hit("unify")
    })?;
    crate::events::Event::Unified {
        dir: dir.display().to_string(),
        files: files.len(),
        entries: unified.entries,
        conflicts: unified.conflicts.len(),
    }
    .emit();
    for c in unified.conflicts.iter().take(CONFLICT_LINES) {
        crate::events::Event::UnifyConflict {
            dir: dir.display().to_string(),
            conflict: c.to_string(),
        }
        .emit();
    }
    if unified.conflicts.len() > CONFLICT_LINES {
        crate::events::Event::UnifyMoreConflicts {
            dir: dir.display().to_string(),
            conflicts: unified.conflicts.len() - CONFLICT_LINES,
        }
        .emit();
    }
    Ok(true)
}
