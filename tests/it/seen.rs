//! The engine that actually runs: a launch whose engine keepwrap does not
//! exec itself (a login shell, NVIDIA's entrypoint and its hooks, a shell
//! that sources a file) is checked against what its engine got, read from
//! `/proc` once it runs. Driven with the fake engine tagging each tactic
//! with the settings it was tuned under (`FAKE_TAG_SETTINGS=1`): the engine
//! loads nothing tuned under other settings, an input only the running
//! engine shows costs one boot per change, a launch that goes back
//! restores its set, and the unchanged launch is reused.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The engine, offline (its exit is done), with a weight-loading pause so
/// that keepwrap sees it before it reaches its cache, as it does a real one.
fn engine_words() -> String {
    engine_words_with(&python())
}

fn engine_words_with(python: &str) -> String {
    format!(
        "{python} -m sglang.launch_server --model-path /models/fake-moe --tp 2 --offline --tune-ms 2 --load-ms 400"
    )
}

/// The interpreter by its absolute path: a login profile may set PATH.
pub(crate) fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// keepwrap around `argv` in `cwd`, with HOME at `home` (the cache under
/// it), the fake engine importable as `sglang`, tactics tagged.
fn kw(home: &Path, cwd: &Path, argv: &[String]) -> Command {
    let mut cmd = crate::fingerprint_e2e::kw(home, cwd);
    cmd.env("HOME", home)
        .env("FAKE_TAG_SETTINGS", "1")
        .args(["--done", "exit", "--"])
        .args(argv);
    cmd
}

/// The settings each pass ran under, and those of the tactics it loaded:
/// panics when a pass loaded a tactic tuned under other settings.
pub(crate) fn loaded_only_own(out: &Finished) {
    let passes = out.events("pass");
    assert!(!passes.is_empty(), "{}", out.stderr);
    for p in passes {
        let own = p["settings"].as_str().unwrap();
        for tag in p["loaded_under"].as_array().unwrap() {
            assert_eq!(
                tag.as_str().unwrap(),
                own,
                "rank {} loaded tactics tuned under other settings: {p}\n{}",
                p["rank"],
                out.stderr
            );
        }
    }
}

/// One boot: it exits 0 and loads nothing tuned under other settings.
fn run(home: &Path, cwd: &Path, argv: &[String]) -> Finished {
    run_cmd(&mut kw(home, cwd, argv))
}

pub(crate) fn run_cmd(cmd: &mut Command) -> Finished {
    let out = boot(cmd);
    assert_eq!(out.code, 0, "{}", out.stderr);
    loaded_only_own(&out);
    out
}

fn differs(out: &Finished) -> Vec<String> {
    out.events_named("engine_differs")
        .iter()
        .flat_map(|e| e["differences"].as_array().cloned().unwrap_or_default())
        .map(|d| d.as_str().unwrap().to_string())
        .collect()
}

/// Boots of `argv` while `set(value)` changes an input the words do not
/// show: each change costs one boot (tuned, signed, the line that names
/// `name` and says `source`); the same input again is reused; going back
/// restores the set of the first value.
fn one_boot_per_change(
    home: &Path,
    cwd: &Path,
    argv: &[String],
    set: &dyn Fn(&str),
    name: &str,
    source: &str,
) {
    one_boot_per_change_with(&|| kw(home, cwd, argv), set, name, source);
}

