//! Tuning progress: a launch that saves many rank files (64 ranks or more)
//! gets its landings summed up at a bounded rate instead of a line each.

use crate::common;

use common::*;

/// The `landed*` events of a launch whose engine saves `ranks` rank files
/// `passes` times, and how long the launch took. Each file is written
/// whole and renamed into place, as FlashInfer saves it: a reader never sees
/// it half written.
fn landed_events(ranks: usize, passes: usize) -> (Vec<serde_json::Value>, std::time::Duration) {
    let h = tempfile::tempdir().unwrap();
    let root = h.path().join("root");
    let script = format!(
        "d=\"$0/0.7.2/sm90/0123456789abcdef\"; mkdir -p \"$d\"; for p in $(seq {passes}); do i=0; while [ $i -lt {ranks} ]; do printf '{{\"_metadata\": {{}}, \"k%s\": 1}}' $p > \"$d/.w$i\"; mv \"$d/.w$i\" \"$d/rank_tp${{i}}_pp0_dp0.json\"; i=$((i+1)); done; sleep 0.2; done"
    );
    let t0 = std::time::Instant::now();
    let f = output(
        keepwrap(&root)
            .args(["--done", "exit", "--", "sh", "-c", &script])
            .arg(&root),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(f.has_event("signed"), "{}", f.stderr);
    let events = f
        .log_events()
        .into_iter()
        .filter(|e| e["code"].as_str().unwrap().starts_with("landed"))
        .collect();
    (events, t0.elapsed())
}

fn named<'a>(events: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["code"] == name).collect()
}

#[test]
fn a_small_launch_gets_a_line_per_landing() {
    let (events, _) = landed_events(8, 2);
    // Every landing is seen (a file written twice in one read may fold).
    let files = named(&events, "landed");
    assert_eq!(files.len(), events.len(), "{events:#?}");
    assert!(files.len() >= 8 && files.len() <= 16, "{events:#?}");
    assert!(
        files.iter().all(|e| e["entries"] == 1
            && e["path"].as_str().unwrap().ends_with(".json")
            && e["after_s"].is_f64()),
        "{events:#?}"
    );
}

#[test]
fn a_large_launch_is_summed_up() {
    let (events, took) = landed_events(100, 3);
    let per_file = keepwrap::done::progress::PER_FILE;
    assert_eq!(named(&events, "landed").len(), per_file, "{events:#?}");
    let switch = named(&events, "landed_summing");
    assert_eq!(switch.len(), 1, "{events:#?}");
    assert_eq!(switch[0]["distinct"], per_file + 1);
    // At most one summing line per 10 s (the run takes about a second).
    let sums = named(&events, "landed_more").len();
    let bound = 1 + (took.as_secs() / 10) as usize;
    assert!(sums <= bound, "{took:?}: {events:#?}");
    assert_eq!(events.len(), per_file + 1 + sums, "{events:#?}");
}
