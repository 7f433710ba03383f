//! The metrics file (`--metrics-file`, `KEEPWRAP_METRICS_FILE`): after each
//! boot of the fake engine, the file is read back as Prometheus would and
//! its counters checked exactly; a file that cannot be written, or that
//! keepwrap did not write, is one warning and changes nothing else.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;

/// TP2 with expert parallelism, offline: tuning is done when the engine
/// exits 0.
const EP2_FIXED: &[&str] = &["--tp", "2", "--ep", "2", "--gate", "fixed", "--offline"];

/// The samples of a metrics file, `name{outcome="x"}` or `name` to value,
/// after checking that each metric has its `# HELP` and `# TYPE` lines
/// before its samples.
pub(crate) fn samples(path: &Path) -> BTreeMap<String, f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut typed = std::collections::BTreeSet::new();
    let mut helped = std::collections::BTreeSet::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "a counter's name ends in _total: {line}"
            );
            typed.insert(name.to_string());
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            assert!(typed.contains(name) && helped.contains(name), "{line}");
            out.insert(series.to_string(), value.parse().unwrap());
        }
    }
    out
}

/// The boots counted, by outcome: reused, tuned_signed, not_signed,
/// supervised_only.
pub(crate) fn boots(m: &BTreeMap<String, f64>) -> [f64; 4] {
    ["reused", "tuned_signed", "not_signed", "supervised_only"]
        .map(|o| m[&format!("keepwrap_boots_total{{outcome=\"{o}\"}}")])
}

/// The entries of the cache files under `root` (every key but the
/// engine's own `_metadata`, `_records`, `_generation`).
fn entries(root: &Path) -> f64 {
    cache_files(root)
        .iter()
        .map(|p| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join(p)).unwrap()).unwrap();
            v.as_object()
                .unwrap()
                .keys()
                .filter(|k| !["_metadata", "_records", "_generation"].contains(&k.as_str()))
                .count() as f64
        })
        .sum()
}

/// keepwrap only supervising `sh -c SCRIPT`, its metrics in `metrics`.
fn supervised(metrics: &Path, script: &str) -> Command {
    let mut cmd = Command::new(BIN);
    without_keepwrap_env(&mut cmd)
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env("KEEPWRAP_METRICS_FILE", metrics)
        .args(["--keep", "never", "--", "sh", "-c", script]);
    cmd
}

#[test]
fn a_tuned_boot_a_reused_boot_and_a_supervised_one_are_each_counted_once() {
    let h = home();
    let root = cache_root(h.path());
    let dir = h.path().join("textfile");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("keepwrap.prom");
    let flag = ["--metrics-file", file.to_str().unwrap()];

    let b1 = boot(&mut keepwrap_engine(h.path(), &flag, EP2_FIXED));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(b1.has_event("signed"), "{}", b1.stderr);
    assert!(b1.warnings().is_empty(), "{}", b1.stderr);
    let m = samples(&file);
    assert_eq!(boots(&m), [0.0, 1.0, 0.0, 0.0], "{m:?}");
    assert_eq!(m["keepwrap_kept_files"], 2.0);
    assert_eq!(m["keepwrap_kept_entries"], entries(&root));
    assert!(m["keepwrap_kept_entries"] > 0.0);
    let done = b1.event("tuning_done")["after_s"].as_f64().unwrap();
    let to_done = m["keepwrap_time_to_done_seconds{outcome=\"tuned_signed\"}"];
    assert!((to_done - done).abs() < 0.001, "{to_done} vs {done}");
    for o in ["restored", "empty", "failed"] {
        assert_eq!(
            m[&format!("keepwrap_fleet_restores_total{{outcome=\"{o}\"}}")],
            0.0
        );
    }
    let first = m["keepwrap_last_outcome_timestamp_seconds"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(first <= now && first > now - 120.0, "{first} vs {now}");

    let b2 = boot(&mut keepwrap_engine(h.path(), &flag, EP2_FIXED));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert!(b2.has_event("reused"), "{}", b2.stderr);
    let m = samples(&file);
    assert_eq!(boots(&m), [1.0, 1.0, 0.0, 0.0], "{m:?}");
    assert_eq!(m["keepwrap_kept_files"], 2.0);
    assert_eq!(m["keepwrap_kept_entries"], entries(&root));
    assert!(m.contains_key("keepwrap_time_to_done_seconds{outcome=\"reused\"}"));
    assert_eq!(
        m["keepwrap_time_to_done_seconds{outcome=\"tuned_signed\"}"], to_done,
        "the tuned boot's time stays"
    );
    assert!(m["keepwrap_last_outcome_timestamp_seconds"] >= first);

    let b3 = output(&mut supervised(&file, "exit 0"));
    assert_eq!(b3.code, 0, "{}", b3.stderr);
    assert!(b3.has_event("supervising_only"), "{}", b3.stderr);
    let m = samples(&file);
    assert_eq!(boots(&m), [1.0, 1.0, 0.0, 1.0], "{m:?}");
    assert_eq!(m["keepwrap_kept_files"], 0.0);

    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["keepwrap.prom"], "no temporary file is left");
}