/// [`one_boot_per_change`] of the launch `cmd` gives.
fn one_boot_per_change_with(
    cmd: &dyn Fn() -> Command,
    set: &dyn Fn(&str),
    name: &str,
    source: &str,
) {
    let run = || run_cmd(&mut cmd());
    set("a");
    let first = run();
    assert!(first.tuned() > 0, "{}", first.stderr);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let again = run();
    assert_eq!(
        again.tuned(),
        0,
        "the unchanged launch reuses: {}",
        again.stderr
    );
    assert!(again.has_event("reused"), "{}", again.stderr);
    assert!(!again.has_event("engine_differs"), "{}", again.stderr);

    set("b");
    let changed = run();
    assert_eq!(
        changed.hit(),
        0,
        "nothing tuned under a: {}",
        changed.stderr
    );
    assert!(changed.tuned() > 0, "{}", changed.stderr);
    assert!(changed.has_event("signed"), "{}", changed.stderr);
    let d = differs(&changed);
    assert!(
        d.iter().any(|d| d.contains(name)),
        "the line names {name}: {d:?}\n{}",
        changed.stderr
    );
    let line = changed.event("engine_differs");
    assert!(line["message"].as_str().unwrap().contains(source), "{line}");
    let after = run();
    assert_eq!(after.tuned(), 0, "one boot per change: {}", after.stderr);
    assert!(after.has_event("reused"), "{}", after.stderr);

    set("a");
    let back = run();
    assert_eq!(
        back.tuned(),
        0,
        "going back restores a's set: {}",
        back.stderr
    );
    assert!(back.hit() > 0, "{}", back.stderr);
    assert!(back.has_event("restored"), "{}", back.stderr);
}

#[test]
fn a_login_shells_profile_costs_one_boot_per_change() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().to_path_buf();
    let profile = home.join(".bash_profile");
    let set = |v: &str| std::fs::write(&profile, format!("export SGLANG_HIDDEN={v}\n")).unwrap();
    let argv = vec![
        "bash".to_string(),
        "-lc".to_string(),
        format!("exec {}", engine_words()),
    ];
    one_boot_per_change(
        &home,
        t.path(),
        &argv,
        &set,
        "SGLANG_HIDDEN",
        "login shell's profile",
    );
}

/// A stand-in for NVIDIA's `/opt/nvidia/nvidia_entrypoint.sh`: it sources
/// every `entrypoint.d/*.sh` beside it, then execs its arguments.
fn nvidia_entrypoint(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.join("opt/nvidia");
    std::fs::create_dir_all(d.join("entrypoint.d")).unwrap();
    let script = d.join("nvidia_entrypoint.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\nfor f in \"$(dirname \"$0\")\"/entrypoint.d/*.sh; do . \"$f\"; done\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn an_entrypoint_hook_costs_one_boot_per_change() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let script = nvidia_entrypoint(t.path());
    let hook = t.path().join("opt/nvidia/entrypoint.d/50-gpu.sh");
    let set = |v: &str| std::fs::write(&hook, format!("export SGLANG_HOOKED={v}\n")).unwrap();
    let mut argv = vec![script.display().to_string()];
    argv.extend(engine_words().split(' ').map(str::to_string));
    one_boot_per_change(
        &home,
        t.path(),
        &argv,
        &set,
        "SGLANG_HOOKED",
        "entrypoint hook",
    );
}

#[test]
fn a_launch_it_cannot_read_whole_is_pruned_and_the_good_set_comes_back() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let activate = t.path().join("activate");
    std::fs::write(&activate, "export SGLANG_VENV=b\n").unwrap();
    let plain: Vec<String> = engine_words().split(' ').map(str::to_string).collect();
    let good = boot(kw(&home, t.path(), &plain).env("SGLANG_VENV", "a"));
    assert!(good.has_event("signed"), "{}", good.stderr);
    let signed = cache_files(&cache_root(&home));
    assert!(!signed.is_empty());

    // the commonest chart command: read as far as `source`, no further
    let unreadable = vec![
        "bash".to_string(),
        "-c".to_string(),
        format!("source {} && {}", activate.display(), engine_words()),
    ];
    let out = run(&home, t.path(), &unreadable);
    assert_eq!(out.hit(), 0, "nothing of another launch: {}", out.stderr);
    assert!(out.tuned() > 0, "{}", out.stderr);
    let line = out.event("unreadable_launch");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("'bash' runs an engine keepwrap cannot read whole"),
        "{line}"
    );
    // its exit status is the shell's: it proves nothing
    assert!(out.has_event("not_signing_exit_unproven"), "{}", out.stderr);
    assert!(!out.has_event("no_cache"), "{}", out.stderr);
    assert!(!out.has_event("signed"), "{}", out.stderr);
    assert!(!out.has_event("supervising_only"), "{}", out.stderr);

    // the good set is whole, for the launch it belongs to
    let back = boot(kw(&home, t.path(), &plain).env("SGLANG_VENV", "a"));
    assert_eq!(back.code, 0, "{}", back.stderr);
    loaded_only_own(&back);
    assert_eq!(back.tuned(), 0, "{}", back.stderr);
    assert!(back.has_event("restored"), "{}", back.stderr);
    assert!(back.has_event("reused"), "{}", back.stderr);
    assert_eq!(cache_files(&cache_root(&home)), signed);
}

