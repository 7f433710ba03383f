//! The variants of [`Event`], by the folder they belong to: each with its
//! fields, its levels (the usual one first), its code and its message.

use std::path::PathBuf;
use std::time::Duration;

use super::cache_files;
use super::Shown;

/// What the next launch does with files that landed after done.
const LATE_KEEP: &str = "the next launch keeps the set signed at done if its files did not change, and tunes again otherwise";

fn tenths(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `1 entry`, `N entries`.
fn count_entries(n: usize) -> String {
    if n == 1 {
        "1 entry".to_string()
    } else {
        format!("{n} entries")
    }
}

/// What a probe's status line said.
fn status_line(status: Option<u16>) -> String {
    status.map_or_else(
        || "no HTTP status line".to_string(),
        |s| format!("status {s}"),
    )
}

catalogue! {
    "keepwrap::done" {
        // ---- the health probe (debug: one line per probe) ----

        ProbeTimedOut { url: String }
            DEBUG "probe_timed_out"
            => "health probe of {url} timed out";
        ProbeFailed { url: String, error: String }
            DEBUG "probe_failed"
            => "health probe of {url}: {error}";
        ProbeStatus { url: String, status: Option<u16> }
            DEBUG "probe_status"
            => "health probe of {url}: {}", status_line(status);
        ProbeUnresolved { host: String, error: String }
            DEBUG "probe_unresolved"
            => "health probe: cannot resolve {host}: {error}";
        ProbeSocketFailed { error: String }
            DEBUG "probe_socket_failed"
            => "health probe: socket: {error}";
        /// Which sockets listen on the probed address, and the engine's
        /// processes.
        PortListeners { address: String, inodes: Vec<u64>, tables: Duration, pids: Vec<u32> }
            DEBUG "port_listeners"
            => "sockets listening for {address}: inodes {} (socket tables read in {:.1} ms); the engine's tree: pids {}",
                super::listed(inodes), tables.as_secs_f64() * 1000.0, super::listed(pids);

        // ---- the watch ----

        CannotWatchDir { path: PathBuf, error: String }
            WARN "cannot_watch_dir"
            => "cannot watch {}: {error}; nothing in it will be signed", Shown(path);
        CannotListDir { path: PathBuf, error: String }
            WARN "cannot_list_dir"
            => "cannot list {}: {error}; nothing in it will be signed", Shown(path);
        /// The cache root itself cannot be watched or listed any more.
        WatchError { error: String }
            WARN "watch_error"
            => "{error}";
        InotifyReadFailed { dir: PathBuf, error: String }
            WARN "inotify_read_failed"
            => "reading inotify events for {} failed: {error}; rescanning", Shown(dir);
        InotifyOverflow { dir: PathBuf }
            INFO "inotify_overflow"
            => "the inotify queue overflowed: rescanning {}", Shown(dir);

        // ---- progress ----

        /// The engine saved a cache file of `entries` entries.
        Landed { path: PathBuf, entries: usize, after: Duration }
            INFO "landed"
            => "landed {} ({}, {} after the launch)", Shown(path), count_entries(entries), tenths(after);
        /// The engine saved a cache file keepwrap cannot count (`reason`).
        LandedUncounted { path: PathBuf, reason: String, after: Duration }
            INFO "landed"
            => "landed {} ({reason}, {} after the launch)", Shown(path), tenths(after);
        /// The engine saved again a cache file as it was signed for this
        /// launch (a warm boot that tuned nothing new).
        LandedUnchanged { path: PathBuf, entries: usize, after: Duration }
            DEBUG "landed_unchanged"
            => "landed {} unchanged: as signed for this launch, nothing new tuned ({} after the launch)", Shown(path), tenths(after);
        /// A file landed and was gone before it was read: the engine
        /// removed it (its entry gate) or renamed it.
        LandedGone { path: PathBuf, after: Duration }
            DEBUG "landed_gone"
            => "{} was saved and then removed or renamed by the engine before keepwrap read it ({} after the launch)", Shown(path), tenths(after);
        /// From now on landings are summed up every `every`.
        LandedSumming { distinct: usize, after: Duration, every: Duration }
            INFO "landed_summing"
            => "landed {distinct} distinct cache files ({} after the launch): from now on one line every {} s sums up the landings",
                tenths(after), every.as_secs();
        LandedMore { landed: usize, distinct: usize, after: Duration }
            INFO "landed_more"
            => "landed {landed} more {} ({distinct} distinct so far, {} after the launch)", cache_files(landed), tenths(after);
    }
    "keepwrap::keeper" {
        // ---- the done rule's decisions ([`crate::keeper::policy`]) ----

        /// The health endpoint answered 200 from the engine.
        DoneHealth { rule: &'static str, url: String, after: Duration }
            INFO "tuning_done"
            => "tuning is done: GET {url} answered 200 {} after the launch", tenths(after);
        /// No cache file landed for the quiet period.
        DoneQuiet { rule: &'static str, quiet: Duration, after: Duration }
            INFO "tuning_done"
            => "tuning is done: no cache file landed for {} ({} after the launch)",
                humantime::format_duration(quiet), tenths(after);
        /// The command exited 0 (`--done exit`, or `quiet=` before it fired).
        DoneExit { rule: &'static str, after: Duration }
            INFO "tuning_done"
            => "tuning is done: the command exited 0 ({} after the launch)", tenths(after);
        /// The probed port is served by another process than the engine.
        NotDoneForeign { url: String, owner: String }
            INFO "port_not_engines"
            => "not done yet: GET {url} answered 200, but the port is served by {owner}, not by the engine; waiting for the engine's own server";
        /// Another launch used the root while this one ran.
        NotSigningOtherLaunch { other: String }
            INFO "not_signing_other_launch"
            => "not signing: {other} used this cache root while this launch ran; their rank files may be mixed";
        /// The first file that landed after done.
        LateLanding {}
            INFO "late_landing"
            => "a cache file landed after tuning was done: what lands now is provisional, signed only if the engine exits 0 on its own";
        /// The engine was stopped before done.
        NotSigningStopped { status: String, signal: String }
            INFO "not_signing_stopped"
            => "not signing: the engine ended with status {status} after keepwrap forwarded {signal}: a stop is never tuning done";
        /// The engine exited before done.
        NotSigningEarly { status: String }
            INFO "not_signing_early_exit"
            => "not signing: the engine exited with status {status} before tuning was done";
        /// A headless node exited 0 before done: its exit says nothing about
        /// tuning.
        NotSigningHeadless {}
            INFO "not_signing_headless"
            => "not signing: a headless node exited 0 before tuning was done: its exit says nothing about tuning";
        /// The command exited 0 before done, but its exit status may not be
        /// the engine's (a launch not read whole, `timeout --preserve-status`).
        NotSigningExitUnproven {}
            INFO "not_signing_exit_unproven"
            => "not signing: the command exited 0 before tuning was done, and its exit status may not be the engine's";
        /// Files that landed after done, not signed: the command's exit 0 may
        /// not be the engine's.
        LateNotSignedExitUnproven { late: usize }
            INFO "late_not_signed_exit_unproven"
            => "not signing the {late} {} that landed after tuning was done: the command's exit 0 may not be the engine's; {LATE_KEEP}",
                cache_files(late);
        /// Files that landed after done, not signed: a headless node's exit 0
        /// says nothing about tuning.
        LateNotSignedHeadless { late: usize }
            INFO "late_not_signed_headless"
            => "not signing the {late} {} that landed after tuning was done: a headless node's exit 0 says nothing about tuning; {LATE_KEEP}",
                cache_files(late);
        /// Files that landed after done, not signed: the engine was stopped.
        LateNotSignedStopped { late: usize, status: String, signal: String }
            INFO "late_not_signed_stopped"
            => "not signing the {late} {} that landed after tuning was done: the engine ended with status {status} after keepwrap forwarded {signal}; {LATE_KEEP}",
                cache_files(late);
        /// Files that landed after done, not signed: the engine failed.
        LateNotSignedAbnormal { late: usize, status: String }
            INFO "late_not_signed_abnormal"
            => "not signing the {late} {} that landed after tuning was done: the engine ended abnormally with status {status}; {LATE_KEEP}",
                cache_files(late);
    }
}

impl Event {
    /// A quieter level than the usual one where the fields say so.
    pub(super) fn quieter(&self) -> Option<tracing::Level> {
        None
    }
}
