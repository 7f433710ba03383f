//! TensorRT-LLM behind keepwrap (the fake `trtllm-serve`,
//! `tests/fixtures/engines/fake_trtllm.py`, installed with the
//! `tensorrt_llm-*.dist-info` of a release of each layout): keepwrap sets
//! `TLLM_AUTOTUNER_CACHE_PATH` to its own file and keeps it per launch, and
//! a file the engine broke leads to a cold boot, never a failed one.

use crate::common;
use serde_json::json;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::vllm::{hermetic_cmd, until_outcome, DEADLINE};
use common::{Finished, Running, BIN};

/// The layouts, each with a release that writes it.
pub(crate) const LAYOUTS: [(&str, &str); 3] =
    [("P", "1.2.0rc2"), ("F", "1.2.1"), ("FA", "1.3.0rc19")];

/// `home/site`: the fake `tensorrt_llm` package with the metadata of
/// `version` beside it, as pip installs it; the PYTHONPATH that finds it.
fn installed(home: &Path, version: &str) -> String {
    let site = home.join("site");
    let info = site.join(format!("tensorrt_llm-{version}.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n"),
    )
    .unwrap();
    let link = site.join("tensorrt_llm");
    if !link.exists() {
        std::os::unix::fs::symlink(
            common::repo().join("tests/fixtures/engines/tensorrt_llm"),
            &link,
        )
        .unwrap();
    }
    site.display().to_string()
}

/// `keepwrap` with the environment of a `trtllm-serve` launch in layout
/// `layout` (the fake first on PATH, the release installed), hermetic,
/// JSON logs, `env` added; no arguments yet.
pub(crate) fn kw_env(home: &Path, layout: &str, env: &[(&str, &str)]) -> Command {
    let version = LAYOUTS.iter().find(|(l, _)| *l == layout).unwrap().1;
    let mut cmd = hermetic_cmd(Command::new(BIN), home);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("TLLM_") || k.starts_with("TRTLLM_") {
            cmd.env_remove(k);
        }
    }
    let path = format!(
        "{}:{}",
        common::repo().join("tests/fixtures/engines/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("KEEPWRAP_LOG_FORMAT", "json")
        .env("PATH", path)
        .env("PYTHONPATH", installed(home, version))
        .env("FAKE_TRTLLM_LAYOUT", layout)
        .envs(env.iter().copied());
    cmd
}

/// `keepwrap -- trtllm-serve /models/fake ARGS --port P` in layout
/// `layout`, hermetic, JSON logs, `env` added.
pub(crate) fn kw(home: &Path, layout: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let port = common::free_port().to_string();
    let mut cmd = kw_env(home, layout, env);
    cmd.args(["--", "trtllm-serve", "/models/fake"])
        .args(args)
        .args(["--port", &port]);
    cmd
}

/// One boot that serves: wait for keepwrap's outcome line, then TERM.
pub(crate) fn boot(home: &Path, layout: &str, args: &[&str], env: &[(&str, &str)]) -> Finished {
    until_outcome(Running::spawn(&mut kw(home, layout, args, env)))
}

#[cfg(feature = "failpoints")]
/// One boot that serves under `--fleet`: wait for keepwrap's outcome line
/// and, when it signed, for the publication's own line (a TERM before it
/// abandons the publication), then TERM.
pub(crate) fn until_published(r: Running) -> Finished {
    common::wait_for("keepwrap's outcome and publication lines", DEADLINE, || {
        let events = r.log_events();
        let code = |e: &serde_json::Value| e["code"].as_str().unwrap_or_default().to_string();
        let outcome = events.iter().any(common::vllm::is_outcome);
        let signed = events.iter().any(|e| code(e) == "signed");
        let published = events
            .iter()
            .any(|e| code(e).starts_with("fleet_publish") || code(e) == "fleet_part_published");
        (outcome && (!signed || published)).then_some(())
    });
    r.guard.signal(nix::sys::signal::Signal::SIGTERM);
    r.finish(DEADLINE)
}

/// One boot whose engine ends on its own (a failed start).
pub(crate) fn failed_boot(
    home: &Path,
    layout: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Finished {
    Running::spawn(&mut kw(home, layout, args, env)).finish(DEADLINE)
}

/// keepwrap's folder for TensorRT-LLM under `home`.
pub(crate) fn folder(home: &Path) -> PathBuf {
    home.join(".cache/keepwrap/trtllm/autotune")
}

/// The bare path: the file the engine is told to use.
fn bare(home: &Path) -> PathBuf {
    folder(home).join("autotuner_cache.json")
}

/// The engine served (the fake's `ready` line).
pub(crate) fn served(f: &Finished) -> bool {
    !f.events("ready").is_empty()
}

/// The shapes one boot of `/models/fake` tunes per rank (3 ops; batch
/// buckets 1..8 and token buckets 256..2048, or 1..16 with
/// `--max_batch_size 16`).
pub(crate) const SHAPES: u64 = 24;
const SHAPES_16: u64 = 27;

#[test]
fn boot_two_tunes_nothing_in_each_layout() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        let cold = boot(home.path(), layout, &["--tp_size", "2"], &[]);
        assert!(served(&cold), "{layout}: {}", cold.stderr);
        assert_eq!(cold.tuned(), 2 * SHAPES, "{layout}: {:#?}", cold.stdout);
        assert!(cold.has_event("signed"), "{layout}: {}", cold.stderr);
        assert!(
            cold.logged_with("trtllm_cache_kept", json!({"path": bare(home.path())})),
            "{layout}: {}",
            cold.stderr
        );
        assert_eq!(cold.event("launch")["profile"], "trtllm", "{}", cold.stderr);
        let warm = boot(home.path(), layout, &["--tp_size", "2"], &[]);
        assert_eq!(warm.tuned(), 0, "{layout}: {:#?}", warm.stdout);
        assert_eq!(warm.hit(), 2 * SHAPES, "{layout}: {:#?}", warm.stdout);
        assert_eq!(warm.tactics(), cold.tactics(), "{layout}");
        assert!(warm.has_event("reused"), "{layout}: {}", warm.stderr);
    }
}