#[test]
fn a_launch_keepwrap_execs_itself_is_not_looked_at() {
    let t = tempfile::tempdir().unwrap();
    let argv: Vec<String> = engine_words().split(' ').map(str::to_string).collect();
    let first = run(t.path(), t.path(), &argv);
    assert!(first.has_event("signed"), "{}", first.stderr);
    for out in [&first, &run(t.path(), t.path(), &argv)] {
        for code in ["engine_as_offered", "engine_differs", "offered_as_seen"] {
            assert!(!out.has_event(code), "{code}: {}", out.stderr);
        }
    }
}

/// `keepwrap -- COMMAND` in front of the fake vLLM until its outcome line.
fn vllm(home: &Path, command: &[String], env: &[(&str, &str)]) -> Finished {
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = common::vllm::until_outcome(Running::spawn(&mut common::vllm::kw_cmd(
        home,
        &[],
        &command,
        env,
    )));
    assert_eq!(out.code, 0, "{}", out.stderr);
    out
}

#[test]
fn a_vllm_server_is_seen_in_a_shell_and_in_a_login_shell() {
    let home = common::home();
    let bin = repo().join("tests/fixtures/engines/bin/vllm");
    let words = |port: &str| {
        format!(
            "exec {} serve /models/fake-moe --tune-ms 2 --load-ms 400 -tp 2 -ep --port {port}",
            bin.display()
        )
    };
    let port = free_port().to_string();
    let shell = vec!["sh".to_string(), "-c".to_string(), words(&port)];
    let cold = vllm(home.path(), &shell, &[]);
    assert!(cold.has_event("signed"), "{}", cold.stderr);
    assert!(
        !cold.has_event("engine_differs"),
        "read right: {}",
        cold.stderr
    );
    // what the shell's engine ran with is what the words say: the plain
    // launch reuses it
    let port = free_port().to_string();
    let plain: Vec<String> = words(&port)
        .split(' ')
        .skip(1)
        .map(str::to_string)
        .collect();
    let warm = vllm(home.path(), &plain, &[]);
    assert!(warm.has_event("reused"), "{}", warm.stderr);
    assert_eq!(warm.tuned(), 0, "{}", warm.stderr);

    // a login shell's profile sets a vLLM variable: one boot, then reused
    std::fs::write(
        home.path().join(".bash_profile"),
        "export VLLM_HIDDEN_SETTING=1\n",
    )
    .unwrap();
    let port = free_port().to_string();
    let login = vec!["bash".to_string(), "-lc".to_string(), words(&port)];
    let changed = vllm(home.path(), &login, &[]);
    assert_eq!(changed.hit(), 0, "{}", changed.stderr);
    assert!(changed.has_event("engine_differs"), "{}", changed.stderr);
    assert!(changed.has_event("signed"), "{}", changed.stderr);
    let again = vllm(home.path(), &login, &[]);
    assert!(again.has_event("reused"), "{}", again.stderr);
    assert_eq!(again.tuned(), 0, "{}", again.stderr);
}

