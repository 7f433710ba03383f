//! `keepwrap status`: every cache file and store entry under a cache root,
//! with its state, size, when it was signed and last used, totals and the
//! statistics; with `-- COMMAND`, what that launch would keep, restore,
//! store and remove. Reads sidecars and manifests only (`--verify` also
//! hashes the cache files), so it stays fast on large trees.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::cache::Shape;
use crate::engine::fingerprint::Launch;
use crate::root::stats::Stats;
use crate::store::Store;

mod render;
mod report;

use super::{lock, print};
pub use render::render;
pub use report::report;

/// Run `keepwrap status` (`launch`: the command after `--`, with
/// `--cache-dir` when given; `extra`: fields the report carries from
/// outside the root, such as the fleet's state).
pub fn run(
    root: Option<(std::path::PathBuf, Shape)>,
    launch: Option<(&Launch, Option<&Path>)>,
    json_out: bool,
    zero: bool,
    verify: bool,
    store_max_size: u64,
    extra: serde_json::Map<String, Value>,
) -> ExitCode {
    let Some((root, shape)) = root else {
        return crate::cmd::no_root();
    };
    crate::events::set_root(&root);
    if zero {
        match zero_stats(&root, shape) {
            Ok(()) => crate::events::Event::StatsReset {}.emit(),
            Err(e) => {
                crate::cmd::failed(format!(
                    "cannot reset the statistics under {}: {e}",
                    root.display()
                ));
                return ExitCode::FAILURE;
            }
        }
    }
    // A launch whose engine last ran with inputs its words do not show is
    // offered the set of what ran.
    let (launch, cache_dir) = launch.unzip();
    let seen = launch.and_then(|l| {
        let s = crate::store::Store::open_existing(&root, shape)?;
        crate::keeper::seen_as(&s, l.fingerprint())
    });
    let fp = seen.as_ref().or(launch.map(Launch::fingerprint));
    let mut report = report(&root, shape, fp, verify);
    if let Some(s) = &seen {
        report["seen_as"] = json!(s.as_str());
    }
    if let Some(l) = launch {
        crate::engine::of(l.profile()).plan(&mut report, l, cache_dir.flatten());
    }
    if let Some(h) = fp.and_then(|fp| crate::keeper::last_pinned(&root, fp.as_str())) {
        report["pinned"] =
            json!({"files": h.files, "missing": h.missing, "changed": h.changed, "at": h.at});
    }
    report["store_max_size"] = json!(store_max_size);
    for (k, v) in extra {
        report[k] = v;
    }
    let text = if json_out {
        let mut v = serde_json::to_vec_pretty(&report).expect("a Value serializes");
        v.push(b'\n');
        v
    } else {
        render(&report).into_bytes()
    };
    if !print(&text) {
        return ExitCode::FAILURE;
    }
    let corrupt = report["totals"]["corrupt"]["files"].as_u64().unwrap_or(0);
    let stored = report["totals"]["stored"]["corrupt"].as_u64().unwrap_or(0);
    if verify && corrupt > 0 {
        crate::events::Event::VerifyFound {
            what: format!(
                "{} (see the corrupt rows); the next launch removes them",
                crate::events::counted(
                    corrupt as usize,
                    "corrupt or mismatched cache file",
                    "corrupt or mismatched cache files"
                )
            ),
        }
        .emit();
    }
    if verify && stored > 0 {
        crate::events::Event::VerifyFound {
            what: format!(
                "{} not intact (see the corrupt rows); they are removed when their launch returns",
                crate::events::counted(stored as usize, "stored set is", "stored sets are")
            ),
        }
        .emit();
    }
    if verify && corrupt + stored > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `42.0 s`, `12 min 5 s`, `3 h 20 min`, `2 days 4 h`: how long something
/// took or lasts.
pub fn duration_text(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let whole = d.as_secs();
    let (days, h, m, sec) = (
        whole / 86400,
        whole % 86400 / 3600,
        whole % 3600 / 60,
        whole % 60,
    );
    match (days, h) {
        (0, 0) => format!("{m} min {sec} s"),
        (0, h) => format!("{h} h {m} min"),
        (1, h) => format!("1 day {h} h"),
        (d, h) => format!("{d} days {h} h"),
    }
}

fn ms_text(v: &Value) -> String {
    duration_text(std::time::Duration::from_millis(v.as_u64().unwrap_or(0)))
}

fn zero_stats(root: &Path, shape: Shape) -> std::io::Result<()> {
    let store = Store::open(root, shape)?;
    let _lock = lock(
        &store,
        std::time::Duration::from_secs(60),
        "keepwrap status --zero",
    )?;
    Stats::zero(store.state_fd())
}

#[cfg(test)]
mod tests {
    use super::duration_text;
    use std::time::Duration;

    #[test]
    fn durations_read_the_same_everywhere() {
        for (secs, text) in [
            (0.04, "0.0 s"),
            (42.05, "42.0 s"),
            (59.9, "59.9 s"),
            (60.0, "1 min 0 s"),
            (725.0, "12 min 5 s"),
            (12_000.0, "3 h 20 min"),
            (86_400.0 + 3600.0, "1 day 1 h"),
            (30.0 * 86_400.0, "30 days 0 h"),
        ] {
            assert_eq!(duration_text(Duration::from_secs_f64(secs)), text, "{secs}");
        }
    }
}
