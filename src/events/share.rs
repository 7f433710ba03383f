//! Events of the share of a multi-node launch: where this node stands,
//! taking the union of every node's rank files, publishing this node's.

use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use super::secs;
use super::Shown;
use crate::digest::short;

const TARGET: &str = "keepwrap::share";

pub fn share_unify_off(dir: &Path) {
    tracing::info!(
        target: TARGET,
        event = "share_unify_off",
        dir = %Shown(dir),
        "share: --unify off: the share {} is not used",
        Shown(dir)
    );
}

pub fn share_single_node(dir: &Path) {
    tracing::info!(
        target: TARGET,
        event = "share_single_node",
        dir = %Shown(dir),
        "share: --nnodes is 1 (a single-node launch): the share {} is not used",
        Shown(dir)
    );
}

pub fn share_unusable(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_unusable",
        dir = %Shown(dir),
        error = %error,
        "share: {error}; the share {} is not used",
        Shown(dir)
    );
}

/// This node's place in the launch.
pub fn share_cluster(cluster: &str, node: u32, nodes: u32, dir: &Path) {
    tracing::info!(
        target: TARGET,
        event = "share_cluster",
        cluster_fingerprint = cluster,
        node,
        nodes,
        dir = %Shown(dir),
        "share: cluster fingerprint {} (node {node} of {nodes}); share {}",
        short(cluster),
        Shown(dir)
    );
}

pub fn share_slow(dir: &Path, timeout: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "share_slow",
        dir = %Shown(dir),
        timeout_s = secs(timeout),
        "share: reading {} took more than {}; single-node behaviour",
        Shown(dir),
        humantime::format_duration(timeout)
    );
}

pub fn share_unreadable(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_unreadable",
        dir = %Shown(dir),
        error = %error,
        "share: cannot read {}: {error}; single-node behaviour",
        Shown(dir)
    );
}

/// Nodes whose publication is missing or does not verify.
pub fn share_incomplete(missing: &str, nodes: u32, reason: &str) {
    tracing::info!(
        target: TARGET,
        event = "share_incomplete",
        missing,
        nodes,
        reason,
        "share: not every node has published: node {missing} of {nodes} ({reason}); single-node behaviour"
    );
}

pub fn share_union_taken(took: Duration) {
    tracing::debug!(
        target: TARGET,
        event = "share_union_taken",
        took_s = secs(took),
        "share: union taken in {:.1} ms",
        took.as_secs_f64() * 1000.0
    );
}

pub fn share_signed(files: usize, nodes: u32, fingerprint: &str) {
    let files_text = super::counted(files, "cache file", "cache files");
    tracing::info!(
        target: TARGET,
        event = "share_signed",
        files,
        nodes,
        fingerprint,
        "share: signed {files_text} holding the union of {nodes} nodes for this launch"
    );
}

pub fn share_cannot_sign(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_cannot_sign",
        root = %Shown(root),
        error = %error,
        "share: cannot sign {}: {error}",
        Shown(root)
    );
}

/// The union does not apply to this directory.
pub fn share_left(dir: impl Display, reason: impl Display) {
    tracing::info!(target: TARGET, event = "share_left", dir = %dir, reason = %reason, "share: {dir}: {reason}");
}

pub fn share_already_union(dir: impl Display, files: usize, nodes: usize, entries: usize) {
    let files_text = super::counted(files, "rank file", "rank files");
    let entries_text = super::counted(entries, "entry", "entries");
    tracing::info!(
        target: TARGET,
        event = "share_already_union",
        dir = %dir,
        files,
        nodes,
        entries,
        "share: {dir}: this node's {files_text} already hold the union of {nodes} nodes ({entries_text})"
    );
}

pub fn share_union_written(
    dir: impl Display,
    nodes: usize,
    files: usize,
    entries: usize,
    conflicts: usize,
) {
    let files_text = super::counted(files, "rank file", "rank files");
    let entries_text = super::counted(entries, "entry", "entries");
    tracing::info!(
        target: TARGET,
        event = "share_union_written",
        dir = %dir,
        nodes,
        files,
        entries,
        conflicts,
        "share: {dir}: wrote the union of {nodes} nodes' rank files to {files_text} here: {entries_text} each, {conflicts} conflicting"
    );
}

pub fn share_cannot_write_union(dir: impl Display, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_cannot_write_union",
        dir = %dir,
        error = %error,
        "share: {dir}: cannot write the union: {error}"
    );
}

// ---- publishing ----

pub fn share_not_publishing(path: &str, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_not_publishing",
        path,
        error = %error,
        "share: not publishing {path}: cannot read it ({error})"
    );
}

pub fn share_publish_not_started(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_publish_not_started",
        error = %error,
        "share: cannot start publishing: {error}; the launch goes on"
    );
}

pub fn share_publish_slow(dir: &Path, timeout: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "share_publish_slow",
        dir = %Shown(dir),
        timeout_s = secs(timeout),
        "share: publishing to {} did not finish within {}; the launch goes on",
        Shown(dir),
        humantime::format_duration(timeout)
    );
}

pub fn share_published(files: usize, node: u32, nodes: u32, rewritten: usize, dir: &Path) {
    let files_text = super::counted(files, "rank file", "rank files");
    tracing::info!(
        target: TARGET,
        event = "share_published",
        files,
        node,
        nodes,
        rewritten,
        dir = %Shown(dir),
        "share: published {files_text} as node {node} of {nodes} ({rewritten} rewritten) to {}",
        Shown(dir)
    );
}

pub fn share_cannot_publish(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_cannot_publish",
        dir = %Shown(dir),
        error = %error,
        "share: cannot publish to {}: {error}; the launch goes on",
        Shown(dir)
    );
}

pub fn share_old_removed(publications: usize, max_age: Duration) {
    tracing::info!(
        target: TARGET,
        event = "share_old_removed",
        publications,
        max_age_s = secs(max_age),
        "share: removed {publications} node publications older than {}",
        humantime::format_duration(max_age)
    );
}

pub fn share_cannot_remove_old(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "share_cannot_remove_old",
        dir = %Shown(dir),
        error = %error,
        "share: cannot remove the old publication {}: {error}",
        Shown(dir)
    );
}
