//! Events of the store of signed sets (`.keepwrap/store`): recovery of an
//! interrupted move, restoring this launch's set, eviction, launch records.

use std::fmt::Display;

use crate::digest::short;

const TARGET: &str = "keepwrap::store";

// ---- recovery ----

pub fn recovery_store_taken(fingerprint: &str, taken: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "recovery_store_taken",
        fingerprint,
        taken = %taken,
        "recovery: an interrupted store of launch {} cannot go back in place ({taken} is taken); its files are removed",
        short(fingerprint)
    );
}

pub fn recovery_store_undone(fingerprint: &str, files: usize) {
    let files_text = super::counted(files, "file", "files");
    tracing::info!(
        target: TARGET,
        event = "recovery_store_undone",
        fingerprint,
        files,
        "recovery: moved {files_text} of an interrupted store of launch {} back in place",
        short(fingerprint)
    );
}

pub fn recovery_store_failed(fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "recovery_store_failed",
        fingerprint,
        error = %error,
        "recovery: cannot move the files of an interrupted store of launch {} back in place: {error}; they are removed",
        short(fingerprint)
    );
}

pub fn recovery_restore_finished(fingerprint: &str, files: usize) {
    let files_text = super::counted(files, "file", "files");
    tracing::info!(
        target: TARGET,
        event = "recovery_restore_finished",
        fingerprint,
        files,
        "recovery: moved the last {files_text} of an interrupted restore of launch {} in place",
        short(fingerprint)
    );
}

pub fn recovery_restore_failed(fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "recovery_restore_failed",
        fingerprint,
        error = %error,
        "recovery: cannot finish an interrupted restore of launch {}: {error}; putting it back in the store",
        short(fingerprint)
    );
}

pub fn recovery_restore_taken(fingerprint: &str, taken: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "recovery_restore_taken",
        fingerprint,
        taken = %taken,
        "recovery: an interrupted restore of launch {} cannot finish ({taken} is taken); putting it back in the store",
        short(fingerprint)
    );
}

// ---- store and restore ----

/// A launch was signed again: its older stored set goes.
pub fn store_replaced(fingerprint: &str) {
    tracing::info!(
        target: TARGET,
        event = "store_replaced",
        fingerprint,
        "store: the newer set of launch {} replaces the one stored",
        short(fingerprint)
    );
}

pub fn entry_misnamed(fingerprint: &str) {
    tracing::warn!(
        target: TARGET,
        event = "entry_misnamed",
        fingerprint,
        "store: the entry {} names another launch; removed it",
        short(fingerprint)
    );
}

/// The stored set sits in a directory another user can write.
pub fn entry_untrusted(fingerprint: &str, reason: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "entry_untrusted",
        fingerprint,
        reason = %reason,
        "store: not restoring the stored set of this launch: {reason}; removed it, the launch tunes"
    );
}

pub fn entry_not_intact(fingerprint: &str, reason: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "entry_not_intact",
        fingerprint,
        reason = %reason,
        "store: the stored set of this launch is not intact ({reason}); removed it, the launch tunes"
    );
}

/// The directory the set would return to is another user's to write.
pub fn restore_destination_untrusted(fingerprint: &str, dir: impl Display, reason: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "restore_destination_untrusted",
        fingerprint,
        dir = %dir,
        reason = %reason,
        "store: not restoring the stored set of this launch into {dir}: {reason}; it stays in the store"
    );
}

pub fn restore_in_the_way(fingerprint: &str, path: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "restore_in_the_way",
        fingerprint,
        path = %path,
        "store: cannot restore the stored set of this launch: {path} is in the way; it stays in the store"
    );
}

/// The stored set could not be taken out of the store.
pub fn cannot_restore(fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_restore",
        fingerprint,
        error = %error,
        "store: cannot restore the stored set of this launch: {error}"
    );
}

/// The stored set could not be moved in place: it goes back to the store.
pub fn restore_move_failed(fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "restore_move_failed",
        fingerprint,
        error = %error,
        "store: cannot restore the stored set of this launch: {error}; it stays in the store"
    );
}

pub fn evicted(
    fingerprint: &str,
    files: usize,
    bytes: u64,
    size: impl Display,
    last_used: impl Display,
    reason: &str,
) {
    let files_text = super::counted(files, "file", "files");
    tracing::info!(
        target: TARGET,
        event = "evicted",
        fingerprint,
        files,
        bytes,
        reason,
        "evicted the stored set of launch {} ({files_text}, {size}, last used {last_used}): {reason}",
        short(fingerprint)
    );
}

pub fn cannot_write_record(fingerprint: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_write_record",
        fingerprint,
        error = %error,
        "cannot write the launch record of {}: {error}",
        short(fingerprint)
    );
}
