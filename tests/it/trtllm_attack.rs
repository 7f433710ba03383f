//! Attacks on TensorRT-LLM's support, from outside: a launch that sets
//! the variable keepwrap owns inside its own command, files planted in
//! keepwrap's root, kills and races around a boot. Each promise: never a
//! partial hit, nothing good lost, nothing planted trusted, nothing not
//! the engine's touched, the launch's start and exit status unchanged,
//! one line per decision.

use crate::common;
use crate::trtllm::{kw_env, served};
use serde_json::json;

use std::path::Path;
use std::process::Command;

use common::vllm::DEADLINE;
use common::{Finished, Running};

/// Run `cmd` until the engine's `ready` line, then TERM it.
fn until_ready(cmd: &mut Command) -> Finished {
    let mut r = Running::spawn(cmd);
    r.wait_stdout("the engine's ready line", DEADLINE, |l| {
        l.contains("\"event\": \"ready\"")
    });
    r.guard.signal(nix::sys::signal::Signal::SIGTERM);
    r.finish(DEADLINE)
}

/// `keepwrap -- WORDS.. trtllm-serve /models/fake --port P` in layout F.
fn wrapped(home: &Path, words: &[&str]) -> Command {
    let port = common::free_port().to_string();
    let mut cmd = kw_env(home, "F", &[]);
    cmd.arg("--")
        .args(words)
        .args(["trtllm-serve", "/models/fake", "--port", &port]);
    cmd
}

#[test]
fn a_value_the_command_sets_itself_is_never_said_to_be_replaced() {
    let home = common::home();
    let theirs = home.path().join("mine.json");
    let assign = format!("TLLM_AUTOTUNER_CACHE_PATH={}", theirs.display());
    let shell = format!("{assign} exec \"$@\"");
    for words in [
        vec!["env", assign.as_str()],
        vec!["sh", "-c", shell.as_str(), "sh"],
    ] {
        let _ = std::fs::remove_file(&theirs);
        let f = until_ready(&mut wrapped(home.path(), &words));
        assert!(served(&f), "{words:?}: {}", f.stderr);
        // the engine writes where the command says: keepwrap keeps nothing
        // and says why, never that it replaced the value
        assert_eq!(
            f.events("start")[0]["cache_path"],
            json!(theirs),
            "{words:?}: {:#?}",
            f.stdout
        );
        assert!(
            f.logged_with("supervising_only", json!({"reason": "engine_variable"})),
            "{words:?}: {}",
            f.stderr
        );
        assert!(
            !f.has_event("trtllm_cache_path_overridden"),
            "{words:?}: {}",
            f.stderr
        );
        assert!(!f.has_event("signed"), "{words:?}: {}", f.stderr);
        assert_eq!(f.code, 0, "{words:?}: {}", f.stderr);
    }
}

/// `keepwrap fingerprint -- trtllm-serve /models/fake ARGS` in layout F.
fn fingerprint(home: &Path, args: &[&str]) -> String {
    let mut cmd = kw_env(home, "F", &[]);
    cmd.args(["fingerprint", "--", "trtllm-serve", "/models/fake"])
        .args(args);
    let f = common::output(&mut cmd);
    assert_eq!(f.code, 0, "{args:?}: {}", f.stderr);
    f.stdout.join("\n")
}

#[test]
fn a_yaml_given_with_config_counts_by_its_bytes_and_may_set_the_world() {
    // `--config` is TensorRT-LLM's alias of `--extra_llm_api_options`
    // (PR 9104), the spelling its docs prefer
    let home = common::home();
    let yaml = home.path().join("serve.yaml");
    std::fs::write(&yaml, "tensor_parallel_size: 2\n").unwrap();
    let y = yaml.to_str().unwrap();
    let first = crate::trtllm::boot(home.path(), "F", &["--config", y], &[]);
    assert_eq!(
        first.tuned(),
        2 * crate::trtllm::SHAPES,
        "{:#?}",
        first.stdout
    );
    assert!(first.has_event("signed"), "{}", first.stderr);
    // the world is the YAML's: the two ranks' sections are whole
    let again = crate::trtllm::boot(home.path(), "F", &["--config", y], &[]);
    assert!(!again.has_event("trtllm_file_removed"), "{}", again.stderr);
    assert_eq!(again.tuned(), 0, "{:#?}", again.stdout);
    assert!(again.has_event("reused"), "{}", again.stderr);
    // the file's bytes count, not its path; either spelling is one launch
    let before = fingerprint(home.path(), &["--config", y]);
    assert_eq!(
        fingerprint(home.path(), &["--extra_llm_api_options", y]),
        before
    );
    std::fs::write(
        &yaml,
        "tensor_parallel_size: 2\nenable_attention_dp: true\n",
    )
    .unwrap();
    assert_ne!(fingerprint(home.path(), &["--config", y]), before);
    let dp = crate::trtllm::boot(home.path(), "F", &["--config", y], &[]);
    assert!(
        dp.logged_with("trtllm_attention_dp", json!({"file": yaml})),
        "{}",
        dp.stderr
    );
}

#[test]
fn attention_dp_turned_on_by_its_flag_is_told_how_to_start_cold_too() {
    // `--enable_attention_dp`, a switch of trtllm-serve since PR 12105
    let home = common::home();
    let f = crate::trtllm::boot(home.path(), "F", &["--enable_attention_dp"], &[]);
    assert!(served(&f), "{}", f.stderr);
    let w = f.events_named("trtllm_attention_dp_flag");
    assert_eq!(w.len(), 1, "{}", f.stderr);
    let msg = w[0]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--start-cold"), "{msg}");
    let off = crate::trtllm::boot(home.path(), "F", &[], &[]);
    assert!(!off.has_event("trtllm_attention_dp_flag"), "{}", off.stderr);
}

/// A shell string keepwrap cannot read that runs `trtllm-serve` wraps an
/// engine, as one that runs `python3`, `sglang` or `vllm` does: its exit 0
/// proves nothing of the engine's, so `--done auto` has no rule and says
/// which to give.
#[test]
fn an_unreadable_string_running_trtllm_serve_is_an_engine_whose_exit_proves_nothing() {
    let mut cmd = Command::new(common::BIN);
    let out = common::output(
        common::without_keepwrap_env(&mut cmd)
            .args(["config", "--json", "--", "sh", "-c"])
            .arg("for i in 1 2; do trtllm-serve /models/m; done"),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let cfg: serde_json::Value = serde_json::from_str(&out.stdout.join("\n")).unwrap();
    let done = cfg["done-for-command"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(
        done.starts_with(
            "an exit 0 of this launch would not prove the engine's (the shell string:"
        ),
        "{done}"
    );
}
