//! Every argument that names a file the engine reads to build its model or
//! kernels counts by what the file holds, not by its path: a config read
//! instead of the model's `config.json`, a draft model, a LoRA adapter, a
//! table that steers speculative decoding. Each launch runs in its own
//! directory holding its files: other bytes under the same path differ.

use crate::common;

use std::path::Path;

fn w(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// `keepwrap fingerprint --explain -- ARGV` in a fresh directory holding `files`.
fn explain(argv: &[String], files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (p, c) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    run(dir.path(), argv)
}

fn run(cwd: &Path, argv: &[String]) -> String {
    common::explain_in(cwd, &[("PATH", "/nonexistent")], argv)
}

fn fp(e: &str) -> &str {
    e.lines().last().unwrap()
}

const SGL: &str = "python3 -m sglang.launch_server --model-path m";
const VLLM: &str = "vllm serve m";

/// (what, launch with `@A`/`@B` for the path, the file's relative path
/// under `@A` or `@B`, the explain line's start)
fn cases() -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "sglang --decrypted-config-file",
            format!("{SGL} --decrypted-config-file @"),
            "",
            "model --decrypted-config-file file <sha256:",
        ),
        (
            "sglang --decrypted-draft-config-file",
            format!("{SGL} --speculative-draft-model-path d --decrypted-draft-config-file @"),
            "",
            "model --decrypted-draft-config-file file <sha256:",
        ),
        (
            "sglang --deepep-config (a file)",
            format!("{SGL} --deepep-config @"),
            "",
            "model --deepep-config file <sha256:",
        ),
        (
            "sglang --speculative-dspark-sps-table-path",
            format!("{SGL} --speculative-dspark-sps-table-path @"),
            "",
            "model --speculative-dspark-sps-table-path file <sha256:",
        ),
        (
            "sglang --lora-paths NAME=DIR",
            format!("{SGL} --enable-lora --lora-paths a=@"),
            "adapter_config.json",
            "model --lora-paths ",
        ),
        (
            "sglang --uno-lora-path",
            format!("{SGL} --uno-lora-path @"),
            "adapter_config.json",
            "model --uno-lora-path adapter_config.json <sha256:",
        ),
        (
            "vllm --hf-config-path",
            format!("{VLLM} --hf-config-path @"),
            "config.json",
            "model --hf-config-path config.json <sha256:",
        ),
        (
            "vllm --spec-model",
            format!("{VLLM} --spec-model @ --spec-tokens 3"),
            "config.json",
            "model --speculative-config.model config.json <sha256:",
        ),
        (
            "vllm --speculative-config JSON",
            format!("{VLLM} --speculative-config {{\"model\":\"@\",\"num_speculative_tokens\":3}}"),
            "config.json",
            "model --speculative-config.model config.json <sha256:",
        ),
        (
            "vllm --speculative-config.model",
            format!("{VLLM} --speculative-config.model @"),
            "config.json",
            "model --speculative-config.model config.json <sha256:",
        ),
        (
            "vllm --lora-modules NAME=DIR",
            format!("{VLLM} --enable-lora --lora-modules a=@"),
            "adapter_config.json",
            "model --lora-modules ",
        ),
    ]
}

#[test]
fn a_file_the_engine_builds_the_model_from_counts_by_its_content() {
    let mut failures = Vec::new();
    for (what, launch, inner, line) in cases() {
        let file = |at: &str| {
            if inner.is_empty() {
                at.to_string()
            } else {
                format!("{at}/{inner}")
            }
        };
        let argv = |at: &str| w(&launch.replace('@', at));
        let fa = file("a");
        let base = [("m/config.json", "{}"), ("d/config.json", "{}")];
        let with = |f: &str, c: &'static str| {
            let mut v: Vec<(&str, &str)> = base.to_vec();
            v.push((Box::leak(f.to_string().into_boxed_str()), c));
            v
        };
        let a1 = explain(&argv("a"), &with(&fa, "{\"r\": 8}"));
        let a2 = explain(&argv("a"), &with(&fa, "{\"r\": 16}"));
        if !a1.lines().any(|l| l.starts_with(line)) {
            failures.push(format!("{what}: no line {line:?} in\n{a1}"));
        }
        if fp(&a1) == fp(&a2) {
            failures.push(format!("{what}: other content, same fingerprint"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_draft_of_vllms_speculative_config_agrees_however_it_is_spelled() {
    let files = [("m/config.json", "{}"), ("d/config.json", "{\"x\": 1}")];
    let json = explain(
        &w(&format!("{VLLM} --speculative-config {{\"model\":\"d\"}}")),
        &files,
    );
    let dotted = explain(&w(&format!("{VLLM} --speculative-config.model d")), &files);
    let line = |e: &str| {
        e.lines()
            .find(|l| l.starts_with("model --speculative-config.model"))
            .map(str::to_string)
    };
    assert!(line(&json).is_some(), "{json}");
    assert_eq!(line(&json), line(&dotted));
}

#[test]
fn sglang_download_dir_is_where_the_hub_revision_is_read() {
    let files = |rev: &'static str| vec![("dl/models--org--name/refs/main", rev), ("dl/.keep", "")];
    let argv = w("python3 -m sglang.launch_server --model-path org/name --download-dir dl");
    let a = explain(&argv, &files("abc"));
    let b = explain(&argv, &files("def"));
    assert!(
        a.lines()
            .any(|l| l == "model --model-path hub_revision abc"),
        "{a}"
    );
    assert_ne!(fp(&a), fp(&b));
}

#[test]
fn vllm_download_dir_is_where_the_hub_revision_is_read() {
    let argv = w("vllm serve org/name --download-dir dl");
    let a = explain(&argv, &[("dl/models--org--name/refs/main", "abc")]);
    let b = explain(&argv, &[("dl/models--org--name/refs/main", "def")]);
    assert!(
        a.lines().any(|l| l == "model --model hub_revision abc"),
        "{a}"
    );
    assert_ne!(fp(&a), fp(&b));
}