#[test]
fn as_pid_1_and_another_user_a_login_profile_costs_one_boot_per_change() {
    // a Python another user can run (the one on PATH may be under root's
    // home)
    let python = "/usr/bin/python3";
    let ok = is_root() && have("unshare") && have("setpriv") && Path::new(python).exists();
    if !has_need(ok, "root, unshare, setpriv and /usr/bin/python3") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // the test's own temporary directory is root's: open it to others, with
    // a copy of the fake engine in it (the checkout may be under root's home)
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let engines = t.path().join("engines");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo().join("tests/fixtures/engines"))
        .arg(&engines)
        .status()
        .unwrap();
    assert!(copied.success());
    let nobody = nix::unistd::Uid::from_raw(65534);
    let nogroup = nix::unistd::Gid::from_raw(65534);
    nix::unistd::chown(&home, Some(nobody), Some(nogroup)).unwrap();
    let profile = home.join(".bash_profile");
    let set = |v: &str| {
        std::fs::write(&profile, format!("export SGLANG_HIDDEN={v}\n")).unwrap();
        nix::unistd::chown(&profile, Some(nobody), Some(nogroup)).unwrap();
    };
    let argv = vec![
        "bash".to_string(),
        "-lc".to_string(),
        format!("exec {}", engine_words_with(python)),
    ];
    let cmd = || {
        // keepwrap as PID 1 of a PID namespace, running as nobody
        let mut inner = kw(&home, &home, &argv);
        inner.env("PYTHONPATH", &engines);
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(&home);
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    };
    one_boot_per_change_with(&cmd, &set, "SGLANG_HIDDEN", "login shell's profile");
    let root = cache_root(&home);
    assert!(std::fs::metadata(root.join(".keepwrap/seen")).is_ok());
}

/// `kw` of `argv` that `cmd` runs in `cwd` with `env`: one boot, asserted
/// to load nothing tuned under other settings.
fn boot_with(home: &Path, cwd: &Path, argv: &[String], env: &[(&str, &str)]) -> Finished {
    let mut cmd = kw(home, cwd, argv);
    cmd.envs(env.iter().copied());
    run_cmd(&mut cmd)
}

fn sh_c(script: &str) -> Vec<String> {
    vec!["sh".to_string(), "-c".to_string(), script.to_string()]
}

#[test]
fn a_relative_cache_root_after_a_cd_is_the_engines() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(t.path().join("w")).unwrap();
    let argv = |chunk: u32| {
        sh_c(&format!(
            "cd w && exec {} --chunked-prefill-size {chunk}",
            engine_words()
        ))
    };
    let env = [("SGLANG_CACHE_DIR", "cache")];
    let first = boot_with(&home, t.path(), &argv(256), &env);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let root = t.path().join("w/cache/flashinfer/autotune");
    assert_eq!(
        t.path()
            .join(first.event("launch")["root"].as_str().unwrap()),
        root,
        "the engine's root, beside its working directory"
    );
    assert!(!cache_files(&root).is_empty());
    let changed = boot_with(&home, t.path(), &argv(512), &env);
    assert_eq!(changed.hit(), 0, "{}", changed.stderr);
    let back = boot_with(&home, t.path(), &argv(256), &env);
    assert_eq!(back.tuned(), 0, "{}", back.stderr);
}

#[test]
fn a_cd_through_a_symlink_is_resolved_as_the_shell_does() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let (srv, elsewhere) = (t.path().join("srv"), t.path().join("elsewhere"));
    std::fs::create_dir_all(elsewhere.join("sub")).unwrap();
    std::fs::create_dir_all(&srv).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("sub"), srv.join("current")).unwrap();
    let config = |dir: &Path, chunk: u32| {
        std::fs::write(
            dir.join("c.yaml"),
            format!("chunked-prefill-size: {chunk}\n"),
        )
        .unwrap()
    };
    config(&srv, 256);
    config(&elsewhere, 256);
    // the shell lands in srv (logically), whatever current links to
    let argv = sh_c(&format!(
        "cd {}/current/.. && exec {} --config c.yaml",
        srv.display(),
        engine_words()
    ));
    let first = run(&home, t.path(), &argv);
    assert!(first.has_event("signed"), "{}", first.stderr);
    assert!(
        !first.has_event("engine_differs"),
        "read right: {}",
        first.stderr
    );
    config(&srv, 512);
    let edited = run(&home, t.path(), &argv);
    assert_eq!(edited.hit(), 0, "{}", edited.stderr);
    assert!(
        !edited.has_event("engine_differs"),
        "read right: {}",
        edited.stderr
    );
    config(&elsewhere, 1024);
    let other = run(&home, t.path(), &argv);
    assert_eq!(
        other.tuned(),
        0,
        "the file it does not read: {}",
        other.stderr
    );
}

