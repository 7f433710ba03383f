//! Events of the cache on disk: prune (kept, stored, removed, left), sign
//! (what cannot be signed), the walk of the tree, the trash, state files.

use std::fmt::Display;

use super::cache_files;

const TARGET: &str = "keepwrap::cache";

// ---- prune ----

/// A cache file signed for this launch stays; after the first
/// lines at debug level only (`loud` false).
pub fn kept(path: impl Display, loud: bool) {
    if loud {
        tracing::info!(target: TARGET, event = "kept", path = %path, "kept {path}: signed for this launch");
    } else {
        tracing::debug!(target: TARGET, event = "kept", path = %path, "kept {path}: signed for this launch");
    }
}

/// A file of another launch's whole set moved to the store; after the
/// first lines at debug level only (`loud` false).
pub fn stored(path: impl Display, fingerprint: &str, loud: bool) {
    if loud {
        tracing::info!(
            target: TARGET,
            event = "stored",
            path = %path,
            fingerprint,
            "stored {path}: signed for another launch (fingerprint {fingerprint}...)"
        );
    } else {
        tracing::debug!(
            target: TARGET,
            event = "stored",
            path = %path,
            fingerprint,
            "stored {path}: signed for another launch (fingerprint {fingerprint}...)"
        );
    }
}

/// How many more files were kept or stored than have a line each.
pub fn more_files(what: &str, files: usize) {
    tracing::info!(
        target: TARGET,
        event = "more_files",
        what,
        files,
        "{what} {files} more {} (KEEPWRAP_LOG=debug lists each)",
        cache_files(files)
    );
}

/// A cache file this launch must not load was removed.
pub fn removed(path: impl Display, reason: impl Display) {
    tracing::info!(target: TARGET, event = "removed", path = %path, reason = %reason, "removed {path}: {reason}");
}

/// A cache file in a directory another user can write was removed; at
/// debug level when that directory is the root (said once at the start).
pub fn removed_untrusted(path: impl Display, reason: impl Display) {
    let reason = reason.to_string();
    if super::in_untrusted_root(&reason) {
        tracing::debug!(
            target: TARGET,
            event = "removed_untrusted",
            path = %path,
            reason = %reason,
            "removed {path}: {reason}"
        );
    } else {
        tracing::warn!(
            target: TARGET,
            event = "removed_untrusted",
            path = %path,
            reason = %reason,
            "removed {path}: {reason}"
        );
    }
}

/// A leftover (orphan sidecar, temp file) was removed.
pub fn removed_leftover(path: impl Display, reason: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "removed_leftover",
        path = %path,
        reason = %reason,
        "removed {path}: {reason}"
    );
}

/// A symlink to a directory planted in the tree was removed.
pub fn removed_symlink(path: impl Display, reason: &str) {
    tracing::warn!(
        target: TARGET,
        event = "removed_symlink",
        path = %path,
        reason,
        "removed {path}: {reason} (its target is left alone)"
    );
}

/// A file prune must remove could not go.
pub fn cannot_remove(path: impl Display, reason: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_remove",
        path = %path,
        reason = %reason,
        error = %error,
        "cannot remove {path} ({reason}): {error}"
    );
}

pub fn cannot_remove_sidecar(path: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_remove_sidecar",
        path = %path,
        error = %error,
        "cannot remove {path}: {error}"
    );
}

/// A directory named like a cache file.
pub fn left_directory(path: impl Display) {
    let reason = "a directory named *.json, which keepwrap does not remove";
    tracing::warn!(
        target: TARGET,
        event = "left_directory",
        path = %path,
        reason,
        "left {path}: a directory named *.json, which keepwrap does not remove"
    );
}

/// Entries not shaped like the engine's cache, never judged nor touched;
/// `hint` asks whether `--cache-dir` is the engine's cache directory.
pub fn untouched(entries: usize, first: impl Display, hint: &str) {
    tracing::warn!(
        target: TARGET,
        event = "untouched",
        entries,
        first = %first,
        "left {entries} {} under the cache root untouched: not the engine's autotune cache (first: {first}); {hint}",
        if entries == 1 { "entry" } else { "entries" }
    );
}

/// The summary of prune.
pub fn pruned(kept: usize, stored: usize, removed: usize, leftovers: usize, left: usize) {
    let removed_text = format!(
        "{} and {}",
        super::counted(removed, "cache file", "cache files"),
        super::counted(leftovers, "leftover", "leftovers")
    );
    if stored > 0 {
        let left_text = if left > 0 {
            format!(", left {left} that could not be removed")
        } else {
            String::new()
        };
        tracing::info!(
            target: TARGET,
            event = "pruned",
            kept,
            stored,
            removed,
            leftovers,
            left,
            "prune: kept {kept}, stored {stored}, removed {removed_text}{left_text}"
        );
    } else if left > 0 {
        tracing::info!(
            target: TARGET,
            event = "pruned",
            kept,
            stored,
            removed,
            leftovers,
            left,
            "prune: kept {kept}, removed {removed_text}, left {left} that could not be removed"
        );
    } else {
        tracing::info!(
            target: TARGET,
            event = "pruned",
            kept,
            stored,
            removed,
            leftovers,
            left,
            "prune: kept {kept}, removed {removed_text}"
        );
    }
}

