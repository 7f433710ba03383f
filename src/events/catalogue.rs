//! The variants of [`Event`], by the folder they belong to: each with its
//! fields, its levels (the usual one first), its code and its message.

use std::path::PathBuf;
use std::time::Duration;

use super::cache_files;
use super::secs;
use super::Shown;
use crate::digest::short;
use crate::signals::Ended;
use crate::STATE_DIR;

/// The advice for two launches that meet on one root.
const ROOT_PER_POD: &str =
    "give each pod its own cache root (e.g. SGLANG_CACHE_DIR=/cache/$(POD_NAME)), with --share DIR for what the nodes of a multi-node launch have in common";

/// What the engine keeps running without.
const WITHOUT: &str = "this launch goes on without keeping the cache (prunes nothing, signs nothing: its engine sees the cache as it is)";

/// How to fix a cache root another user can write (`why`).
fn untrusted_fix(root: &std::path::Path, why: &str) -> String {
    if why.starts_with("world-writable") {
        format!("chmod o-w {}", Shown(root))
    } else {
        "give it to this user (chown) or use a root of its own".to_string()
    }
}

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

/// What became of the set signed at done, as a line about the cache files
/// that landed after done says it: the policy knows the files, the commit
/// worker (which signed the set) judges the rest before the line is
/// logged, so that the launch's last verdict is true.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Not judged against the set signed at done.
    #[default]
    Unjudged,
    /// Nothing was signed at done.
    NothingSigned,
    /// These members of the set signed at done changed (or are gone) since:
    /// the set no longer holds.
    Broken { changed: Vec<PathBuf> },
    /// The set signed at done (`signed` files) is as it was signed; the
    /// late files are new ones beside it.
    Holds { signed: usize },
    /// The set signed at done (`signed` files) is in the store, whole
    /// (another launch's prune moved it there).
    Stored { signed: usize },
}

impl super::AsArg for Outcome {
    type Out<'a> = &'a Outcome;
    fn arg(&self) -> &Outcome {
        self
    }
}

/// In the JSON form: `unjudged`, `nothing_signed`, `broken`, `holds` or
/// `stored`.
impl super::Field for Outcome {
    fn json<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(match self {
            Outcome::Unjudged => "unjudged",
            Outcome::NothingSigned => "nothing_signed",
            Outcome::Broken { .. } => "broken",
            Outcome::Holds { .. } => "holds",
            Outcome::Stored { .. } => "stored",
        })
    }
}