/// A copy of the fake engine's directory in `dir` (the `sglang` package
/// there is the "checkout" a test upgrades).
fn engines_copy(dir: &Path) -> PathBuf {
    let engines = dir.join("engines");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo().join("tests/fixtures/engines"))
        .arg(&engines)
        .status()
        .unwrap();
    assert!(copied.success());
    engines
}

/// An "upgrade" of the engine's checkout: its package's `__init__.py`
/// (the fake's version) changes (written only when it does).
fn upgrade(engines: &Path, n: u32) {
    let path = engines.join("sglang/__init__.py");
    let version = format!("__version__ = \"0.5.{n}\"\n");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(version.as_str()) {
        std::fs::write(path, version).unwrap();
    }
}

/// A boot of the engine run by `python`, with keepwrap's environment
/// naming no path to it, after upgrading the checkout `engines` to
/// version `n`.
fn upgrades_of<'a>(
    home: &'a Path,
    cwd: &'a Path,
    engines: &'a Path,
    python: &Path,
) -> impl Fn(u32) -> Finished + 'a {
    let argv: Vec<String> = engine_words_with(&python.display().to_string())
        .split(' ')
        .map(str::to_string)
        .collect();
    move |n| {
        upgrade(engines, n);
        let mut cmd = kw(home, cwd, &argv);
        cmd.env_remove("PYTHONPATH");
        run_cmd(&mut cmd)
    }
}

#[test]
fn a_server_whose_engine_is_not_found_is_never_kept() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let engines = engines_copy(t.path());
    // an interpreter keepwrap cannot resolve: a shim (as pyenv's) that
    // finds the engine by a path only it knows
    let shim = t.path().join("shim/python3");
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nPYTHONPATH={} exec {} \"$@\"\n",
            engines.display(),
            python()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let launch = upgrades_of(&home, t.path(), &engines, &shim);
    let first = launch(1);
    assert!(first.tuned() > 0, "{}", first.stderr);
    assert!(!first.has_event("signed"), "{}", first.stderr);
    let line = first.event("unresolved_launch");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("engine sglang not found"),
        "{line}"
    );
    let upgraded = launch(2);
    assert_eq!(upgraded.hit(), 0, "{}", upgraded.stderr);
}

#[test]
fn an_engine_found_through_a_pth_file_is_kept_and_its_upgrade_retunes() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let engines = engines_copy(t.path());
    let venv = t.path().join("venv");
    let made = Command::new(python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    // a legacy editable install: the checkout's directory in a path file
    std::fs::write(
        site.join("__editable__.sglang.pth"),
        format!("{}\n", engines.display()),
    )
    .unwrap();
    let launch = upgrades_of(&home, t.path(), &engines, &venv.join("bin/python3"));
    let first = launch(1);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let again = launch(1);
    assert_eq!(again.tuned(), 0, "{}", again.stderr);
    let upgraded = launch(2);
    assert_eq!(upgraded.hit(), 0, "{}", upgraded.stderr);
    assert!(upgraded.has_event("signed"), "{}", upgraded.stderr);
}

