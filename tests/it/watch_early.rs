//! Cache files that land in the first moments of a launch, before keepwrap
//! adds its inotify watches, and files written by a command that exits at
//! once: all are seen, logged as landed, and signed.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(20);
const FILE: &str = "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json";

fn run(done: &str, script: &str) -> (i32, String, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut cmd = keepwrap(&cache);
    cmd.args(["--done", done, "--", "sh", "-c", script])
        .env("FILE", cache.join(FILE))
        .stdout(Stdio::null());
    let r = Running::spawn(&mut cmd).finish(T);
    (r.code, r.stderr, cache, dir)
}

const WRITE: &str = "mkdir -p \"$(dirname \"$FILE\")\" && echo '{\"k\": [1]}' > \"$FILE\"";

#[test]
fn a_file_written_by_a_command_that_exits_at_once_is_signed() {
    let (code, err, cache, _dir) = run("exit", WRITE);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("landed {FILE}")), "{err}");
    assert!(err.contains("tuned and signed 1 cache file"), "{err}");
    let sidecar = cache.join(FILE.replace(".json", ".launch"));
    assert!(sidecar.exists(), "{err}");
}

#[test]
fn a_file_that_lands_before_the_watches_and_one_after_are_both_seen() {
    // One file at once, a second one well after the watches are in place;
    // the quiet window closes after the second.
    let script = format!(
        "{WRITE}; sleep 0.6; f2=\"$(dirname \"$FILE\")/rank_tp1_pp0_dp0.json\"; echo '{{\"k\": [1]}}' > \"$f2\"; sleep 3"
    );
    let (code, err, _cache, _dir) = run("quiet=1s", &script);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("landed {FILE}")), "{err}");
    assert!(
        err.contains("landed 0.7.2/sm121/0123456789abcdef/rank_tp1_pp0_dp0.json"),
        "{err}"
    );
    let done = err.find("tuning is done:").expect(&err);
    assert!(err.find("rank_tp1_pp0_dp0.json").unwrap() < done, "{err}");
    assert!(err.contains("tuned and signed 2 cache files"), "{err}");
}
