//! Events of the keeper: the start of a launch (its fingerprint, its cache
//! root, the other launches on it), the done rule's decisions, and what was
//! signed at the end.

use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use super::cache_files;
use super::secs;
use super::Shown;
use crate::digest::short;

const TARGET: &str = "keepwrap::keeper";

/// The advice for two launches that meet on one root.
const ROOT_PER_POD: &str =
    "give each pod its own cache root (e.g. SGLANG_CACHE_DIR=/cache/$(POD_NAME)), with --share DIR for what the nodes of a multi-node launch have in common";

/// What the engine keeps running without.
const WITHOUT: &str = "this launch goes on without keeping the cache (prunes nothing, signs nothing: its engine sees the cache as it is)";

/// The first line of a launch that keeps its cache.
pub fn launch(fingerprint: &str, profile: &str, root: &Path, done: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "launch",
        fingerprint,
        profile,
        root = %Shown(root),
        done = %done,
        "launch fingerprint {} ({profile} profile); cache root {}; tuning is done {done}",
        short(fingerprint),
        Shown(root)
    );
}

pub fn no_cache_root() {
    tracing::warn!(
        target: TARGET,
        event = "no_cache_root",
        "no cache root: neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set, and this user has no password-database entry; the launch goes on without keeping the cache"
    );
}

/// The `--done` rule cannot be used for this launch.
pub fn done_rule_unusable(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "done_rule_unusable",
        error = %error,
        "{error}; the launch goes on without keeping the cache"
    );
}

pub fn root_not_a_directory(root: &Path) {
    tracing::warn!(
        target: TARGET,
        event = "root_not_a_directory",
        root = %Shown(root),
        "cache root {} is not a directory; the launch goes on without keeping the cache",
        Shown(root)
    );
}

pub fn root_created(root: &Path) {
    tracing::info!(
        target: TARGET,
        event = "root_created",
        root = %Shown(root),
        "cache root {} did not exist (first boot): created it",
        Shown(root)
    );
}

pub fn cannot_create_root(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_create_root",
        root = %Shown(root),
        error = %error,
        "cannot create cache root {}: {error}; the launch goes on without keeping the cache",
        Shown(root)
    );
}

pub fn cannot_use_root(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_use_root",
        root = %Shown(root),
        error = %error,
        "cannot use cache root {}: {error}; the launch goes on without keeping the cache",
        Shown(root)
    );
}

pub fn root_read_only(root: &Path) {
    tracing::warn!(
        target: TARGET,
        event = "root_read_only",
        root = %Shown(root),
        "cache root {} is on a read-only file system; the launch goes on without keeping the cache",
        Shown(root)
    );
}

/// Another user can write the cache root (`why`): keepwrap can never sign
/// there, and prune removes every cache file in it at each boot. The one
/// line a boot gets about it: the lines of each file are at debug level
/// ([`super::in_untrusted_root`]).
pub fn root_untrusted(root: &Path, why: &str) {
    let fix = if why.starts_with("world-writable") {
        format!("chmod o-w {}", Shown(root))
    } else {
        "give it to this user (chown) or use a root of its own".to_string()
    };
    tracing::warn!(
        target: TARGET,
        event = "root_untrusted",
        root = %Shown(root),
        reason = why,
        "cache root {} is {why}: will never keep here (another user could plant what keepwrap would sign), so every cache file in it is removed at each boot and none is signed: {fix}",
        Shown(root)
    );
}

/// The directory of the running markers cannot be opened.
pub fn cannot_open_running(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_open_running",
        dir = %Shown(dir),
        error = %error,
        "cannot open {}: {error}; the launch goes on without keeping the cache",
        Shown(dir)
    );
}

pub fn cannot_leave_marker(dir: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_leave_marker",
        dir = %Shown(dir),
        error = %error,
        "cannot leave this launch's marker in {}: {error}; the launch goes on without keeping the cache",
        Shown(dir)
    );
}

