//! `--start-cold` (`KEEPWRAP_START_COLD=1`): one boot that neither
//! restores nor reuses the launch's signed set. The set is put aside in the
//! store until the cold boot signs its own, so a cold boot that dies loses
//! nothing: the next boot gets the old set back. Driven with the fake
//! TensorRT-LLM server, whose warm start can hang under attention-DP.

use crate::common;
use crate::trtllm::{boot, failed_boot, served, SHAPES};
use serde_json::json;

use std::path::Path;
use std::process::Command;

use common::vllm::hermetic_cmd;
use common::BIN;

const ARGS: [&str; 2] = ["--tp_size", "2"];

/// `keepwrap status --json` of keepwrap's TensorRT-LLM root under `home`.
fn status(home: &Path) -> serde_json::Value {
    let root = home.join(".cache/keepwrap/trtllm");
    common::json_out(
        hermetic_cmd(Command::new(BIN), home)
            .args(["status", "--json", "--cache-dir"])
            .arg(&root),
    )
}

#[test]
fn a_cold_start_tunes_afresh_and_its_set_replaces_the_one_put_aside() {
    for layout in ["P", "F", "FA"] {
        let home = common::home();
        let first = boot(home.path(), layout, &ARGS, &[]);
        assert!(first.has_event("signed"), "{layout}: {}", first.stderr);
        let cold = boot(home.path(), layout, &ARGS, &[("KEEPWRAP_START_COLD", "1")]);
        assert!(served(&cold), "{layout}: {}", cold.stderr);
        let files = if layout == "P" { 2 } else { 1 };
        assert!(
            cold.logged_with("start_cold", json!({"files": files})),
            "{layout}: {}",
            cold.stderr
        );
        assert!(
            cold.events("loaded").is_empty(),
            "{layout}: {:#?}",
            cold.stdout
        );
        assert_eq!(cold.hit(), 0, "{layout}: {:#?}", cold.stdout);
        assert_eq!(cold.tuned(), 2 * SHAPES, "{layout}: {:#?}", cold.stdout);
        assert!(cold.has_event("signed"), "{layout}: {}", cold.stderr);
        assert!(!cold.has_event("restored"), "{layout}: {}", cold.stderr);
        // the set put aside went once the cold boot signed its own
        let st = status(home.path());
        assert_eq!(st["totals"]["stored"]["entries"], 0, "{layout}: {st:#}");
        // the next boot is warm, on the cold boot's tactics
        let warm = boot(home.path(), layout, &ARGS, &[]);
        assert_eq!(warm.tuned(), 0, "{layout}: {:#?}", warm.stdout);
        assert_eq!(warm.tactics(), cold.tactics(), "{layout}");
        assert_ne!(warm.tactics(), first.tactics(), "{layout}");
        assert!(warm.has_event("reused"), "{layout}: {}", warm.stderr);
    }
}

#[test]
fn a_cold_start_that_dies_loses_nothing() {
    for layout in ["P", "F", "FA"] {
        let home = common::home();
        let first = boot(home.path(), layout, &ARGS, &[]);
        assert!(first.has_event("signed"), "{layout}: {}", first.stderr);
        let killed = failed_boot(
            home.path(),
            layout,
            &ARGS,
            &[("KEEPWRAP_START_COLD", "1"), ("FAKE_TRTLLM_CRASH", "save")],
        );
        assert!(!served(&killed), "{layout}: {:#?}", killed.stdout);
        assert!(
            killed.events("loaded").is_empty(),
            "{layout}: {:#?}",
            killed.stdout
        );
        // the next boot (not cold) gets the first set back
        let next = boot(home.path(), layout, &ARGS, &[]);
        assert!(served(&next), "{layout}: {}", next.stderr);
        assert!(next.has_event("restored"), "{layout}: {}", next.stderr);
        assert_eq!(next.tuned(), 0, "{layout}: {:#?}", next.stdout);
        assert_eq!(next.tactics(), first.tactics(), "{layout}");
    }
}

