//! Never a partial hit in the launch shapes people write: a launch behind
//! launcher prefixes (`numactl`, `nice`, `taskset`, `chrt`, `ionice`,
//! `stdbuf`, `timeout`, `setpriv`, `env` with options, NVIDIA's image
//! entrypoint) or inside a shell string of simple commands is read whole
//! and fingerprinted like the plain launch; one that cannot be read whole is
//! only supervised, with one line saying why; a wrapper whose exit status is
//! not the engine's never makes an exit 0 count as done.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const DEADLINE: Duration = Duration::from_secs(60);
const CFG: &str = "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 7168}";
const BASE: &str = "python3 -m sglang.launch_server --model-path model --config c.yaml";

fn w(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// `keepwrap fingerprint -- argv` in a directory holding `model/config.json`
/// and `files`, with only PATH, HOME and `env` in the environment.
fn fp(argv: &[String], env: &[(&str, &str)], files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (p, c) in [("model/config.json", CFG)].iter().chain(files) {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .envs(env.iter().copied())
        .arg("fingerprint")
        .arg("--")
        .args(argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

const C1: &str = "chunked-prefill-size: 4096\n";
const C2: &str = "chunked-prefill-size: 8192\n";

#[test]
fn every_launcher_prefix_is_fingerprinted_like_the_plain_launch() {
    let plain = fp(&w(BASE), &[], &[("c.yaml", C1)]);
    let edited = fp(&w(BASE), &[], &[("c.yaml", C2)]);
    assert_ne!(plain, edited);
    for prefix in [
        "numactl --cpunodebind=0",
        "numactl -N 0 --membind 0",
        "numactl -N0 -m0",
        "numactl --physcpubind=0-3 --localalloc",
        "numactl -i all",
        "numactl --interleave=0,1 --",
        "nice",
        "nice -n 5",
        "nice -n5",
        "nice -10",
        "nice --adjustment=5",
        "taskset -c 0-3",
        "taskset 0xf",
        "chrt -f 10",
        "chrt --rr 10",
        "ionice -c2 -n0",
        "ionice -c 3",
        "stdbuf -oL -eL",
        "timeout 1h",
        "timeout -k 10 --signal=TERM 3600",
        "setpriv --no-new-privs --reuid=1000 --init-groups",
        "env -u NOT_SET",
        "env --",
        "/opt/nvidia/nvidia_entrypoint.sh",
        "nvidia_entrypoint.sh",
        // nested
        "numactl --cpunodebind=0 nice -n 5 env A=1",
        "/opt/nvidia/nvidia_entrypoint.sh numactl -N 0 --membind=0 taskset -c 0-7 stdbuf -oL",
        "timeout 1d ionice -c2 -n0 chrt --rr 5 setpriv --no-new-privs env",
    ] {
        let argv = w(&format!("{prefix} {BASE}"));
        assert_eq!(
            fp(&argv, &[], &[("c.yaml", C1)]),
            plain,
            "{prefix}: the plain launch's fingerprint"
        );
        assert_eq!(
            fp(&argv, &[], &[("c.yaml", C2)]),
            edited,
            "{prefix}: an edit of the config file counts"
        );
    }
}

#[test]
fn env_options_change_what_the_fingerprint_sees() {
    let c = [("c.yaml", C1)];
    let only_a = fp(&w(BASE), &[("SGLANG_A", "1")], &c);
    let a_and_b = fp(&w(BASE), &[("SGLANG_A", "1"), ("SGLANG_B", "2")], &c);
    assert_ne!(only_a, a_and_b);
    // env -i: the engine's environment is only the assignments
    let cleared = w(&format!("env -i PATH=/usr/bin:/bin SGLANG_A=1 {BASE}"));
    assert_eq!(fp(&cleared, &[("SGLANG_B", "2")], &c), only_a);
    let cleared = w(&format!("env - SGLANG_A=1 {BASE}"));
    assert_eq!(
        fp(&cleared, &[("SGLANG_A", "9"), ("SGLANG_B", "2")], &c),
        only_a
    );
    // env -u NAME: taken out
    let unset = w(&format!("env -u SGLANG_B {BASE}"));
    assert_eq!(
        fp(&unset, &[("SGLANG_A", "1"), ("SGLANG_B", "2")], &c),
        only_a
    );
    let unset = w(&format!("env --unset=SGLANG_B SGLANG_A=1 {BASE}"));
    assert_eq!(fp(&unset, &[("SGLANG_B", "2")], &c), only_a);
    // env -C DIR: relative paths resolve there
    let chdir = w(&format!("env -C sub {BASE}"));
    let in_sub = [
        ("c.yaml", C2),
        ("sub/c.yaml", C1),
        ("sub/model/config.json", CFG),
    ];
    assert_eq!(fp(&chdir, &[], &in_sub), fp(&w(BASE), &[], &c));
    let other_model = [("sub/c.yaml", C1), ("sub/model/config.json", "{}")];
    assert_ne!(fp(&chdir, &[], &other_model), fp(&w(BASE), &[], &c));
}

/// `SHELL -c SCRIPT`
fn sh(shell: &str, script: &str) -> Vec<String> {
    vec![shell.into(), "-c".into(), script.into()]
}

#[test]
fn a_shell_string_of_simple_commands_then_exec_is_the_plain_launch() {
    let c = [("c.yaml", C1)];
    let plain = fp(&w(&format!("{BASE} --port 8000")), &[], &c);
    for script in [
        "ulimit -n 65536; exec python3 -m sglang.launch_server --model-path model --config c.yaml --port $PORT",
        "set -e\nulimit -n 65536 -l unlimited\n# the server\nexec python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000\n",
        "set -eux -o pipefail; : ; echo starting && exec python3 -m sglang.launch_server --model-path model --config c.yaml --port \"${PORT}\"",
        "P=8000; exec python3 -m sglang.launch_server --model-path model --config c.yaml --port $P",
        "ulimit -n 1; exec numactl -N 0 python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000",
    ] {
        for shell in ["bash", "sh"] {
            assert_eq!(
                fp(&sh(shell, script), &[("PORT", "8000")], &c),
                plain,
                "{shell} -c {script:?}"
            );
        }
    }
    // export becomes the engine's environment, cd its working directory
    let with_a = fp(&w(&format!("{BASE} --port 8000")), &[("SGLANG_A", "1")], &c);
    let in_sub = [
        ("c.yaml", C2),
        ("sub/c.yaml", C1),
        ("sub/model/config.json", CFG),
    ];
    for (script, env) in [
        (
            "export SGLANG_A=1; cd sub; exec python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000",
            &[][..],
        ),
        (
            "cd sub && export SGLANG_A\nexec python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000",
            &[("SGLANG_A", "1")],
        ),
        (
            // a variable of the environment assigned anew is exported anew
            "SGLANG_A=1; cd ./sub; exec python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000",
            &[("SGLANG_A", "0")],
        ),
    ] {
        assert_eq!(fp(&sh("bash", script), env, &in_sub), with_a, "bash -c {script:?}");
    }
    // a variable the string exports and uses
    let cps = fp(
        &w(&format!("{BASE} --port 8000 --chunked-prefill-size 1024")),
        &[],
        &c,
    );
    let script = "export CPS=1024; exec python3 -m sglang.launch_server --model-path model --config c.yaml --port 8000 --chunked-prefill-size $CPS";
    assert_eq!(fp(&sh("bash", script), &[("CPS", "8192")], &c), cps);
}

/// bash sources BASH_ENV and takes functions from the environment, even
/// one named `exec`: a string it runs with them is not the launch it says.
#[test]
fn a_shell_string_under_bash_env_or_exported_functions_is_not_read() {
    let c = [("c.yaml", C1)];
    let plain = fp(&w(&format!("{BASE} --port 8000")), &[], &c);
    let script = format!("exec {BASE} --port 8000");
    assert_eq!(fp(&sh("bash", &script), &[], &c), plain);
    for env in [
        ("BASH_ENV", "/dev/null"),
        ("BASH_FUNC_exec%%", "() { builtin exec python3 bench.py; }"),
        ("BASH_FUNC_python3%%", "() { echo; }"),
        ("SHELLOPTS", "xtrace"),
        ("BASHOPTS", "expand_aliases"),
    ] {
        assert_ne!(fp(&sh("bash", &script), &[env], &c), plain, "{env:?}");
    }
}

#[test]
fn a_shell_string_it_cannot_read_counts_the_variables_it_names() {
    let script = "python3 -m sglang.launch_server --model-path model --chunked-prefill-size $CPS --port 8000 | tee /dev/null";
    let a = fp(&sh("bash", script), &[("CPS", "1024")], &[]);
    let b = fp(&sh("bash", script), &[("CPS", "8192")], &[]);
    assert_ne!(a, b, "CPS=1024 and CPS=8192 are two launches");
    let script = "python3 -m sglang.launch_server --model-path model --chunked-prefill-size ${CPS:-1024} || exit 1";
    let a = fp(&sh("sh", script), &[("CPS", "1024")], &[]);
    let b = fp(&sh("sh", script), &[("CPS", "8192")], &[]);
    assert_ne!(a, b, "${{CPS:-1024}}");
}

#[test]
fn a_vllm_server_behind_a_prefix_gets_the_vllm_profile() {
    let explain = |argv: &[String]| {
        let out = Command::new(BIN)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(["fingerprint", "--explain", "--"])
            .args(argv)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = explain(&w("vllm serve /models/m --tensor-parallel-size 2"));
    for prefix in [
        "numactl --cpunodebind=0",
        "nice -n 5 taskset -c 0-3",
        "env -u X",
    ] {
        let got = explain(&w(&format!(
            "{prefix} vllm serve /models/m --tensor-parallel-size 2"
        )));
        assert!(got.starts_with("profile vllm\n"), "{prefix}: {got}");
        assert_eq!(got.lines().last(), plain.lines().last(), "{prefix}");
    }
}

/// A stand-in `numactl` in `dir` that skips the options it is given and
/// execs the rest (keepwrap reads the options; this one only has to run).
fn fake_numactl(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("numactl");
    std::fs::write(
        &path,
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in --*=*|-l|--localalloc|--bogus) shift;; -N|-m|-C|-i|--cpunodebind|--membind) shift 2;; --) shift; break;; *) break;; esac; done\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// keepwrap with the cache under `home`, the fake engine importable as
/// `sglang`, `bin` first on PATH, run in `cwd`.
fn kw(home: &Path, cwd: &Path, bin: &Path) -> Command {
    let mut cmd = crate::fingerprint_e2e::kw(home, cwd);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap());
    cmd
}

/// Run a server launch until keepwrap has signed or reused its cache, then
/// stop it with TERM and collect everything.
fn serve(mut cmd: Command) -> Finished {
    let mut run = Running::spawn(&mut cmd);
    run.wait_event("tuning_done", DEADLINE);
    wait_for("the signing event", DEADLINE, || {
        run.log_events()
            .iter()
            .any(|e| ["signed", "reused"].contains(&e["code"].as_str().unwrap()))
            .then_some(())
    });
    run.guard.signal(Signal::SIGTERM);
    run.finish(DEADLINE)
}

#[test]
fn numactl_before_the_server_keeps_and_an_edited_config_retunes() {
    let t = tempfile::tempdir().unwrap();
    let (home, cwd, bin) = (
        t.path().join("home"),
        t.path().join("w"),
        t.path().join("bin"),
    );
    std::fs::create_dir_all(&cwd).unwrap();
    fake_numactl(&bin);
    let port = free_port().to_string();
    let write = |chunk: u32| {
        std::fs::write(
            cwd.join("c.yaml"),
            format!("model-path: /models/fake-moe\ntp-size: 2\nchunked-prefill-size: {chunk}\nport: {port}\n"),
        )
        .unwrap()
    };
    let prefixed = ["numactl", "--cpunodebind=0", "-m", "0"];
    let server = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--config",
        "c.yaml",
    ];
    let run = |argv: &[&str]| {
        let mut cmd = kw(&home, &cwd, &bin);
        cmd.arg("--").args(argv);
        serve(cmd)
    };
    write(256);
    let first = run(&[&prefixed[..], &server].concat());
    assert!(first.tuned() > 0, "{}", first.stderr);
    assert!(
        first.probes_port(&port),
        "the port from the config file is probed: {}",
        first.stderr
    );
    write(512);
    let edited = run(&[&prefixed[..], &server].concat());
    assert!(
        edited.tuned() > 0,
        "an edited config file re-tunes: {}",
        edited.stderr
    );
    assert_eq!(edited.hit(), 0, "no partial hit: {}", edited.stderr);
    // and the plain launch reuses what the prefixed one signed
    let plain = run(&server);
    assert_eq!(plain.tuned(), 0, "{}", plain.stderr);
    assert!(plain.has_event("reused"), "{}", plain.stderr);
}

#[test]
fn a_chart_shell_string_is_kept_probed_on_its_port_and_reused_plainly() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let port = free_port().to_string();
    let script = "ulimit -n 4096; export SGLANG_A=1; exec python3 -m sglang.launch_server --model-path /models/fake-moe --tp 2 --port $PORT";
    let mut cmd = kw(&home, t.path(), t.path());
    cmd.env("PORT", &port).args(["--", "bash", "-c", script]);
    let first = serve(cmd);
    assert!(first.tuned() > 0, "{}", first.stderr);
    assert!(first.probes_port(&port), "{}", first.stderr);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let port2 = free_port().to_string();
    let mut cmd = kw(&home, t.path(), t.path());
    cmd.env("SGLANG_A", "1")
        .args(["--", "python3", "-m", "sglang.launch_server"])
        .args([
            "--model-path",
            "/models/fake-moe",
            "--tp",
            "2",
            "--port",
            &port2,
        ]);
    let plain = serve(cmd);
    assert_eq!(plain.tuned(), 0, "{}", plain.stderr);
    assert!(plain.has_event("reused"), "{}", plain.stderr);
}

