//! Crash points for the crash tests, compiled only with the cargo feature
//! `failpoints` (the release binary has none: [`hit`] is empty there).
//!
//! `KEEPWRAP_FAILPOINT=<step>:<n>` makes keepwrap stop itself with SIGKILL
//! right after the n-th (from 1) durable change of `<step>`:
//! - `store`: each rename of the store (a member into or out of a staging,
//!   restoring or store directory, a directory installed or restored, an
//!   evicted entry moved out);
//! - `sign`: each sidecar written at sign, and the set manifest after them;
//! - `unify`: each rank file replaced by the union of its directory;
//! - `evict`: the start of the eviction after the engine's spawn, before
//!   its first change (a kill there leaves the store as it was).
//!
//! A test enumerates every crash point of a step: n = 1, 2, ... until the
//! launch runs to its end (the step has fewer than n points).
//!
//! `KEEPWRAP_FAILPOINT_DELAY_MS=<ms>` sleeps that long at every such change
//! instead (a slow disk), for tests that need those steps to last.

/// Count one change of `step`; SIGKILL this process when it is the one
/// `KEEPWRAP_FAILPOINT` names (after the delay of
/// `KEEPWRAP_FAILPOINT_DELAY_MS`, if set).
#[cfg(feature = "failpoints")]
pub fn hit(step: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static AT: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    static DELAY: OnceLock<Option<std::time::Duration>> = OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        let ms = std::env::var("KEEPWRAP_FAILPOINT_DELAY_MS").ok()?;
        Some(std::time::Duration::from_millis(ms.parse().ok()?))
    });
    if let Some(d) = delay {
        std::thread::sleep(*d);
    }
    let at = AT.get_or_init(|| {
        let v = std::env::var("KEEPWRAP_FAILPOINT").ok()?;
        let (s, n) = v.rsplit_once(':')?;
        Some((s.to_string(), n.parse().ok()?))
    });
    if let Some((s, n)) = at {
        if s == step && COUNT.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Without the feature: nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_step: &str) {}

/// Where the NVIDIA driver shows this machine's GPUs without CUDA
/// (`<dir>/<bus id>/information`). With the feature, a test names another
/// directory in `KEEPWRAP_FAILPOINT_NVIDIA_GPUS` (a machine with the GPUs
/// it lays out there); the release binary reads only the driver's.
pub fn nvidia_gpus_dir() -> std::path::PathBuf {
    #[cfg(feature = "failpoints")]
    if let Some(dir) = std::env::var_os("KEEPWRAP_FAILPOINT_NVIDIA_GPUS") {
        return dir.into();
    }
    std::path::PathBuf::from("/proc/driver/nvidia/gpus")
}
