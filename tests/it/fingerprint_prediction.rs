//! What keepwrap predicts of a launch before it starts, read as the engine
//! will read it: a shell's `cd` resolved logically, as the shell does it
//! (so the config file counted is the one the engine reads).

use crate::common;

use std::path::Path;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn fp(explain: &str) -> &str {
    explain.lines().last().unwrap()
}

fn explain(cwd: &Path, argv: &[impl AsRef<std::ffi::OsStr>]) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    common::explain_in(cwd, &[("PATH", &path)], argv)
}

#[test]
fn a_shell_cd_through_a_symlink_and_dotdot_reads_the_config_the_shell_lands_beside() {
    // <t>/x/current -> <t>/a/b: `cd <t>/x/current/..` lands in <t>/x (the
    // shell's logical `..`), not in <t>/a (the kernel's)
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::create_dir_all(root.join("x")).unwrap();
    std::os::unix::fs::symlink(root.join("a/b"), root.join("x/current")).unwrap();
    write(&root.join("x/c.yaml"), "chunked-prefill-size: 4096\n");
    write(&root.join("a/c.yaml"), "chunked-prefill-size: 8192\n");
    let script = format!(
        "cd {}/x/current/.. && exec python3 -m sglang.launch_server --model-path m --config c.yaml",
        root.display()
    );
    let argv = ["sh", "-c", script.as_str()];
    let before = explain(&root, &argv);
    assert!(
        before.contains("arg \"--chunked-prefill-size\" \"4096\""),
        "{before}"
    );
    // the file the shell's directory holds counts
    write(&root.join("x/c.yaml"), "chunked-prefill-size: 2048\n");
    let changed = explain(&root, &argv);
    assert_ne!(fp(&before), fp(&changed), "{changed}");
    // the one beside the link's target does not
    write(&root.join("a/c.yaml"), "chunked-prefill-size: 1024\n");
    assert_eq!(fp(&changed), fp(&explain(&root, &argv)));
    // `env -C` is a chdir: the kernel's `..`, the target's parent
    let dir = format!("{}/x/current/..", root.display());
    let env_c = [
        "env",
        "-C",
        dir.as_str(),
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--config",
        "c.yaml",
    ];
    let e = explain(&root, &env_c);
    assert!(e.contains("arg \"--chunked-prefill-size\" \"1024\""), "{e}");
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A virtual environment at `dir/venv` with no engine installed in it.
fn bare_venv(dir: &Path) -> std::path::PathBuf {
    let v = dir.join("venv");
    executable(&v.join("bin/python3"), "not run\n");
    write(
        &v.join("pyvenv.cfg"),
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n",
    );
    std::fs::create_dir_all(v.join("lib/python3.11/site-packages")).unwrap();
    v
}

fn engine_line(explain: &str) -> &str {
    explain
        .lines()
        .find(|l| l.starts_with("engine "))
        .unwrap_or_else(|| panic!("no engine line: {explain}"))
}

#[test]
fn an_engine_installed_through_a_pth_path_file_is_found_and_counts() {
    // `setup.py develop` / `conda develop`: a .pth line names the checkout
    let t = tempfile::tempdir().unwrap();
    let v = bare_venv(t.path());
    let src = t.path().join("checkout/python");
    write(&src.join("sglang/__init__.py"), "");
    let pkg_info = src.join("sglang.egg-info/PKG-INFO");
    write(
        &pkg_info,
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.22\n\n",
    );
    let site = v.join("lib/python3.11/site-packages");
    write(
        &site.join("easy-install.pth"),
        "import sys; sys.__plen = len(sys.path)\n../../../../checkout/python\n",
    );
    let path = format!("{}:/usr/bin:/bin", v.join("bin").display());
    let argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
    ];
    let run = || common::explain_in(t.path(), &[("PATH", path.as_str())], &argv);
    let a = run();
    assert!(engine_line(&a).starts_with("engine sglang 0.5.22 "), "{a}");
    assert!(!a.contains("unresolved"), "{a}");
    // the checkout is upgraded: another fingerprint
    write(
        &pkg_info,
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n\n",
    );
    let b = run();
    assert!(engine_line(&b).starts_with("engine sglang 0.5.23 "), "{b}");
    assert_ne!(fp(&a), fp(&b));
    // without the path line: not found, and the launch is not trusted
    write(&site.join("easy-install.pth"), "import sys\n");
    let c = run();
    assert!(
        engine_line(&c).starts_with("engine sglang not found: "),
        "{c}"
    );
    assert!(
        c.lines()
            .any(|l| l.starts_with("unresolved: engine sglang not found: ")),
        "{c}"
    );
}

