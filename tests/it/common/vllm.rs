//! keepwrap in front of the fake vLLM engine (`tests/fixtures/engines/fake_vllm.py`,
//! launched as `vllm serve MODEL ...` through `tests/fixtures/engines/bin/vllm`):
//! the commands, the outcome line a boot ends with, a two-node boot.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Finished, Running, BIN};
use nix::sys::signal::Signal;

pub const DEADLINE: Duration = Duration::from_secs(60);

/// The events that end a launch's tuning, one of which every boot logs
/// (or one of the `not_signing*`).
const OUTCOMES: [&str; 5] = [
    "signed",
    "reused",
    "nothing_to_keep",
    "nothing_signed",
    "keeps_nothing",
];

pub fn is_outcome(e: &serde_json::Value) -> bool {
    let name = e["code"].as_str().unwrap_or_default();
    OUTCOMES.contains(&name) || name.starts_with("not_signing")
}

/// `cmd` with nothing of the caller's vLLM, FlashInfer, fake or keepwrap
/// settings, HOME in `home`, and collectives that give up after 20 s.
pub fn hermetic_cmd(mut cmd: Command, home: &Path) -> Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if ["VLLM_", "FLASHINFER_", "FAKE_", "KEEPWRAP_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("XDG_CACHE_HOME")
        .env("HOME", home)
        .env("FAKE_DIST_TIMEOUT_S", "20");
    cmd
}

/// `keepwrap` ([`hermetic_cmd`]) with JSON logs and `vllm` on PATH.
pub fn hermetic(home: &Path) -> Command {
    let path = format!(
        "{}:{}",
        super::repo().join("tests/fixtures/engines/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = hermetic_cmd(Command::new(BIN), home);
    // the fake `vllm` package importable, as an installed one is: keepwrap
    // reads its version
    cmd.env("KEEPWRAP_LOG_FORMAT", "json")
        .env("PATH", path)
        .env("PYTHONPATH", super::repo().join("tests/fixtures/engines"));
    cmd
}

/// `keepwrap KW -- COMMAND` ([`hermetic`]) with `env` added.
pub fn kw_cmd(home: &Path, kw: &[&str], command: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = hermetic(home);
    cmd.args(kw)
        .arg("--")
        .args(command)
        .envs(env.iter().copied());
    cmd
}

/// `keepwrap KW -- vllm serve /models/fake-moe --tune-ms 2 ARGS`
pub fn kw_vllm(home: &Path, kw: &[&str], args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = vec!["vllm", "serve", "/models/fake-moe", "--tune-ms", "2"];
    command.extend_from_slice(args);
    kw_cmd(home, kw, &command, env)
}

/// Wait for keepwrap's outcome line, then stop the launch with TERM.
pub fn until_outcome(r: Running) -> Finished {
    super::wait_for("keepwrap's outcome line", DEADLINE, || {
        r.log_events().iter().any(is_outcome).then_some(())
    });
    r.guard.signal(Signal::SIGTERM);
    r.finish(DEADLINE)
}

/// A boot that keepwrap only supervises, which logs no outcome: wait for
/// the engine's `ready`, then stop the launch with TERM.
pub fn until_ready(mut r: Running) -> Finished {
    r.wait_stdout("the engine's ready line", DEADLINE, |l| {
        serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["event"] == "ready")
    });
    r.guard.signal(Signal::SIGTERM);
    r.finish(DEADLINE)
}

/// One boot of a two-node launch: node 1 (headless, started first) and
/// node 0, each `kw_vllm(homes[rank], kw, args(rank))`. Waits for both
/// outcome lines (both nodes' stderr in the failure when one never comes),
/// then stops both with TERM. `[head, headless]`.
pub fn two_nodes(
    homes: &[PathBuf; 2],
    kw: &[&str],
    args: impl Fn(usize) -> Vec<String>,
) -> [Finished; 2] {
    let start = |rank: usize| {
        let args = args(rank);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Running::spawn(&mut kw_vllm(&homes[rank], kw, &args, &[]))
    };
    let nodes = [start(1), start(0)];
    let deadline = Instant::now() + DEADLINE;
    while !nodes.iter().all(|n| n.log_events().iter().any(is_outcome)) {
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for both nodes' outcome lines\nheadless node:\n{}\nhead:\n{}",
            nodes[0].stderr(),
            nodes[1].stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for n in &nodes {
        n.guard.signal(Signal::SIGTERM);
    }
    let [headless, head] = nodes;
    [head.finish(DEADLINE), headless.finish(DEADLINE)]
}
