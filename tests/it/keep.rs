//! Keeping the autotune cache, end to end with the fake engine of
//! `tests/fixtures/engines/`: prune what a launch must not load, watch the engine tune,
//! sign the set when tuning is done, and reuse it on the next identical
//! launch. Every promise is checked from the outside: what the engine
//! tuned and loaded, what keepwrap logged, what is on disk.

use crate::common;
use serde_json::json;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

/// TP4 with expert parallelism, the fixed gate (SGLang PR 40420), offline:
/// tuning is done when the engine exits 0.
const EP4_FIXED: &[&str] = &["--tp", "4", "--ep", "4", "--gate", "fixed", "--offline"];

/// The same with two ranks, for what holds of any set of more than one
/// rank file (a change, a crash, a fingerprint).
const EP2_FIXED: &[&str] = &["--tp", "2", "--ep", "2", "--gate", "fixed", "--offline"];

fn rank_file(root: &Path, tp: usize) -> PathBuf {
    let name = format!("rank_tp{tp}_pp0_dp0.json");
    root.join(
        cache_files(root)
            .into_iter()
            .find(|p| p.ends_with(&name))
            .expect("rank file"),
    )
}

#[test]
fn the_same_launch_twice_reuses_every_file_and_tunes_nothing() {
    let h = home();
    let root = cache_root(h.path());
    assert!(!root.exists());
    let b1 = boot(&mut keepwrap_engine(h.path(), &[], EP4_FIXED));
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(b1.logged_with("root_created", json!({"root": root.to_str().unwrap()})));
    assert!(b1.tuned() > 0);
    assert!(
        b1.logged_with("signed", json!({"files": 4})),
        "{}",
        b1.stderr
    );
    assert_eq!(cache_files(&root).len(), 4);
    assert_eq!(sidecars(&root).len(), 4);

    let b2 = boot(&mut keepwrap_engine(h.path(), &[], EP4_FIXED));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert_eq!(b2.tuned(), 0, "boot 2 tunes nothing");
    assert_eq!(b2.tuned_by_rank().len(), 4);
    assert!(
        b2.events("pass")
            .iter()
            .all(|p| p["hit"].as_u64().unwrap() > 0),
        "every rank loads what it needs"
    );
    assert_eq!(b2.tactics(), b1.tactics(), "the tactics are boot 1's");
    assert!(
        b2.logged_with("reused", json!({"files": 4})),
        "{}",
        b2.stderr
    );
}

#[test]
fn each_rank_file_is_logged_as_it_lands() {
    let h = home();
    let b = boot(&mut keepwrap_engine(h.path(), &[], EP4_FIXED));
    assert_eq!(b.code, 0);
    for tp in 0..4 {
        let rel = rank_file(&cache_root(h.path()), tp)
            .strip_prefix(cache_root(h.path()))
            .unwrap()
            .to_path_buf();
        let landed = b
            .events_named("landed")
            .into_iter()
            .find(|e| e["path"] == rel.to_str().unwrap())
            .unwrap_or_else(|| panic!("no landing event for {}: {}", rel.display(), b.stderr));
        assert!(
            landed["entries"].as_u64().is_some_and(|n| n != 1)
                && landed["after_s"].as_f64().unwrap() > 0.0,
            "{landed}"
        );
    }
}