#[test]
fn an_offline_script_counts_by_its_bytes_read_where_it_runs() {
    let t = tempfile::tempdir().unwrap();
    let w = t.path().join("w");
    write(
        &w.join("gen.py"),
        "engine = Engine(chunked_prefill_size=4096)\n",
    );
    let argv = ["python3", "gen.py", "--n", "1"];
    let shell = ["sh", "-c", "cd w && exec python3 gen.py --n 1"];
    let a = explain(&w, &argv);
    assert!(
        a.lines()
            .any(|l| l.starts_with("script \"gen.py\" <sha256:")),
        "{a}"
    );
    assert!(!a.contains("unresolved"), "{a}");
    let s = explain(t.path(), &shell);
    assert!(!s.contains("unresolved"), "{s}");
    // the same bytes: the same launch
    assert_eq!(fp(&a), fp(&explain(&w, &argv)));
    // the chunk size edited inside the script: another launch, in both forms
    write(
        &w.join("gen.py"),
        "engine = Engine(chunked_prefill_size=8192)\n",
    );
    assert_ne!(fp(&a), fp(&explain(&w, &argv)));
    assert_ne!(fp(&s), fp(&explain(t.path(), &shell)));
    // a script that is not there: its prediction is not trusted
    let missing = explain(t.path(), &argv);
    assert!(
        missing
            .lines()
            .any(|l| l.starts_with("unresolved: script 'gen.py' cannot be read")),
        "{missing}"
    );
    // a command that runs no script is fingerprinted as before
    let c = explain(t.path(), &["python3", "-c", "pass"]);
    assert!(!c.contains("script ") && !c.contains("unresolved"), "{c}");
}

#[test]
fn an_sglang_benchmark_is_read_with_the_servers_arguments_and_its_models_config() {
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("m/config.json"), "{\"num_experts\": 8}");
    write(&t.path().join("b.yaml"), "tp-size: 2\n");
    let bench = |module: &str| {
        [
            "python3",
            "-m",
            module,
            "--model-path",
            "m",
            "--tp",
            "2",
            "--batch-size",
            "1",
        ]
        .map(str::to_string)
    };
    for module in [
        "sglang.bench_one_batch",
        "sglang.bench_offline_throughput",
        "sglang.benchmark.one_batch",
    ] {
        let argv = bench(module);
        let a = explain(t.path(), &argv);
        assert!(a.contains(&format!("launch {module}, ")), "{a}");
        assert!(a.contains("arg \"--tp-size\" \"2\""), "{a}");
        assert!(a.contains("model --model-path config.json <sha256:"), "{a}");
        // the model's config.json counts
        write(&t.path().join("m/config.json"), "{\"num_experts\": 16}");
        let b = explain(t.path(), &argv);
        assert_ne!(fp(&a), fp(&b), "{module}");
        write(&t.path().join("m/config.json"), "{\"num_experts\": 8}");
        assert_eq!(fp(&a), fp(&explain(t.path(), &argv)), "{module}");
    }
    // a benchmark is not the server with the same arguments
    let server = explain(
        t.path(),
        &[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--tp",
            "2",
            "--batch-size",
            "1",
        ],
    );
    assert_ne!(
        fp(&server),
        fp(&explain(t.path(), &bench("sglang.bench_one_batch")))
    );
    // its plain parse_args merges no --config: the file counts by its bytes
    let with_config = |text: &str| {
        write(&t.path().join("b.yaml"), text);
        let mut argv = bench("sglang.bench_one_batch").to_vec();
        argv.extend(["--config".to_string(), "b.yaml".to_string()]);
        explain(t.path(), &argv)
    };
    let c1 = with_config("tp-size: 2\n");
    assert!(!c1.contains("merged into the arguments"), "{c1}");
    assert_ne!(fp(&c1), fp(&with_config("tp-size: 2\n# a comment\n")));
}