#[test]
fn a_launch_stopped_before_done_is_counted_not_signed() {
    let h = home();
    let file = h.path().join("m.prom");
    let mut cmd = keepwrap(&h.path().join("cache"));
    cmd.args(["--metrics-file", file.to_str().unwrap()])
        .args(["--", "sh", "-c", "exit 5"]);
    let b = output(&mut cmd);
    assert_eq!(b.code, 5, "{}", b.stderr);
    assert!(b.has_event("not_signing_early_exit"), "{}", b.stderr);
    assert_eq!(boots(&samples(&file)), [0.0, 0.0, 1.0, 0.0]);
}

#[test]
fn a_metrics_file_that_cannot_be_written_is_one_warning_and_the_exit_status_stays() {
    let h = home();
    let blocker = h.path().join("blocker");
    std::fs::write(&blocker, "a file, not a directory").unwrap();
    let file = blocker.join("keepwrap.prom");
    // Two outcomes (the fleet that cannot be used, then the boot): one line.
    let mut cmd = keepwrap(&h.path().join("cache"));
    cmd.args(["--metrics-file", file.to_str().unwrap()])
        .args(["--fleet", "not-a-bucket"])
        .args(["--", "sh", "-c", "exit 3"]);
    let b = output(&mut cmd);
    assert_eq!(b.code, 3, "{}", b.stderr);
    assert!(b.has_event("fleet_unusable"), "{}", b.stderr);
    let warned = b.events_named("metrics_not_written");
    assert_eq!(warned.len(), 1, "{}", b.stderr);
    assert_eq!(warned[0]["level"], "WARN");
    assert_eq!(warned[0]["file"], json!(file.to_str().unwrap()));
    assert!(b.has_event("engine_ended"), "{}", b.stderr);

    let s = output(&mut supervised(&file, "exit 7"));
    assert_eq!(s.code, 7, "{}", s.stderr);
    assert_eq!(s.events_named("metrics_not_written").len(), 1);
    assert_eq!(std::fs::read(&blocker).unwrap(), b"a file, not a directory");
}

#[test]
fn a_metrics_file_keepwrap_did_not_write_is_said_and_replaced() {
    let h = home();
    let file = h.path().join("keepwrap.prom");
    std::fs::write(&file, "this is not\na metrics file {{{\n").unwrap();
    let b = output(&mut supervised(&file, "exit 0"));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let ignored = b.event("metrics_file_ignored");
    assert_eq!(ignored["level"], "WARN");
    assert_eq!(ignored["file"], json!(file.to_str().unwrap()));
    assert!(ignored["error"].as_str().unwrap().starts_with("line 1: "));
    assert_eq!(boots(&samples(&file)), [0.0, 0.0, 0.0, 1.0]);

    // Read back from now on: the next boot adds to it.
    let b = output(&mut supervised(&file, "exit 0"));
    assert!(b.warnings().is_empty(), "{}", b.stderr);
    assert_eq!(boots(&samples(&file)), [0.0, 0.0, 0.0, 2.0]);
}

#[test]
fn a_fleet_that_cannot_be_used_counts_as_a_failed_restore() {
    let h = home();
    let file = h.path().join("keepwrap.prom");
    let flag = [
        "--metrics-file",
        file.to_str().unwrap(),
        "--fleet",
        "not-a-bucket",
    ];
    let b = boot(&mut keepwrap_engine(h.path(), &flag, EP2_FIXED));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.has_event("fleet_unusable"), "{}", b.stderr);
    let m = samples(&file);
    assert_eq!(m["keepwrap_fleet_restores_total{outcome=\"failed\"}"], 1.0);
    assert_eq!(
        m["keepwrap_fleet_restores_total{outcome=\"restored\"}"],
        0.0
    );
    assert_eq!(boots(&m), [0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn a_fifo_where_the_metrics_file_goes_never_blocks_the_start() {
    let h = home();
    let file = h.path().join("keepwrap.prom");
    mkfifo(&file);
    let b = output_within(&mut supervised(&file, "exit 4"), Duration::from_secs(20));
    assert_eq!(b.code, 4, "{}", b.stderr);
    let ignored = b.event("metrics_file_ignored");
    assert_eq!(ignored["error"], "not a regular file");
    assert_eq!(boots(&samples(&file)), [0.0, 0.0, 0.0, 1.0]);
}
