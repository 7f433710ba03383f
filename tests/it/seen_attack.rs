//! Hostile review of the check against the running engine: launch shapes
//! where keepwrap could take the wrong process for the engine, so that the
//! engine loads tactics tuned under other settings. Driven with the fake
//! engine tagging each tactic with the settings it was tuned under
//! (`FAKE_TAG_SETTINGS=1`).

use crate::seen::{loaded_only_own, python, run_cmd};

/// `--keep always` with a launch keepwrap cannot read whole: the first
/// Python the shell runs (a `pip install`, a `python3 -c 'import torch;
/// ...'` GPU check, a readiness wait) must not be taken for the engine. If
/// it were, its argv and environment would be fingerprinted and signed for,
/// and every change of the real engine's hidden input (a sourced file)
/// would be a partial hit.
#[test]
fn keep_always_takes_a_helper_python_for_the_engine() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env_sh = t.path().join("env.sh");
    let set = |v: &str| std::fs::write(&env_sh, format!("export SGLANG_HIDDEN={v}\n")).unwrap();
    let py = python();
    let script = format!(
        "{py} -c 'import time; time.sleep(0.3)' && source {} && {py} -m sglang.launch_server --model-path /models/fake-moe --tp 2 --offline --tune-ms 2 --load-ms 400; sleep 2",
        env_sh.display()
    );
    let cmd = || {
        let mut cmd = crate::fingerprint_e2e::kw(&home, t.path());
        cmd.env("HOME", &home)
            .env("FAKE_TAG_SETTINGS", "1")
            .args(["--keep", "always", "--done", "quiet=500ms", "--"])
            .args(["bash", "-c", &script]);
        cmd
    };
    set("a");
    let first = run_cmd(&mut cmd());
    assert!(first.has_event("signed"), "{}", first.stderr);
    set("b");
    let changed = run_cmd(&mut cmd());
    loaded_only_own(&changed);
}
