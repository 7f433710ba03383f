//! Statistics: counted in memory during a launch and written once, at the
//! end, only when something was counted.

use crate::common;

use common::*;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// How many times `stats.json` was replaced (renamed into place) while
/// `run` ran.
fn replacements(state: &std::path::Path, run: impl FnOnce()) -> usize {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
    ino.add_watch(
        state,
        AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE,
    )
    .unwrap();
    run();
    let mut n = 0;
    while let Ok(events) = ino.read_events() {
        n += events
            .iter()
            .filter(|e| {
                e.mask.contains(AddWatchFlags::IN_MOVED_TO)
                    && e.name.as_deref() == Some(std::ffi::OsStr::new("stats.json"))
            })
            .count();
    }
    n
}

#[test]
fn a_launch_writes_the_statistics_once() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    // A first launch creates the state directory.
    let b = boot(keepwrap(&cache).args(["--done", "exit", "--", "true"]));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let state = cache.join(".keepwrap");
    for argv in [&["true"][..], &["sh", "-c", "exit 3"][..]] {
        let n = replacements(&state, || {
            let b = boot(keepwrap(&cache).args(["--done", "exit", "--"]).args(argv));
            assert!(!b.stderr.contains("panicked"), "{}", b.stderr);
        });
        assert_eq!(n, 1, "{argv:?}: stats.json written once");
    }
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("stats.json")).unwrap()).unwrap();
    assert_eq!(st["launches"], 3, "{st}");
}
