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

fn explain(cwd: &Path, argv: &[&str]) -> String {
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