/// The fake engine, offline, one rank crashing mid-tune, inside `script`
/// (`{}` is the engine command).
fn crashing(script: &str) -> Vec<String> {
    let engine = format!(
        "python3 {} --model-path /models/fake-moe --tune-ms 2 --offline --crash 0:extend",
        fake_engine().display()
    );
    sh("sh", &script.replace("{}", &engine))
}

#[test]
fn a_wrapper_that_hides_the_engines_exit_never_signs_a_crash() {
    for script in ["{} || true", "{}; exit 0", "{} | cat"] {
        // the default rule, then an explicit quiet window the crash ends early
        for keep in ["auto", "always", "always --done quiet=30s"] {
            let t = tempfile::tempdir().unwrap();
            let home = t.path().join("home");
            let out = boot(
                kw(&home, t.path(), t.path())
                    .arg("--keep")
                    .args(keep.split(' '))
                    .arg("--")
                    .args(crashing(script)),
            );
            assert_eq!(
                out.code, 0,
                "the wrapper's status passes through: {}",
                out.stderr
            );
            assert!(
                !out.has_event("signed"),
                "{script} --keep {keep}: {}",
                out.stderr
            );
            assert!(
                sidecars(&cache_root(&home)).is_empty(),
                "{script}: {}",
                out.stderr
            );
            let said = match keep {
                "auto" => out.has_event("unreadable_launch"),
                "always" => out.has_event("done_rule_unusable"),
                _ => out.has_event("not_signing_exit_unproven"),
            };
            assert!(
                said,
                "{script} --keep {keep}: one line says why: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn a_launch_it_cannot_read_whole_is_pruned_with_one_line_and_never_signed() {
    let t = tempfile::tempdir().unwrap();
    let (home, bin) = (t.path().join("home"), t.path().join("bin"));
    fake_numactl(&bin);
    for (argv, names) in [
        (w("numactl --bogus python3 -m sglang.launch_server --model-path /models/fake-moe --offline"), "numactl: an option keepwrap does not read ('--bogus')"),
        (w("numactl --cpunode=0 python3 -m sglang.launch_server --model-path /models/fake-moe --offline"), "numactl: an option keepwrap does not read ('--cpunode=...')"),
        (sh("sh", "python3 -m sglang.launch_server --model-path /models/fake-moe --offline || exit 1"), "the shell string: a shell operator"),
        (sh("bash", "ulimit -n 4096; python3 -m sglang.launch_server --model-path /models/fake-moe --offline"), "no exec of it"),
        (sh("bash", "source /dev/null; exec python3 -m sglang.launch_server --model-path /models/fake-moe --offline"), "a command before the engine"),
        (sh("bash", "cd /nonexistent-dir; exec python3 -m sglang.launch_server --model-path /models/fake-moe --offline"), "which is no directory"),
    ] {
        let out = boot(kw(&home, t.path(), &bin).args(["--done", "exit", "--"]).args(&argv));
        assert_eq!(out.code, 0, "{argv:?}: {}", out.stderr);
        let line = out.event("unreadable_launch");
        let m = line["message"].as_str().unwrap();
        assert!(m.contains(names) && m.contains("nothing is signed"), "{argv:?}: {m}");
        assert!(!out.has_event("supervising_only"), "{argv:?}: {}", out.stderr);
        // what the launch before tuned was never signed: removed, not loaded
        assert_eq!(out.hit(), 0, "{argv:?}: {}", out.stderr);
        assert!(out.tuned() > 0, "{argv:?}: {}", out.stderr);
        assert!(sidecars(&cache_root(&home)).is_empty(), "{argv:?}: {}", out.stderr);
    }
}

#[test]
fn timeout_preserve_status_proves_no_exit_and_plain_timeout_does() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let engine = format!(
        "python3 {} --model-path /models/fake-moe --tp 2 --tune-ms 2 --offline",
        fake_engine().display()
    );
    for (prefix, signed) in [
        ("timeout --preserve-status 60", false),
        ("timeout 60", true),
    ] {
        let out = boot(
            kw(&home, t.path(), t.path())
                .arg("--")
                .args(w(&format!("{prefix} {engine}"))),
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(out.has_event("signed"), signed, "{prefix}: {}", out.stderr);
        assert_eq!(
            out.has_event("done_rule_unusable"),
            !signed,
            "{prefix}: {}",
            out.stderr
        );
    }
}
