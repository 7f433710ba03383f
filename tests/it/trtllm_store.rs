//! TensorRT-LLM's sets in keepwrap's store, as for the other engines, seen
//! from outside: `status` (with and without a launch), `explain`, eviction
//! without `--cache-dir`, the statistics, the fleet.

use crate::common;
use crate::trtllm::{boot, kw_env};

use std::path::Path;

use common::Finished;

const A: [&str; 2] = ["--tp_size", "2"];
const B: [&str; 4] = ["--tp_size", "2", "--max_batch_size", "16"];

/// Launch A, then B: A's set goes to the store. Both boots.
fn a_then_b(home: &Path) -> (Finished, Finished) {
    let a = boot(home, "F", &A, &[]);
    assert!(a.has_event("signed"), "{}", a.stderr);
    let b = boot(home, "F", &B, &[]);
    assert!(b.has_event("signed"), "{}", b.stderr);
    (a, b)
}

/// `keepwrap SUB... [-- trtllm-serve /models/fake ARGS]` with the launch's
/// environment: its stdout as JSON.
fn json_of(home: &Path, sub: &[&str], args: Option<&[&str]>) -> serde_json::Value {
    let mut cmd = kw_env(home, "F", &[]);
    cmd.args(sub);
    if let Some(args) = args {
        cmd.args(["--", "trtllm-serve", "/models/fake"]).args(args);
    }
    common::json_out(&mut cmd)
}

/// `keepwrap SUB...` with the launch's environment, which must succeed.
fn run(home: &Path, sub: &[&str]) -> Finished {
    let f = common::output(kw_env(home, "F", &[]).args(sub));
    assert_eq!(f.code, 0, "{sub:?}: {}", f.stderr);
    f
}

#[test]
fn status_shows_the_sets_and_the_plan_of_a_launch() {
    let home = common::home();
    let (a, b) = a_then_b(home.path());
    let fa = a.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let fb = b.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    // bare: the profile's root, its tree and its store
    let st = json_of(
        home.path(),
        &["status", "--profile", "trtllm", "--json"],
        None,
    );
    assert_eq!(st["totals"]["stored"]["entries"], 1, "{st:#}");
    let stored = &st["store"][0];
    assert_eq!(stored["fingerprint"], fa, "{st:#}");
    let files: Vec<&serde_json::Value> = st["files"].as_array().unwrap().iter().collect();
    assert!(
        files
            .iter()
            .any(|f| f["path"] == "autotune/autotuner_cache.json" && f["fingerprint"] == fb),
        "{st:#}"
    );
    // the statistics: two launches, two tunes, one set stored
    let s = &st["stats"];
    assert_eq!(
        (&s["launches"], &s["tunes"], &s["stored"]),
        (&2.into(), &2.into(), &1.into()),
        "{st:#}"
    );
    // with A's launch: restore A's file, store B's
    let plan = json_of(home.path(), &["status", "--json"], Some(&A));
    let plan = &plan["plan"];
    assert_eq!(plan["restore"], 1, "{plan:#}");
    assert_eq!(plan["store"], 1, "{plan:#}");
    assert_eq!(plan["keep"], 0, "{plan:#}");
}

#[test]
fn explain_names_how_a_launch_differs_from_the_signed_ones() {
    let home = common::home();
    a_then_b(home.path());
    let third = ["--tp_size", "2", "--max_batch_size", "32"];
    let mut cmd = kw_env(home.path(), "F", &[]);
    cmd.args(["explain", "--", "trtllm-serve", "/models/fake"])
        .args(third);
    let out = common::output(&mut cmd);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = out.stdout.join("\n");
    assert!(text.contains("--max_batch_size"), "{text}");
}

#[test]
fn evict_without_cache_dir_reaches_the_trtllm_store() {
    let home = common::home();
    let (a, _) = a_then_b(home.path());
    let fa = a.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let dry = run(home.path(), &["evict", "--all", "--dry-run"]);
    let said = dry.stdout.join("\n");
    assert!(said.contains(&fa[..8]), "{said}\n{}", dry.stderr);
    run(home.path(), &["evict", "--all"]);
    let st = json_of(
        home.path(),
        &["status", "--profile", "trtllm", "--json"],
        None,
    );
    assert_eq!(st["totals"]["stored"]["entries"], 0, "{st:#}");
    // A tunes again
    let again = boot(home.path(), "F", &A, &[]);
    assert_eq!(again.hit(), 0, "{:#?}", again.stdout);
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto (KEEPWRAP_TEST_S3=http://127.0.0.1:PORT)"]
fn a_second_pod_restores_the_first_pods_set_from_the_fleet_on_the_same_gpu_model_only() {
    use crate::fleet::{gpus, moto, to_moto, Bucket};
    use serde_json::json;
    let Some(ep) = moto() else { return };
    let bucket = Bucket::new(&ep);
    let url = bucket.url();
    let pod = |home: &Path, layout: &str, model: &str| {
        let machine = gpus(home, model);
        let machine = machine.to_str().unwrap().to_string();
        let env = [
            ("KEEPWRAP_FLEET", url.as_str()),
            ("KEEPWRAP_FLEET_TIMEOUT", "10s"),
            ("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", machine.as_str()),
            ("FAKE_TRTLLM_GPU", model),
        ];
        let mut cmd = crate::trtllm::kw(home, layout, &A, &env);
        to_moto(&mut cmd, &ep);
        crate::trtllm::until_published(common::Running::spawn(&mut cmd))
    };
    for (layout, files) in [("P", 2), ("F", 1), ("FA", 1)] {
        let (h1, h2, h3) = (common::home(), common::home(), common::home());
        let p1 = pod(h1.path(), layout, "NVIDIA H100 80GB HBM3");
        assert_eq!(
            p1.tuned(),
            2 * crate::trtllm::SHAPES,
            "{layout}: {}",
            p1.stderr
        );
        assert!(p1.has_event("fleet_published"), "{layout}: {}", p1.stderr);
        let p2 = pod(h2.path(), layout, "NVIDIA H100 80GB HBM3");
        assert!(
            p2.logged_with("fleet_restored", json!({"files": files})),
            "{layout}: {}",
            p2.stderr
        );
        assert_eq!(p2.tuned(), 0, "{layout}: {:#?}", p2.stdout);
        assert_eq!(p2.tactics(), p1.tactics(), "{layout}");
        assert!(p2.has_event("reused"), "{layout}: {}", p2.stderr);
        // another GPU model: another launch, nothing restored
        let p3 = pod(h3.path(), layout, "NVIDIA L40S");
        assert!(!p3.has_event("fleet_restored"), "{layout}: {}", p3.stderr);
        assert!(p3.events("loaded").is_empty(), "{layout}: {:#?}", p3.stdout);
        assert_eq!(
            p3.tuned(),
            2 * crate::trtllm::SHAPES,
            "{layout}: {:#?}",
            p3.stdout
        );
    }
}
