//! A set the engine refuses: FlashInfer rejects a rank file whose
//! `_metadata` is for another GPU, CUDA or FlashInfer build, tunes every
//! shape, and skips its save. keepwrap sees that the engine saved none of
//! the kept files again, signs nothing, and removes the set, so that the
//! next boot tunes once on this machine and keeps its own, instead of
//! loading, refusing and tuning at every boot.

use crate::common;

use common::*;

const H100: &str = "NVIDIA H100 80GB HBM3";
const H200: &str = "NVIDIA H200";

/// One offline boot of an SGLang server launch on `gpu`.
fn on(home: &std::path::Path, gpu: &str) -> Finished {
    let mut cmd = crate::fingerprint_e2e::kw(home, home);
    cmd.env("FAKE_GPU", gpu)
        .args([
            "--done",
            "exit",
            "--",
            "python3",
            "-m",
            "sglang.launch_server",
        ])
        .args([
            "--model-path",
            "/models/fake-moe",
            "--tp",
            "2",
            "--offline",
            "--tune-ms",
            "2",
        ]);
    let out = boot(&mut cmd);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out
}

#[test]
fn a_set_the_engine_refuses_is_not_signed_again_and_the_next_boot_keeps_its_own() {
    let home = home();
    let first = on(home.path(), H100);
    assert!(first.has_event("signed"), "{}", first.stderr);

    // the same launch on another GPU model of the same architecture
    let other = on(home.path(), H200);
    assert!(
        other
            .events("pass")
            .iter()
            .all(|p| p["load"] == "rejected" && p["saved"] == "skipped"),
        "the engine refuses the H100 files: {:#?}",
        other.stdout
    );
    let line = other.event("kept_refused");
    assert_eq!(line["refused"], 2, "{line}");
    assert!(!other.has_event("reused"), "{}", other.stderr);
    assert!(!other.has_event("signed"), "{}", other.stderr);
    assert!(cache_files(&cache_root(home.path())).is_empty());

    let tunes_once = on(home.path(), H200);
    assert!(tunes_once.tuned() > 0, "{}", tunes_once.stderr);
    assert!(tunes_once.has_event("signed"), "{}", tunes_once.stderr);
    let warm = on(home.path(), H200);
    assert_eq!(warm.tuned(), 0, "{}", warm.stderr);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}

#[test]
fn a_warm_boot_saves_every_kept_file_again_and_is_reused() {
    let home = home();
    on(home.path(), H100);
    let warm = on(home.path(), H100);
    assert!(!warm.has_event("kept_refused"), "{}", warm.stderr);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}
