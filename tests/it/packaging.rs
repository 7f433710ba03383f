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
        |name: &str| keepwrap::cli::parse_duration(cfg[name]["text"].as_str().unwrap()).unwrap();
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

/// The Dockerfiles that build keepwrap from a checkout: the image of the
/// binary alone and the two snippets (one build stage, tests/it/docker.rs).
const DOCKERFILES: [&str; 3] = [
    "Dockerfile",
    "Dockerfile.snippet",
    "Dockerfile.vllm.snippet",
];

/// The sources the build stage of `file` copies (`COPY A B ./` names A and
/// B), in order.
fn stage_copies(file: &str) -> Vec<String> {
    let text = fs::read_to_string(common::repo().join(file)).unwrap();
    let stage = text
        .split("\nFROM ")
        .find(|s| s.contains(" AS keepwrap"))
        .unwrap_or_else(|| panic!("{file}'s keepwrap stage"));
    let copies: Vec<String> = stage
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(|w| w.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        copies.contains(&"Cargo.toml".to_string()),
        "{file}: {copies:?}"
    );
    copies
}

/// Every file Cargo.toml names as a target (`[lib]`, `[[bin]]`, `[[bench]]`,
/// ...: an explicit `path`, else cargo's place for its name), as cargo looks
/// for them when it reads the manifest.
fn manifest_targets() -> Vec<String> {
    let text = fs::read_to_string(common::repo().join("Cargo.toml")).unwrap();
    let mut out = Vec::new();
    let mut section = String::new();
    let mut name = None::<String>;
    let mut path = None::<String>;
    let mut flush = |section: &str, name: &mut Option<String>, path: &mut Option<String>| {
        let dir = match section {
            "[[bench]]" => "benches",
            "[[test]]" => "tests",
            "[[example]]" => "examples",
            "[[bin]]" => "src/bin",
            _ => "",
        };
        match (path.take(), name.take()) {
            (Some(p), _) => out.push(p),
            (None, Some(n)) if !dir.is_empty() => out.push(format!("{dir}/{n}.rs")),
            _ => {}
        }
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(&section, &mut name, &mut path);
            section = line.to_string();
            continue;
        }
        let value = |key: &str| {
            let rest = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
            Some(rest.trim().trim_matches('"').to_string())
        };
        if let Some(v) = value("name") {
            name = Some(v);
        }
        if let Some(v) = value("path") {
            path = Some(v);
        }
    }
    flush(&section, &mut name, &mut path);
    assert!(!text.contains("\nbuild"), "a build script: name it here");
    if common::repo().join("build.rs").exists() {
        out.push("build.rs".into());
    }
    out
}

#[test]
fn the_dockerfiles_copy_every_file_their_build_needs() {
    // `docker build` runs `cargo build` on what the build stage copies, and
    // cargo refuses a manifest whose targets are missing ("can't find
    // bench_done bench at benches/bench_done.rs").
    let targets = manifest_targets();
    assert!(
        targets.iter().any(|t| t.starts_with("benches/")),
        "{targets:?}"
    );
    let ci = fs::read_to_string(common::repo().join(".ci/run")).unwrap();
    for file in DOCKERFILES {
        let copies = stage_copies(file);
        for t in &targets {
            assert!(
                copies
                    .iter()
                    .any(|c| t == c || t.starts_with(&format!("{c}/"))),
                "Cargo.toml needs {t}, which {file} does not copy ({copies:?})"
            );
            assert!(common::repo().join(t).exists(), "{t}");
        }
    }
    // `.ci/run` builds exactly these files with the Dockerfile's own command
    // (the vLLM snippet's stage is the SGLang snippet's, line for line).
    for file in ["Dockerfile", "Dockerfile.snippet"] {
        assert!(
            ci.lines()
                .any(|l| l.trim().starts_with(&format!("stage_build {file} "))),
            "{file}: {ci}"
        );
    }
}

