//! Events of the done side: the health probe, who serves the probed port,
//! the watch of the cache tree, and the tuning progress (`landed`).

use std::fmt::Display;
use std::time::Duration;

use super::cache_files;
use super::secs;
use super::Shown;

const TARGET: &str = "keepwrap::done";

// ---- the health probe (debug: one line per probe) ----

pub fn probe_timed_out(url: impl Display) {
    tracing::debug!(target: TARGET, event = "probe_timed_out", url = %url, "health probe of {url} timed out");
}

pub fn probe_failed(url: impl Display, error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "probe_failed",
        url = %url,
        error = %error,
        "health probe of {url}: {error}"
    );
}

pub fn probe_status(url: impl Display, status: Option<u16>) {
    let shown = status.map_or_else(
        || "no HTTP status line".to_string(),
        |s| format!("status {s}"),
    );
    tracing::debug!(
        target: TARGET,
        event = "probe_status",
        url = %url,
        status,
        "health probe of {url}: {shown}"
    );
}

pub fn probe_unresolved(host: impl Display, error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "probe_unresolved",
        host = %host,
        error = %error,
        "health probe: cannot resolve {host}: {error}"
    );
}

pub fn probe_socket_failed(error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "probe_socket_failed",
        error = %error,
        "health probe: socket: {error}"
    );
}

/// Which sockets listen on the probed address, and the engine's processes.
pub fn port_listeners<I: Display, P: Display>(
    to: impl Display,
    inodes: impl IntoIterator<Item = I>,
    tables: Duration,
    tree: impl IntoIterator<Item = P>,
) {
    let inodes = super::listed(inodes);
    let tree = super::listed(tree);
    tracing::debug!(
        target: TARGET,
        event = "port_listeners",
        address = %to,
        inodes = inodes.as_str(),
        pids = tree.as_str(),
        "sockets listening for {to}: inodes {inodes} (socket tables read in {:.1} ms); the engine's tree: pids {tree}",
        tables.as_secs_f64() * 1000.0
    );
}

// ---- the watch ----

pub fn cannot_watch_dir(path: &std::path::Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_watch_dir",
        path = %Shown(path),
        error = %error,
        "cannot watch {}: {error}; nothing in it will be signed",
        Shown(path)
    );
}

pub fn cannot_list_dir(path: &std::path::Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_list_dir",
        path = %Shown(path),
        error = %error,
        "cannot list {}: {error}; nothing in it will be signed",
        Shown(path)
    );
}

/// The cache root itself cannot be watched or listed any more.
pub fn watch_error(error: impl Display) {
    tracing::warn!(target: TARGET, event = "watch_error", error = %error, "{error}");
}

pub fn inotify_read_failed(root: &std::path::Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "inotify_read_failed",
        root = %Shown(root),
        error = %error,
        "reading inotify events for {} failed: {error}; rescanning",
        Shown(root)
    );
}

pub fn inotify_overflow(root: &std::path::Path) {
    tracing::info!(
        target: TARGET,
        event = "inotify_overflow",
        root = %Shown(root),
        "the inotify queue overflowed: rescanning {}",
        Shown(root)
    );
}

// ---- progress ----

/// The engine saved a cache file (`entries` counts them, or says why not).
pub fn landed(path: &std::path::Path, entries: &str, after: Duration) {
    tracing::info!(
        target: TARGET,
        event = "landed",
        path = %Shown(path),
        entries,
        after_s = secs(after),
        "landed {} ({entries}, {:.1} s after the launch)",
        Shown(path),
        secs(after)
    );
}

/// The engine saved again a cache file as it was signed for this launch
/// (a warm boot that tuned nothing new).
pub fn landed_unchanged(path: &std::path::Path, entries: usize, after: Duration) {
    tracing::debug!(
        target: TARGET,
        event = "landed_unchanged",
        path = %Shown(path),
        entries,
        after_s = secs(after),
        "landed {} unchanged: as signed for this launch, nothing new tuned ({:.1} s after the launch)",
        Shown(path),
        secs(after)
    );
}

/// A file landed and was gone before it was read: the engine removed it
/// (its entry gate) or renamed it.
pub fn landed_gone(path: &std::path::Path, after: Duration) {
    tracing::debug!(
        target: TARGET,
        event = "landed_gone",
        path = %Shown(path),
        after_s = secs(after),
        "{} was saved and then removed or renamed by the engine before keepwrap read it ({:.1} s after the launch)",
        Shown(path),
        secs(after)
    );
}

/// From now on landings are summed up every `every`.
pub fn landed_summing(distinct: usize, after: Duration, every: Duration) {
    tracing::info!(
        target: TARGET,
        event = "landed_summing",
        distinct,
        after_s = secs(after),
        "landed {distinct} distinct cache files ({:.1} s after the launch): from now on one line every {} s sums up the landings",
        secs(after),
        every.as_secs()
    );
}

pub fn landed_more(landed: usize, distinct: usize, after: Duration) {
    tracing::info!(
        target: TARGET,
        event = "landed_more",
        landed,
        distinct,
        after_s = secs(after),
        "landed {landed} more {} ({distinct} distinct so far, {:.1} s after the launch)",
        cache_files(landed),
        secs(after)
    );
}