/// A hub snapshot of `org/m` at `revision` in the Hugging Face cache
/// layout under `dir`, its `config.json` naming `experts`.
fn hub_snapshot(dir: &Path, revision: &str, experts: u32) {
    let repo = dir.join("models--org--m");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots").join(revision)).unwrap();
    std::fs::write(repo.join("refs/main"), revision).unwrap();
    std::fs::write(
        repo.join("snapshots").join(revision).join("config.json"),
        format!(
            "{{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"n_routed_experts\": {experts}}}"
        ),
    )
    .unwrap();
}

#[test]
fn a_hub_id_downloaded_after_the_start_is_signed_under_what_was_downloaded() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let (r1, r2, hf) = (
        t.path().join("r1"),
        t.path().join("r2"),
        t.path().join("hf"),
    );
    hub_snapshot(&r1, &"1".repeat(40), 8);
    hub_snapshot(&r2, &"2".repeat(40), 16);
    let argv: Vec<String> = engine_words()
        .replace("/models/fake-moe", "org/m")
        .split(' ')
        .map(str::to_string)
        .collect();
    let hf_s = hf.display().to_string();
    // an emptyDir hub cache: empty at every start, the engine downloads
    let fresh = |from: &Path| {
        let _ = std::fs::remove_dir_all(&hf);
        let download = format!("{}:{}", from.display(), hf.display());
        boot_with(
            &home,
            t.path(),
            &argv,
            &[("HF_HUB_CACHE", &hf_s), ("FAKE_DOWNLOAD", &download)],
        )
    };
    let first = fresh(&r1);
    assert!(first.has_event("unresolved_launch"), "{}", first.stderr);
    assert!(first.has_event("signed"), "{}", first.stderr);
    // the hub moved to a revision with more experts
    let moved = fresh(&r2);
    assert_eq!(moved.hit(), 0, "{}", moved.stderr);
    assert!(moved.has_event("signed"), "{}", moved.stderr);
    // the hub cache kept (a volume): read before the start, reused
    let kept = boot_with(&home, t.path(), &argv, &[("HF_HUB_CACHE", &hf_s)]);
    assert!(!kept.has_event("unresolved_launch"), "{}", kept.stderr);
    assert_eq!(kept.tuned(), 0, "{}", kept.stderr);
}

#[test]
fn an_offline_script_counts_by_its_bytes() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let script = t.path().join("gen.py");
    let write = |chunk: u32| {
        std::fs::write(
            &script,
            format!(
                "import runpy, sys\nsys.argv = [{fake:?}, '--model-path', '/models/fake-moe', '--tp', '2', '--offline', '--tune-ms', '2', '--chunked-prefill-size', '{chunk}']\nrunpy.run_path({fake:?}, run_name='__main__')\n",
                fake = fake_engine().display().to_string()
            ),
        )
        .unwrap()
    };
    let argv = vec![python(), "gen.py".to_string()];
    write(256);
    let first = run(&home, t.path(), &argv);
    assert!(first.has_event("signed"), "{}", first.stderr);
    let again = run(&home, t.path(), &argv);
    assert_eq!(again.tuned(), 0, "{}", again.stderr);
    write(512);
    let edited = run(&home, t.path(), &argv);
    assert_eq!(edited.hit(), 0, "{}", edited.stderr);
}

#[test]
fn bench_one_batch_reads_the_models_config() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let model = t.path().join("m");
    std::fs::create_dir_all(&model).unwrap();
    let write = |experts: u32| {
        std::fs::write(
            model.join("config.json"),
            format!("{{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"n_routed_experts\": {experts}}}"),
        )
        .unwrap()
    };
    let argv: Vec<String> = format!(
        "{} -m sglang.bench_one_batch --model-path {} --tp 2 --tune-ms 2",
        python(),
        model.display()
    )
    .split(' ')
    .map(str::to_string)
    .collect();
    write(8);
    let first = run(&home, t.path(), &argv);
    assert!(first.has_event("signed"), "{}", first.stderr);
    write(16);
    let edited = run(&home, t.path(), &argv);
    assert_eq!(edited.hit(), 0, "{}", edited.stderr);
}

