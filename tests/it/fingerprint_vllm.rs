//! The `vllm` profile (chosen by `--profile auto`, the default) fingerprints
//! what a vLLM launch means: a table of launch pairs, run through `keepwrap
//! fingerprint`, that must agree (the same engine, tuned the same way) or
//! must differ. Each side runs in its own directory holding its files (a
//! `--config` file, the model directory `model/` with its config.json).

use crate::common;

use std::path::Path;
use std::process::Command;

/// One side of a pair: the command, extra environment, files in its cwd.
struct Side {
    argv: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    files: Vec<(&'static str, &'static str)>,
}

fn w(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn side(argv: Vec<String>) -> Side {
    Side {
        argv,
        env: vec![],
        files: vec![],
    }
}

/// `vllm serve model ARGS`
fn vs(args: &str) -> Side {
    side(w(&format!("vllm serve model {args}")))
}

impl Side {
    fn env(mut self, k: &'static str, v: &'static str) -> Side {
        self.env.push((k, v));
        self
    }
    fn file(mut self, path: &'static str, content: &'static str) -> Side {
        self.files.push((path, content));
        self
    }
}

const CFG: &str = "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"num_experts\": 128}";

fn dir_for(s: &Side) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("model")).unwrap();
    std::fs::write(dir.path().join("model/config.json"), CFG).unwrap();
    for (p, c) in &s.files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    dir
}

