//! "Done" is the engine's own readiness, on the address the engine serves:
//! the host and port as the engine reads them (its `--config` file typed
//! as PyYAML types it, the port as Python's `int()` reads it), every
//! address of this host checked against the engine's process tree, HTTPS
//! servers probed over TLS, and a headless vLLM node that never guesses the
//! head's port.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// `port` written as YAML 1.1 and Python's `int()` both read it, with an
/// underscore: `3155_5` for 31555.
fn underscored(port: u16) -> String {
    format!("{}_{}", port / 10, port % 10)
}

/// Boot `cmd` until keepwrap signs (or the deadline), then stop it.
fn until_signed(cmd: &mut Command) -> Finished {
    let mut r = Running::spawn(cmd);
    r.wait_event("signed", T);
    r.guard.signal(Signal::SIGTERM);
    r.finish(T)
}

/// What the launch line says decides done.
fn done_line(f: &Finished) -> String {
    f.event("launch")["done"].as_str().unwrap().to_string()
}

/// The launch line names `/health` on loopback at `port`, and both rank
/// files were signed.
fn probed_and_signed(f: &Finished, port: u16) {
    let done = done_line(f);
    assert!(
        done.contains(&format!("GET http://127.0.0.1:{port}/health")),
        "{}",
        f.stderr
    );
    assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
}

/// `keepwrap KW -- python3 -m sglang.launch_server --model-path
/// /models/fake-moe --tune-ms 2 ARGS` (the fake engine as SGLang), its
/// cache in `home`.
fn kw_sglang(home: &Path, kw: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_DONE")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("PYTHONPATH", repo().join("tests/fixtures/engines"))
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args(kw)
        .args(["--", "python3", "-m", "sglang.launch_server"])
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(args);
    cmd
}

#[test]
fn an_sglang_config_files_host_and_port_are_probed_as_sglang_reads_them() {
    let h = home();
    let port = free_port();
    let cfg = h.path().join("serve.yaml");
    // the most common lines: an unquoted wildcard host, a port with a
    // digit separator (an int to PyYAML, 31555 to SGLang's argparse)
    std::fs::write(
        &cfg,
        format!("host: 0.0.0.0\nport: {}\ntp-size: 2\n", underscored(port)),
    )
    .unwrap();
    let f = until_signed(&mut kw_sglang(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--config", cfg.to_str().unwrap()],
    ));
    probed_and_signed(&f, port);
}

#[test]
fn an_sglang_port_with_a_digit_separator_on_the_command_line_is_probed() {
    let h = home();
    let port = free_port();
    let p = underscored(port);
    let f = until_signed(&mut kw_sglang(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--tp", "2", "--port", &p],
    ));
    probed_and_signed(&f, port);
}

#[test]
fn a_vllm_config_files_host_and_port_are_probed_as_vllm_reads_them() {
    let h = home();
    let port = free_port();
    let cfg = h.path().join("serve.yaml");
    std::fs::write(
        &cfg,
        format!(
            "host: 0.0.0.0\nport: {}\ntensor-parallel-size: 2\n",
            underscored(port)
        ),
    )
    .unwrap();
    let f = until_signed(&mut crate::vllm_e2e::kw_vllm(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--config", cfg.to_str().unwrap()],
        &[],
    ));
    probed_and_signed(&f, port);
}

/// A headless vLLM node serves nothing, and its launch does not say the
/// head's API port (it needs none): the head serving on another port than
/// 8000 must not leave the node unsigned (on every boot its ranks, and so
/// the whole cluster's, would tune again). It signs once its own rank file
/// has landed and is quiet, and a warm boot of both nodes tunes nothing.
#[test]
fn a_headless_vllm_node_without_a_port_signs_its_rank_files() {
    let tmp = home();
    let homes = [tmp.path().join("node0"), tmp.path().join("node1")];
    let port = free_port().to_string();
    let master = free_port().to_string();
    let boot = || {
        let start = |rank: usize| {
            let r = rank.to_string();
            let mut args = vec![
                "-tp",
                "2",
                "-ep",
                "--nnodes",
                "2",
                "--node-rank",
                &r,
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                &master,
            ];
            if rank == 0 {
                args.extend(["--port", &port]);
            } else {
                args.push("--headless");
            }
            Running::spawn(&mut crate::vllm_e2e::kw_vllm(
                &homes[rank],
                &["--probe-interval", "50ms"],
                &args,
                &[],
            ))
        };
        let mut nodes = [start(1), start(0)];
        for n in nodes.iter_mut() {
            wait_for("both nodes' outcome lines", T, || {
                n.log_events()
                    .iter()
                    .any(|e| ["signed", "reused"].contains(&e["event"].as_str().unwrap()))
                    .then_some(())
            });
        }
        for n in &nodes {
            n.guard.signal(Signal::SIGTERM);
        }
        let [headless, head] = nodes;
        [head.finish(T), headless.finish(T)]
    };
    let [head, headless] = boot();
    assert!(
        done_line(&headless).starts_with(
            "when this headless node's 1 rank files (autotune_configs_dp0_rank1.json) have landed"
        ),
        "{}",
        headless.stderr
    );
    for f in [&head, &headless] {
        assert!(f.logged_with("signed", json!({"files": 1})), "{}", f.stderr);
    }
    assert!(head.tuned() + headless.tuned() > 0);
    let [head, headless] = boot();
    for f in [&head, &headless] {
        assert!(f.logged_with("reused", json!({"files": 1})), "{}", f.stderr);
    }
    assert_eq!(head.tuned() + headless.tuned(), 0, "{}", headless.stderr);
}
