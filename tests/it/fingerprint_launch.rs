//! The `sglang` profile fingerprints what a launch means, not how it is
//! spelled: a table of launch pairs, each from a real SGLang launch shape
//! (flags from SGLang 0.5.23's `server_args.py`), that must agree or must
//! differ, run through `keepwrap fingerprint`. Each side runs in its own
//! directory holding its files (config files, model directories, a hub
//! cache), so "the same path with other content" is two sides.

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

/// `python3 -m sglang.launch_server ARGS`
fn ls(args: &str) -> Side {
    side(w(&format!("python3 -m sglang.launch_server {args}")))
}

fn side(argv: Vec<String>) -> Side {
    Side {
        argv,
        env: vec![],
        files: vec![],
    }
}

/// `SHELL -c SCRIPT`
fn sh(shell: &str, script: &str) -> Side {
    side(vec![shell.into(), "-c".into(), script.into()])
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

const M: &str = "--model-path model";
const CFG: &str = "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 7168}";
const CFG2: &str = "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 4096}";

/// Every side has a model directory `model/` with a config.json.
fn fp(s: &Side) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("model")).unwrap();
    std::fs::write(dir.path().join("model/config.json"), CFG).unwrap();
    for (p, c) in &s.files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    run(dir.path(), s)
}

fn run(cwd: &Path, s: &Side) -> String {
    let out = Command::new(common::BIN)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("HF_HUB_CACHE", cwd.join("hub"))
        .env("PORT", "30000")
        .env("TP", "4")
        .envs(s.env.iter().copied())
        .arg("fingerprint")
        .arg("--")
        .args(&s.argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        s.argv,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn agree() -> Vec<(&'static str, Side, Side)> {
    let y = |c: &'static str| ls(&format!("{M} --config cfg.yaml")).file("cfg.yaml", c);
    vec![
        (
            "--flag=value is --flag value",
            ls(&format!("{M} --chunked-prefill-size=8192")),
            ls(&format!("{M} --chunked-prefill-size 8192")),
        ),
        (
            "the order of groups",
            ls(&format!("{M} --tp-size 4 --chunked-prefill-size 8192 --trust-remote-code")),
            ls(&format!("--trust-remote-code --chunked-prefill-size 8192 --tp-size 4 {M}")),
        ),
        ("python and python3", side(w(&format!("python -m sglang.launch_server {M}"))), ls(M)),
        (
            "an interpreter path",
            side(w(&format!("/usr/bin/python3 -m sglang.launch_server {M} --tp 2"))),
            ls(&format!("{M} --tp 2")),
        ),
        (
            "an interpreter version",
            side(w(&format!("python3.12 -m sglang.launch_server {M}"))),
            ls(M),
        ),
        (
            "sglang serve",
            side(w(&format!("sglang serve {M} --tp 4"))),
            ls(&format!("{M} --tp 4")),
        ),
        (
            "sglang serve with a positional model",
            side(w("sglang serve model --tp 4")),
            ls(&format!("{M} --tp 4")),
        ),
        (
            "sglang from a path",
            side(w(&format!("/usr/local/bin/sglang serve {M}"))),
            ls(M),
        ),
        ("the --model alias", ls("--model model --tp 2"), ls(&format!("{M} --tp 2"))),
        (
            "the --tensor-parallel-size alias",
            ls(&format!("{M} --tensor-parallel-size 8")),
            ls(&format!("{M} --tp-size 8")),
        ),
        (
            "the --tp abbreviation",
            ls(&format!("{M} --tp 8")),
            ls(&format!("{M} --tp-size=8")),
        ),
        (
            "--ep and --expert-parallel-size",
            ls(&format!("{M} --tp 8 --ep 8")),
            ls(&format!("{M} --tp 8 --expert-parallel-size 8")),
        ),
        (
            "--dp-size and --data-parallel-size",
            ls(&format!("{M} --dp-size 2")),
            ls(&format!("{M} --data-parallel-size 2")),
        ),
        (
            "a repeated option: the last wins",
            ls(&format!("{M} --tp 2 --tp 4")),
            ls(&format!("{M} --tp 4")),
        ),
        (
            "a repeated switch",
            ls(&format!("{M} --trust-remote-code --trust-remote-code")),
            ls(&format!("{M} --trust-remote-code")),
        ),
        (
            "--port",
            ls(&format!("{M} --port 30000")),
            ls(&format!("{M} --port=8000")),
        ),
        (
            "--host",
            ls(&format!("--host 0.0.0.0 {M}")),
            ls(M),
        ),
        (
            "--api-key",
            ls(&format!("{M} --api-key sk-1")),
            ls(&format!("{M} --api-key=sk-2")),
        ),
        (
            "--log-level and --log-requests",
            ls(&format!("{M} --log-level debug --log-requests")),
            ls(M),
        ),
        (
            "--dist-init-addr and its alias --nccl-init-addr",
            ls(&format!("{M} --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000")),
            ls(&format!("{M} --nccl-init-addr 10.0.0.9:5000 --node-rank 0 --nnodes 2")),
        ),
        (
            "--served-model-name",
            ls(&format!("{M} --served-model-name a")),
            ls(&format!("{M} --served-model-name b")),
        ),
        (
            "SGLANG_CACHE_DIR",
            ls(M).env("SGLANG_CACHE_DIR", "/a"),
            ls(M).env("SGLANG_CACHE_DIR", "/mnt/b"),
        ),
        (
            "a setting moved from argv to the config file",
            y("tp-size: 4\nchunked-prefill-size: 8192\n"),
            ls(&format!("{M} --tp-size 4 --chunked-prefill-size 8192")),
        ),
        (
            "the config file reformatted",
            y("tp-size: 4\nchunked-prefill-size: 8192\n"),
            y("# tuned for B200\n{ tp-size: 4,   chunked-prefill-size: 8192 }\n"),
        ),
        (
            "the config file's key order",
            y("tp-size: 4\nchunked-prefill-size: 8192\n"),
            y("chunked-prefill-size: 8192\ntp-size: 4\n"),
        ),
        (
            "a quoted number in the config file",
            y("chunked-prefill-size: '8192'\n"),
            y("chunked-prefill-size: 8192\n"),
        ),
        (
            "a store_true true in the config file is the flag",
            y("trust-remote-code: true\n"),
            ls(&format!("{M} --trust-remote-code")),
        ),
        (
            "a store_true false in the config file is nothing",
            y("enable-torch-compile: false\ntp-size: 2\n"),
            ls(&format!("{M} --tp-size 2")),
        ),
        (
            "the command line wins over the config file",
            ls(&format!("{M} --config cfg.yaml --chunked-prefill-size 8192"))
                .file("cfg.yaml", "chunked-prefill-size: 4096\n"),
            ls(&format!("{M} --chunked-prefill-size 8192")),
        ),
        (
            "a JSON config file",
            ls(&format!("{M} --config cfg.json"))
                .file("cfg.json", "{\"tp-size\": 4, \"mem-fraction-static\": 0.85}"),
            y("tp-size: 4\nmem-fraction-static: 0.85\n"),
        ),
        (
            "the port in the config file",
            y("port: 30000\ntp-size: 2\n"),
            y("port: 8000\ntp-size: 2\nhost: 0.0.0.0\n"),
        ),
        (
            "the config file's name and spelling of its path",
            ls(&format!("{M} --config ./a.yaml")).file("a.yaml", "tp-size: 2\n"),
            ls(&format!("{M} --config b.yaml")).file("b.yaml", "tp-size: 2\n"),
        ),
        (
            "sh -c exec ... --port $PORT",
            sh(
                "sh",
                "exec python3 -m sglang.launch_server --model-path model --port $PORT",
            ),
            ls(M),
        ),
        (
            "bash -c and sh -c",
            sh("bash", "python3 -m sglang.launch_server --model-path model --tp 4"),
            sh("sh", "exec python3 -m sglang.launch_server --model-path model --tp 4"),
        ),
        (
            "bash -lc and /bin/sh -c",
            side(vec![
                "bash".into(),
                "-lc".into(),
                "exec python3 -m sglang.launch_server --model-path model".into(),
            ]),
            sh("/bin/sh", "exec python3 -m sglang.launch_server --model-path \"model\""),
        ),
        (
            "${VAR} and $VAR",
            sh("sh", "exec python3 -m sglang.launch_server --model-path model --tp ${TP}"),
            ls(&format!("{M} --tp 4")),
        ),
        (
            "an assignment in the shell string is the environment",
            sh(
                "sh",
                "SGLANG_ENABLE_JIT_DEEPGEMM=0 exec python3 -m sglang.launch_server --model-path model",
            ),
            ls(M).env("SGLANG_ENABLE_JIT_DEEPGEMM", "0"),
        ),
        (
            "sh -c 'exec \"$@\"' with the launch as its arguments",
            side(
                ["sh", "-c", "exec \"$@\"", "sh"]
                    .into_iter()
                    .map(String::from)
                    .chain(w(&format!("python3 -m sglang.launch_server {M} --tp 2")))
                    .collect(),
            ),
            ls(&format!("{M} --tp 2")),
        ),
        (
            "env NAME=value before the launch is the environment",
            side(w(&format!(
                "/usr/bin/env SGLANG_ENABLE_JIT_DEEPGEMM=0 python3 -m sglang.launch_server {M}"
            ))),
            ls(M).env("SGLANG_ENABLE_JIT_DEEPGEMM", "0"),
        ),
        (
            "nargs='+' values move with their option",
            ls(&format!("{M} --cuda-graph-bs-decode 1 2 4 8 --tp 2")),
            ls(&format!("--tp 2 {M} --cuda-graph-bs-decode 1 2 4 8")),
        ),
        (
            "a BooleanOptionalAction: the last of --X/--no-X wins",
            ls(&format!("{M} --enable-tf32-matmul --no-enable-tf32-matmul")),
            ls(&format!("{M} --no-enable-tf32-matmul")),
        ),
        (
            "the weights are never read",
            ls(M).file("model/model-00001.safetensors", "a"),
            ls(M).file("model/model-00001.safetensors", "b"),
        ),
        (
            "the --speculative-draft-model alias",
            ls(&format!("{M} --speculative-algorithm EAGLE --speculative-draft-model model")),
            ls(&format!(
                "{M} --speculative-draft-model-path model --speculative-algorithm EAGLE"
            )),
        ),
        (
            "mem-fraction-static reordered with kv-cache-dtype",
            ls(&format!("{M} --mem-fraction-static=0.85 --kv-cache-dtype fp8_e5m2")),
            ls(&format!("--kv-cache-dtype=fp8_e5m2 --mem-fraction-static 0.85 {M}")),
        ),
        (
            "a hub id at the same cached revision",
            ls("--model-path org/name").file("hub/models--org--name/refs/main", "abc\n"),
            ls("--model-path org/name")
                .file("hub/models--org--name/refs/main", "abc\n")
                .file("hub/models--org--name/refs/dev", "zzz\n"),
        ),
    ]
}

fn differ() -> Vec<(&'static str, Side, Side)> {
    let y = |c: &'static str| ls(&format!("{M} --config cfg.yaml")).file("cfg.yaml", c);
    let two = |a: &str, b: &str| (ls(&format!("{M} {a}")), ls(&format!("{M} {b}")));
    let mut v = vec![];
    for (name, a, b) in [
        (
            "chunked-prefill-size",
            "--chunked-prefill-size 4096",
            "--chunked-prefill-size 8192",
        ),
        ("tp-size", "--tp 4", "--tp 8"),
        ("the order of repeats", "--tp 4 --tp 8", "--tp 8 --tp 4"),
        (
            "the order of --X and --no-X",
            "--enable-tf32-matmul --no-enable-tf32-matmul",
            "--no-enable-tf32-matmul --enable-tf32-matmul",
        ),
        (
            "the order inside a group",
            "--cuda-graph-bs-decode 1 2 4",
            "--cuda-graph-bs-decode 4 2 1",
        ),
        ("a switch", "--trust-remote-code", ""),
        ("quantization", "--quantization fp8", ""),
        (
            "kv-cache-dtype",
            "--kv-cache-dtype fp8_e5m2",
            "--kv-cache-dtype auto",
        ),
        ("dtype", "--dtype bfloat16", "--dtype float16"),
        ("ep-size", "--tp 8 --ep 4", "--tp 8 --ep 8"),
        ("dp-size", "--dp-size 2", "--dp-size 1"),
        ("nnodes", "--nnodes 2", ""),
        (
            "node-rank",
            "--nnodes 2 --node-rank 0",
            "--nnodes 2 --node-rank 1",
        ),
        (
            "attention-backend",
            "--attention-backend fa3",
            "--attention-backend flashinfer",
        ),
        (
            "moe-runner-backend",
            "--moe-runner-backend flashinfer_trtllm",
            "--moe-runner-backend cutlass",
        ),
        ("speculative-algorithm", "--speculative-algorithm EAGLE", ""),
        (
            "cuda-graph-max-bs",
            "--cuda-graph-max-bs 64",
            "--cuda-graph-max-bs 128",
        ),
        (
            "max-running-requests",
            "--max-running-requests 32",
            "--max-running-requests 64",
        ),
        (
            "enable-dp-attention",
            "--enable-dp-attention --dp-size 2",
            "--dp-size 2",
        ),
        ("max-prefill-tokens", "--max-prefill-tokens 16384", ""),
        ("disable-cuda-graph", "--disable-cuda-graph", ""),
        (
            "json-model-override-args",
            "--json-model-override-args {\"a\":1}",
            "--json-model-override-args {\"a\":2}",
        ),
        (
            "an unknown option moved",
            "--brand-new-flag 1 --tp 4",
            "--tp 4 --brand-new-flag 1",
        ),
        (
            "an unknown option before a switch",
            "--brand-new-flag --trust-remote-code",
            "--trust-remote-code --brand-new-flag",
        ),
        (
            "a value given to a switch",
            "--trust-remote-code=1",
            "--trust-remote-code",
        ),
        ("a stray token", "--tp-size 4 stray", "--tp-size 4"),
        ("the revision", "--revision r1", "--revision r2"),
        ("the model path", "", "--model-path other"),
    ] {
        let (x, y) = two(a, b);
        v.push((name, x, y));
    }
    v.extend([
        (
            "editing chunked-prefill-size in the config file",
            y("chunked-prefill-size: 4096\n"),
            y("chunked-prefill-size: 8192\n"),
        ),
        ("a config file's setting and none", y("tp-size: 2\n"), ls(M)),
        (
            "a missing config file and an empty one",
            ls(&format!("{M} --config cfg.yaml")),
            y(""),
        ),
        (
            "an unparsable config file and an empty one",
            y("tp-size: [2\n"),
            y(""),
        ),
        (
            "an unreadable and an unparsable config file",
            ls(&format!("{M} --config cfg.yaml")),
            y("- a list\n"),
        ),
        (
            "--config=FILE (which SGLang 0.5.23 does not merge) and --config FILE",
            ls(&format!("{M} --config=cfg.yaml")).file("cfg.yaml", "tp-size: 2\n"),
            y("tp-size: 2\n"),
        ),
        (
            "the config file under the command line is another launch",
            y("chunked-prefill-size: 4096\n"),
            ls(&format!("{M} --chunked-prefill-size 8192")),
        ),
        (
            "YAML 1.1 on is true, quoted 'on' is a string",
            y("reasoning-parser: on\n"),
            y("reasoning-parser: 'on'\n"),
        ),
        (
            "two config files keepwrap does not interpret (YAML tags)",
            y("chunked-prefill-size: !!str 4096\n"),
            y("chunked-prefill-size: !!str 8192\n"),
        ),
        (
            "mem-fraction-static in the config file",
            y("mem-fraction-static: 0.8\n"),
            y("mem-fraction-static: 0.85\n"),
        ),
        (
            "a dash key and an underscore key (SGLang writes --tp_size)",
            y("tp-size: 4\n"),
            y("tp_size: 4\n"),
        ),
        (
            "a mapping in the config file",
            y("json-model-override-args: {a: 1}\n"),
            y("json-model-override-args: {a: 2}\n"),
        ),
        (
            "the model's config.json",
            ls(M),
            ls(M).file("model/config.json", CFG2),
        ),
        (
            "the model's hf_quant_config.json",
            ls(M),
            ls(M).file("model/hf_quant_config.json", "{\"quant_algo\": \"FP8\"}"),
        ),
        (
            "the draft model's config.json",
            ls(&format!(
                "{M} --speculative-algorithm EAGLE --speculative-draft-model-path draft"
            ))
            .file("draft/config.json", CFG),
            ls(&format!(
                "{M} --speculative-algorithm EAGLE --speculative-draft-model-path draft"
            ))
            .file("draft/config.json", CFG2),
        ),
        (
            "the hub cache's revision of a hub id",
            ls("--model-path org/name").file("hub/models--org--name/refs/main", "abc\n"),
            ls("--model-path org/name").file("hub/models--org--name/refs/main", "def\n"),
        ),
        (
            "a hub id cached and not",
            ls("--model-path org/name").file("hub/models--org--name/refs/main", "abc\n"),
            ls("--model-path org/name"),
        ),
        (
            "an SGLANG_ variable",
            ls(M).env("SGLANG_ENABLE_JIT_DEEPGEMM", "1"),
            ls(M).env("SGLANG_ENABLE_JIT_DEEPGEMM", "0"),
        ),
        (
            "a variable expanded in a shell wrapper",
            sh(
                "sh",
                "exec python3 -m sglang.launch_server --model-path model --tp $TP",
            ),
            sh(
                "sh",
                "exec python3 -m sglang.launch_server --model-path model --tp $TP",
            )
            .env("TP", "8"),
        ),
        (
            "a shell string that cannot be read and the launch inside",
            sh(
                "sh",
                "python3 -m sglang.launch_server --model-path model 2>&1 | tee log",
            ),
            ls(M),
        ),
        (
            "env -i (a cleared environment) and the launch alone",
            side(w(&format!("env -i python3 -m sglang.launch_server {M}"))).env("SGLANG_A", "1"),
            ls(M).env("SGLANG_A", "1"),
        ),
        (
            "launch_server and bench_one_batch",
            ls(M),
            side(w(&format!("python3 -m sglang.bench_one_batch {M}"))),
        ),
        (
            "sglang serve --model-type",
            side(w(&format!("sglang serve {M} --model-type diffusion"))),
            side(w(&format!("sglang serve {M}"))),
        ),
    ]);
    v
}

fn check(cases: Vec<(&'static str, Side, Side)>, same: bool) {
    let mut wrong = Vec::new();
    for (name, a, b) in &cases {
        let (fa, fb) = (fp(a), fp(b));
        if (fa == fb) != same {
            wrong.push(*name);
        }
    }
    assert!(
        wrong.is_empty(),
        "these pairs should {}: {wrong:#?}",
        if same { "agree" } else { "differ" }
    );
}

#[test]
fn launches_that_mean_the_same_agree() {
    let cases = agree();
    assert!(cases.len() >= 40, "{}", cases.len());
    check(cases, true);
}

#[test]
fn launches_that_mean_different_things_differ() {
    let cases = differ();
    assert!(cases.len() >= 40, "{}", cases.len());
    check(cases, false);
}