#[test]
fn an_sglang_benchmark_is_done_when_it_exits() {
    let t = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::BIN)
        .current_dir(t.path())
        .args([
            "config",
            "--json",
            "--",
            "python3",
            "-m",
            "sglang.bench_one_batch",
            "--model-path",
            "m",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("when the command exits 0"), "{text}");
}

#[test]
fn a_hub_id_with_no_local_revision_is_unresolved_and_modelscope_is_read_when_switched_on() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("ms");
    let path = std::env::var("PATH").unwrap_or_default();
    let hf = t.path().join("hf");
    let run = |extra: &[(&str, &str)], argv: &[&str]| {
        let mut env = vec![
            ("PATH", path.as_str()),
            ("MODELSCOPE_CACHE", cache.to_str().unwrap()),
            ("HF_HUB_CACHE", hf.to_str().unwrap()),
        ];
        env.extend_from_slice(extra);
        common::explain_in(t.path(), &env, argv)
    };
    let sglang = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "org/model.v2",
    ];
    let vllm = ["vllm", "serve", "org/model.v2"];
    let unresolved = |e: &str| {
        e.lines()
            .find(|l| l.starts_with("unresolved: model 'org/model.v2' ("))
            .map(str::to_string)
    };
    // no local revision in either hub cache: never trusted, whichever hub
    for (argv, switch) in [
        (&sglang[..], ("SGLANG_USE_MODELSCOPE", "true")),
        (&vllm[..], ("VLLM_USE_MODELSCOPE", "True")),
    ] {
        let e = run(&[], argv);
        let line = unresolved(&e).unwrap_or_else(|| panic!("{e}"));
        assert!(line.contains("not in the local hub cache"), "{line}");
        let e = run(&[switch], argv);
        let line = unresolved(&e).unwrap_or_else(|| panic!("{e}"));
        assert!(
            line.contains("not in the local hub cache (ModelScope)"),
            "{line}"
        );
    }
    // ModelScope's cache holds it: its config.json counts
    let dir = cache.join("models/org--model.v2/snapshots/master");
    write(&dir.join("config.json"), "{\"n_routed_experts\": 64}");
    for (argv, switch) in [
        (&sglang[..], ("SGLANG_USE_MODELSCOPE", "1")),
        (&vllm[..], ("VLLM_USE_MODELSCOPE", "true")),
    ] {
        let a = run(&[switch], argv);
        assert!(unresolved(&a).is_none(), "{a}");
        write(&dir.join("config.json"), "{\"n_routed_experts\": 256}");
        let b = run(&[switch], argv);
        assert_ne!(fp(&a), fp(&b), "{b}");
        write(&dir.join("config.json"), "{\"n_routed_experts\": 64}");
        assert_eq!(fp(&a), fp(&run(&[switch], argv)));
        // the switch off: the Hugging Face cache, which does not hold it
        assert!(unresolved(&run(&[], argv)).is_some());
    }
    // a copy without config.json is not trusted either
    std::fs::remove_file(dir.join("config.json")).unwrap();
    write(&dir.join("README.md"), "x");
    let e = run(&[("SGLANG_USE_MODELSCOPE", "true")], &sglang);
    let line = unresolved(&e).unwrap_or_else(|| panic!("{e}"));
    assert!(line.contains("no config.json"), "{line}");
}