#[test]
fn a_fingerprinted_argument_change_removes_every_cache_and_retunes_all() {
    let h = home();
    let base = [EP4_FIXED, &["--chunked-prefill-size", "2048"]].concat();
    let changed = [EP4_FIXED, &["--chunked-prefill-size", "4096"]].concat();
    let b1 = boot_debug(&mut keepwrap_engine(h.path(), &[], &base));
    assert_eq!(b1.code, 0);
    let b2 = boot_debug(&mut keepwrap_engine(h.path(), &[], &changed));
    // Without keepwrap this boot would load boot 1's files: a partial hit.
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert_eq!(b2.hit(), 0, "nothing of the other launch was loaded");
    // Stored whole, or removed: none is kept.
    let gone = b2.events_named("stored").len()
        + b2.events_named("removed")
            .iter()
            .filter(|e| {
                e["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("signed for another launch (fingerprint ")
            })
            .count();
    assert_eq!(gone, 4, "{}", b2.stderr);
    assert!(!b2.has_event("kept"), "{}", b2.stderr);
    assert!(b2.logged_with("signed", json!({"files": 4})));
}

#[test]
fn a_volatile_env_change_reuses_and_a_fingerprinted_one_retunes() {
    let h = home();
    let run = |value: &str, volatile: bool| {
        let flags: &[&str] = if volatile {
            &["--volatile-env", "SGLANG_TEST_SWITCH"]
        } else {
            &[]
        };
        let mut cmd = keepwrap_engine(h.path(), flags, EP2_FIXED);
        cmd.env("SGLANG_TEST_SWITCH", value);
        boot(&mut cmd)
    };
    assert_eq!(run("a", true).code, 0);
    let b = run("b", true);
    assert_eq!(
        (b.code, b.tuned()),
        (0, 0),
        "a volatile change reuses: {}",
        b.stderr
    );
    let b = run("c", false);
    assert_eq!(
        (b.code, b.hit()),
        (0, 0),
        "a fingerprinted change retunes: {}",
        b.stderr
    );
}

#[test]
fn an_engine_killed_mid_tuning_signs_nothing_and_the_next_boot_tunes_everything() {
    let h = home();
    let root = cache_root(h.path());
    // Rank 1 dies by SIGKILL in the extend pass, after every rank saved its
    // decode pass: a half-tuned set lies on disk.
    let b1 = boot_debug(&mut keepwrap_engine(
        h.path(),
        &[],
        &[EP2_FIXED, &["--crash", "1:extend"]].concat(),
    ));
    assert_ne!(b1.code, 0);
    assert!(
        b1.events_named("not_signing_early_exit")
            .iter()
            .any(|e| e["status"] == b1.code),
        "{}",
        b1.stderr
    );
    assert!(
        !cache_files(&root).is_empty(),
        "the engine left files behind"
    );
    assert!(sidecars(&root).is_empty(), "nothing signed");

    let b2 = boot_debug(&mut keepwrap_engine(h.path(), &[], EP2_FIXED));
    assert_eq!(b2.code, 0, "no rank got a partial hit: {}", b2.stderr);
    assert_eq!(b2.hit(), 0, "everything tuned again");
    assert!(
        b2.events_named("removed")
            .iter()
            .any(|e| e["reason"] == "no sidecar (unsigned)"),
        "{}",
        b2.stderr
    );
}

#[test]
fn a_rank_file_changed_after_signing_distrusts_the_whole_set() {
    type Mutation = fn(&Path);
    let mutations: [(&str, Mutation); 3] = [
        ("corrupted", |p| {
            std::fs::write(p, b"\x00\xffnot json").unwrap()
        }),
        ("truncated", |p| {
            let bytes = std::fs::read(p).unwrap();
            std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap();
        }),
        ("edited", |p| {
            let text = std::fs::read_to_string(p).unwrap();
            std::fs::write(
                p,
                text.replacen("\"_metadata\"", "\"_edited\": 1, \"_metadata\"", 1),
            )
            .unwrap();
        }),
    ];
    // One root for the three: boot 3 of one mutation, which reuses a whole
    // signed set, is the signed set the next mutation starts from.
    let h = home();
    let root = cache_root(h.path());
    assert_eq!(
        boot_debug(&mut keepwrap_engine(h.path(), &[], EP2_FIXED)).code,
        0
    );
    for (what, mutate) in mutations {
        let victim = rank_file(&root, 1);
        mutate(&victim);
        let b2 = boot_debug(&mut keepwrap_engine(h.path(), &[], EP2_FIXED));
        assert_eq!(b2.code, 0, "{what}: the boot goes on: {}", b2.stderr);
        assert_eq!(b2.hit(), 0, "{what}: no rank loads any of the set");
        let rel = victim.strip_prefix(&root).unwrap();
        assert!(
            b2.events_named("removed")
                .iter()
                .any(|e| e["path"] == rel.to_str().unwrap()),
            "{what}: {}",
            b2.stderr
        );
        let b3 = boot_debug(&mut keepwrap_engine(h.path(), &[], EP2_FIXED));
        assert_eq!(
            (b3.code, b3.tuned()),
            (0, 0),
            "{what}: boot 3 reuses boot 2's set"
        );
    }
}

#[test]
fn an_engine_that_writes_no_cache_leaves_nothing_to_keep() {
    let h = home();
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &[],
        &["--tp", "2", "--offline", "--disable-flashinfer-autotune"],
    ));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.has_event("nothing_to_keep"), "{}", b.stderr);
}

