//! Events of unify: the union of a directory's rank files.

use std::fmt::Display;

const TARGET: &str = "keepwrap::unify";

pub fn cannot_unify_root(root: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_unify_root",
        root = %root,
        error = %error,
        "cannot unify rank files under {root}: {error}"
    );
}

/// No room left: the other directories are left as they are too.
pub fn unify_no_room(dir: impl Display, error: impl Display, others: usize) {
    tracing::warn!(
        target: TARGET,
        event = "unify_no_room",
        dir = %dir,
        error = %error,
        others,
        "cannot unify the rank files of {dir}: {error}; left them and the {others} other directories as they are"
    );
}

pub fn unify_failed(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "unify_failed",
        dir = %dir,
        error = %error,
        "cannot unify the rank files of {dir}: {error}; left as they are"
    );
}

/// Unify does not apply to this directory; `reason` starts with `left as
/// they are: `.
pub fn unify_left(dir: impl Display, reason: impl Display) {
    let reason = reason.to_string();
    if reason
        .strip_prefix("left as they are: ")
        .is_some_and(super::in_untrusted_root)
    {
        tracing::debug!(target: TARGET, event = "unify_left", dir = %dir, reason = %reason, "{dir}: {reason}");
    } else {
        tracing::info!(target: TARGET, event = "unify_left", dir = %dir, reason = %reason, "{dir}: {reason}");
    }
}

pub fn already_unified(dir: impl Display, files: usize) {
    let files_text = super::counted(files, "rank file", "rank files");
    tracing::debug!(
        target: TARGET,
        event = "already_unified",
        dir = %dir,
        files,
        "{dir}: the {files_text} are already one union"
    );
}

pub fn unified(dir: impl Display, files: usize, entries: usize, conflicts: usize) {
    let entries_text = super::counted(entries, "entry", "entries");
    tracing::info!(
        target: TARGET,
        event = "unified",
        dir = %dir,
        files,
        entries,
        conflicts,
        "unified {files} rank files in {dir}: {entries_text} each, {conflicts} conflicting"
    );
}

/// One entry two ranks tuned differently; `conflict` names it and says
/// which value was kept.
pub fn unify_conflict(dir: impl Display, conflict: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "unify_conflict",
        dir = %dir,
        conflict = %conflict,
        "{dir}: {conflict}"
    );
}

pub fn unify_more_conflicts(dir: impl Display, conflicts: usize) {
    let conflicts_text = super::counted(
        conflicts,
        "more conflicting entry",
        "more conflicting entries",
    );
    tracing::info!(
        target: TARGET,
        event = "unify_more_conflicts",
        dir = %dir,
        conflicts,
        "{dir}: and {conflicts_text}"
    );
}