#[test]
fn a_changed_launch_retunes_fully_and_going_back_restores_the_first_launchs_tactics() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        let a = boot(home.path(), layout, &["--tp_size", "2"], &[]);
        assert!(a.has_event("signed"), "{layout}: {}", a.stderr);
        // shares shapes with A: any of A's tactics reaching it is a hit
        let b = boot(
            home.path(),
            layout,
            &["--tp_size", "2", "--max_batch_size", "16"],
            &[],
        );
        assert_eq!(b.hit(), 0, "{layout}: {:#?}", b.stdout);
        assert_eq!(b.tuned(), 2 * SHAPES_16, "{layout}: {:#?}", b.stdout);
        assert!(b.events("loaded").is_empty(), "{layout}: {:#?}", b.stdout);
        assert!(b.has_event("signed"), "{layout}: {}", b.stderr);
        let again = boot(home.path(), layout, &["--tp_size", "2"], &[]);
        assert_eq!(again.tuned(), 0, "{layout}: {:#?}", again.stdout);
        assert_eq!(again.tactics(), a.tactics(), "{layout}");
    }
}

#[test]
fn a_file_torn_by_sigkill_mid_save_leads_to_a_cold_boot_never_a_failed_one() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        let args = ["--tp_size", "2"];
        let cold = boot(home.path(), layout, &args, &[]);
        assert!(cold.has_event("signed"), "{layout}: {}", cold.stderr);
        let killed = failed_boot(home.path(), layout, &args, &[("FAKE_TRTLLM_CRASH", "save")]);
        assert!(!served(&killed), "{layout}: {:#?}", killed.stdout);
        assert!(
            killed.has_event("not_signing_early_exit"),
            "{layout}: {}",
            killed.stderr
        );
        let next = boot(home.path(), layout, &args, &[]);
        assert!(served(&next), "{layout}: {}", next.stderr);
        assert_eq!(next.code, 0, "{layout}: {}", next.stderr);
        if layout == "FA" {
            // the rename never happened: the data file is whole, and the
            // temp file the kill left goes
            assert_eq!(next.tuned(), 0, "{layout}: {:#?}", next.stdout);
            // (each leftover's own line is at debug level; the prune line
            // counts them: the lock and the temp file)
            assert_eq!(
                next.event("pruned")["leftovers"],
                2,
                "{layout}: {}",
                next.stderr
            );
        } else {
            assert_eq!(next.hit(), 0, "{layout}: {:#?}", next.stdout);
            assert_eq!(next.tuned(), 2 * SHAPES, "{layout}: {:#?}", next.stdout);
        }
        let leftovers: Vec<_> = std::fs::read_dir(folder(home.path()))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{layout}: {leftovers:?}");
    }
}

