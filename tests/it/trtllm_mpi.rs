//! TensorRT-LLM behind its launcher, `mpirun -n 2 trtllm-llmapi-launch
//! trtllm-serve ...` (the fake `mpirun` starts one process per rank, each
//! of which plays only its global rank and writes only its own section or
//! rank file; rank 0 serves HTTP): keepwrap, once around the launcher,
//! keeps the set of the whole world, and a set that is not whole for the
//! world leads to a cold boot, never a failed one nor a partial hit.

use crate::common;
use crate::trtllm::{folder, kw_env, served, LAYOUTS, SHAPES};

use std::path::Path;
use std::process::Command;

use common::vllm::until_outcome;
use common::{Finished, Running};
use serde_json::json;

/// `mpirun LAUNCHER... trtllm-llmapi-launch trtllm-serve /models/fake
/// --tp_size 2 --port P` under keepwrap in layout `layout`: one boot that
/// serves (keepwrap's outcome line, then TERM).
fn boot(home: &Path, layout: &str, launcher: &[&str]) -> Finished {
    until_outcome(Running::spawn(&mut launch(home, layout, launcher, &[])))
}

/// keepwrap around that launch, `env` added.
fn launch(home: &Path, layout: &str, launcher: &[&str], env: &[(&str, &str)]) -> Command {
    let port = common::free_port().to_string();
    let mut cmd = kw_env(home, layout, env);
    cmd.args(["--", "mpirun"])
        .args(launcher)
        .args(["trtllm-llmapi-launch", "trtllm-serve", "/models/fake"])
        .args(["--tp_size", "2", "--port", &port]);
    cmd
}

/// Both ranks on this node.
const ONE_NODE: [&str; 2] = ["-n", "2"];
/// One rank on each of two nodes, the variable passed to the other's.
const TWO_NODES: [&str; 6] = [
    "-n",
    "2",
    "-H",
    "a:1,b:1",
    "-x",
    "TLLM_AUTOTUNER_CACHE_PATH",
];
/// The same, without `-x`: the rank on the other node never sees the
/// variable, and persists nothing.
const TWO_NODES_NO_X: [&str; 4] = ["-n", "2", "-H", "a:1,b:1"];

#[test]
fn behind_the_launcher_boot_one_tunes_and_is_signed_and_boot_two_tunes_nothing() {
    for (layout, _) in LAYOUTS {
        for launcher in [&ONE_NODE[..], &TWO_NODES] {
            let home = common::home();
            let cold = boot(home.path(), layout, launcher);
            assert!(served(&cold), "{layout} {launcher:?}: {}", cold.stderr);
            assert_eq!(cold.event("launch")["profile"], "trtllm", "{}", cold.stderr);
            // one process per rank, each its own rank
            let started = cold.events("start");
            assert_eq!(started.len(), 2, "{layout}: {:#?}", cold.stdout);
            assert_eq!(
                cold.tuned_by_rank(),
                [(0, SHAPES), (1, SHAPES)].into(),
                "{layout} {launcher:?}: {:#?}",
                cold.stdout
            );
            assert!(cold.has_event("signed"), "{layout}: {}", cold.stderr);
            let warm = boot(home.path(), layout, launcher);
            assert!(served(&warm), "{layout} {launcher:?}: {}", warm.stderr);
            assert_eq!(warm.tuned(), 0, "{layout} {launcher:?}: {:#?}", warm.stdout);
            assert_eq!(warm.hit(), 2 * SHAPES, "{layout}: {:#?}", warm.stdout);
            assert_eq!(warm.tactics(), cold.tactics(), "{layout} {launcher:?}");
            assert!(warm.has_event("reused"), "{layout}: {}", warm.stderr);
        }
    }
}