#[test]
fn the_exit_status_stays_the_engines() {
    let h = home();
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &[],
        &["--tp", "2", "--offline", "--exit-code", "7"],
    ));
    assert_eq!(b.code, 7);
    assert!(
        b.logged_with("not_signing_early_exit", json!({"status": 7})),
        "{}",
        b.stderr
    );
}

#[test]
fn disable_leaves_the_cache_alone() {
    let h = home();
    let root = cache_root(h.path());
    assert_eq!(
        boot(&mut keepwrap_engine(h.path(), &["--disable"], EP4_FIXED)).code,
        0
    );
    assert_eq!(cache_files(&root).len(), 4);
    assert!(sidecars(&root).is_empty());
    let b = boot(&mut keepwrap_engine(h.path(), &["--disable"], EP4_FIXED));
    assert_eq!(
        b.tuned(),
        0,
        "the engine's own gate kept its files, untouched by keepwrap"
    );
}

/// `keepwrap -- python3 -m sglang.launch_server ...` (the fake, found on
/// PYTHONPATH): `--done auto` probes its /health.
fn server(h: &Path, kw_args: &[&str], port: u16) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env("SGLANG_CACHE_DIR", h.join("sglang"))
        .env("PYTHONPATH", repo().join("tests/fixtures/engines"))
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args(kw_args)
        .args([
            "--",
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/fake-moe",
        ])
        .args([
            "--tp",
            "2",
            "--ep",
            "2",
            "--gate",
            "fixed",
            "--tune-ms",
            "2",
            "--host",
            "0.0.0.0",
        ])
        .args(["--port", &port.to_string()]);
    cmd
}

#[test]
fn a_server_launch_is_signed_when_health_first_answers_200_and_reused_next_boot() {
    let h = home();
    let root = cache_root(h.path());
    let port = free_port();
    let mut s = Running::spawn(&mut server(h.path(), &[], port));
    s.wait_event_with("signed", json!({"files": 2}), Duration::from_secs(30));
    s.wait_event_with(
        "tuning_done",
        json!({"rule": "health", "url": format!("http://127.0.0.1:{port}/health")}),
        Duration::from_secs(5),
    );
    assert_eq!(sidecars(&root).len(), 2, "signed while the server runs");
    s.guard.signal(Signal::SIGTERM);
    let b1 = s.finish(Duration::from_secs(20));
    assert_eq!(b1.code, 0, "the fake exits 0 on TERM");

    let mut s = Running::spawn(&mut server(h.path(), &[], port));
    s.wait_event_with("reused", json!({"files": 2}), Duration::from_secs(30));
    s.guard.signal(Signal::SIGTERM);
    let b2 = s.finish(Duration::from_secs(20));
    assert_eq!((b2.code, b2.tuned()), (0, 0), "{}", b2.stderr);
    assert_eq!(b2.tactics(), b1.tactics());
}

#[test]
fn a_quiet_window_marks_tuning_done() {
    let h = home();
    let mut s = Running::spawn(&mut server(
        h.path(),
        &["--done", "quiet=300ms"],
        free_port(),
    ));
    s.wait_event_with(
        "tuning_done",
        json!({"rule": "quiet", "quiet_s": 0.3}),
        Duration::from_secs(30),
    );
    s.wait_event_with("signed", json!({"files": 2}), Duration::from_secs(5));
    s.guard.signal(Signal::SIGTERM);
    assert_eq!(s.finish(Duration::from_secs(20)).code, 0);
}

#[test]
fn a_server_that_dies_before_ready_signs_nothing() {
    let h = home();
    // Health never answers: the probe goes to a port nobody serves.
    let dead = free_port();
    let mut cmd = keepwrap_engine(
        h.path(),
        &["--done", &format!("health=http://127.0.0.1:{dead}/health")],
        EP2_FIXED,
    );
    let b = boot(&mut cmd);
    assert_eq!(b.code, 0);
    assert!(
        b.logged_with("not_signing_early_exit", json!({"status": 0})),
        "{}",
        b.stderr
    );
    assert!(sidecars(&cache_root(h.path())).is_empty());
}