#[test]
fn a_failed_warmup_that_still_saved_leads_to_a_cold_boot() {
    for (layout, _) in LAYOUTS {
        let home = common::home();
        let args = ["--tp_size", "2"];
        let failed = failed_boot(
            home.path(),
            layout,
            &args,
            &[("FAKE_TRTLLM_FAIL_WARMUP", "1")],
        );
        assert_eq!(failed.code, 1, "{layout}: {}", failed.stderr);
        assert!(failed.tuned() > 0, "{layout}: {:#?}", failed.stdout);
        let saved: Vec<_> = std::fs::read_dir(folder(home.path()))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .collect();
        assert!(
            !saved.is_empty(),
            "{layout}: the failed boot saved in finally"
        );
        let next = boot(home.path(), layout, &args, &[]);
        assert!(served(&next), "{layout}: {}", next.stderr);
        assert!(
            next.events("loaded").is_empty(),
            "{layout}: {:#?}",
            next.stdout
        );
        assert_eq!(next.tuned(), 2 * SHAPES, "{layout}: {:#?}", next.stdout);
        assert!(next.has_event("signed"), "{layout}: {}", next.stderr);
    }
}

#[test]
fn nothing_is_ever_created_at_the_bare_path_in_layout_p() {
    let home = common::home();
    let check = |f: &Finished| {
        assert!(!bare(home.path()).exists(), "{}", f.stderr);
        assert!(
            f.events("pass").iter().all(|p| p["fallback"] == 0),
            "tuning was never off: {:#?}",
            f.stdout
        );
    };
    for args in [
        &["--tp_size", "2"][..],
        &["--tp_size", "2"],
        &["--tp_size", "2", "--max_batch_size", "16"],
        &["--tp_size", "2"],
    ] {
        let f = boot(home.path(), "P", args, &[]);
        check(&f);
    }
    let ranks: Vec<_> = std::fs::read_dir(folder(home.path()))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(ranks.len(), 2, "{ranks:?}");
}

#[test]
fn a_launchs_own_path_is_replaced_with_a_line_and_left_alone() {
    let home = common::home();
    let theirs = home.path().join("mine/cache.json");
    let t = theirs.to_str().unwrap();
    let first = boot(
        home.path(),
        "F",
        &[],
        &[
            ("TLLM_AUTOTUNER_CACHE_PATH", t),
            ("TLLM_LOG_LEVEL", "DEBUG"),
        ],
    );
    assert!(
        first.logged_with(
            "trtllm_cache_path_overridden",
            json!({"theirs": theirs, "ours": bare(home.path())})
        ),
        "{}",
        first.stderr
    );
    assert!(!theirs.exists());
    assert!(first.has_event("signed"), "{}", first.stderr);
    // neither the variable nor the log level is in the fingerprint
    let again = boot(home.path(), "F", &[], &[]);
    assert_eq!(again.tuned(), 0, "{:#?}", again.stdout);
}

#[cfg(feature = "failpoints")]
#[test]
fn a_set_tuned_on_one_gpu_model_is_never_loaded_on_another() {
    let home = common::home();
    let on = |model: &str| {
        let gpus = crate::fleet::gpus(home.path(), model);
        let gpus = gpus.to_str().unwrap().to_string();
        boot(
            home.path(),
            "F",
            &[],
            &[
                ("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", &gpus),
                ("FAKE_TRTLLM_GPU", model),
            ],
        )
    };
    let h100 = on("NVIDIA H100 80GB HBM3");
    assert_eq!(h100.tuned(), SHAPES, "{:#?}", h100.stdout);
    assert!(
        h100.logged_with("trtllm_cache_kept", json!({"gpu": "NVIDIA H100 80GB HBM3"})),
        "{}",
        h100.stderr
    );
    let l40s = on("NVIDIA L40S");
    assert!(l40s.events("loaded").is_empty(), "{:#?}", l40s.stdout);
    assert_eq!(l40s.tuned(), SHAPES, "{:#?}", l40s.stdout);
    let back = on("NVIDIA H100 80GB HBM3");
    assert_eq!(back.tuned(), 0, "{:#?}", back.stdout);
    assert_eq!(
        back.events("loaded")[0]["device_name"],
        "NVIDIA H100 80GB HBM3"
    );
    assert_eq!(back.tactics(), h100.tactics());
    // no driver: said, and one more fingerprint
    let none = boot(
        home.path(),
        "F",
        &[],
        &[("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", "/nonexistent")],
    );
    let kept = &none.events_named("trtllm_cache_kept")[0];
    assert!(
        kept["gpu"]
            .as_str()
            .unwrap()
            .starts_with("no GPU model seen"),
        "{kept}"
    );
    assert_eq!(none.tuned(), SHAPES, "{:#?}", none.stdout);
}

