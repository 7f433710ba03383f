//! The variants of [`Event`], by the folder they belong to: each with its
//! fields, its levels (the usual one first), its code and its message.

use std::path::PathBuf;
use std::time::Duration;

use super::cache_files;
use super::secs;
use super::Shown;
use crate::STATE_DIR;

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

        /// vLLM's cache root cannot be found.
        NoVllmCacheRoot { error: String }
            WARN "no_vllm_cache_root"
            => "no cache root: {error}; the launch goes on without keeping the cache";

        /// The shared cache file is kept: the launch is not a MoE model under more
        /// than one rank (`why`).
        KeptSharedFile { path: PathBuf, reason: String }
            INFO "kept_shared_file"
            => "kept {}: vLLM 0.27.1-0.31.x's one shared cache file hangs only a MoE model under more than one rank, and this is {reason}", Shown(path);

        /// The shared cache file is removed: kept, it hangs every warm boot.
        RemovedSharedFile { path: PathBuf, reason: String }
            INFO "removed_shared_file"
            => "removed {}: vLLM 0.27.1-0.31.x keeps one cache file for all ranks with rank 0's MoE tactics only, and a kept one hangs every warm boot of a MoE model under more than one rank until the 30-minute collective timeout (vLLM issues 57423, 54618; fixed in vLLM 0.32.0 by per-rank files): the engine re-tunes ({reason})", Shown(path);

        CannotRemoveSharedFile { path: PathBuf, error: String }
            WARN "cannot_remove_shared_file"
            => "cannot remove {}: {error}", Shown(path);

        /// A one-rank launch of vLLM 0.33.0 or later: its tactics live in
        /// FlashInfer's managed store, left alone.
        ManagedStore { store: String }
            INFO "managed_store"
            => "a one-rank launch: vLLM 0.33.0 and later keep its tactics in FlashInfer's managed store ({store}), which keepwrap leaves alone: one rank cannot desynchronise, entries are keyed by their shape and the environment, and a bad entry is a miss";

        /// A Ray launch (`--distributed-executor-backend ray`, `-dpb ray`): its
        /// workers write their rank files from Ray's processes, on the nodes Ray
        /// picks, with each node's own Ray environment; keepwrap cannot vouch for
        /// them and leaves vLLM's cache as vLLM leaves it.
        RayLaunch { arg: String }
            INFO "ray_launch"
            => "a Ray launch ({arg}): vLLM's workers run as Ray actors on whichever nodes Ray places them, each writing its rank file with its own node's Ray environment (which wins over this launch's), so keepwrap can tell neither which rank files are written here nor under which settings: it leaves vLLM's cache as vLLM leaves it (nothing kept, signed or removed) and only supervises; to keep the cache run the nodes with --nnodes/--node-rank instead";
 }
    "keepwrap::supervisor" {
        /// `KEEPWRAP_LOG` is neither a level nor a filter.
        UnknownLogLevel { value: String }
            WARN "unknown_log_level"
            => "KEEPWRAP_LOG={value:?} is not a log level (off, error, warn, info, debug, trace) nor a filter such as keepwrap=debug: logging at info";

        CannotBlockSignals { error: String }
            ERROR "cannot_block_signals"
            => "cannot block signals: {error}";

        CannotOpenSignalfd { error: String }
            ERROR "cannot_open_signalfd"
            => "cannot open a signalfd: {error}";

        PollFailed { error: String }
            ERROR "poll_failed"
            => "poll failed: {error}";

        /// The cache is not kept for this command: `--disable` (`reason`
        /// `disabled`), `--keep never` (`keep_never`), no engine launch under
        /// `--keep auto` (`not_an_engine`), or an engine launch keepwrap cannot read
        /// whole under `--keep auto` (`unreadable_launch`); `why` says it to the
        /// operator.
        SupervisingOnly { reason: String, why: String }
            INFO "supervising_only"
            => "{why}";

        /// The command could not be started.
        CannotRun { program: String, reason: String, status: u8 }
            ERROR "cannot_run"
            => "cannot run '{program}': {reason}";

        /// A stop signal came before the engine was started.
        StoppedBeforeStart { signal: String, status: i32 }
            INFO "stopped_before_start"
            => "received {signal} before the engine started: exiting with {status} without starting it";

        ExplainThreadFailed { error: String }
            DEBUG "explain_thread_failed"
            => "cannot start a thread for the explanation: {error}";

        /// `--kill-after` fired.
        KillAfter { after: Duration }
            WARN "kill_after"
            => "the engine is still running {} after TERM/INT: killing its process group", humantime::format_duration(after);

        /// The engine exited and processes of its group are left.
        DrainTerm { grace: Duration }
            INFO "drain_term"
            => "the engine exited; sending TERM to what is left of its process group ({} grace)", humantime::format_duration(grace);

        /// What was left of the group outlived `--grace`.
        DrainKill { grace: Duration }
            WARN "drain_kill"
            => "processes of the engine outlived the {} grace: sending KILL", humantime::format_duration(grace);

        CannotBecomeSubreaper { error: String }
            WARN "cannot_become_subreaper"
            => "cannot become a child subreaper ({error}): orphans of the engine will not be reaped by keepwrap";

        CannotForward { signal: String, pid: i32, error: String }
            WARN "cannot_forward"
            => "cannot forward {signal} to {pid}: {error}";

        WaitpidFailed { error: String }
            WARN "waitpid_failed"
            => "waitpid failed: {error}";

        /// The last line of a launch whose engine exited: its status and
        /// after how long, once everything keepwrap did at the end is logged.
        EngineExited { status: u8, uptime: Duration }
            INFO "engine_ended"
            => "the engine exited with status {status} after {:.1} s", secs(uptime);
        /// The last line of a launch whose engine a signal killed.
        EngineKilled { status: u8, signal: String, uptime: Duration }
            INFO "engine_ended"
            => "the engine was killed by {signal} (status {status}) after {:.1} s", secs(uptime);
 }
    "keepwrap::root" {
        LockWaiting { timeout: Duration, holder: String }
            INFO "lock_waiting"
            => "waiting up to {} for the cache lock {STATE_DIR}/lock, held by {holder}", humantime::format_duration(timeout);

        LockTaken { waited: Duration }
            INFO "lock_taken"
            => "took the cache lock after waiting {:.1} s", secs(waited);

        /// A marker another user put among the running markers
        /// (`.keepwrap/running/NAME`).
        ForeignMarker { marker: String, uid: u32 }
            WARN "foreign_marker"
            => "ignored the marker {marker}: owned by another user (uid {uid}); only this user's (or root's) launches are waited for or left alone";

        CannotUpdateMarker { marker: String, error: String }
            WARN "cannot_update_marker"
            => "cannot update this launch's marker {marker}: {error}";

        CannotPassMarker { error: String }
            WARN "cannot_pass_marker"
            => "cannot pass this launch's marker to the engine: {error}";

        /// Best effort: a full or read-only disk is warned about by the cache work.
        CannotWriteStats { file: String, error: String }
            DEBUG "cannot_write_stats"
            => "cannot write {STATE_DIR}/{file}: {error}";

        /// `--cache-dir` is not where the engine writes.
        CacheDirNotEngines { dir: PathBuf, engine: PathBuf, from: String }
            WARN "cache_dir_not_engines"
            => "--cache-dir {} is not under the engine's cache directory {} ({from}): the engine writes its autotune cache there, so keepwrap does not protect it; set SGLANG_CACHE_DIR instead (one per pod: SGLANG_CACHE_DIR=/cache/$(POD_NAME))", Shown(dir), Shown(engine);
    }
    "keepwrap::cli" {
        /// A keepwrap setting (`option`, from `variable` when a variable set it)
        /// has a value keepwrap cannot read: `what` says it as a usage error would,
        /// `then` what the launch does instead.
        SettingInvalid { what: String, option: String, variable: Option<String>, value: String, then: String }
            ERROR "setting_invalid"
            => "{what}; {then} (--strict, or KEEPWRAP_STRICT=1, refuses it)";

        /// The command line cannot be used: `what` says why (exit status 2).
        UsageError { what: String }
            ERROR "usage_error"
            => "{what}";
    }
    "keepwrap::unify" {
        CannotUnifyRoot { root: String, error: String }
            WARN "cannot_unify_root"
            => "cannot unify rank files under {root}: {error}";

        /// No room left: the other directories are left as they are too.
        UnifyNoRoom { dir: String, error: String, others: usize }
            WARN "unify_no_room"
            => "cannot unify the rank files of {dir}: {error}; left them and the {others} other directories as they are";

        UnifyFailed { dir: String, error: String }
            WARN "unify_failed"
            => "cannot unify the rank files of {dir}: {error}; left as they are";

        /// One entry two ranks tuned differently; `conflict` names it and says
        /// which value was kept.
        UnifyConflict { dir: String, conflict: String }
            INFO "unify_conflict"
            => "{dir}: {conflict}";

        /// Unify does not apply to this directory; `reason` starts with
        /// `left as they are: ` (at debug level in a root said once to be
        /// untrusted).
        UnifyLeft { dir: String, reason: String }
            INFO | DEBUG "unify_left"
            => "{dir}: {reason}";
        AlreadyUnified { dir: String, files: usize }
            DEBUG "already_unified"
            => "{dir}: the {} are already one union", super::counted(files, "rank file", "rank files");
        Unified { dir: String, files: usize, entries: usize, conflicts: usize }
            INFO "unified"
            => "unified {files} rank files in {dir}: {} each, {conflicts} conflicting",
                super::counted(entries, "entry", "entries");
        UnifyMoreConflicts { dir: String, conflicts: usize }
            INFO "unify_more_conflicts"
            => "{dir}: and {}", super::counted(conflicts, "more conflicting entry", "more conflicting entries");
 }
    "keepwrap::share" {
        ShareCannotWriteOwn { error: String }
            WARN "share_cannot_write_own"
            => "share: cannot write this node's rank files: {error}; single-node behaviour";

        /// This node's own published rank files were written back and signed.
        ShareRestoredOwn { files: usize, nodes: u32 }
            INFO "share_restored_own"
            => "share: restored this node's {} from the share, published with every other node's for this launch ({nodes} nodes), and signed them",
                super::counted(files, "rank file", "rank files");
 }
}

impl Event {
    /// A quieter level than the usual one where the fields say so.
    pub(super) fn quieter(&self) -> Option<tracing::Level> {
        match self {
            Event::UnifyLeft { reason, .. }
                if reason
                    .strip_prefix("left as they are: ")
                    .is_some_and(super::in_untrusted_root) =>
            {
                Some(tracing::Level::DEBUG)
            }
            _ => None,
        }
    }
}
