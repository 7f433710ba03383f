//! The engine's own version is in the fingerprint: an SGLang or vLLM
//! upgrade with the same FlashInfer (the same cache directory) plans other
//! shapes for the same command line, so it must not reuse the old tactics.
//! keepwrap reads it without running Python: the interpreter the command
//! names (on the child's `PATH`, or a `vllm`/`sglang` script's `#!` line),
//! its virtual environment or prefix, `PYTHONPATH` first, and the package's
//! `*.dist-info/METADATA`. Each test builds such a tree in a temp dir.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn executable(path: &Path, text: &str) {
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A virtual environment at `dir/venv` with `pkg` at `version` installed.
fn venv(dir: &Path, pkg: &str, version: &str) -> PathBuf {
    let v = dir.join("venv");
    executable(&v.join("bin/python3"), "not run\n");
    write(
        &v.join("pyvenv.cfg"),
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n",
    );
    let site = v.join("lib/python3.11/site-packages");
    write(&site.join(pkg).join("__init__.py"), "");
    write(
        &site.join(format!("{pkg}-{version}.dist-info/METADATA")),
        &format!("Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\n\nlong text\n"),
    );
    v
}

fn run(cwd: &Path, path: &str, env: &[(&str, &str)], argv: &[&str]) -> String {
    let mut all = vec![("PATH", path)];
    all.extend_from_slice(env);
    common::explain_in(cwd, &all, argv)
}

fn fp(explain: &str) -> &str {
    explain.lines().last().unwrap()
}

fn engine_line(explain: &str) -> &str {
    explain
        .lines()
        .find(|l| l.starts_with("engine "))
        .unwrap_or_else(|| panic!("no engine line: {explain}"))
}

fn set_version(v: &Path, pkg: &str, from: &str, to: &str) {
    let site = v.join("lib/python3.11/site-packages");
    std::fs::rename(
        site.join(format!("{pkg}-{from}.dist-info")),
        site.join(format!("{pkg}-{to}.dist-info")),
    )
    .unwrap();
    write(
        &site.join(format!("{pkg}-{to}.dist-info/METADATA")),
        &format!("Metadata-Version: 2.1\nName: {pkg}\nVersion: {to}\n\n"),
    );
}

const SGLANG: &[&str] = &[
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/m",
    "--tp",
    "2",
];

#[test]
fn an_sglang_upgrade_changes_the_fingerprint() {
    let t = tempfile::tempdir().unwrap();
    let v = venv(t.path(), "sglang", "0.5.23");
    let bin = v.join("bin");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    // `python3` on the child's PATH, and the interpreter named by its path
    let by_path = [&["python3"], SGLANG].concat();
    let py = v.join("bin/python3");
    let by_name = [&[py.to_str().unwrap()], SGLANG].concat();
    let a = run(t.path(), &path, &[], &by_path);
    let site = v.join("lib/python3.11/site-packages");
    assert_eq!(
        engine_line(&a),
        format!(
            "engine sglang 0.5.23 ({})",
            site.join("sglang-0.5.23.dist-info").display()
        )
    );
    let a2 = run(t.path(), "/usr/bin:/bin", &[], &by_name);
    assert_eq!(fp(&a), fp(&a2), "the same interpreter, named two ways");

    set_version(&v, "sglang", "0.5.23", "0.5.24");
    let b = run(t.path(), &path, &[], &by_path);
    assert!(engine_line(&b).starts_with("engine sglang 0.5.24 "), "{b}");
    assert_ne!(fp(&a), fp(&b), "another SGLang version is another launch");
}

#[test]
fn a_vllm_script_names_its_interpreter_in_its_shebang() {
    let t = tempfile::tempdir().unwrap();
    let v = venv(t.path(), "vllm", "0.33.0");
    let py = v.join("bin/python3");
    executable(
        &v.join("bin/vllm"),
        &format!(
            "#!{}\nimport sys\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n",
            py.display()
        ),
    );
    let path = format!("{}:/usr/bin:/bin", v.join("bin").display());
    let argv = ["vllm", "serve", "/m", "-tp", "2"];
    let a = run(t.path(), &path, &[], &argv);
    assert!(engine_line(&a).starts_with("engine vllm 0.33.0 "), "{a}");
    set_version(&v, "vllm", "0.33.0", "0.34.0");
    let b = run(t.path(), &path, &[], &argv);
    assert!(engine_line(&b).starts_with("engine vllm 0.34.0 "), "{b}");
    assert_ne!(fp(&a), fp(&b));
}

#[test]
fn pythonpath_comes_first_and_a_package_without_metadata_counts_by_its_files() {
    let t = tempfile::tempdir().unwrap();
    let v = venv(t.path(), "sglang", "0.5.23");
    let path = format!("{}:/usr/bin:/bin", v.join("bin").display());
    let src = t.path().join("src");
    write(&src.join("sglang/__init__.py"), "");
    write(&src.join("sglang/version.py"), "__version__ = \"0.5.23\"\n");
    let argv = [&["python3"], SGLANG].concat();
    let env = [("PYTHONPATH", "src")];
    let a = run(t.path(), &path, &env, &argv);
    let line = engine_line(&a);
    assert!(
        line.starts_with("engine sglang files <sha256:") && line.contains("no *.dist-info"),
        "{a}"
    );
    write(&src.join("sglang/version.py"), "__version__ = \"0.5.24\"\n");
    let b = run(t.path(), &path, &env, &argv);
    assert_ne!(fp(&a), fp(&b), "the package's version.py counts");
    // the venv's version without PYTHONPATH
    let c = run(t.path(), &path, &[], &argv);
    assert!(engine_line(&c).starts_with("engine sglang 0.5.23 "), "{c}");
}

#[test]
fn an_engine_that_cannot_be_found_is_said_and_the_rest_counts() {
    let t = tempfile::tempdir().unwrap();
    let v = venv(t.path(), "other", "1.0");
    let path = format!("{}:/usr/bin:/bin", v.join("bin").display());
    let argv = [&["python3"], SGLANG].concat();
    let a = run(t.path(), &path, &[], &argv);
    assert!(
        engine_line(&a).starts_with("engine sglang not found: "),
        "{a}"
    );
    let a2 = run(t.path(), &path, &[], &argv);
    assert_eq!(fp(&a), fp(&a2));
}

#[test]
fn a_debian_prefix_finds_dist_packages() {
    // /usr/bin/python3 -> python3.11, packages in /usr/local/lib/python3.11/dist-packages
    let t = tempfile::tempdir().unwrap();
    let usr = t.path().join("usr");
    executable(&usr.join("bin/python3.11"), "not run\n");
    std::os::unix::fs::symlink("python3.11", usr.join("bin/python3")).unwrap();
    write(&usr.join("lib/python3.11/os.py"), "");
    let dist = usr.join("local/lib/python3.11/dist-packages");
    write(&dist.join("sglang/__init__.py"), "");
    write(
        &dist.join("sglang-0.5.23.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n",
    );
    let path = format!("{}:/usr/bin:/bin", usr.join("bin").display());
    let argv = [&["python3"], SGLANG].concat();
    let a = run(t.path(), &path, &[], &argv);
    assert_eq!(
        engine_line(&a),
        format!(
            "engine sglang 0.5.23 ({})",
            dist.join("sglang-0.5.23.dist-info").display()
        )
    );
}