#[test]
fn a_set_tuned_without_the_launcher_is_reused_behind_it() {
    let home = common::home();
    let plain = crate::trtllm::boot(home.path(), "F", &["--tp_size", "2"], &[]);
    assert!(plain.has_event("signed"), "{}", plain.stderr);
    let behind = boot(home.path(), "F", &ONE_NODE);
    assert_eq!(
        behind.event("launch")["fingerprint"],
        plain.event("launch")["fingerprint"],
        "{}",
        behind.stderr
    );
    assert_eq!(behind.tuned(), 0, "{:#?}", behind.stdout);
    assert_eq!(behind.tactics(), plain.tactics());
}

/// Why a set of rank 0's section (or rank file) only is not kept for a
/// launch of 2 ranks in `layout`.
fn not_whole(layout: &str) -> String {
    let what = if layout == "P" {
        "rank files"
    } else {
        "rank sections"
    };
    format!("its {what} are for ranks 0 and the launch runs 2 ranks")
}

/// Launch A without `-x`: the rank on the other node persists nothing,
/// and what rank 0 saved (its section or rank file only) is never signed.
fn rank_zero_only(home: &Path, layout: &str) -> Finished {
    let first = boot(home, layout, &TWO_NODES_NO_X);
    assert!(served(&first), "{layout}: {}", first.stderr);
    let starts = first.events("start");
    assert!(
        starts.iter().any(|s| s["cache_path"].is_null()),
        "{layout}: {starts:#?}"
    );
    assert!(
        first.logged_with("keeps_nothing", json!({"why": not_whole(layout)})),
        "{layout}: {}",
        first.stderr
    );
    assert!(!first.has_event("signed"), "{layout}: {}", first.stderr);
    first
}

#[test]
fn a_set_not_whole_for_the_world_leads_to_a_cold_boot_never_a_failed_one_nor_a_partial_hit() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        rank_zero_only(home.path(), layout);
        // -x added (the launcher's options are not in the fingerprint):
        // rank 1 would now load a set without its section
        let next = boot(home.path(), layout, &TWO_NODES);
        assert!(served(&next), "{layout}: {}", next.stderr);
        assert_eq!(next.code, 0, "{layout}: {}", next.stderr);
        // cold on every rank: nothing loaded, nothing hit
        assert!(
            next.events("loaded").is_empty(),
            "{layout}: {:#?}",
            next.stdout
        );
        assert_eq!(next.hit(), 0, "{layout}: {:#?}", next.stdout);
        assert_eq!(
            next.tuned_by_rank(),
            [(0, SHAPES), (1, SHAPES)].into(),
            "{layout}: {:#?}",
            next.stdout
        );
        assert!(next.has_event("signed"), "{layout}: {}", next.stderr);
        let again = boot(home.path(), layout, &TWO_NODES);
        assert_eq!(again.tuned(), 0, "{layout}: {:#?}", again.stdout);
        assert_eq!(again.tactics(), next.tactics(), "{layout}");
        assert!(folder(home.path()).is_dir());
    }
}

