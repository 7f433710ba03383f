//! The launch fingerprint end to end, with the fake engine started as users
//! start SGLang (`python3 -m sglang.launch_server`, a `--config` file, an
//! `sh -c` wrapper): what it means decides what is reused, and a command that
//! is no engine leaves the cache root alone.

use crate::common;
use serde_json::json;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const DEADLINE: Duration = Duration::from_secs(60);

/// A TCP port nothing listens on right now.
/// keepwrap with the cache under `home`, the fake engine importable as
/// `sglang`, run in `cwd`.
pub(crate) fn kw(home: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(cwd)
        .env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_KEEP")
        .env_remove("KEEPWRAP_DONE")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("PYTHONPATH", repo().join("tests/fixtures/engines"))
        .env("FAKE_DIST_TIMEOUT_S", "20");
    cmd
}

/// Run a server launch until keepwrap has signed its cache, then stop it
/// with TERM (forwarded to the engine) and collect everything.
fn serve(home: &Path, cwd: &Path, command: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut cmd = kw(home, cwd);
    cmd.envs(env.iter().copied()).arg("--").args(command);
    let mut run = Running::spawn(&mut cmd);
    run.wait_event("tuning_done", DEADLINE);
    wait_for("the signing event", DEADLINE, || {
        run.log_events()
            .iter()
            .any(|e| {
                ["signed", "reused", "nothing_to_keep", "nothing_signed"]
                    .contains(&e["code"].as_str().unwrap())
            })
            .then_some(())
    });
    run.guard.signal(Signal::SIGTERM);
    run.finish(DEADLINE)
}

fn server(args: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["python3", "-m", "sglang.launch_server"];
    v.extend_from_slice(args);
    v
}

#[test]
fn editing_the_config_file_retunes_and_an_unchanged_one_reuses() {
    let t = tempfile::tempdir().unwrap();
    let (home, cwd) = (t.path().join("home"), t.path().join("work"));
    std::fs::create_dir_all(&cwd).unwrap();
    let port = free_port().to_string();
    let cfg = cwd.join("serve.yaml");
    let write = |chunk: u32| {
        std::fs::write(
            &cfg,
            format!("# the deployment\nmodel-path: /models/fake-moe\ntp-size: 2\nchunked-prefill-size: {chunk}\nport: {port}\n"),
        )
        .unwrap()
    };
    let argv = server(&["--config", "serve.yaml"]);

    write(256);
    let first = serve(&home, &cwd, &argv, &[]);
    assert!(first.tuned() > 0, "{}", first.stderr);
    assert!(
        first.probes_port(&port),
        "the port from the config file is probed: {}",
        first.stderr
    );

    let same = serve(&home, &cwd, &argv, &[]);
    assert_eq!(same.tuned(), 0, "{}", same.stderr);
    assert!(same.hit() > 0);
    assert!(same.has_event("reused"), "{}", same.stderr);

    write(512);
    let edited = serve(&home, &cwd, &argv, &[]);
    assert!(
        edited.tuned() > 0,
        "an edited config file re-tunes: {}",
        edited.stderr
    );
    assert_eq!(edited.hit(), 0, "no partial hit: {}", edited.stderr);
    assert!(
        edited.logged_with(
            "no_cache",
            json!({"differences": ["arg --chunked-prefill-size 256 -> 512"]})
        ),
        "{}",
        edited.stderr
    );
}

#[test]
fn reordering_and_respelling_flags_reuses() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let port = free_port().to_string();
    let port: &'static str = Box::leak(port.into_boxed_str());
    let a = serve(
        &home,
        t.path(),
        &server(&[
            "--model-path",
            "/models/fake-moe",
            "--tp",
            "2",
            "--chunked-prefill-size",
            "256",
            "--port",
            port,
        ]),
        &[],
    );
    assert!(a.tuned() > 0, "{}", a.stderr);
    let b = serve(
        &home,
        t.path(),
        &[
            "/usr/bin/env",
            "python3",
            "-m",
            "sglang.launch_server",
            "--port",
            port,
            "--chunked-prefill-size=256",
            "--tensor-parallel-size=2",
            "--model",
            "/models/fake-moe",
        ],
        &[],
    );
    // through `env`, reordered and respelled: the same launch
    assert_eq!(b.tuned(), 0, "{}", b.stderr);
    assert!(b.has_event("reused"), "{}", b.stderr);
    let c = serve(
        &home,
        t.path(),
        &server(&[
            "--port",
            port,
            "--chunked-prefill-size=256",
            "--tensor-parallel-size=2",
            "--model",
            "/models/fake-moe",
        ]),
        &[],
    );
    assert_eq!(c.tuned(), 0, "a reordering reuses: {}", c.stderr);
    assert!(c.hit() > 0);
    assert!(c.has_event("reused"), "{}", c.stderr);

    // `explain` compares canonical forms: a reordering is no difference,
    // a changed value is named.
    let explain = |args: &[&str]| {
        let out = kw(&home, t.path())
            .args(["explain", "--"])
            .args(server(&[]))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let same = explain(&[
        "--tp",
        "2",
        "--model",
        "/models/fake-moe",
        "--chunked-prefill-size",
        "256",
    ]);
    assert!(same.contains("): signed "), "{same}");
    let other = explain(&[
        "--tp=4",
        "--model",
        "/models/fake-moe",
        "--chunked-prefill-size",
        "256",
    ]);
    assert!(other.contains("never signed"), "{other}");
    assert!(
        other.contains("differs in: arg --tp-size 2 -> 4\n"),
        "{other}"
    );
    assert!(!other.contains("nothing visible"), "{other}");
}