#[test]
fn the_docker_build_context_leaves_the_build_output_out() {
    // `.dockerignore` lets in what the Dockerfiles copy and nothing else:
    // not `target/` (gigabytes), not `.git`.
    let text = fs::read_to_string(common::repo().join(".dockerignore"))
        .expect("a .dockerignore beside the Dockerfiles");
    let rules: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(rules.first(), Some(&"*"), "{rules:?}");
    let mut allowed: Vec<String> = rules
        .iter()
        .filter_map(|r| r.strip_prefix('!'))
        .map(|r| r.trim_end_matches('/').to_string())
        .collect();
    allowed.sort();
    for file in DOCKERFILES {
        let mut copies = stage_copies(file);
        copies.sort();
        assert_eq!(allowed, copies, "{file}: {rules:?}");
    }
}

/// The architectures the build stage of `file` builds for, each with its
/// Rust target (`amd64) target=x86_64-unknown-linux-musl ;;`).
fn stage_targets(file: &str) -> Vec<(String, String)> {
    let text = fs::read_to_string(common::repo().join(file)).unwrap();
    text.lines()
        .filter_map(|l| {
            let (arch, rest) = l.trim().split_once(") target=")?;
            let target = rest.split_whitespace().next()?.trim_end_matches(';');
            Some((arch.to_string(), target.to_string()))
        })
        .collect()
}

/// The value of `key: VALUE` on a line of the workflow (the first such
/// line), without quotes.
fn yaml_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(": "))
        .unwrap_or_else(|| panic!("no {key}: in the workflow"))
        .trim()
}

#[test]
fn the_release_workflow_builds_the_dockerfiles_targets_and_image() {
    let text = fs::read_to_string(common::repo().join(".github/workflows/release.yml")).unwrap();
    let dockerfile = fs::read_to_string(common::repo().join("Dockerfile")).unwrap();
    let targets = stage_targets("Dockerfile");
    assert_eq!(
        targets,
        [
            ("amd64".into(), "x86_64-unknown-linux-musl".into()),
            ("arm64".into(), "aarch64-unknown-linux-musl".into()),
        ],
        "{dockerfile}"
    );
    // At a pushed tag v*.
    assert!(
        text.contains("\non:\n  push:\n    tags: [\"v*\"]\n"),
        "{text}"
    );
    // The release binaries: exactly the two targets, built by the
    // Dockerfile's own cargo command, linked by the same rust-lld.
    let matrix: Vec<&str> = yaml_value(&text, "target")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(str::trim)
        .collect();
    let names: Vec<&str> = targets.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(matrix, names, "{text}");
    assert!(
        text.contains("run: cargo build --release --locked --target ${{ matrix.target }}\n"),
        "{text}"
    );
    assert!(dockerfile.contains("cargo build --release --locked --target \"$target\""));
    for target in &names {
        let var = format!(
            "CARGO_TARGET_{}_LINKER",
            target.to_uppercase().replace('-', "_")
        );
        assert!(dockerfile.contains(&format!("{var}=rust-lld")), "{var}");
        assert_eq!(yaml_value(&text, &var), "rust-lld", "{var}");
        // each binary is attached to the release, and so are its checksums
        assert!(
            text.contains(&format!("dist/keepwrap-{target}\n")),
            "{target}"
        );
    }
    assert!(text.contains("sha256sum keepwrap-* > SHA256SUMS"), "{text}");
    assert!(text.contains("dist/SHA256SUMS\n"), "{text}");
    // The image: the root Dockerfile, for the architectures it builds.
    assert_eq!(yaml_value(&text, "context"), ".");
    assert_eq!(yaml_value(&text, "file"), "./Dockerfile");
    let platforms: Vec<String> = targets.iter().map(|(a, _)| format!("linux/{a}")).collect();
    assert_eq!(yaml_value(&text, "platforms"), platforms.join(","));
    assert!(text.contains("uses: docker/build-push-action@v"), "{text}");
    assert_eq!(yaml_value(&text, "registry"), "ghcr.io");
    // Every action pinned to a major version.
    let uses: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses: "))
        .collect();
    assert!(uses.len() >= 6, "{uses:?}");
    for u in uses {
        let (_, version) = u.split_once('@').unwrap_or_else(|| panic!("{u}"));
        assert!(
            version
                .strip_prefix('v')
                .is_some_and(|n| n.parse::<u32>().is_ok()),
            "{u}"
        );
    }
}