pub fn store_unusable(state: &str, root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "store_unusable",
        root = %Shown(root),
        error = %error,
        "cannot open the store {state}/ in {}: {error}; cache files of other launches are removed, not stored",
        Shown(root)
    );
}

pub fn cannot_prune(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_prune",
        root = %Shown(root),
        error = %error,
        "cannot prune {}: {error}; the launch goes on, and nothing it writes will be signed",
        Shown(root)
    );
}

/// The watch of the cache tree cannot start.
pub fn watch_failed(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "watch_failed",
        error = %error,
        "{error}; the launch goes on, and nothing it writes will be signed"
    );
}

/// This launch's set came back from the store.
pub fn restored(files: usize, fingerprint: &str, signed_ago: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "restored",
        files,
        fingerprint,
        "restored {files} {} of this launch from the store (signed {signed_ago})",
        cache_files(files)
    );
}

/// This launch was never signed; `line` names the nearest launch that was
/// and how it differs.
pub fn no_cache(fingerprint: &str, line: &str) {
    tracing::info!(target: TARGET, event = "no_cache", fingerprint, "{line}");
}

/// A line about the launch itself, logged once: a config file that cannot
/// be used, a shell command that cannot be read.
pub fn launch_warning(line: &str) {
    tracing::warn!(target: TARGET, event = "launch_warning", "{line}");
}

// ---- other launches on the root ----

/// Another launch on the cache root, as its events name it: shown in full
/// by `Display` (`launch 0123abcd... (pid 7 on host h, tuning since ...)`).
pub trait OtherLaunch: Display {
    fn fingerprint(&self) -> &str;
    fn pid(&self) -> u32;
}

pub fn waiting_for_other(other: &impl OtherLaunch, limit: Duration) {
    tracing::info!(
        target: TARGET,
        event = "waiting_for_other",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        limit_s = secs(limit),
        "waiting up to {} for {other} to finish tuning on this cache root before starting the engine: two engines tuning on one root would remove and sign each other's files",
        humantime::format_duration(limit)
    );
}

pub fn still_waiting(other: &impl OtherLaunch, waited: Duration, limit: Duration) {
    tracing::info!(
        target: TARGET,
        event = "still_waiting",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        waited_s = secs(waited),
        "still waiting for {other} to finish tuning ({} of {})",
        humantime::format_duration(Duration::from_secs(waited.as_secs())),
        humantime::format_duration(limit)
    );
}

pub fn other_done_tuning(other: &str, waited: Duration) {
    tracing::info!(
        target: TARGET,
        event = "other_done_tuning",
        other,
        waited_s = secs(waited),
        "{other} is done tuning; this launch goes on after waiting {:.1} s",
        secs(waited)
    );
}

pub fn gave_up_waiting(other: &impl OtherLaunch, limit: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "gave_up_waiting",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        limit_s = secs(limit),
        "gave up waiting {} (--wait-for-tuning) for {other} to finish tuning: this launch goes on hands-off: it prunes nothing and signs nothing, so that neither engine removes or signs the other's files",
        humantime::format_duration(limit)
    );
}

/// A node or data-parallel rank of this very launch uses the root.
pub fn peer_on_root(other: &impl OtherLaunch) {
    tracing::warn!(
        target: TARGET,
        event = "peer_on_root",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        "{other} is another node or data-parallel rank of this multi-node launch on the same cache root: the engines need each other to finish tuning, so {WITHOUT}, and so does that one; {ROOT_PER_POD}"
    );
}

/// An engine whose keepwrap was killed still runs on the root.
pub fn orphan_on_root(other: &impl OtherLaunch) {
    tracing::warn!(
        target: TARGET,
        event = "orphan_on_root",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        "{other} left its engine running on this cache root when keepwrap was killed: {WITHOUT}, so that nothing is removed under that engine and nothing it writes is signed"
    );
}

