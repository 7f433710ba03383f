//! Packaging: the static build's file operations, and the Docker snippet,
//! docs/docker.md and Kubernetes examples agreeing on the settings they suggest.

use crate::common;

use std::fs;
use std::io;
use std::os::fd::AsFd;

use keepwrap::cache::fsx;

#[test]
fn rename_noreplace_moves_and_never_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let d = fs::File::open(dir.path()).unwrap();
    fs::write(dir.path().join("a"), b"A").unwrap();
    fs::write(dir.path().join("b"), b"B").unwrap();

    // An existing target is refused, and both files stay as they were.
    let e = fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"b").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"A");
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"B");

    // A free target is taken.
    fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"c").unwrap();
    assert!(!dir.path().join("a").exists());
    assert_eq!(fs::read(dir.path().join("c")).unwrap(), b"A");

    // A missing source is NotFound.
    let e = fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"d").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
}

/// The `KEEPWRAP_*` settings a Dockerfile snippet suggests (commented or not).
fn snippet_settings(file: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(common::repo().join(file)).unwrap();
    text.lines()
        .filter_map(|l| {
            l.trim_start_matches(['#', ' '])
                .strip_prefix("ENV KEEPWRAP_")
        })
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (format!("KEEPWRAP_{k}"), v.trim().to_string())
        })
        .collect()
}

/// The settings `file` suggests are ones keepwrap reads and accepts, and
/// `docker stop` (KILL 10 s after TERM) leaves time for the engine's KILL
/// and the grace of its leftovers, as docs/docker.md says.
fn assert_snippet_settings_fit(file: &str) {
    let settings = snippet_settings(file);
    assert!(settings.len() >= 8, "{file}: {settings:?}");
    let home = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.env("HOME", home.path());
    common::without_keepwrap_env(&mut cmd);
    for (k, v) in &settings {
        cmd.env(k, v);
    }
    let f = common::output(cmd.args(["config", "--json"]));
    assert_eq!(f.code, 0, "{file}'s settings: {}", f.stderr);
    let cfg: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    for (k, _) in &settings {
        assert!(
            cfg.as_object()
                .unwrap()
                .values()
                .any(|s| s["from"] == k.as_str()),
            "{file}: {k} is not a variable keepwrap reads"
        );
    }
    let d =
        |name: &str| keepwrap::cli::parse_duration(cfg[name]["value"].as_str().unwrap()).unwrap();
    let stop = d("kill-after") + d("grace");
    assert!(
        stop < std::time::Duration::from_secs(10),
        "{file}: {stop:?}"
    );
}

#[test]
fn the_docker_snippet_suggests_settings_keepwrap_accepts_and_docker_stop_allows() {
    for file in ["Dockerfile.snippet", "Dockerfile.vllm.snippet"] {
        assert_snippet_settings_fit(file);
    }
    let readme = std::fs::read_to_string(common::repo().join("docs/docker.md")).unwrap();
    assert!(readme.contains("KILLs\nafter 10 s") || readme.contains("KILLs after 10 s"));
    let snippet = std::fs::read_to_string(common::repo().join("Dockerfile.snippet")).unwrap();
    assert!(snippet.contains(r#"ENTRYPOINT ["keepwrap", "--"]"#));
}