#[test]
fn a_cold_start_with_nothing_signed_says_so_and_tunes() {
    let home = common::home();
    let cold = boot(home.path(), "F", &ARGS, &[("KEEPWRAP_START_COLD", "1")]);
    assert!(
        cold.logged_with("start_cold", json!({"files": 0})),
        "{}",
        cold.stderr
    );
    assert_eq!(cold.tuned(), 2 * SHAPES, "{:#?}", cold.stdout);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
}

#[test]
fn the_attention_dp_warning_names_the_flag() {
    let home = common::home();
    let yaml = home.path().join("extra.yaml");
    std::fs::write(&yaml, "enable_attention_dp: true\n").unwrap();
    let f = boot(
        home.path(),
        "F",
        &["--extra_llm_api_options", yaml.to_str().unwrap()],
        &[],
    );
    let w = &f.events_named("trtllm_attention_dp")[0];
    let msg = w["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--start-cold"), "{w}");
    assert!(!msg.contains("--disable"), "{w}");
}

#[test]
fn the_set_put_aside_is_never_evicted_by_the_cold_boot_it_waits_for() {
    // the store's limit is smaller than the one set: any other launch's
    // set would be evicted, the set a cold boot put aside must wait
    let home = common::home();
    let small = [("KEEPWRAP_STORE_MAX_SIZE", "1k")];
    let first = boot(home.path(), "F", &ARGS, &small);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let killed = failed_boot(
        home.path(),
        "F",
        &ARGS,
        &[
            small[0],
            ("KEEPWRAP_START_COLD", "1"),
            ("FAKE_TRTLLM_CRASH", "save"),
        ],
    );
    assert!(!served(&killed), "{:#?}", killed.stdout);
    assert!(
        killed.logged_with("start_cold", json!({"files": 1})),
        "{}",
        killed.stderr
    );
    assert!(!killed.has_event("evicted"), "{}", killed.stderr);
    let next = boot(home.path(), "F", &ARGS, &small);
    assert!(next.has_event("restored"), "{}", next.stderr);
    assert_eq!(next.tuned(), 0, "{:#?}", next.stdout);
    assert_eq!(next.tactics(), first.tactics());
}

#[test]
fn a_cold_start_of_a_vllm_launch_tunes_afresh_and_loses_nothing() {
    use crate::vllm_store::{serve, serve_kw};
    let home = common::home();
    let first = serve(home.path(), &[], &[]);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let cold = serve_kw(home.path(), &["--start-cold"], &[], &[]);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    assert!(cold.has_event("start_cold"), "{}", cold.stderr);
    assert!(!cold.has_event("restored"), "{}", cold.stderr);
    assert_eq!(cold.tuned(), first.tuned(), "{:#?}", cold.stdout);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    assert!(cold.has_event("start_cold_replaced"), "{}", cold.stderr);
    let warm = serve(home.path(), &[], &[]);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}

#[test]
fn a_cold_start_of_an_sglang_launch_tunes_afresh_and_loses_nothing() {
    use common::{boot, keepwrap_engine};
    let home = common::home();
    let run = ["--tp", "2", "--offline"];
    let first = boot(&mut keepwrap_engine(home.path(), &[], &run));
    assert!(first.has_event("signed"), "{}", first.stderr);
    let cold = boot(&mut keepwrap_engine(home.path(), &["--start-cold"], &run));
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    assert!(cold.has_event("start_cold"), "{}", cold.stderr);
    assert!(!cold.has_event("restored"), "{}", cold.stderr);
    assert_eq!(cold.tuned(), first.tuned(), "{:#?}", cold.stdout);
    assert!(cold.has_event("start_cold_replaced"), "{}", cold.stderr);
    let warm = boot(&mut keepwrap_engine(home.path(), &[], &run));
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
}