/// At most four paths, then how many more.
fn some_paths(paths: &[PathBuf]) -> String {
    const SHOWN: usize = 4;
    let mut text = super::listed(paths.iter().take(SHOWN).map(|p| Shown(p)));
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

/// `N cache files`, the files that landed after done.
fn late_files(files: &[PathBuf]) -> String {
    super::counted(files.len(), "cache file", "cache files")
}

/// What became of the set signed at done, `late` files having landed
/// after it.
fn verdict(outcome: &Outcome, late: usize) -> String {
    match outcome {
        Outcome::Unjudged => "the next launch keeps the set signed at done if its files did not change, and tunes again otherwise".to_string(),
        Outcome::NothingSigned => "nothing was signed at done: the next launch tunes again".to_string(),
        Outcome::Broken { changed } => format!(
            "the set signed at done no longer holds ({} changed or gone since it was signed): the next launch tunes again",
            some_paths(changed)
        ),
        Outcome::Stored { signed } => format!(
            "the {signed} {} signed at done went into the store whole: the next launch of this one brings them back",
            cache_files(*signed)
        ),
        Outcome::Holds { signed } => format!(
            "the {signed} {} signed at done stay signed as they were: the next launch keeps them and removes the {}",
            cache_files(*signed),
            if late == 1 { "late one" } else { "late ones" }
        ),
    }
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

        // ---- the done rule's decisions (the keeper's policy) ----

        /// The health endpoint answered 200 from the engine.
        DoneHealth { url: String, after: Duration }
            INFO "tuning_done"
            => "tuning is done: GET {url} answered 200 {} after the launch", tenths(after);
        /// No cache file landed for the quiet period.
        DoneQuiet { quiet: Duration, after: Duration }
            INFO "tuning_done"
            => "tuning is done: no cache file landed for {} ({} after the launch)", humantime::format_duration(quiet), tenths(after);
        /// The command exited 0 (`--done exit`, or `quiet=` before it fired).
        DoneExit { after: Duration }
            INFO "tuning_done"
            => "tuning is done: the command exited 0 ({} after the launch)", tenths(after);
        /// The probed port is served by another process than the engine.
        NotDoneForeign { url: String, owner: String }
            INFO "port_not_engines"
            => "not done yet: GET {url} answered 200, but the port is served by {owner}, not by the engine; waiting for the engine's own server";
        /// Another launch used the root while this one ran.
        OtherLaunch { other: String }
            INFO "not_signing_other_launch"
            => "not signing: {other} used this cache root while this launch ran; their rank files may be mixed";
        /// Another launch used the root after the sign at done.
        OtherAfterSign { other: String }
            INFO "other_launch_after_done"
            => "{other} used this cache root after tuning was done: what lands now is not signed, even at an exit 0 (the last line of this launch about the cache says what became of the set signed at done)";
        /// The first file that landed after done.
        LateLanding {}
            INFO "late_landing"
            => "a cache file landed after tuning was done: what lands now is provisional, signed only if the engine exits 0 on its own";
        /// The engine was stopped before done.
        NotSigningStopped { status: Ended, signal: String }
            INFO "not_signing_stopped"
            => "not signing: the engine ended with status {status} after keepwrap forwarded {signal}: a stop is never tuning done";
        /// The engine exited before done.
        NotSigningEarly { status: Ended }
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

        // ---- the cache files that landed after done, not signed (`paths`,
        // relative to the cache root), and what became of the set signed at
        // done (`outcome`, judged by the commit worker before the line is
        // logged); the JSON form adds `late` (their count) and `set_holds`
        // ----

        /// The command's exit 0 may not be the engine's.
        LateNotSignedExitUnproven { paths: Vec<PathBuf>, outcome: Outcome }
            INFO "late_not_signed_exit_unproven"
            => "not signing the {} that landed after tuning was done ({}): the command's exit 0 may not be the engine's; {}",
                late_files(paths), some_paths(paths), verdict(outcome, paths.len());
        /// A headless node's exit 0 says nothing about tuning.
        LateNotSignedHeadless { paths: Vec<PathBuf>, outcome: Outcome }
            INFO "late_not_signed_headless"
            => "not signing the {} that landed after tuning was done ({}): a headless node's exit 0 says nothing about tuning; {}",
                late_files(paths), some_paths(paths), verdict(outcome, paths.len());
        /// The engine was stopped.
        LateNotSignedStopped { paths: Vec<PathBuf>, outcome: Outcome, status: Ended, signal: String }
            INFO "late_not_signed_stopped"
            => "not signing the {} that landed after tuning was done ({}): the engine ended with status {status} after keepwrap forwarded {signal}; {}",
                late_files(paths), some_paths(paths), verdict(outcome, paths.len());
        /// The engine failed.
        LateNotSignedAbnormal { paths: Vec<PathBuf>, outcome: Outcome, status: Ended }
            INFO "late_not_signed_abnormal"
            => "not signing the {} that landed after tuning was done ({}): the engine ended abnormally with status {status}; {}",
                late_files(paths), some_paths(paths), verdict(outcome, paths.len());
        /// Another launch used the root after the sign at done.
        LateNotSignedOther { paths: Vec<PathBuf>, outcome: Outcome, other: String }
            INFO "late_not_signed_other_launch"
            => "not signing the {} that landed after tuning was done ({}): {other} used this cache root while this launch ran, and its files may be mixed in; {}",
                late_files(paths), some_paths(paths), verdict(outcome, paths.len());
        /// The files that landed after done are all as the sign at done left
        /// them (the engine saved again what it had): the set signed at done
        /// holds.
        LateAsSigned { files: usize }
            DEBUG "late_as_signed"
            => "the {files} {} that landed after tuning was done {} as signed at done: the set signed at done holds",
                cache_files(files), if files == 1 { "is" } else { "are" };

        /// vLLM's cache root cannot be found.
        NoVllmCacheRoot { error: String }
            WARN "no_vllm_cache_root"
            => "no cache root: {error}; the launch goes on without keeping the cache";

        /// The shared cache file is kept: the launch is not a MoE model under more
        /// than one rank (`why`).
        /// The shared cache file is kept: the launch is not a MoE model
        /// under more than one rank (`reason`). At debug level: the file's
        /// verdict is prune's `kept` line; this says why that is safe.
        KeptSharedFile { path: PathBuf, reason: String }
            DEBUG "kept_shared_file"
            => "kept {}: vLLM 0.27.1-0.31.x's one shared cache file hangs only a MoE model under more than one rank, and this is {reason}", Shown(path);

        /// The shared cache file the store restored for this launch is
        /// removed: kept, it hangs every warm boot. (One prune kept is
        /// refused there, with the same reason, in prune's `removed` line.)
        RemovedSharedFile { path: PathBuf, reason: String }
            INFO "removed_shared_file"
            => "removed {}: {}", Shown(path), super::shared_file_hangs(reason);

        CannotRemoveSharedFile { path: PathBuf, error: String }
            WARN "cannot_remove_shared_file"
            => "cannot remove {}: {error}", Shown(path);

        /// Every cache file the engine wrote is one the next start removes
        /// (`why`): nothing is signed, and the launch tunes at every boot.
        KeepsNothing { files: usize, why: String }
            INFO "keeps_nothing"
            => "this launch keeps nothing: the next start removes the {} the engine wrote: {why}", super::counted(files, "cache file", "cache files");

        /// A one-rank launch whose tactics may live in FlashInfer's managed
        /// store, which keepwrap leaves alone (`why`); `supervising`: the
        /// launch is only supervised (it names its own store), else its
        /// rank files are kept as any launch's and its outcome comes later.
        ManagedStore { store: String, why: String, supervising: bool }
            INFO "managed_store"
            => "a one-rank launch: FlashInfer's managed store ({store}) is left alone: {why}";

        /// A command keepwrap does not read as a vLLM server, run under the
        /// vllm profile (a launch script): its world size cannot be read, so
        /// only vLLM's rank files are kept; a one-rank vLLM 0.33.0 or later
        /// in it keeps its tactics in FlashInfer's managed store (`store`),
        /// left alone. Not an outcome: the rank files are kept as any.
        ManagedStoreUnread { store: String }
            INFO "managed_store_unread"
            => "keepwrap does not read this command as a vLLM server (a launch script), so it cannot tell its world size and keeps vLLM's rank files only: a one-rank vLLM 0.33.0 or later in it keeps its tactics in FlashInfer's managed store ({store}), which keepwrap leaves alone (give keepwrap the vllm serve command itself, or a shell string that runs it, to have the store kept per launch)";

        /// A one-rank launch of vLLM 0.33.0 or later: its tactics live in
        /// FlashInfer's managed store, which keepwrap keeps per launch in a
        /// root of its own (`var` set for the engine).
        ManagedStoreKept { store: PathBuf, var: String }
            INFO "managed_store_kept"
            => "a one-rank launch: FlashInfer's managed store is kept per launch in {} ({var} for the engine)", Shown(store);

        /// `--pin` on a launch whose cache pinning does not apply to
        /// (`why`): the launch goes on as without it.
        PinNotApplicable { why: String }
            INFO "pin_not_applicable"
            => "--pin: {why}; the launch goes on unpinned";

        /// `--pin` and no set signed for the launch yet: this boot tunes,
        /// and the set signed at done is the one pinned from then on.
        PinFirst { fingerprint: String }
            INFO "pin_first"
            => "--pin: no set is signed for this launch yet: this boot tunes, and the set signed when it is done is pinned from the next boot on";

        /// The set pinned could not be held (its hard links in keepwrap's
        /// state directory): the launch goes on unpinned.
        CannotPin { error: String }
            WARN "cannot_pin"
            => "--pin: cannot keep a copy of the signed set ({error}); the launch goes on unpinned";

        /// `--pin` at done (again at exit when the engine wrote after
        /// done): the signed set is as signed again, the engine's writes
        /// are not signed. `missing`: the shapes the engine tuned that the
        /// set lacks (removed: tuned in memory for this boot only);
        /// `changed`: members it replaced or removed (put back).
        Pinned { files: usize, missing: usize, changed: usize, fingerprint: String }
            INFO "pinned"
            => "pinned: the {} signed for this launch stay as signed; the engine tuned {} the set lacks (for this boot only, not kept) and replaced {changed} of its files (put back)", super::counted(files, "cache file", "cache files"), super::counted(missing, "shape", "shapes");

        /// Files of keepwrap's copy of a pinned set that are not the files
        /// signed (planted, edited, a symlink, a name the set lacks): never
        /// put back; the copy is dropped and taken again from the set as
        /// checked.
        PinUntrusted { files: usize, path: PathBuf, why: String, fingerprint: String }
            WARN "pin_untrusted"
            => "warning: --pin: keepwrap's copy of the pinned set of launch {} holds {} not signed ({}: {why}): never put back; the copy is dropped and taken again from the set in the tree once checked", short(fingerprint), super::counted(files, "file", "files"), path.display();

        /// At done (or at exit), the pinned set put back is still not the
        /// set signed: the engine wrote into one of its files, which is
        /// keepwrap's copy too.
        NotSigningPinnedChanged { fingerprint: String }
            WARN "not_signing_pinned_changed"
            => "warning: not signing: the cache files of the pinned set are not the ones signed for launch {} even once put back: the engine wrote into a file of the set itself (keepwrap's copy is that file); nothing is reused or published, and the next start removes the set (changed after signing)", short(fingerprint);

        /// Before the start: members of the pinned set that the engine
        /// replaced or removed while keepwrap could not put them back (it
        /// was killed) are put back from keepwrap's copy.
        PinPutBack { restored: usize, fingerprint: String }
            INFO "pin_put_back"
            => "put back {} of the pinned set that the engine replaced or removed", super::counted(restored, "cache file", "cache files");

        /// An SGLang after 0.5.23 that keeps its tactics in FlashInfer's
        /// managed store (not released yet): keepwrap keeps the store per
        /// launch in a root of its own (`var` set for the engine).
        SglangStoreKept { store: PathBuf, var: String, version: String }
            INFO "sglang_store_kept"
            => "SGLang {version} keeps its tactics in FlashInfer's managed store: kept per launch in {} ({var} for the engine)", Shown(store);

        /// An SGLang on the managed store whose store keepwrap leaves as
        /// the engine leaves it, and why.
        SglangStoreLeft { store: String, version: String, why: String }
            INFO "sglang_store_left"
            => "SGLang {version} keeps its tactics in FlashInfer's managed store ({store}), left alone: {why}";

        /// A TensorRT-LLM launch: keepwrap sets `TLLM_AUTOTUNER_CACHE_PATH` for
        /// the engine to its own file and keeps it per launch; the
        /// fingerprint holds what TensorRT-LLM never checks.
        TrtllmCacheKept { path: PathBuf, gpu: String, engine: String }
            INFO "trtllm_cache_kept"
            => "TensorRT-LLM's autotuner cache is kept per launch in {} (TLLM_AUTOTUNER_CACHE_PATH for the engine); the fingerprint holds the GPU model ({gpu}) and the build ({engine}), which TensorRT-LLM never checks", Shown(path);

        /// The launch set `TLLM_AUTOTUNER_CACHE_PATH` itself: keepwrap's
        /// file replaces it for the engine.
        TrtllmCachePathOverridden { theirs: PathBuf, ours: PathBuf }
            INFO "trtllm_cache_path_overridden"
            => "TLLM_AUTOTUNER_CACHE_PATH is {} for the engine: keepwrap sets it to {} instead, a file it keeps per launch (the file at {} is left as it is)", Shown(theirs), Shown(ours), Shown(theirs);

        /// A kept TensorRT-LLM cache file that would fail the boot or set
        /// its ranks apart, removed before the start.
        TrtllmFileRemoved { path: PathBuf, why: String }
            INFO "trtllm_file_removed"
            => "removed {}: {why}; the engine tunes afresh (a cold boot, not a failed one)", Shown(path);

        /// Attention-DP is on: with expert parallelism a warm cache can hang
        /// the start (TensorRT-LLM PR 14240).
        TrtllmAttentionDp { file: PathBuf }
            WARN "trtllm_attention_dp"
            => "attention-DP is on ({}: enable_attention_dp): with expert parallelism a warm autotuner cache can hang TensorRT-LLM's start (PR 14240, not merged); if a warm start hangs, start this launch once with --start-cold (KEEPWRAP_START_COLD=1): that boot tunes from scratch, and its set is kept as usual", Shown(file);

        /// Attention-DP is on by the launch's switch.
        TrtllmAttentionDpFlag {}
            WARN "trtllm_attention_dp_flag"
            => "attention-DP is on (--enable_attention_dp): with expert parallelism a warm autotuner cache can hang TensorRT-LLM's start (PR 14240, not merged); if a warm start hangs, start this launch once with --start-cold (KEEPWRAP_START_COLD=1): that boot tunes from scratch, and its set is kept as usual";

        /// `--share` given for a TensorRT-LLM launch: one keepwrap around
        /// the launcher keeps every rank's set in its root, so there is
        /// nothing for other nodes' keepwraps to take.
        TrtllmShareNotUsed { dir: PathBuf }
            WARN "trtllm_share_not_used"
            => "share: {} is not used for a TensorRT-LLM launch: one keepwrap around mpirun/srun on rank 0's node keeps the set of every rank in its root; put --cache-dir on a directory every node mounts instead", Shown(dir);

        TrtllmCannotRemove { path: PathBuf, error: String }
            WARN "trtllm_cannot_remove"
            => "cannot remove {}: {error}", Shown(path);

        /// An entry of a kept managed store that FlashInfer did not write
        /// as it is: the set it belongs to is not trusted.
        UntrustedStoreEntry { path: String, why: String }
            WARN "untrusted_store_entry"
            => "{path} {why}: the managed store's set is not trusted";

        /// The kept set of a managed store removed for an untrusted entry.
        UntrustedStoreRemoved { files: usize }
            WARN "untrusted_store_removed"
            => "removed the {} kept for this launch: the engine tunes afresh", super::counted(files, "store entry", "store entries");

        CannotRemoveStoreEntry { path: PathBuf, error: String }
            WARN "cannot_remove_store_entry"
            => "cannot remove {}: {error}", Shown(path);

        /// A Ray launch (`--distributed-executor-backend ray`, `-dpb ray`): its
        /// workers write their rank files from Ray's processes, on the nodes Ray
        /// picks, with each node's own Ray environment; keepwrap cannot vouch for
        /// them and leaves vLLM's cache as vLLM leaves it.
        RayLaunch { arg: String }
            INFO "ray_launch"
            => "a Ray launch ({arg}): vLLM's workers run as Ray actors on whichever nodes Ray places them, each writing its rank file with its own node's Ray environment (which wins over this launch's), so keepwrap can tell neither which rank files are written here nor under which settings: it leaves vLLM's cache as vLLM leaves it (nothing kept, signed or removed) and only supervises; to keep the cache run the nodes with --nnodes/--node-rank instead";

        /// The first line of a launch that keeps its cache.
        Launch { fingerprint: String, profile: String, root: PathBuf, done: String }
            INFO "launch"
            => "launch fingerprint {} ({profile} profile); cache root {}; tuning is done {done}", short(fingerprint), Shown(root);

        NoCacheRoot {}
            WARN "no_cache_root"
            => "no cache root: neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set, and this user has no password-database entry; the launch goes on without keeping the cache";

        /// The `--done` rule cannot be used for this launch.
        DoneRuleUnusable { error: String }
            WARN "done_rule_unusable"
            => "{error}; the launch goes on without keeping the cache";

        RootNotADirectory { root: PathBuf }
            WARN "root_not_a_directory"
            => "cache root {} is not a directory; the launch goes on without keeping the cache", Shown(root);

        RootCreated { root: PathBuf }
            INFO "root_created"
            => "cache root {} did not exist (first boot): created it", Shown(root);

        CannotCreateRoot { root: PathBuf, error: String }
            WARN "cannot_create_root"
            => "cannot create cache root {}: {error}; the launch goes on without keeping the cache", Shown(root);

        CannotUseRoot { root: PathBuf, error: String }
            WARN "cannot_use_root"
            => "cannot use cache root {}: {error}; the launch goes on without keeping the cache", Shown(root);

        RootReadOnly { root: PathBuf }
            WARN "root_read_only"
            => "cache root {} is on a read-only file system; the launch goes on without keeping the cache", Shown(root);

        /// The directory of the running markers cannot be opened.
        CannotOpenRunning { dir: PathBuf, error: String }
            WARN "cannot_open_running"
            => "cannot open {}: {error}; the launch goes on without keeping the cache", Shown(dir);

        CannotLeaveMarker { dir: PathBuf, error: String }
            WARN "cannot_leave_marker"
            => "cannot leave this launch's marker in {}: {error}; the launch goes on without keeping the cache", Shown(dir);

        StoreUnusable { state: String, root: PathBuf, error: String }
            WARN "store_unusable"
            => "cannot open the store {state}/ in {}: {error}; cache files of other launches are removed, not stored", Shown(root);

        CannotPrune { root: PathBuf, error: String }
            WARN "cannot_prune"
            => "cannot prune {}: {error}; the launch goes on, and nothing it writes will be signed", Shown(root);

        /// The watch of the cache tree cannot start.
        WatchFailed { error: String }
            WARN "watch_failed"
            => "{error}; the launch goes on, and nothing it writes will be signed";

        /// `--start-cold`: this boot neither restores nor reuses the
        /// launch's set; `files` of it wait in the store (`put_aside`), or
        /// were removed (no store).
        StartCold { files: usize, fingerprint: String, put_aside: bool }
            INFO "start_cold"
            => "starting cold (--start-cold): {}", super::start_cold_line(files, put_aside);

        /// The set a cold start put aside is deleted: the cold boot signed
        /// its own.
        StartColdReplaced { files: usize, fingerprint: String }
            INFO "start_cold_replaced"
            => "the cold boot signed its own set: the {} put aside for it deleted from the store", super::counted(files, "cache file", "cache files");

        /// This launch's set came back from the store.
        Restored { files: usize, fingerprint: String, signed_ago: String }
            INFO "restored"
            => "restored {files} {} of this launch from the store (signed {signed_ago})", cache_files(files);

        /// This launch was never signed; `line` names the nearest launch that was
        /// and how it differs.
        NoCacheFilesGone { fingerprint: String, signed: String }
            INFO "no_cache"
            => "no cache for this launch: it was signed {signed}, but its cache files were removed or are gone (the prune line above counts why; KEEPWRAP_LOG=debug names each file); it tunes again";
        /// This launch was never signed: the nearest signed launch, when it
        /// signed, and how this one differs (`arg --tp 4 -> 8`, `env X
        /// added`; none when they differ only in redacted or ignored
        /// values).
        NoCacheNearest { fingerprint: String, other_fingerprint: String, other_signed: String, differences: Vec<String> }
            INFO "no_cache"
            => "no cache for this launch; the nearest signed launch ({}, {other_signed}) differs in: {}",
                short(other_fingerprint), super::differences(differences);

        /// A line about the launch itself, logged once: a config file that cannot
        /// be used, a shell command that cannot be read.
        LaunchWarning { line: String }
            WARN "launch_warning"
            => "{line}";

        OtherDoneTuning { other: String, waited: Duration }
            INFO "other_done_tuning"
            => "{other} is done tuning; this launch goes on after waiting {:.1} s", secs(waited);

        LockGaveUp { timeout: Duration, what: String, holder: String, then: String }
            WARN "lock_gave_up"
            => "gave up waiting {} for the cache lock {}/lock ({what}), held by {holder}: {then}", humantime::format_duration(timeout), crate::STATE_DIR;

        LockFailed { what: String, error: String, then: String }
            WARN "lock_failed"
            => "cannot take the cache lock {}/lock ({what}): {error}: {then}", crate::STATE_DIR;

        CannotSign { root: PathBuf, error: String }
            WARN "cannot_sign"
            => "cannot sign {}: {error}; the next launch will tune again", Shown(root);

        /// Files kept for this launch were signed without unify: unified at done.
        KeptNotUnified { dirs: usize, fingerprint: String }
            INFO "kept_not_unified"
            => "the cache files kept in {dirs} {} are not one union (signed without being unified, as with --unify off): the engine loads them as they are, and they are unified and signed again once tuning is done", if dirs == 1 { "directory" } else { "directories" };

        /// An engine launch keepwrap cannot read whole (`--keep auto`): its
        /// tree is pruned (signed sets into the store, unsigned files
        /// removed), no set is offered, nothing is signed.
        UnreadablePruned { program: String, why: String, instead: String }
            INFO "unreadable_launch"
            => "'{program}' runs an engine keepwrap cannot read whole ({why}): its cache is pruned (signed sets go to the store, where the launches they belong to get them back), no set is offered and nothing is signed; {instead} (--keep always keeps it, checked against the engine seen running)";

        /// The launch's words do not show everything its engine gets: it is
        /// offered the set of the fingerprint its engine was last seen with.
        OfferedAsSeen { read: String, seen: String }
            INFO "offered_as_seen"
            => "the engine of this launch last ran as {} (seen, not read from the words {}): its set is offered, and checked again once the engine runs",
                short(seen), short(read);

        /// The engine was seen and runs with what the set offered was signed
        /// for.
        EngineAsOffered { pid: u32, fingerprint: String }
            DEBUG "engine_as_offered"
            => "the engine (pid {pid}) runs as {}: the fingerprint of what it got is the one offered", short(fingerprint);

        /// The engine runs with inputs the launch's words do not show: the
        /// tree is pruned again for what it runs with.
        EngineDiffers { pid: u32, read: String, seen: String, differences: Vec<String>, source: String }
            WARN "engine_differs"
            => "warning: the engine (pid {pid}) runs as {}, not as {} (what keepwrap read from the launch's words) and differs in: {}; most likely from {source}; the set offered goes back to the store and the tree is pruned for what runs (the next boot of this launch is offered the set of what ran): to have it read before the start, write it in the launch itself (env NAME=VALUE after keepwrap --, or export in the -c string)",
                short(seen), short(read), super::differences(differences);

        /// The engine was seen too late to take a set of other settings away:
        /// nothing is signed.
        NotSignedOffered { why: String }
            WARN "not_signing_offered"
            => "warning: nothing is signed on this boot: {why}; the next boot of this launch is offered the set of what ran";

        /// The launch cannot be fingerprinted whole before the start: no set
        /// is offered; its fingerprint is taken again at done.
        UnresolvedLaunch { why: String }
            INFO "unresolved_launch"
            => "this launch cannot be fingerprinted whole before the start ({why}): no set is offered; once tuning is done its fingerprint is taken again from what the engine then runs with, and its set is signed only if that is whole";

        /// Taken again at done, the fingerprint is whole.
        ResolvedAtDone { fingerprint: String }
            INFO "resolved_at_done"
            => "taken again at done, this launch's fingerprint is whole: {}", short(fingerprint);

        /// Taken again at done, the fingerprint is still not whole.
        NotSignedUnresolved { why: String }
            INFO "not_signing_unresolved"
            => "nothing signed: taken again at done, this launch still cannot be fingerprinted whole ({why}); the next launch tunes again";

        /// The share and the fleet are not used on this boot: the engine runs
        /// with inputs the words do not show.
        NotSharedUnread {}
            WARN "not_shared_unread"
            => "warning: the share and the fleet are not used on this boot: what this launch's engine runs with is not what its words say, or cannot be read before the start, and other nodes and pods find a set by the words (the lines above say what)";

        /// Nothing is signed: the engine was not seen, or was refused.
        NotSignedUnseen { why: String }
            INFO "not_signing_unseen"
            => "nothing signed: {why}; a set is signed only for what an engine was seen running with";

        /// The engine did not save some kept files again by done: it refused
        /// them (another GPU, CUDA or FlashInfer build); the set is not
        /// signed again and its files are removed.
        KeptRefused { refused: usize, kept: usize, example: PathBuf, fingerprint: String }
            WARN "kept_refused"
            => "warning: the engine refused {refused} of the {} kept for this launch (it saved none of them again, as it does a file whose _metadata is for another GPU, CUDA or FlashInfer build: {}): the set is not signed again and its files are removed, so the next boot tunes once on this machine and keeps its own",
                super::counted(kept, "cache file", "cache files"), super::Shown(example);

        /// This boot tuned; its set is signed for the next identical launch
        /// (`entries`: the tuned shapes its files hold, counted only for a
        /// metrics file, which reads each file again).
        Signed { files: usize, entries: Option<usize>, fingerprint: String }
            INFO "signed"
            => "tuned and signed {files} {}", cache_files(files);

        /// This boot loaded what an earlier identical launch signed
        /// (`entries`: the tuned shapes its files hold, counted only for a
        /// metrics file, which reads each file again).
        Reused { files: usize, entries: Option<usize>, fingerprint: String }
            INFO "reused"
            => "reused {files} {} signed for this launch", cache_files(files);

        SignedAgain { files: usize, late: usize, fingerprint: String }
            INFO "signed_again"
            => "signed again at exit: {files} {}, with the {late} that landed after tuning was done", cache_files(files);

        NothingSigned { present: usize }
            INFO "nothing_signed"
            => "nothing signed: none of the {} present can be signed (see the lines above); the next launch tunes again",
                super::counted(present, "cache file", "cache files");

        NothingToKeep {}
            INFO "nothing_to_keep"
            => "nothing to keep: the engine wrote no autotune cache";

        CommitWorkerFailed { error: String }
            WARN "commit_worker_failed"
            => "cannot start the commit worker ({error}): signing runs in the supervisor loop";

        /// Another user can write the cache root (`reason`): keepwrap can
        /// never sign there, and prune removes every cache file in it at each
        /// boot. The one line a boot gets about it: the lines of each file
        /// are at debug level ([`super::in_untrusted_root`]).
        RootUntrusted { root: PathBuf, reason: String }
            WARN "root_untrusted"
            => "cache root {} is {reason}: will never keep here (another user could plant what keepwrap would sign), so every cache file in it is removed at each boot and none is signed: {}",
                Shown(root), untrusted_fix(root, reason);

        // ---- other launches on the root: `other` as shown (`launch
        // 0123abcd... (pid 7 on host h, tuning since ...)`), its whole
        // fingerprint and its pid ----

        WaitingForOther { other: String, other_fingerprint: String, other_pid: u32, limit: Duration }
            INFO "waiting_for_other"
            => "waiting up to {} for {other} to finish tuning on this cache root before starting the engine: two engines tuning on one root would remove and sign each other's files",
                humantime::format_duration(limit);
        StillWaiting { other: String, other_fingerprint: String, other_pid: u32, waited: Duration, limit: Duration }
            INFO "still_waiting"
            => "still waiting for {other} to finish tuning ({} of {})",
                humantime::format_duration(Duration::from_secs(waited.as_secs())),
                humantime::format_duration(limit);
        GaveUpWaiting { other: String, other_fingerprint: String, other_pid: u32, limit: Duration }
            WARN "gave_up_waiting"
            => "gave up waiting {} (--wait-for-tuning) for {other} to finish tuning: this launch goes on hands-off: it prunes nothing and signs nothing, so that neither engine removes or signs the other's files",
                humantime::format_duration(limit);
        /// A node or data-parallel rank of this very launch uses the root.
        PeerOnRoot { other: String, other_fingerprint: String, other_pid: u32 }
            WARN "peer_on_root"
            => "{other} is another node or data-parallel rank of this multi-node launch on the same cache root: the engines need each other to finish tuning, so {WITHOUT}, and so does that one; {ROOT_PER_POD}";
        /// An engine whose keepwrap was killed still runs on the root.
        OrphanOnRoot { other: String, other_fingerprint: String, other_pid: u32 }
            WARN "orphan_on_root"
            => "{other} left its engine running on this cache root when keepwrap was killed: {WITHOUT}, so that nothing is removed under that engine and nothing it writes is signed";
        /// Launches done tuning run on the root (of another fingerprint, or
        /// orphaned): this one goes around them, `more` besides the one named.
        BesideOtherLaunch { other: String, other_fingerprint: String, other_pid: u32, more: usize }
            INFO "beside_other_launch"
            => "{other}{} is done tuning and still runs on this cache root: its signed set goes into the store (its next boot brings it back whole) and this launch's engine loads none of its files; nothing is signed on this boot, as the two engines run side by side (the next boot of this launch that starts alone tunes and signs)",
                if more == 0 { String::new() } else { format!(" (and {more} more)") };
        /// Another launch runs on the root, itself hands-off.
        OtherOnRoot { other: String, other_fingerprint: String, other_pid: u32 }
            WARN "other_on_root"
            => "{other} is using this cache root: {WITHOUT}, so that neither removes nor signs the other's files; {ROOT_PER_POD}";
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
        /// `disabled`), `--keep never` (`keep_never`), an invalid setting
        /// the cache depends on (`invalid_setting`), or no engine launch
        /// under `--keep auto` (`not_an_engine`); `why` says it to the
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
        /// The last line of a launch keepwrap only supervises (`--disable`,
        /// `--keep never`, no engine launch): how its command ended.
        CommandExited { status: u8, uptime: Duration }
            INFO "command_ended"
            => "the command exited with status {status} after {:.1} s", secs(uptime);
        /// The last line of a launch keepwrap only supervises, whose command
        /// a signal killed.
        CommandKilled { status: u8, signal: String, uptime: Duration }
            INFO "command_ended"
            => "the command was killed by {signal} (status {status}) after {:.1} s", secs(uptime);
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
        /// A subcommand (`status`, `evict`, `clean`, `fleet`) could not do
        /// its work: `what` says why (exit status 1).
        CommandFailed { what: String }
            ERROR "command_failed"
            => "{what}";
        /// `status --zero` reset the statistics.
        StatsReset {}
            INFO "stats_reset"
            => "statistics reset";
        /// `status --verify` found files or stored sets that are not intact.
        VerifyFound { what: String }
            INFO "verify_found"
            => "status --verify: {what}";
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
    "keepwrap::fleet" {
        FleetUnusable { url: String, error: String }
            WARN "fleet_unusable"
            => "fleet: {error}; the fleet {url} is not used";

        FleetMultiNode { node: u32, nnodes: u32, boot: String, source: String }
            INFO "fleet_multi_node"
            => "fleet: node {node} of {nnodes}, boot {boot} (from {source}): this node's files are published under that boot; a set is restored only when every node's part verifies";

        FleetNoBootId { node: u32, nnodes: u32 }
            INFO "fleet_no_boot_id"
            => "fleet: node {node} of {nnodes} with no boot id (--boot-id, KEEPWRAP_BOOT_ID, SLURM_JOB_ID): nothing is published; a set is restored only when every node's part verifies";

        FleetPartPublished { node: u32, nnodes: u32, boot: String, waiting: usize }
            INFO "fleet_part_published"
            => "fleet: uploaded node {node}'s part of boot {boot}; {waiting} of {nnodes} nodes not yet (the last node to publish names the set)";

        FleetStaleStaging { dir: PathBuf }
            INFO "fleet_stale_staging"
            => "fleet: removed {}, left by a keepwrap killed during a restore", Shown(dir);

        FleetOn { url: String, mode: String, endpoint: String }
            INFO "fleet_on"
            => "fleet: {url} ({mode}, endpoint {endpoint})";

        FleetEmpty { key: String }
            INFO "fleet_empty"
            => "fleet: no set for this launch yet ({key}: HTTP 404); a cold boot";

        /// HEAD was written by a keepwrap of another fleet format: read
        /// as no set; this launch's set replaces it.
        FleetOtherFormat { key: String, format: u64, reads: u32 }
            INFO "fleet_other_format"
            => "fleet: {key} is of format {format} (this keepwrap reads format {reads}): read as no set for this launch; a cold boot, and the set this launch tunes is published in format {reads} in its place";

        FleetRestoreFailed { reason: String }
            WARN "fleet_restore_failed"
            => "fleet: not restored: {reason}; a cold boot";

        /// A bucket that cannot be used as configured, said at the start
        /// (S3's code, the region it names for the bucket, what to change).
        FleetBucketRefused { key: String, status: u16, s3_code: Option<String>, region: Option<String>, advice: String }
            WARN "fleet_bucket_refused"
            => "fleet: the bucket refused {key}: HTTP {status} {}: {advice}; a cold boot",
                s3_code.unwrap_or("(no S3 code)");

        FleetUnreachable { endpoint: String, key: String, error: String }
            WARN "fleet_unreachable"
            => "fleet: nothing answers at {endpoint} ({error}): check AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL and the network; a cold boot";

        FleetNoCredentials { error: String }
            WARN "fleet_no_credentials"
            => "fleet: no credentials to sign with ({error}): give them through the AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role); a cold boot";

        FleetCannotPlace { root: PathBuf, error: String }
            WARN "fleet_cannot_place"
            => "fleet: cannot place the restored set in {}: {error}; nothing restored, a cold boot", Shown(root);

        FleetRestored { files: usize, set: String, took: Duration }
            INFO "fleet_restored"
            => "fleet: restored and signed {} of set {set} in {:.1}s",
                super::counted(files, "cache file", "cache files"), took.as_secs_f64();

        FleetPublished { set: String }
            INFO "fleet_published"
            => "fleet: published set {set}; HEAD names it";

        FleetHeadRewritten { set: String, written: bool }
            INFO "fleet_head_rewritten"
            => "fleet: nothing published (no boot id); {}",
                if written {
                    format!("HEAD still names set {set}, which this boot restored: written again, so that fleet gc sees the launch in use")
                } else {
                    format!("HEAD names another set than {set}, which this boot restored, since the restore: left as it is")
                };

        FleetPublishedOther { set: String }
            INFO "fleet_published_other"
            => "fleet: uploaded set {set}; HEAD already names another complete set, left as it is";

        FleetPublishFailed { error: String }
            WARN "fleet_publish_failed"
            => "fleet: not published: {error}";

        FleetPublishAbandoned { timeout: Duration }
            WARN "fleet_publish_abandoned"
            => "fleet: the publication did not finish within {:.1}s; keepwrap exits without it (HEAD never names an incomplete set)", timeout.as_secs_f64();

        FleetNoGpuModel { why: String }
            WARN "fleet_no_gpu_model"
            => "fleet: not used: a set is restored onto, and published from, only a machine of the GPU model it was tuned on, and this machine shows none to compare ({why}); a cold boot, and nothing published";

        FleetPublishStopped {}
            WARN "fleet_publish_stopped"
            => "fleet: keepwrap is being stopped: the publication still running is abandoned (HEAD never names an incomplete set)";

        FleetNoThread { error: String }
            WARN "fleet_no_thread"
            => "fleet: cannot start its thread: {error}; the fleet is not used this time";
    }
    "keepwrap::metrics" {
        /// The metrics file (`--metrics-file`) cannot be written: said once,
        /// the launch goes on as it would without it.
        MetricsNotWritten { file: PathBuf, error: String }
            WARN "metrics_not_written"
            => "cannot write the metrics file {}: {error}; the launch goes on without it", Shown(file);
        /// The metrics file found at the start is not one keepwrap wrote:
        /// its counters start again from zero and it is replaced at the
        /// next outcome.
        MetricsFileIgnored { file: PathBuf, error: String }
            WARN "metrics_file_ignored"
            => "ignored the metrics file {}: {error}; its counters start again from zero and it is replaced at the next outcome", Shown(file);
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

        /// This node's files made the same set as every node's before
        /// the start (a store whose gate compares every file on every
        /// rank): the union of every node's publication, written here, and
        /// this node's files outside it removed.
        ShareSameSet { files: usize, nodes: u32, written: usize, removed: usize }
            INFO "share_same_set"
            => "share: this node's store is now the same set as every node's ({nodes} nodes): {}, {written} written here, {removed} removed", super::counted(files, "file", "files");

        /// A file of a node's publication that is not what the engine
        /// writes under its name (planted, or edited with its manifest):
        /// left out of the union on every node.
        ShareFileRefused { node: u32, path: String, why: String }
            WARN "share_file_refused"
            => "share: node {node}'s {path} is left out of the union: {why}";

        ShareUnifyOff { dir: PathBuf }
            INFO "share_unify_off"
            => "share: --unify off: the share {} is not used", Shown(dir);

        ShareSingleNode { dir: PathBuf }
            INFO "share_single_node"
            => "share: --nnodes is 1 (a single-node launch): the share {} is not used", Shown(dir);

        ShareUnusable { dir: PathBuf, error: String }
            WARN "share_unusable"
            => "share: {error}; the share {} is not used", Shown(dir);

        /// This node's place in the launch.
        ShareCluster { cluster_fingerprint: String, node: u32, nodes: u32, dir: PathBuf }
            INFO "share_cluster"
            => "share: cluster fingerprint {} (node {node} of {nodes}); share {}", short(cluster_fingerprint), Shown(dir);

        ShareSlow { dir: PathBuf, timeout: Duration }
            WARN "share_slow"
            => "share: reading {} took more than {}; single-node behaviour", Shown(dir), humantime::format_duration(timeout);

        ShareUnreadable { dir: PathBuf, error: String }
            WARN "share_unreadable"
            => "share: cannot read {}: {error}; single-node behaviour", Shown(dir);

        /// Nodes whose publication is missing or does not verify.
        ShareIncomplete { missing: String, nodes: u32, reason: String }
            INFO "share_incomplete"
            => "share: not every node has published: node {missing} of {nodes} ({reason}); single-node behaviour";

        ShareUnionTaken { took: Duration }
            DEBUG "share_union_taken"
            => "share: union taken in {:.1} ms", took.as_secs_f64() * 1000.0;

        ShareCannotSign { root: PathBuf, error: String }
            WARN "share_cannot_sign"
            => "share: cannot sign {}: {error}", Shown(root);

        /// The union does not apply to this directory.
        ShareLeft { dir: String, reason: String }
            INFO "share_left"
            => "share: {dir}: {reason}";

        ShareCannotWriteUnion { dir: String, error: String }
            WARN "share_cannot_write_union"
            => "share: {dir}: cannot write the union: {error}";

        ShareNotPublishing { path: String, error: String }
            WARN "share_not_publishing"
            => "share: not publishing {path}: cannot read it ({error})";

        SharePublishNotStarted { error: String }
            WARN "share_publish_not_started"
            => "share: cannot start publishing: {error}; the launch goes on";

        SharePublishSlow { dir: PathBuf, timeout: Duration }
            WARN "share_publish_slow"
            => "share: publishing to {} did not finish within {}; the launch goes on", Shown(dir), humantime::format_duration(timeout);

        ShareCannotPublish { dir: PathBuf, error: String }
            WARN "share_cannot_publish"
            => "share: cannot publish to {}: {error}; the launch goes on", Shown(dir);

        ShareOldRemoved { publications: usize, max_age: Duration }
            INFO "share_old_removed"
            => "share: removed {publications} node publications older than {}", humantime::format_duration(max_age);

        ShareCannotRemoveOld { dir: PathBuf, error: String }
            WARN "share_cannot_remove_old"
            => "share: cannot remove the old publication {}: {error}", Shown(dir);

        ShareSigned { files: usize, nodes: u32, fingerprint: String }
            INFO "share_signed"
            => "share: signed {} holding the union of {nodes} nodes for this launch", super::counted(files, "cache file", "cache files");

        ShareAlreadyUnion { dir: String, files: usize, nodes: usize, entries: usize }
            INFO "share_already_union"
            => "share: {dir}: this node's {} already hold the union of {nodes} nodes ({})", super::counted(files, "rank file", "rank files"), super::counted(entries, "entry", "entries");

        ShareUnionWritten { dir: String, nodes: usize, files: usize, entries: usize, conflicts: usize }
            INFO "share_union_written"
            => "share: {dir}: wrote the union of {nodes} nodes' rank files to {} here: {} each, {conflicts} conflicting", super::counted(files, "rank file", "rank files"), super::counted(entries, "entry", "entries");

        SharePublished { files: usize, node: u32, nodes: u32, rewritten: usize, dir: PathBuf }
            INFO "share_published"
            => "share: published {} as node {node} of {nodes} ({rewritten} rewritten) to {}", super::counted(files, "rank file", "rank files"), Shown(dir);
 }
    "keepwrap::store" {
        RecoveryStoreTaken { fingerprint: String, taken: String }
            WARN "recovery_store_taken"
            => "recovery: an interrupted store of launch {} cannot go back in place ({taken} is taken); its files are removed", short(fingerprint);

        RecoveryStoreFailed { fingerprint: String, error: String }
            WARN "recovery_store_failed"
            => "recovery: cannot move the files of an interrupted store of launch {} back in place: {error}; they are removed", short(fingerprint);

        RecoveryRestoreFailed { fingerprint: String, error: String }
            WARN "recovery_restore_failed"
            => "recovery: cannot finish an interrupted restore of launch {}: {error}; putting it back in the store", short(fingerprint);

        RecoveryRestoreTaken { fingerprint: String, taken: String }
            WARN "recovery_restore_taken"
            => "recovery: an interrupted restore of launch {} cannot finish ({taken} is taken); putting it back in the store", short(fingerprint);

        /// A launch was signed again: its older stored set goes.
        StoreReplaced { fingerprint: String }
            INFO "store_replaced"
            => "store: the newer set of launch {} replaces the one stored", short(fingerprint);

        EntryMisnamed { fingerprint: String }
            WARN "entry_misnamed"
            => "store: the entry {} names another launch; removed it", short(fingerprint);

        /// The stored set sits in a directory another user can write.
        EntryUntrusted { fingerprint: String, reason: String }
            WARN "entry_untrusted"
            => "store: not restoring the stored set of this launch: {reason}; removed it, the launch tunes";

        EntryNotIntact { fingerprint: String, reason: String }
            WARN "entry_not_intact"
            => "store: the stored set of this launch is not intact ({reason}); removed it, the launch tunes";

        /// The directory the set would return to is another user's to write.
        RestoreDestinationUntrusted { fingerprint: String, dir: String, reason: String }
            WARN "restore_destination_untrusted"
            => "store: not restoring the stored set of this launch into {dir}: {reason}; it stays in the store";

        RestoreInTheWay { fingerprint: String, path: String }
            WARN "restore_in_the_way"
            => "store: cannot restore the stored set of this launch: {path} is in the way; it stays in the store";

        /// The stored set could not be taken out of the store.
        CannotRestore { fingerprint: String, error: String }
            WARN "cannot_restore"
            => "store: cannot restore the stored set of this launch: {error}";

        /// The stored set could not be moved in place: it goes back to the store.
        RestoreMoveFailed { fingerprint: String, error: String }
            WARN "restore_move_failed"
            => "store: cannot restore the stored set of this launch: {error}; it stays in the store";

        CannotWriteRecord { fingerprint: String, error: String }
            WARN "cannot_write_record"
            => "cannot write the launch record of {}: {error}", short(fingerprint);

        RecoveryStoreUndone { fingerprint: String, files: usize }
            INFO "recovery_store_undone"
            => "recovery: moved {} of an interrupted store of launch {} back in place", super::counted(files, "file", "files"), short(fingerprint);

        RecoveryRestoreFinished { fingerprint: String, files: usize }
            INFO "recovery_restore_finished"
            => "recovery: moved the last {} of an interrupted restore of launch {} in place", super::counted(files, "file", "files"), short(fingerprint);

        Evicted { fingerprint: String, files: usize, bytes: u64, size: String, last_used: String, reason: String }
            INFO "evicted"
            => "evicted the stored set of launch {} ({}, {size}, last used {last_used}): {reason}", short(fingerprint), super::counted(files, "file", "files");
 }
    "keepwrap::cache" {
        /// A cache file this launch must not load was removed (the prune
        /// summary counts these by reason): at debug level, but for a file
        /// of this launch's own set (`own`): one changed after it was
        /// signed, or one the launch's own rule (its engine's) refuses, a
        /// decision about this launch rather than a stray.
        Removed { path: String, reason: String, own: bool }
            INFO | DEBUG "removed"
            => "removed {path}: {reason}";

        /// A leftover (orphan sidecar, temp file) was removed.
        RemovedLeftover { path: String, reason: String }
            DEBUG "removed_leftover"
            => "removed {path}: {reason}";

        /// A symlink to a directory planted in the tree was removed.
        RemovedSymlink { path: String, reason: String }
            WARN "removed_symlink"
            => "removed {path}: {reason} (its target is left alone)";

        /// A file prune must remove could not go.
        CannotRemove { path: String, reason: String, error: String }
            WARN "cannot_remove"
            => "cannot remove {path} ({reason}): {error}";

        CannotRemoveSidecar { path: String, error: String }
            WARN "cannot_remove_sidecar"
            => "cannot remove {path}: {error}";

        /// Entries not shaped like the engine's cache, never judged nor touched;
        /// `hint` asks whether `--cache-dir` is the engine's cache directory.
        Untouched { entries: usize, first: String, hint: String }
            WARN "untouched"
            => "left {entries} {} under the cache root untouched: not the engine's autotune cache (first: {first}); {hint}", if entries == 1 { "entry" } else { "entries" };

        /// Another launch's set could not be moved into the store.
        CannotStore { files: usize, fingerprint: String, error: String }
            WARN "cannot_store"
            => "cannot store the {files} {} signed for launch {fingerprint}...: {error}; removing them", cache_files(files);

        TrashUnusable { error: String }
            WARN "trash_unusable"
            => "cannot use .keepwrap/trash ({error}): removing files one by one";

        TrashMoveFailed { dir: String, error: String }
            DEBUG "trash_move_failed"
            => "cannot move {dir} to .keepwrap/trash ({error}): removing files one by one";

        TrashThreadFailed { error: String }
            WARN "trash_thread_failed"
            => "cannot start the thread that empties .keepwrap/trash: {error}";

        TrashRemoveFailed { name: String, error: String }
            WARN "trash_remove_failed"
            => "cannot remove .keepwrap/trash/{name}: {error}";

        CannotReadDir { dir: String, error: String }
            WARN "cannot_read_dir"
            => "cannot read directory {dir}: {error}";

        CannotOpenDir { dir: String, error: String }
            WARN "cannot_open_dir"
            => "cannot open directory {dir}: {error}";

        CannotStatDir { dir: String, error: String }
            WARN "cannot_stat_dir"
            => "cannot stat directory {dir}: {error}";

        /// An entry vanished while the tree was read.
        CannotStat { path: String, error: String }
            DEBUG "cannot_stat"
            => "cannot stat {path}: {error}";

        /// A file FlashInfer could not load as a cache file.
        NotSigned { path: String, reason: String }
            INFO "not_signed"
            => "not signed {path}: {reason}";

        /// One unsignable file keeps its whole directory unsigned.
        DirNotSigned { files: usize, dir: String, unsignable: String }
            WARN "dir_not_signed"
            => "not signed the {files} other cache files of {dir}: {unsignable} cannot be signed, and trusting part of a directory's rank files would give a partial hit";

        CannotFsyncDir { dir: String, error: String }
            WARN "cannot_fsync_dir"
            => "cannot fsync directory {dir}: {error}";

        /// A state file under `.keepwrap` (statistics, a launch record, a store
        /// manifest) that cannot be used; `then` says what the launch does.
        StateFileIgnored { file: String, error: String, then: String }
            WARN "state_file_ignored"
            => "ignored {file}: {error}; {then}";

        TrashEmptied { entries: usize }
            DEBUG "trash_emptied"
            => "emptied .keepwrap/trash: {}", super::counted(entries, "entry", "entries");

        NotStamping { files: usize, settle_ns: i64 }
            DEBUG "not_stamping"
            => "not stamping {}: their change times settle in {settle_ns} ns", super::counted(files, "cache file", "cache files");

        /// A cache file signed for this launch stays.
        Kept { path: String }
            DEBUG "kept"
            => "kept {path}: signed for this launch";
        /// A file of another launch's whole set moved to the store.
        Stored { path: String, other_fingerprint: String }
            DEBUG "stored"
            => "stored {path}: signed for another launch (fingerprint {})", short(other_fingerprint);
        /// A cache file in a directory another user can write was removed;
        /// at debug level when that directory is the root (said once at the
        /// start).
        RemovedUntrusted { path: String, reason: String }
            WARN | DEBUG "removed_untrusted"
            => "removed {path}: {reason}";
        /// A directory named like a cache file.
        LeftDirectory { path: String, reason: &'static str }
            WARN "left_directory"
            => "left {path}: {reason}";
        /// The summary of prune, its one line at the default level: the
        /// files removed counted by reason (`reasons`); each file's own
        /// line is at debug level.
        Pruned { kept: usize, stored: usize, removed: usize, reasons: super::Tally, leftovers: usize, left: usize }
            INFO "pruned"
            => "prune: kept {kept}, {}removed {} {}and {}{}{}",
                if stored > 0 { format!("stored {stored}, ") } else { String::new() },
                super::counted(removed, "cache file", "cache files"),
                if reasons.is_empty() { String::new() } else { format!("({reasons}) ") },
                super::counted(leftovers, "leftover", "leftovers"),
                if left > 0 { format!(", left {left} that could not be removed") } else { String::new() },
                if kept + stored + removed + leftovers > 0 { " (KEEPWRAP_LOG=debug names each file)" } else { "" };
        /// A directory named like a rank file.
        NotSignedDirectory { path: String, reason: &'static str }
            DEBUG "not_signed_directory"
            => "not signed {path}: {reason}";
        /// A file that cannot be signed safely: in an untrusted directory, a
        /// path that is not UTF-8, unreadable; at debug level in a root said
        /// once to be untrusted.
        NotSignedUnsafe { path: String, reason: String }
            WARN | DEBUG "not_signed_unsafe"
            => "not signed {path}: {reason}";
 }
}

/// The variants about the cache files that landed after done, binding
/// their paths and outcome.
macro_rules! late {
    ($paths:ident, $outcome:ident) => {
        Event::LateNotSignedExitUnproven {
            paths: $paths,
            outcome: $outcome,
        } | Event::LateNotSignedHeadless {
            paths: $paths,
            outcome: $outcome,
        } | Event::LateNotSignedStopped {
            paths: $paths,
            outcome: $outcome,
            ..
        } | Event::LateNotSignedAbnormal {
            paths: $paths,
            outcome: $outcome,
            ..
        } | Event::LateNotSignedOther {
            paths: $paths,
            outcome: $outcome,
            ..
        }
    };
}

impl Event {
    /// The cache files that landed after done and what became of the set
    /// signed at done, for the commit worker to judge.
    pub fn late_mut(&mut self) -> Option<(&mut Vec<PathBuf>, &mut Outcome)> {
        match self {
            late!(paths, outcome) => Some((paths, outcome)),
            _ => None,
        }
    }

    /// The JSON fields made from others: the done rule of `tuning_done`
    /// (`rule`: `health`, `quiet` or `exit`), and for the files that
    /// landed after done their count (`late`) and whether the set signed
    /// at done holds (`set_holds`).
    pub(super) fn derived_fields(&self, out: &mut impl super::Fields) {
        let rule = match self {
            Event::DoneHealth { .. } => Some("health"),
            Event::DoneQuiet { .. } => Some("quiet"),
            Event::DoneExit { .. } => Some("exit"),
            _ => None,
        };
        if let Some(rule) = rule {
            out.field("rule", &rule);
        }
        if let late!(paths, outcome) = self {
            out.field("late", &paths.len());
            let holds = matches!(outcome, Outcome::Holds { .. } | Outcome::Stored { .. });
            out.field("set_holds", &holds);
        }
    }

    /// A quieter level than the usual one where the fields say so.
    pub(super) fn quieter(&self) -> Option<tracing::Level> {
        match self {
            Event::Removed { own: false, .. } => Some(tracing::Level::DEBUG),
            Event::RemovedUntrusted { reason, .. } | Event::NotSignedUnsafe { reason, .. }
                if super::in_untrusted_root(reason) =>
            {
                Some(tracing::Level::DEBUG)
            }
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
