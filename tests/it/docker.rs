//! The Dockerfiles as images run them: `Dockerfile` (the image of the
//! binary alone) and `Dockerfile.vllm.snippet` build keepwrap exactly as
//! `Dockerfile.snippet` does (one build check covers the three), the image
//! holds the binary alone, and the vLLM snippet's ENTRYPOINT and CMD, run as
//! Docker runs them, are a vLLM launch keepwrap keeps (against the fake vLLM
//! of `tests/fixtures/engines/`, `vllm` on PATH).

use crate::common;
use crate::common::vllm::{hermetic, until_outcome};

use common::{Running, BIN};
use serde_json::json;

fn snippet(file: &str) -> String {
    std::fs::read_to_string(common::repo().join(file)).unwrap()
}

/// The build stage: from `FROM ... AS keepwrap` to the blank line that
/// ends it (then comes the engine's stage).
fn build_stage(text: &str) -> &str {
    let start = text
        .find("FROM --platform=$BUILDPLATFORM rust:1-bookworm AS keepwrap")
        .expect("a keepwrap build stage");
    let end = text[start..].find("\n\n").map_or(text.len(), |e| start + e);
    let stage = &text[start..end];
    assert!(!stage[1..].contains("\nFROM "), "{stage}");
    stage
}

/// The JSON array of the last `INSTRUCTION [...]` line that is not a comment.
fn exec_form(text: &str, instruction: &str) -> Vec<String> {
    let line = text
        .lines()
        .filter_map(|l| l.strip_prefix(instruction)?.strip_prefix(' '))
        .next_back()
        .unwrap_or_else(|| panic!("no {instruction}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{instruction} {line}: {e}"))
}

/// The value of `ENV NAME=VALUE` (uncommented).
fn env_of(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("ENV ")?
                .strip_prefix(name)?
                .strip_prefix('=')
        })
        .unwrap_or_else(|| panic!("no ENV {name}"))
        .to_string()
}

#[test]
fn the_image_and_both_snippets_build_keepwrap_the_same_way() {
    let sglang = snippet("Dockerfile.snippet");
    for file in ["Dockerfile.vllm.snippet", "Dockerfile"] {
        assert_eq!(build_stage(&snippet(file)), build_stage(&sglang), "{file}");
    }
    assert!(build_stage(&sglang).contains("cargo build --release --locked"));
}

#[test]
fn the_build_stage_keeps_crates_and_the_target_directory_between_builds() {
    let text = snippet("Dockerfile.snippet");
    let stage = build_stage(&text);
    let workdir = stage
        .lines()
        .find_map(|l| l.strip_prefix("WORKDIR "))
        .expect("a WORKDIR");
    let mounts: Vec<&str> = stage
        .lines()
        .map(|l| {
            l.trim_start()
                .trim_start_matches("RUN ")
                .trim_end_matches(" \\")
        })
        .filter_map(|l| l.strip_prefix("--mount=type=cache,target="))
        .collect();
    assert_eq!(
        mounts,
        [
            "/usr/local/cargo/registry".to_string(),
            format!("{workdir}/target")
        ],
        "{stage}"
    );
    // The target directory is a mount, gone once the RUN ends: the binary
    // is copied out of it in the same RUN, to where the next stage takes it.
    let run = &stage[stage.find("\nRUN ").expect("a RUN")..];
    assert!(
        run.contains(
            r#"&& install -m 0755 "target/$target/release/keepwrap" /usr/local/bin/keepwrap"#
        ),
        "{run}"
    );
}

#[test]
fn the_image_holds_the_static_binary_alone() {
    let text = snippet("Dockerfile");
    let stage = build_stage(&text);
    // After the build stage: one stage FROM scratch that copies the binary
    // the build stage installed to /keepwrap, and runs nothing.
    let rest = &text[text.find(stage).unwrap() + stage.len()..];
    let lines: Vec<&str> = rest
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        lines,
        [
            "FROM scratch",
            "COPY --from=keepwrap /usr/local/bin/keepwrap /keepwrap",
            r#"ENTRYPOINT ["/keepwrap"]"#,
        ],
        "{rest}"
    );
    // The line the install docs give copies the binary from there.
    let line = "COPY --from=ghcr.io/keepwrap/keepwrap:VERSION /keepwrap /usr/local/bin/keepwrap";
    for file in ["README.md", "docs/docker.md", "Dockerfile"] {
        assert!(snippet(file).contains(line), "{file}");
    }
}

#[test]
fn the_vllm_snippet_runs_vllms_own_entrypoint_behind_keepwrap() {
    let text = snippet("Dockerfile.vllm.snippet");
    // vLLM's image: ENTRYPOINT ["vllm", "serve"], no CMD (docker run IMAGE
    // MODEL --args). The same two words after keepwrap keep that form.
    let entrypoint = exec_form(&text, "ENTRYPOINT");
    assert_eq!(entrypoint, ["keepwrap", "--", "vllm", "serve"]);
    let cmd = exec_form(&text, "CMD");
    assert!(
        !cmd[0].starts_with('-'),
        "CMD starts with the model: {cmd:?}"
    );
    // `docker run IMAGE` alone: ENTRYPOINT + CMD, a vLLM server launch.
    let home = common::home();
    let mut c = std::process::Command::new(BIN);
    common::without_keepwrap_env(&mut c).env("HOME", home.path());
    let f = common::output(
        c.args(["config", "--json"])
            .args(&entrypoint[1..])
            .args(&cmd),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    let cfg: serde_json::Value = serde_json::from_str(&f.stdout.join("\n")).unwrap();
    assert_eq!(cfg["profile-for-command"]["value"], "vllm", "{cfg}");
    assert!(
        cfg["done-for-command"]["value"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:8000/health"),
        "{cfg}"
    );
    let cache_root = env_of(&text, "VLLM_CACHE_ROOT");
    assert_eq!(cache_root, "/cache/vllm");

    // `docker run IMAGE MODEL --args`: ENTRYPOINT + the arguments after the
    // image name, with the image's VLLM_CACHE_ROOT (moved into a temporary
    // directory). Boot 1 tunes and signs, boot 2 reuses.
    let home = common::home();
    let cache = home.path().join(cache_root.trim_start_matches('/'));
    let root = cache.join("flashinfer_autotune_cache");
    let boot = || {
        let port = common::free_port().to_string();
        let mut c = hermetic(home.path());
        c.env("VLLM_CACHE_ROOT", &cache)
            .args(&entrypoint[1..])
            .args(["/models/fake-moe", "--port", &port, "-tp", "2", "-ep"])
            .args(["--tune-ms", "2"]);
        assert_eq!(c.get_program(), BIN);
        until_outcome(Running::spawn(&mut c))
    };
    let cold = boot();
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    let launch = cold.event("launch");
    assert_eq!(launch["profile"], "vllm", "{}", cold.stderr);
    assert!(
        launch["root"]
            .as_str()
            .unwrap()
            .starts_with(root.to_str().unwrap()),
        "{launch}"
    );
    assert!(
        cold.logged_with("signed", json!({"files": 2})),
        "{}",
        cold.stderr
    );
    let warm = boot();
    assert!(warm.has_event("reused"), "{}", warm.stderr);
    assert_eq!(warm.tuned(), 0, "{:#?}", warm.stdout);
}