#[test]
fn a_set_missing_a_ranks_section_or_file_is_never_stored_nor_restored() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        let a = rank_zero_only(home.path(), layout);
        // launch B: A's files, never signed, are removed, not stored
        let b = crate::trtllm::boot(
            home.path(),
            layout,
            &["--tp_size", "2", "--max_batch_size", "16"],
            &[],
        );
        assert!(b.has_event("signed"), "{layout}: {}", b.stderr);
        assert_eq!(b.event("pruned")["stored"], 0, "{layout}: {}", b.stderr);
        // A again, every rank given the path: nothing comes back
        let again = boot(home.path(), layout, &TWO_NODES);
        assert_eq!(
            again.event("launch")["fingerprint"],
            a.event("launch")["fingerprint"]
        );
        assert!(!again.has_event("restored"), "{layout}: {}", again.stderr);
        assert!(served(&again), "{layout}: {}", again.stderr);
        assert!(
            again.events("loaded").is_empty(),
            "{layout}: {:#?}",
            again.stdout
        );
        assert_eq!(again.hit(), 0, "{layout}: {:#?}", again.stdout);
        assert_eq!(again.tuned(), 2 * SHAPES, "{layout}: {:#?}", again.stdout);
        assert!(again.has_event("signed"), "{layout}: {}", again.stderr);
        // the store holds B's set only
        let mut cmd = kw_env(home.path(), layout, &[]);
        cmd.args(["status", "--profile", "trtllm", "--json"]);
        let st = common::json_out(&mut cmd);
        let stored: Vec<&serde_json::Value> = st["store"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["fingerprint"])
            .collect();
        assert_eq!(
            stored,
            [&b.event("launch")["fingerprint"]],
            "{layout}: {st:#}"
        );
    }
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto (KEEPWRAP_TEST_S3=http://127.0.0.1:PORT)"]
fn a_set_missing_a_ranks_section_or_file_is_never_published_to_the_fleet() {
    use crate::fleet::{gpus, moto, to_moto, Bucket};
    let Some(ep) = moto() else { return };
    let bucket = Bucket::new(&ep);
    let url = bucket.url();
    let pod = |home: &Path, layout: &str, launcher: &[&str]| {
        let machine = gpus(home, "NVIDIA H100 80GB HBM3");
        let machine = machine.to_str().unwrap().to_string();
        let env = [
            ("KEEPWRAP_FLEET", url.as_str()),
            ("KEEPWRAP_FLEET_TIMEOUT", "10s"),
            ("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", machine.as_str()),
            ("FAKE_TRTLLM_GPU", "NVIDIA H100 80GB HBM3"),
        ];
        let mut cmd = launch(home, layout, launcher, &env);
        to_moto(&mut cmd, &ep);
        crate::trtllm::until_published(Running::spawn(&mut cmd))
    };
    for (layout, _) in LAYOUTS {
        let (h1, h2, h3) = (common::home(), common::home(), common::home());
        // rank 1 persists nothing: rank 0's part is neither signed nor
        // published
        let p1 = pod(h1.path(), layout, &TWO_NODES_NO_X);
        assert!(
            p1.logged_with("keeps_nothing", json!({"why": not_whole(layout)})),
            "{layout}: {}",
            p1.stderr
        );
        assert!(!p1.has_event("fleet_published"), "{layout}: {}", p1.stderr);
        // the next pod finds nothing, tunes every rank, and publishes
        let p2 = pod(h2.path(), layout, &TWO_NODES);
        assert!(!p2.has_event("fleet_restored"), "{layout}: {}", p2.stderr);
        assert!(p2.events("loaded").is_empty(), "{layout}: {:#?}", p2.stdout);
        assert_eq!(p2.tuned(), 2 * SHAPES, "{layout}: {:#?}", p2.stdout);
        assert!(p2.has_event("fleet_published"), "{layout}: {}", p2.stderr);
        // the whole set is the one a third pod restores
        let p3 = pod(h3.path(), layout, &TWO_NODES);
        assert!(p3.has_event("fleet_restored"), "{layout}: {}", p3.stderr);
        assert_eq!(p3.tuned(), 0, "{layout}: {:#?}", p3.stdout);
        assert_eq!(p3.tactics(), p2.tactics(), "{layout}");
    }
}

#[test]
fn share_says_in_one_line_why_it_does_not_apply_and_the_launch_is_kept_as_without_it() {
    let home = common::home();
    let share = home.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    let given = launch(home.path(), "F", &TWO_NODES, &[]);
    let args: Vec<std::ffi::OsString> = given.get_args().map(|a| a.to_owned()).collect();
    let mut cmd = kw_env(home.path(), "F", &[]);
    cmd.arg("--share").arg(&share).args(args);
    let first = until_outcome(Running::spawn(&mut cmd));
    let said = first.events_named("trtllm_share_not_used");
    assert_eq!(said.len(), 1, "{}", first.stderr);
    assert_eq!(said[0]["dir"], json!(share), "{}", first.stderr);
    assert!(first.has_event("signed"), "{}", first.stderr);
    assert_eq!(std::fs::read_dir(&share).unwrap().count(), 0);
    let warm = boot(home.path(), "F", &TWO_NODES);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}