/// Launches done tuning run on the root (of another fingerprint, or
/// orphaned): this one goes around them, `more` besides the one named.
pub fn beside_other_launch(other: &impl OtherLaunch, more: usize) {
    let and = match more {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    tracing::info!(
        target: TARGET,
        event = "beside_other_launch",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        more,
        "{other}{and} is done tuning and still runs on this cache root: its signed set goes into the store (its next boot brings it back whole) and this launch's engine loads none of its files; nothing is signed on this boot, as the two engines run side by side (the next boot of this launch that starts alone tunes and signs)"
    );
}

/// Another launch runs on the root, itself hands-off.
pub fn other_on_root(other: &impl OtherLaunch) {
    tracing::warn!(
        target: TARGET,
        event = "other_on_root",
        other = %other,
        other_fingerprint = other.fingerprint(),
        other_pid = other.pid(),
        "{other} is using this cache root: {WITHOUT}, so that neither removes nor signs the other's files; {ROOT_PER_POD}"
    );
}

// ---- the cache lock, as the keeper takes it ----

pub fn lock_gave_up(timeout: Duration, what: &str, holder: impl Display, then: &str) {
    tracing::warn!(
        target: TARGET,
        event = "lock_gave_up",
        timeout_s = secs(timeout),
        what,
        holder = %holder,
        "gave up waiting {} for the cache lock {}/lock ({what}), held by {holder}: {then}",
        humantime::format_duration(timeout),
        crate::STATE_DIR
    );
}

pub fn lock_failed(what: &str, error: impl Display, then: &str) {
    tracing::warn!(
        target: TARGET,
        event = "lock_failed",
        what,
        error = %error,
        "cannot take the cache lock {}/lock ({what}): {error}: {then}",
        crate::STATE_DIR
    );
}

// ---- the end ----

pub fn cannot_sign(root: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_sign",
        root = %Shown(root),
        error = %error,
        "cannot sign {}: {error}; the next launch will tune again",
        Shown(root)
    );
}

/// Files kept for this launch were signed without unify: unified at done.
pub fn kept_not_unified(dirs: usize, fingerprint: &str) {
    tracing::info!(
        target: TARGET,
        event = "kept_not_unified",
        dirs,
        fingerprint,
        "the cache files kept in {dirs} {} are not one union (signed with --unify off): the engine loads them as they are, and they are unified and signed again once tuning is done",
        if dirs == 1 { "directory" } else { "directories" }
    );
}

/// This boot tuned; its set is signed for the next identical launch.
pub fn signed(files: usize, fingerprint: &str) {
    tracing::info!(
        target: TARGET,
        event = "signed",
        files,
        fingerprint,
        "tuned and signed {files} {}",
        cache_files(files)
    );
}

/// This boot loaded what an earlier identical launch signed.
pub fn reused(files: usize, fingerprint: &str) {
    tracing::info!(
        target: TARGET,
        event = "reused",
        files,
        fingerprint,
        "reused {files} {} signed for this launch",
        cache_files(files)
    );
}

pub fn signed_again(files: usize, late: usize, fingerprint: &str) {
    tracing::info!(
        target: TARGET,
        event = "signed_again",
        files,
        late,
        fingerprint,
        "signed again at exit: {files} {}, with the {late} that landed after tuning was done",
        cache_files(files)
    );
}

pub fn nothing_signed(present: usize) {
    tracing::info!(
        target: TARGET,
        event = "nothing_signed",
        present,
        "nothing signed: none of the {present} cache files present can be signed (see the lines above); the next launch tunes again"
    );
}

pub fn nothing_to_keep() {
    tracing::info!(
        target: TARGET,
        event = "nothing_to_keep",
        "nothing to keep: the engine wrote no autotune cache"
    );
}

pub fn commit_worker_failed(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "commit_worker_failed",
        error = %error,
        "cannot start the commit worker ({error}): signing runs in the supervisor loop"
    );
}