#[test]
fn a_launch_with_attention_dp_is_told_how_to_start_cold() {
    let home = common::home();
    let yaml = home.path().join("extra.yaml");
    std::fs::write(&yaml, "enable_attention_dp: true\nenable_autotuner: true\n").unwrap();
    let args = ["--extra_llm_api_options", yaml.to_str().unwrap()];
    let first = boot(home.path(), "F", &args, &[]);
    assert!(
        first.logged_with("trtllm_attention_dp", json!({"file": yaml})),
        "{}",
        first.stderr
    );
    assert!(first.has_event("signed"), "{}", first.stderr);
    // --disable: the engine is given no file, and starts cold
    let cold = boot_disabled(home.path(), &args);
    assert_eq!(
        cold.events("start")[0]["cache_path"],
        json!(null),
        "{:#?}",
        cold.stdout
    );
    assert_eq!(cold.tuned(), SHAPES, "{:#?}", cold.stdout);
    assert!(!cold.has_event("trtllm_cache_kept"), "{}", cold.stderr);
}

/// One boot under `--disable` (only supervised): wait for the engine's
/// `ready` line, then TERM.
fn boot_disabled(home: &Path, args: &[&str]) -> Finished {
    let mut r = Running::spawn(&mut kw(home, "F", args, &[("KEEPWRAP_DISABLE", "1")]));
    r.wait_stdout("the engine's ready line", DEADLINE, |l| {
        l.contains("\"event\": \"ready\"")
    });
    r.guard.signal(nix::sys::signal::Signal::SIGTERM);
    r.finish(DEADLINE)
}

#[test]
fn a_launch_behind_mpirun_or_srun_and_trtllm_llmapi_launch_is_recognised() {
    let home = common::home();
    let fingerprint = |words: &[&str]| {
        let mut cmd = kw_env(home.path(), "F", &[]);
        cmd.args(["fingerprint", "--"]).args(words);
        let f = common::output(&mut cmd);
        assert_eq!(f.code, 0, "{words:?}: {}", f.stderr);
        f.stdout.join("\n")
    };
    let serve = ["trtllm-serve", "/models/fake", "--tp_size", "16"];
    let plain = fingerprint(&serve);
    for launcher in [
        &[
            "mpirun",
            "-n",
            "16",
            "-x",
            "TLLM_AUTOTUNER_CACHE_PATH",
            "trtllm-llmapi-launch",
        ][..],
        &[
            "srun",
            "--ntasks",
            "16",
            "--mpi=pmix",
            "trtllm-llmapi-launch",
        ],
        &["trtllm-llmapi-launch"],
    ] {
        let words = [launcher, &serve[..]].concat();
        assert_eq!(fingerprint(&words), plain, "{words:?}");
        let mut cmd = kw_env(home.path(), "F", &[]);
        cmd.args(["config", "--json", "--"]).args(&words);
        let config = common::json_out(&mut cmd);
        assert_eq!(
            config["profile-for-command"]["value"], "trtllm",
            "{words:?}: {config:#}"
        );
    }
    // mpirun without trtllm-llmapi-launch is not a TensorRT-LLM launch
    let mut cmd = kw_env(home.path(), "F", &[]);
    cmd.args(["config", "--json", "--", "mpirun", "-n", "2"])
        .args(serve);
    let config = common::json_out(&mut cmd);
    assert_ne!(
        config["profile-for-command"]["value"], "trtllm",
        "{config:#}"
    );
}