#[test]
fn an_sh_c_wrapper_is_done_at_the_first_200_on_the_port_from_its_variable() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let port = free_port().to_string();
    let script =
        "exec python3 -m sglang.launch_server --model-path /models/fake-moe --tp 2 --port $PORT";
    let run = serve(&home, t.path(), &["sh", "-c", script], &[("PORT", &port)]);
    let url = format!("http://127.0.0.1:{port}/health");
    let want = format!("when GET {url} first answers 200");
    assert!(
        run.logged_with("launch", json!({"done": want})),
        "{}",
        run.stderr
    );
    assert!(
        run.logged_with("tuning_done", json!({"rule": "health", "url": url})),
        "{}",
        run.stderr
    );
    assert!(run.has_event("signed"), "{}", run.stderr);
    assert!(run.tuned() > 0);

    // The same launch written directly reuses what the wrapper signed.
    let port2 = free_port().to_string();
    let direct = serve(
        &home,
        t.path(),
        &server(&["--model-path", "/models/fake-moe", "--tp", "2", "--port"])
            .into_iter()
            .chain([port2.as_str()])
            .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(direct.tuned(), 0, "{}", direct.stderr);
    assert!(direct.has_event("reused"), "{}", direct.stderr);

    // A string it cannot read: pruned, nothing signed (--keep auto), one
    // line says why; --keep always fingerprints it as written, and no exit
    // 0 of a pipeline proves the engine's.
    let piped = boot(kw(&home, t.path()).args(["--", "sh", "-c", "python3 -c pass | cat"]));
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    assert!(
        piped.events_named("unreadable_launch").iter().any(|e| {
            let m = e["message"].as_str().unwrap();
            m.contains("cannot read whole (the shell string: a shell operator")
        }),
        "{}",
        piped.stderr
    );
    let always = boot(kw(&home, t.path()).args([
        "--keep",
        "always",
        "--",
        "sh",
        "-c",
        "python3 -c pass | cat",
    ]));
    assert_eq!(always.code, 0, "{}", always.stderr);
    assert!(
        always
            .events_named("launch_warning")
            .iter()
            .any(|e| e["message"].as_str().unwrap().starts_with(
                "the launch cannot be read whole (the shell string: a shell operator"
            )),
        "{}",
        always.stderr
    );
    assert!(always.has_event("done_rule_unusable"), "{}", always.stderr);
}

/// Every entry under `root`: type, mode, size, mtime and content.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u32, i64, i64, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (u32, i64, i64, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let content = if md.is_file() {
                std::fs::read(&p).unwrap()
            } else if md.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                Vec::new()
            };
            out.insert(
                p.strip_prefix(root).unwrap().to_path_buf(),
                (md.mode(), md.mtime(), md.mtime_nsec(), content),
            );
            if md.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    let md = std::fs::metadata(root).unwrap();
    out.insert(
        PathBuf::new(),
        (md.mode(), md.mtime(), md.mtime_nsec(), Vec::new()),
    );
    walk(root, root, &mut out);
    out
}

#[test]
fn a_command_that_is_no_engine_leaves_the_root_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    // A signed set of an engine launch.
    let engine = boot(&mut keepwrap_engine(
        &home,
        &[],
        &["--tp", "2", "--offline"],
    ));
    assert_eq!(engine.code, 0, "{}", engine.stderr);
    assert!(engine.has_event("signed"), "{}", engine.stderr);
    let root = cache_root(&home);
    let before = snapshot(&root);
    assert!(before.len() > 3);

    for command in [
        &["bash", "-c", "true"][..],
        &["bash"],
        &["sh", "-c", "exit 0"],
        &["sleep", "0.01"],
        &["sh", "-c", "SGLANG_X=1 exec sleep 0"],
    ] {
        let out = kw(&home, t.path())
            .args(["--keep", "auto", "--"])
            .args(command)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command:?}: {err}");
        // Two events: supervising only, as no engine launch, then how
        // the command ended.
        let events = common::log_events(&err);
        assert_eq!(events.len(), 2, "two lines: {err}");
        assert_eq!(
            (&events[1]["code"], &events[1]["status"]),
            (&"command_ended".into(), &0.into()),
            "{command:?}: {err}"
        );
        assert_eq!(
            (&events[0]["code"], &events[0]["reason"]),
            (&"supervising_only".into(), &"not_an_engine".into()),
            "{command:?}: {err}"
        );
        assert!(
            events[0]["message"]
                .as_str()
                .unwrap()
                .contains("is no engine launch (--keep auto): supervising only"),
            "{command:?}: {err}"
        );
        assert_eq!(snapshot(&root), before, "{command:?} touched the root");
    }
    // --keep never too; --keep always keeps it (and moves the other
    // launch's set into the store), which is what auto spares a debug shell.
    let out = kw(&home, t.path())
        .args(["--keep", "never", "--", "bash", "-c", "true"])
        .output()
        .unwrap();
    let events = common::log_events(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["reason"], "keep_never");
    assert_eq!(events[1]["code"], "command_ended");
    assert_eq!(snapshot(&root), before);
    let out = kw(&home, t.path())
        .env("KEEPWRAP_KEEP", "always")
        .args(["--", "bash", "-c", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_ne!(snapshot(&root), before);
}

#[test]
fn offline_engine_scripts_are_kept() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let run = boot(kw(&home, t.path()).args([
        "--",
        "python3",
        "-m",
        "sglang.bench_one_batch",
        "--model-path",
        "/models/fake-moe",
        "--tp",
        "2",
    ]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.has_event("signed"), "{}", run.stderr);
    assert!(
        run.logged_with("launch", json!({"done": "when the command exits 0"})),
        "{}",
        run.stderr
    );
}