#[test]
fn status_and_explain_name_the_set_a_launch_whose_words_hide_inputs_is_offered() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().to_path_buf();
    std::fs::write(home.join(".bash_profile"), "export SGLANG_HIDDEN=a\n").unwrap();
    let argv = vec![
        "bash".to_string(),
        "-lc".to_string(),
        format!("exec {}", engine_words()),
    ];
    let first = run(&home, t.path(), &argv);
    let signed = first.event("signed")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let sub = |args: &[&str]| {
        let mut cmd = crate::fingerprint_e2e::kw(&home, t.path());
        cmd.env("HOME", &home).args(args).arg("--").args(&argv);
        output(&mut cmd)
    };
    let explain = sub(&["explain"]);
    assert_eq!(explain.code, 0, "{}", explain.stderr);
    let text = explain.stdout.join("\n");
    assert!(
        text.contains(&format!("its engine last ran as {}...", &signed[..8])),
        "{text}"
    );
    assert!(
        text.contains(&format!("this launch: {}...", &signed[..8])) && text.contains(": signed "),
        "{text}"
    );
    let status = sub(&["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let report: serde_json::Value = serde_json::from_str(&status.stdout.join("\n")).unwrap();
    assert_eq!(report["seen_as"], signed.as_str(), "{report}");
    assert_eq!(report["fingerprint"], signed.as_str(), "{report}");
}

#[test]
fn nodes_whose_engines_run_with_hidden_inputs_publish_nothing_to_the_share() {
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let port = free_port().to_string();
    let nodes: Vec<Running> = (0..2)
        .map(|rank| {
            let home = t.path().join(format!("node{rank}"));
            std::fs::create_dir_all(&home).unwrap();
            // each node's login profile exports a switch the words do not show
            std::fs::write(home.join(".bash_profile"), "export SGLANG_HIDDEN=1\n").unwrap();
            let script = format!(
                "exec {} {} --model-path /models/fake-moe --tune-ms 2 --load-ms 400 --tp 2 --ep 2 --nnodes 2 --node-rank {rank} --dist-init-addr 127.0.0.1:{port} --gate stock --offline",
                python(),
                fake_engine().display()
            );
            let argv = vec!["bash".to_string(), "-lc".to_string(), script];
            let mut full = crate::fingerprint_e2e::kw(&home, &home);
            full.env("HOME", &home)
                .env("FAKE_TAG_SETTINGS", "1")
                .arg("--share")
                .arg(&share)
                .args(["--done", "exit", "--"])
                .args(&argv);
            Running::spawn(&mut full)
        })
        .collect();
    for node in nodes {
        let out = node.finish(std::time::Duration::from_secs(60));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.has_event("engine_differs"), "{}", out.stderr);
        assert!(out.has_event("not_shared_unread"), "{}", out.stderr);
        assert!(out.has_event("signed"), "signed locally: {}", out.stderr);
    }
    let published: Vec<_> = walkdir(&share);
    assert!(published.is_empty(), "nothing published: {published:?}");
}

/// Every file below `dir`.
fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_engine_whose_profile_moves_its_cache_elsewhere_is_said_and_nothing_signed() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().to_path_buf();
    let elsewhere = t.path().join("elsewhere");
    std::fs::write(
        home.join(".bash_profile"),
        format!("export SGLANG_CACHE_DIR={}\n", elsewhere.display()),
    )
    .unwrap();
    let argv = vec![
        "bash".to_string(),
        "-lc".to_string(),
        format!("exec {}", engine_words()),
    ];
    let out = run(&home, t.path(), &argv);
    let line = out.event("not_signing_unseen");
    let said = format!(
        "the engine writes its cache under {}",
        elsewhere.join("flashinfer/autotune").display()
    );
    assert!(line["message"].as_str().unwrap().contains(&said), "{line}");
    assert!(!out.has_event("signed"), "{}", out.stderr);
}
