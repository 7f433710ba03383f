//! Tuning progress: a launch that saves many rank files (64 ranks or more)
//! gets its landings summed up at a bounded rate instead of a line each.

use crate::common;

use common::*;

/// The `landed` lines of a launch whose engine saves `ranks` rank files
/// `passes` times, and how long the launch took. Each file is written
/// whole and renamed into place, as FlashInfer saves it: a reader never sees
/// it half written.
fn landed_lines(ranks: usize, passes: usize) -> (Vec<String>, std::time::Duration) {
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
    assert!(
        f.stderr.contains("keepwrap: tuned and signed"),
        "{}",
        f.stderr
    );
    let lines = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("keepwrap: landed "))
        .map(str::to_string)
        .collect();
    (lines, t0.elapsed())
}

#[test]
fn a_small_launch_gets_a_line_per_landing() {
    let (lines, _) = landed_lines(8, 2);
    // Every landing is seen (a file written twice in one read may fold).
    assert!(lines.len() >= 8 && lines.len() <= 16, "{lines:#?}");
    assert!(lines.iter().all(|l| l.contains(" entries, ")), "{lines:#?}");
}

#[test]
fn a_large_launch_is_summed_up() {
    let (lines, took) = landed_lines(100, 3);
    let per_file = lines.iter().filter(|l| l.contains(".json (")).count();
    assert_eq!(per_file, keepwrap::done::progress::PER_FILE, "{lines:#?}");
    let switch: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("distinct cache files (") && l.contains("sums up the landings"))
        .collect();
    assert_eq!(switch.len(), 1, "{lines:#?}");
    assert!(switch[0].starts_with(&format!(
        "keepwrap: landed {} distinct cache files",
        keepwrap::done::progress::PER_FILE + 1
    )));
    // At most one summing line per 10 s (the run takes about a second).
    let sums = lines
        .iter()
        .filter(|l| l.contains(" more cache files ("))
        .count();
    let bound = 1 + (took.as_secs() / 10) as usize;
    assert!(sums <= bound, "{took:?}: {lines:#?}");
    assert_eq!(
        lines.len(),
        keepwrap::done::progress::PER_FILE + 1 + sums,
        "{lines:#?}"
    );
}
