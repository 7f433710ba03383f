//! Hostile review of the check against the running engine (issue 34):
//! launch shapes where keepwrap takes the wrong process for the engine,
//! never sees it, or misjudges what it did, so that the engine loads
//! tactics tuned under other settings or a good set is lost. Driven with
//! the fake engine tagging each tactic with the settings it was tuned
//! under (`FAKE_TAG_SETTINGS=1`); each test fails because of its hole.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// The interpreter by its absolute path.
fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// keepwrap with `kw_args` around `argv` in `cwd`, HOME at `home`, the
/// fake engine importable as `sglang`, tactics tagged.
fn kw(home: &Path, cwd: &Path, kw_args: &[&str], argv: &[String]) -> Command {
    let mut cmd = crate::fingerprint_e2e::kw(home, cwd);
    cmd.env("HOME", home)
        .env("FAKE_TAG_SETTINGS", "1")
        .args(kw_args)
        .arg("--")
        .args(argv);
    cmd
}

/// The passes of a boot that loaded tactics tuned under other settings
/// than their own.
fn foreign_loads(out: &Finished) -> Vec<String> {
    let passes = out.events("pass");
    assert!(!passes.is_empty(), "{}", out.stderr);
    passes
        .iter()
        .filter(|p| {
            let own = p["settings"].as_str().unwrap();
            p["loaded_under"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t.as_str().unwrap() != own)
        })
        .map(|p| p.to_string())
        .collect()
}

fn boot_ok(cmd: &mut Command) -> Finished {
    let out = boot(cmd);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out
}

fn assert_own_only(out: &Finished, what: &str) {
    let foreign = foreign_loads(out);
    assert!(
        foreign.is_empty(),
        "{what}: the engine loaded tactics tuned under other settings (a partial hit):\n{}\n--- keepwrap:\n{}",
        foreign.join("\n"),
        out.stderr
    );
}

/// `--keep always` with a launch keepwrap cannot read whole: the engine
/// is "Python, `vllm` or `sglang`" (`Want::Any`), so the first Python the
/// shell runs (a `pip install`, a `python3 -c 'import torch; ...'` GPU
/// check, a readiness wait) is taken for the engine. Its argv and
/// environment are fingerprinted and signed for, and the real engine's
/// hidden input (a sourced file) never counts: every later change of it is
/// a partial hit, and the line names the helper as the engine.
#[test]
fn keep_always_takes_a_helper_python_for_the_engine() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env_sh = t.path().join("env.sh");
    let set = |v: &str| std::fs::write(&env_sh, format!("export SGLANG_HIDDEN={v}\n")).unwrap();
    let py = python();
    let argv = vec![
        "bash".to_string(),
        "-c".to_string(),
        format!(
            "{py} -c 'import time; time.sleep(0.3)' && source {} && {py} -m sglang.launch_server --model-path /models/fake-moe --tp 2 --offline --tune-ms 2 --load-ms 400; sleep 2",
            env_sh.display()
        ),
    ];
    let cmd = || {
        kw(
            &home,
            t.path(),
            &["--keep", "always", "--done", "quiet=500ms"],
            &argv,
        )
    };
    set("a");
    let first = boot_ok(&mut cmd());
    assert!(first.has_event("signed"), "{}", first.stderr);
    set("b");
    let changed = boot_ok(&mut cmd());
    assert_own_only(&changed, "the sourced file changed SGLANG_HIDDEN a -> b");
}