#[test]
fn a_root_that_is_a_file_or_read_only_lets_the_launch_go_on_with_a_warning() {
    let h = home();
    let file = h.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let b = boot(
        keepwrap_engine(
            h.path(),
            &[],
            &["--tp", "2", "--offline", "--disable-flashinfer-autotune"],
        )
        .env("KEEPWRAP_CACHE_DIR", &file),
    );
    assert_eq!(b.code, 0);
    assert!(
        b.logged_with(
            "root_not_a_directory",
            json!({"root": file.to_str().unwrap()})
        ),
        "{}",
        b.stderr
    );

    if !common::has_need(
        is_root() && have("unshare"),
        "root and unshare (the read-only part)",
    ) {
        return;
    }
    let ro = h.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let inner = keepwrap_engine(
        h.path(),
        &[],
        &["--tp", "2", "--offline", "--disable-flashinfer-autotune"],
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "sh",
        "-c",
        "mount --bind -o ro \"$0\" \"$0\" && exec \"$@\"",
    ])
    .arg(&ro);
    cmd.arg(inner.get_program()).args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env("KEEPWRAP_CACHE_DIR", &ro);
    let b = boot(&mut cmd);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.logged_with("root_read_only", json!({"root": ro.to_str().unwrap()})),
        "{}",
        b.stderr
    );
}

#[test]
fn two_different_launches_running_at_once_on_one_root_load_nothing_of_each_other() {
    let h = home();
    let port = free_port();
    let health = format!("health=http://127.0.0.1:{port}/health");
    let port_s = port.to_string();
    // A serves: it waits for nobody, tunes, signs at done and keeps running.
    let mut a = Running::spawn(&mut keepwrap_engine(
        h.path(),
        &["--done", &health],
        &[
            "--tp", "2", "--ep", "2", "--gate", "fixed", "--port", &port_s,
        ],
    ));
    a.wait_event_with("signed", json!({"files": 2}), Duration::from_secs(60));
    // B, another launch, starts while A runs on the same cache root.
    let b = boot(&mut keepwrap_engine(
        h.path(),
        &[],
        &[EP2_FIXED, &["--chunked-prefill-size", "4096"]].concat(),
    ));
    a.wait_event("other_launch_after_done", Duration::from_secs(30));
    a.guard.signal(Signal::SIGTERM);
    let a = a.finish(Duration::from_secs(60));
    assert_eq!(b.code, 0, "{}", b.stderr);
    // B goes around A: A's set into the store, B's engine loads nothing.
    assert!(b.has_event("beside_other_launch"), "{}", b.stderr);
    assert!(
        b.logged_with("pruned", json!({"stored": 2})),
        "{}",
        b.stderr
    );
    assert_eq!(b.hit(), 0, "{}", b.stderr);
    assert!(
        !b.has_event("signed") && b.has_event("not_signing_other_launch"),
        "B signs nothing it wrote beside A: {}",
        b.stderr
    );
    // A's one verdict on what landed after its sign at done: B's files,
    // not signed; its own set went into the store whole.
    assert!(
        !a.has_event("not_signing_other_launch"),
        "A does not sign again what B wrote: {}",
        a.stderr
    );
    let verdict = a.event("late_not_signed_other_launch");
    assert!(
        verdict["message"].as_str().unwrap().ends_with(
            "; the 2 cache files signed at done went into the store whole: the next launch of this one brings them back"
        ),
        "{}",
        a.stderr
    );
    // The next boot of A gets its own set back and tunes nothing.
    let mut next = Running::spawn(&mut keepwrap_engine(
        h.path(),
        &["--done", &health],
        &[
            "--tp", "2", "--ep", "2", "--gate", "fixed", "--port", &port_s,
        ],
    ));
    next.wait_event_with("reused", json!({"files": 2}), Duration::from_secs(60));
    next.guard.signal(Signal::SIGTERM);
    let next = next.finish(Duration::from_secs(60));
    assert!(
        next.logged_with("restored", json!({"files": 2})),
        "{}",
        next.stderr
    );
    assert_eq!(next.tuned(), 0, "{}", next.stderr);
    assert_eq!(next.tactics(), a.tactics(), "A's very tactics");
}