/// Another launch's set could not be moved into the store.
pub fn cannot_store(files: usize, fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_store",
        files,
        fingerprint,
        error = %error,
        "cannot store the {files} {} signed for launch {fingerprint}...: {error}; removing them",
        cache_files(files)
    );
}

// ---- the trash ----

pub fn trash_unusable(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "trash_unusable",
        error = %error,
        "cannot use .keepwrap/trash ({error}): removing files one by one"
    );
}

pub fn trash_move_failed(dir: impl Display, error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "trash_move_failed",
        dir = %dir,
        error = %error,
        "cannot move {dir} to .keepwrap/trash ({error}): removing files one by one"
    );
}

pub fn trash_thread_failed(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "trash_thread_failed",
        error = %error,
        "cannot start the thread that empties .keepwrap/trash: {error}"
    );
}

pub fn trash_remove_failed(name: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "trash_remove_failed",
        name = %name,
        error = %error,
        "cannot remove .keepwrap/trash/{name}: {error}"
    );
}

pub fn trash_emptied(entries: usize) {
    let entries_text = super::counted(entries, "entry", "entries");
    tracing::debug!(
        target: TARGET,
        event = "trash_emptied",
        entries,
        "emptied .keepwrap/trash: {entries_text}"
    );
}

// ---- the walk of the tree ----

pub fn cannot_read_dir(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_read_dir",
        dir = %dir,
        error = %error,
        "cannot read directory {dir}: {error}"
    );
}

pub fn cannot_open_dir(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_open_dir",
        dir = %dir,
        error = %error,
        "cannot open directory {dir}: {error}"
    );
}

pub fn cannot_stat_dir(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_stat_dir",
        dir = %dir,
        error = %error,
        "cannot stat directory {dir}: {error}"
    );
}

/// An entry vanished while the tree was read.
pub fn cannot_stat(path: impl Display, error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "cannot_stat",
        path = %path,
        error = %error,
        "cannot stat {path}: {error}"
    );
}

// ---- sign ----

/// A directory named like a rank file.
pub fn not_signed_directory(path: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "not_signed_directory",
        path = %path,
        reason = "a directory",
        "not signed {path}: a directory"
    );
}

/// A file FlashInfer could not load as a cache file.
pub fn not_signed(path: impl Display, reason: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "not_signed",
        path = %path,
        reason = %reason,
        "not signed {path}: {reason}"
    );
}

/// A file that cannot be signed safely: in an untrusted directory, a path
/// that is not UTF-8, unreadable.
pub fn not_signed_unsafe(path: impl Display, reason: impl Display) {
    let reason = reason.to_string();
    if super::in_untrusted_root(&reason) {
        tracing::debug!(
            target: TARGET,
            event = "not_signed_unsafe",
            path = %path,
            reason = %reason,
            "not signed {path}: {reason}"
        );
    } else {
        tracing::warn!(
            target: TARGET,
            event = "not_signed_unsafe",
            path = %path,
            reason = %reason,
            "not signed {path}: {reason}"
        );
    }
}

/// One unsignable file keeps its whole directory unsigned.
pub fn dir_not_signed(files: usize, dir: impl Display, unsignable: &str) {
    tracing::warn!(
        target: TARGET,
        event = "dir_not_signed",
        files,
        dir = %dir,
        unsignable,
        "not signed the {files} other cache files of {dir}: {unsignable} cannot be signed, and trusting part of a directory's rank files would give a partial hit"
    );
}

pub fn not_stamping(files: usize, settle_ns: i64) {
    let files_text = super::counted(files, "cache file", "cache files");
    tracing::debug!(
        target: TARGET,
        event = "not_stamping",
        files,
        settle_ns,
        "not stamping {files_text}: their change times settle in {settle_ns} ns"
    );
}

pub fn cannot_fsync_dir(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_fsync_dir",
        dir = %dir,
        error = %error,
        "cannot fsync directory {dir}: {error}"
    );
}

// ---- state files ----

/// A state file under `.keepwrap` (statistics, a launch record, a store
/// manifest) that cannot be used; `then` says what the launch does.
pub fn state_file_ignored(file: &str, error: impl Display, then: &str) {
    tracing::warn!(
        target: TARGET,
        event = "state_file_ignored",
        file,
        error = %error,
        "ignored {file}: {error}; {then}"
    );
}