fn run(cwd: &Path, s: &Side, explain: bool) -> String {
    let mut cmd = Command::new(common::BIN);
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .envs(s.env.iter().copied())
        .arg("fingerprint");
    if explain {
        cmd.arg("--explain");
    }
    let out = cmd.arg("--").args(&s.argv).output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        s.argv,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fp(s: &Side) -> String {
    let dir = dir_for(s);
    run(dir.path(), s, false).trim().to_string()
}

fn explain(s: &Side) -> String {
    let dir = dir_for(s);
    run(dir.path(), s, true)
}

fn agree() -> Vec<(&'static str, Side, Side)> {
    vec![
        (
            "the positional model is --model",
            vs("-tp 2"),
            side(w("vllm serve --model model -tp 2")),
        ),
        (
            "vllm serve and python -m vllm.entrypoints.cli.main serve",
            side(w("python3 -m vllm.entrypoints.cli.main serve model -tp 2")),
            vs("-tp 2"),
        ),
        (
            "a path to vllm",
            side(w("/usr/local/bin/vllm serve model -tp 2")),
            vs("-tp 2"),
        ),
        (
            "inside sh -c",
            side(vec!["sh".into(), "-c".into(), "exec vllm serve model -tp 2".into()]),
            vs("-tp 2"),
        ),
        (
            "behind env NAME=value",
            side(w("env VLLM_HOST_IP=10.0.0.2 vllm serve model -tp 2")),
            vs("-tp 2"),
        ),
        ("--flag=value is --flag value", vs("--max-num-seqs=64"), vs("--max-num-seqs 64")),
        ("-tp is --tensor-parallel-size", vs("-tp 2 -ep"), vs("--tensor-parallel-size=2 --enable-expert-parallel")),
        (
            "a headless node's short aliases",
            vs("-tp 4 -n 2 -r 1 --headless"),
            vs("-tp 4 --nnodes 2 --node-rank 0"),
        ),
        ("--long_name is --long-name", vs("--max_num_seqs 64"), vs("--max-num-seqs 64")),
        ("--port", vs("-tp 2 --port 8001"), vs("-tp 2 --port=9000")),
        ("--host", vs("-tp 2 --host 0.0.0.0"), vs("-tp 2")),
        ("--api-key", vs("-tp 2 --api-key sk-1"), vs("-tp 2 --api-key sk-2")),
        ("--served-model-name", vs("--served-model-name a b"), vs("--served-model-name c")),
        ("--uvicorn-log-level", vs("--uvicorn-log-level debug"), vs("")),
        (
            "a headless node and the head (node rank, master address)",
            vs("-tp 4 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29501 --headless"),
            vs("-tp 4 --nnodes 2 --node-rank 0 --master-addr 10.0.0.9 --master-port 1234"),
        ),
        (
            "a headless data-parallel node and the head",
            vs("-dp 4 -dpl 2 -dpr 2 -dpa 10.0.0.1 -dpp 13345 --headless -ep"),
            vs("-dp 4 -dpl 2 -dpa 10.0.0.7 -dpp 5555 -ep"),
        ),
        ("volatile: VLLM_HOST_IP", vs("").env("VLLM_HOST_IP", "10.0.0.1"), vs("")),
        ("volatile: VLLM_PORT", vs("").env("VLLM_PORT", "1"), vs("").env("VLLM_PORT", "2")),
        ("volatile: VLLM_LOGGING_LEVEL", vs("").env("VLLM_LOGGING_LEVEL", "DEBUG"), vs("")),
        ("volatile: VLLM_API_KEY", vs("").env("VLLM_API_KEY", "x"), vs("")),
        (
            "volatile: the cache location",
            vs("").env("VLLM_CACHE_ROOT", "/a"),
            vs("").env("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "/b"),
        ),
        ("not selected: CUDA_VISIBLE_DEVICES", vs("").env("CUDA_VISIBLE_DEVICES", "0,1"), vs("")),
        (
            "the --config file's path, same contents",
            vs("--config a.yaml").file("a.yaml", "max-num-seqs: 64\n"),
            vs("--config b.yaml").file("b.yaml", "max-num-seqs: 64\n"),
        ),
    ]
}

fn differ() -> Vec<(&'static str, Side, Side)> {
    vec![
        ("-tp", vs("-tp 2"), vs("-tp 4")),
        ("expert parallelism", vs("-tp 2 -ep"), vs("-tp 2")),
        (
            "--max-num-batched-tokens",
            vs("--max-num-batched-tokens 2048"),
            vs("--max-num-batched-tokens 4096"),
        ),
        ("the model", vs(""), side(w("vllm serve other"))),
        (
            "the model's config.json",
            vs(""),
            vs("").file("model/config.json", "{\"num_experts\": 64}"),
        ),
        (
            "the --config file's contents",
            vs("--config a.yaml").file("a.yaml", "max-num-seqs: 64\n"),
            vs("--config a.yaml").file("a.yaml", "max-num-seqs: 128\n"),
        ),
        (
            "a missing --config file",
            vs("--config a.yaml").file("a.yaml", "max-num-seqs: 64\n"),
            vs("--config a.yaml"),
        ),
        (
            "a VLLM_* switch (the engine's own key ignores it since 0.30.0)",
            vs("").env("VLLM_FLASHINFER_MOE_BACKEND", "latency"),
            vs(""),
        ),
        (
            "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
            vs("").env("VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS", "bf16_gemm"),
            vs(""),
        ),
        (
            "a FLASHINFER_* switch",
            vs("").env("FLASHINFER_CUDA_ARCH_LIST", "9.0a"),
            vs(""),
        ),
        (
            "the api_server module and vllm serve (entry points are told apart)",
            side(w(
                "python3 -m vllm.entrypoints.openai.api_server --model model",
            )),
            vs(""),
        ),
        ("--nnodes counts", vs("-tp 4 --nnodes 2"), vs("-tp 4")),
    ]
}

#[test]
fn vllm_launch_pairs_agree_and_differ() {
    let mut failures = Vec::new();
    for (what, a, b) in agree() {
        if fp(&a) != fp(&b) {
            failures.push(format!("should agree: {what}"));
        }
    }
    for (what, a, b) in differ() {
        if fp(&a) == fp(&b) {
            failures.push(format!("should differ: {what}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn auto_picks_the_profile_by_launch_shape() {
    let shapes: Vec<(Side, &str)> = vec![
        (vs("-tp 2"), "vllm"),
        (
            side(w(
                "python3 -m vllm.entrypoints.openai.api_server --model model",
            )),
            "vllm",
        ),
        (
            side(w("python -m vllm.entrypoints.cli.main serve model")),
            "vllm",
        ),
        (
            side(vec![
                "sh".into(),
                "-c".into(),
                "exec vllm serve model".into(),
            ]),
            "vllm",
        ),
        (
            side(vec![
                "bash".into(),
                "-c".into(),
                "VLLM_X=1 exec vllm serve model".into(),
            ]),
            "vllm",
        ),
        (side(w("env VLLM_X=1 vllm serve model")), "vllm"),
        (
            side(w("python3 -m sglang.launch_server --model-path model")),
            "sglang",
        ),
        (side(w("sglang serve model")), "sglang"),
        (side(w("python3 bench.py")), "sglang"),
        (side(w("vllm bench latency")), "sglang"),
    ];
    for (s, want) in shapes {
        let out = explain(&s);
        assert_eq!(
            out.lines().next(),
            Some(format!("profile {want}").as_str()),
            "{:?}:\n{out}",
            s.argv
        );
    }
}

#[test]
fn explain_shows_the_vllm_inputs_without_secrets() {
    let s =
        vs("-tp 2 --port 8001 --api-key sk-secret --hf-token hf_secret --hf-token=-hf_dash --config c.yaml --headless")
            .file("c.yaml", "max-num-seqs: 64\n")
            .env("VLLM_FLASHINFER_MOE_BACKEND", "latency")
            .env("VLLM_HOST_IP", "10.0.0.1");
    let out = explain(&s);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "profile vllm");
    assert_eq!(lines[1], "launch vllm serve, arguments in the order given");
    for want in [
        "arg \"--model\"",
        "arg \"model\"",
        "arg \"--tensor-parallel-size\"",
        "arg \"2\"",
        "ignored-arg \"--port\" (front end)",
        "ignored-arg \"8001\" (front end)",
        "ignored-arg \"--headless\" (per node)",
        "volatile-env \"VLLM_HOST_IP\"",
    ] {
        assert!(lines.contains(&want), "{want}:\n{out}");
    }
    assert!(out.contains("config \"c.yaml\" <sha256:"), "{out}");
    assert!(out.contains("model --model config.json <sha256:"), "{out}");
    assert!(
        out.contains("env \"VLLM_FLASHINFER_MOE_BACKEND\" <sha256:"),
        "{out}"
    );
    assert!(
        !out.contains("sk-secret")
            && !out.contains("hf_secret")
            && !out.contains("hf_dash")
            && !out.contains("latency"),
        "{out}"
    );
    assert!(out.contains("<redacted sha256:"), "{out}");
    // the last line is the fingerprint itself
    assert_eq!(lines.last().unwrap().trim(), fp(&s));
}

/// `vllm serve --port 8000 model`: vLLM's parser takes the model where it
/// stands, after options too (argparse fills the `model_tag` positional
/// with the first argument no option takes). Its `config.json` counts, and
/// the launch is the one with the model first.
#[test]
fn the_model_after_options_counts_by_its_config() {
    let moe = "{\"num_experts\": 64}";
    for args in [
        "--port 8000 model",
        "-tp 2 --enforce-eager model",
        "--served-model-name a b --max-num-seqs=8 model",
        "--cudagraph-capture-sizes 1 2 4 --enable-expert-parallel model",
        "--hf-token=x model",
        "--tensor-parallel 2 model",
    ] {
        let a = side(w(&format!("vllm serve {args}")));
        let b = side(w(&format!("vllm serve {args}"))).file("model/config.json", moe);
        let text = explain(&a);
        assert!(
            text.lines()
                .any(|l| l.starts_with("model --model config.json <sha256:")),
            "{args}: {text}"
        );
        assert_ne!(fp(&a), fp(&b), "{args}: the model's config.json counts");
    }
    assert_eq!(
        fp(&side(w("vllm serve --port 8000 -tp 2 model"))),
        fp(&vs("-tp 2")),
        "the model after options is the model first"
    );
    // a value is no model: `--max-num-seqs 8` takes the 8,
    // `--cudagraph-capture-sizes` every argument up to the next option
    assert_eq!(
        fp(&side(w(
            "vllm serve --max-num-seqs 8 --cudagraph-capture-sizes 1 2 -ep model"
        ))),
        fp(&vs("--max-num-seqs 8 --cudagraph-capture-sizes 1 2 -ep")),
    );
    // an option vLLM 0.33.0 does not know (a newer version's): either
    // argument after it may be the model, so both count by their config
    let newer = "vllm serve --a-newer-option model other";
    let both = side(w(newer)).file("other/config.json", moe);
    assert_ne!(fp(&side(w(newer))), fp(&both), "a possible model counts");
    assert_ne!(
        fp(&side(w(newer))),
        fp(&side(w(newer)).file("model/config.json", moe)),
        "a possible model counts"
    );
}
