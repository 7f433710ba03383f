//! The cache root without `HOME`: the engine's Python expands `~` with
//! `os.path.expanduser`, which reads `HOME` when it is set (empty too) and
//! else the password database's home of the user it runs as. keepwrap
//! guards the same directory the engine writes.

use crate::common;
use serde_json::json;

use std::path::Path;
use std::process::Command;

use common::*;

/// `keepwrap config --json -- ARGV`'s cache root, run through `wrap`.
fn config_root(mut cmd: Command) -> (Option<String>, String) {
    let f = output(&mut cmd);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let v: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).expect("config --json");
    (
        v["cache-root"]["value"].as_str().map(str::to_string),
        v["cache-root"]["from"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn config(argv: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["config", "--json", "--"])
        .args(argv);
    cmd
}

const SGLANG: &[&str] = &[
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/m",
];
const VLLM: &[&str] = &["vllm", "serve", "/m"];

#[test]
fn an_empty_home_is_set_as_python_reads_it() {
    // posixpath.expanduser("~/.cache/sglang") with HOME="" is "/.cache/sglang"
    let mut c = config(SGLANG);
    c.env("HOME", "");
    assert_eq!(
        config_root(c).0.as_deref(),
        Some("/.cache/sglang/flashinfer/autotune")
    );
    // SGLang reads SGLANG_CACHE_DIR set but empty as "": a relative root
    let mut c = config(SGLANG);
    c.env("SGLANG_CACHE_DIR", "").env("HOME", "/h");
    assert_eq!(config_root(c).0.as_deref(), Some("flashinfer/autotune"));
    let mut c = config(VLLM);
    c.env("HOME", "");
    assert_eq!(
        config_root(c).0.as_deref(),
        Some("/.cache/vllm/flashinfer_autotune_cache")
    );
}

/// `cmd` run in a mount namespace of its own where `/etc/passwd` is a copy
/// whose entry for this user has the home `home`.
fn with_passwd_home(cmd: &Command, home: &Path, dir: &Path) -> Command {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let mut found = false;
    let copy: String = passwd
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(':').collect();
            if f.len() == 7 && f[2] == uid {
                found = true;
                f[5] = home.to_str().unwrap();
            }
            f.join(":") + "\n"
        })
        .collect();
    assert!(found, "this user has a passwd entry");
    let file = dir.join("passwd");
    std::fs::write(&file, copy).unwrap();
    let mut out = Command::new("unshare");
    out.args([
        "--mount",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/passwd && exec \"$@\"",
    ])
    .arg(&file)
    .arg(cmd.get_program())
    .args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        out.current_dir(d);
    }
    out.env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            out.env(k, v);
        }
    }
    out
}

#[test]
fn without_home_the_root_is_the_passwd_home_the_engine_writes_to() {
    if !has_need(
        is_root() && have("unshare"),
        "root and unshare (an /etc/passwd of its own)",
    ) {
        return;
    }
    let h = home();
    let pw_home = h.path().join("pw-home");
    std::fs::create_dir(&pw_home).unwrap();
    let sglang_root = pw_home.join(".cache/sglang/flashinfer/autotune");

    // what keepwrap says it guards
    let (root, from) = config_root(with_passwd_home(&config(SGLANG), &pw_home, h.path()));
    assert_eq!(root.as_deref(), sglang_root.to_str());
    assert_eq!(from, "passwd");
    let (root, _) = config_root(with_passwd_home(&config(VLLM), &pw_home, h.path()));
    assert_eq!(
        root.as_deref(),
        pw_home
            .join(".cache/vllm/flashinfer_autotune_cache")
            .to_str()
    );

    // and what it does: the engine writes below the passwd home, keepwrap
    // signs there, and the next boot reuses
    let engine = || {
        let mut cmd = keepwrap_engine(h.path(), &[], &["--tp", "2", "--offline"]);
        cmd.env_remove("SGLANG_CACHE_DIR").env_remove("HOME");
        let mut clean = Command::new(cmd.get_program());
        clean
            .args(cmd.get_args())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                clean.env(k, v);
            }
        }
        with_passwd_home(&clean, &pw_home, h.path())
    };
    let b1 = boot(&mut engine());
    assert_eq!(b1.code, 0, "{}", b1.stderr);
    assert!(b1.tuned() > 0);
    assert!(
        b1.logged_with("signed", json!({"files": 2})),
        "{}",
        b1.stderr
    );
    assert_eq!(cache_files(&sglang_root).len(), 2, "{}", b1.stderr);
    assert_eq!(sidecars(&sglang_root).len(), 2);
    let b2 = boot(&mut engine());
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert_eq!(b2.tuned(), 0, "{}", b2.stderr);
    assert!(
        b2.logged_with("reused", json!({"files": 2})),
        "{}",
        b2.stderr
    );
}
