//! Black-box tests of `keepwrap fingerprint`: parity of the `seed` profile
//! with the seed itself (tests/fixtures/seed_autotune_keep.py, run by
//! tests/py/seed_oracle.py), the `sglang` profile, extensions, `--explain`
//! redaction and bad input.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Command, Output};

use assert_cmd::prelude::*;
use predicates::prelude::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use proptest::{bool, collection, sample};
use sha2::{Digest, Sha256};

fn keepwrap() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_keepwrap"));
    cmd.env_clear();
    cmd
}

fn os(b: &[u8]) -> OsString {
    OsString::from_vec(b.to_vec())
}

/// `keepwrap fingerprint OPTS -- ARGV` with exactly `env`; asserts success
/// and one line of 64 lowercase hex.
fn fp_bytes(opts: &[&str], argv: &[Vec<u8>], env: &[(Vec<u8>, Vec<u8>)]) -> String {
    let out = keepwrap()
        .arg("fingerprint")
        .args(opts)
        .arg("--")
        .args(argv.iter().map(|a| os(a)))
        .envs(env.iter().map(|(k, v)| (os(k), os(v))))
        .output()
        .expect("run keepwrap");
    assert!(
        out.status.success(),
        "keepwrap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).expect("ascii stdout");
    let line = s.strip_suffix('\n').expect("one line ending in a newline");
    assert!(
        line.len() == 64
            && line
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "not a sha256 hex line: {s:?}"
    );
    line.to_string()
}

fn fp(opts: &[&str], argv: &[&str], env: &[(&str, &str)]) -> String {
    let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
    let env: Vec<(Vec<u8>, Vec<u8>)> = env
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    fp_bytes(opts, &argv, &env)
}

fn run(opts: &[&str], argv: &[&str], env: &[(&str, &str)]) -> Output {
    keepwrap()
        .arg("fingerprint")
        .args(opts)
        .arg("--")
        .args(argv)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn python() -> Command {
    let mut cmd = Command::new("python3");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PYTHONUTF8", "1");
    cmd
}

fn hexs(b: &[u8]) -> String {
    crate::common::hex(b)
}

fn sha12(b: &[u8]) -> String {
    crate::common::hex(Sha256::digest(b))[..12].to_string()
}

// ---------------------------------------------------------------- seed parity

/// Pieces of argv and environment strings: ASCII, JSON escapes, controls,
/// non-ASCII, astral, and every kind of byte run Python's UTF-8 decoder
/// rejects (lone continuation, overlong, encoded surrogate, above U+10FFFF,
/// truncated sequences, invalid lead bytes). No NUL (impossible in argv and
/// environ) and no `=` (impossible in a name; values get their own).
const PIECES: &[&[u8]] = &[
    b"a",
    b"Z",
    b"0",
    b"_",
    b" ",
    b"--tp",
    b"-",
    b"\"",
    b"\\",
    b"/",
    b"\n",
    b"\r",
    b"\t",
    b"\x08",
    b"\x0c",
    b"\x01",
    b"\x1f",
    b"\x7f",
    b"\xc3\xa9",         // é
    b"\xe4\xb8\xad",     // 中
    b"\xe2\x80\xa8",     // U+2028
    b"\xf0\x9f\xa6\x80", // 🦀
    b"\xef\xbf\xbf",     // U+FFFF
    b"\xf4\x8f\xbf\xbf", // U+10FFFF, the canonical module's sentinel
    b"\xed\x9f\xbf",     // U+D7FF
    b"\xee\x80\x80",     // U+E000
    b"\xc2\x80",         // U+0080
    b"\xc3\xbf",         // U+00FF
    b"\x80",
    b"\xbf",
    b"\xff",
    b"\xfe",
    b"\xc0\x80",             // overlong NUL
    b"\xc1\xbf",             // overlong
    b"\xe0\x80\xaf",         // overlong /
    b"\xc3",                 // truncated 2-byte
    b"\xe2\x82",             // truncated 3-byte
    b"\xf0\x9f\xa6",         // truncated 4-byte
    b"\xed\xa0\x80",         // encoded surrogate U+D800
    b"\xed\xbf\xbf",         // encoded surrogate U+DFFF
    b"\xf4\x90\x80\x80",     // above U+10FFFF
    b"\xf8\x88\x80\x80\x80", // 5-byte form
];

const NAME_PREFIXES: &[&str] = &[
    "SGLANG_", "DSV41_", "SPARK_", "B12X_", "NCCL_", "sglang_", "SGLANG", "NCCL", "FOO_", "PATH",
    "X", "",
];

/// Up to `max_pieces` pieces, each after an `=` one time in twelve when
/// `allow_eq`.
fn random_bytes(max_pieces: usize, allow_eq: bool) -> impl Strategy<Value = Vec<u8>> {
    let eq = if allow_eq { 1.0 / 12.0 } else { 0.0 };
    collection::vec((bool::weighted(eq), sample::select(PIECES)), 0..=max_pieces).prop_map(
        |pieces| {
            let mut out = Vec::new();
            for (eq, piece) in pieces {
                if eq {
                    out.push(b'=');
                }
                out.extend_from_slice(piece);
            }
            out
        },
    )
}

#[derive(Clone, Debug)]
struct Case {
    argv: Vec<Vec<u8>>,
    env: Vec<(Vec<u8>, Vec<u8>)>,
}

fn seed_volatile_names() -> Vec<&'static str> {
    let src = include_str!("../fixtures/seed_autotune_keep.py");
    // every quoted DSV41_/SGLANG_ name in the seed's two volatile tuples
    let start = src.find("_VOLATILE = (").unwrap();
    let end = src.find("def _volatile").unwrap();
    src[start..end]
        .split('"')
        .filter(|s| s.starts_with("DSV41_") || s.starts_with("SGLANG_"))
        .collect()
}

/// A launch: random arguments, random names under the prefixes, some of
/// the seed's volatile names, and the TP4 launcher variable or a near miss.
fn random_case(volatile: Vec<&'static str>) -> impl Strategy<Value = Case> {
    let launcher = prop_oneof![
        2 => Just(Some(b"tp4".to_vec())),
        1 => sample::select(vec![&b"TP4"[..], b"tp4 ", b"tp3", b""]).prop_map(|v| Some(v.to_vec())),
        2 => Just(None),
    ];
    (
        collection::vec(random_bytes(6, true), 1..15),
        collection::vec(
            (
                sample::select(NAME_PREFIXES),
                random_bytes(3, false),
                random_bytes(5, true),
            ),
            0..12,
        ),
        collection::vec((sample::select(volatile), random_bytes(2, true)), 0..4),
        launcher,
    )
        .prop_map(|(argv, named, volatile, launcher)| {
            let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for (prefix, rest, value) in named {
                let mut name = prefix.as_bytes().to_vec();
                name.extend(rest);
                if name.is_empty() {
                    name.push(b'Y');
                }
                env.push((name, value));
            }
            for (name, value) in volatile {
                env.push((name.as_bytes().to_vec(), value));
            }
            if let Some(v) = launcher {
                env.push((b"DSV41_LAUNCHER".to_vec(), v));
            }
            // one value per name, as a real environment has
            let mut seen = std::collections::HashSet::new();
            env.retain(|(k, _)| seen.insert(k.clone()));
            Case { argv, env }
        })
}

fn fixed_cases(volatile: &[&str]) -> Vec<Case> {
    let b = |s: &str| s.as_bytes().to_vec();
    let typical_argv: Vec<Vec<u8>> = [
        "/opt/sglang/python/sglang/launch_server.py",
        "--model-path",
        "/models/DeepSeek-V4",
        "--tp",
        "4",
        "--api-key",
        "sk-secret",
        "--port",
        "30000",
    ]
    .iter()
    .map(|s| b(s))
    .collect();
    let mut all_volatile: Vec<(Vec<u8>, Vec<u8>)> =
        volatile.iter().map(|n| (b(n), b("1"))).collect();
    all_volatile.push((b("SGLANG_KEPT"), b("x")));
    let mut all_volatile_tp4 = all_volatile.clone();
    all_volatile_tp4.push((b("DSV41_LAUNCHER"), b("tp4")));
    vec![
        Case {
            argv: vec![b("python")],
            env: vec![],
        },
        Case {
            argv: vec![b("")],
            env: vec![],
        },
        Case {
            argv: vec![b(""), b(""), b("")],
            env: vec![(b("SGLANG_EMPTY"), b(""))],
        },
        Case {
            argv: typical_argv.clone(),
            env: vec![
                (b("SGLANG_RUN_ID"), b("20260924T101010")),
                (b("NCCL_DEBUG"), b("INFO")),
                (b("PATH"), b("/usr/bin")),
            ],
        },
        // every volatile name, with and without the TP4 launcher
        Case {
            argv: typical_argv.clone(),
            env: all_volatile,
        },
        Case {
            argv: typical_argv.clone(),
            env: all_volatile_tp4,
        },
        // the sentinel itself next to what its partner looks like
        Case {
            argv: vec![
                b("a\u{10FFFF}\u{80}b"),
                b("\u{10FFFF}"),
                b("\u{10FFFF}\u{10FFFF}"),
                vec![0xF4, 0x8F, 0xBF, 0xBF, 0xC2, 0x80, 0x80],
            ],
            env: vec![(b("SGLANG_\u{10FFFF}"), vec![0xF4, 0x8F, 0xBF, 0xBF, 0x80])],
        },
        // names that differ only by an undecodable byte vs a real char, for sort order
        Case {
            argv: vec![b("x")],
            env: vec![
                (b"SGLANG_\x80".to_vec(), b("1")),
                (b"SGLANG_\xff".to_vec(), b("2")),
                (b("SGLANG_\u{D7FF}"), b("3")),
                (b("SGLANG_\u{E000}"), b("4")),
                (b("SGLANG_\u{FFFF}"), b("5")),
                (b("SGLANG_\u{1F980}"), b("6")),
                (b("SGLANG_\u{10FFFF}"), b("7")),
                (b("SGLANG_"), b("8")),
                (b("SGLANG_a"), b("9")),
                (b("SGLANG_\u{7f}"), b("10")),
            ],
        },
        // thousands of arguments
        Case {
            argv: (0..3000)
                .map(|i| format!("--arg{i}=é{i}").into_bytes())
                .collect(),
            env: vec![],
        },
        // one long argument and one long value
        Case {
            argv: vec![b("python"), "\u{1F980}\"\\\x7f".repeat(15_000).into_bytes()],
            env: vec![(b("NCCL_LONG"), b"\xff\x01".repeat(30_000))],
        },
    ]
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn seed_profile_matches_the_seed_bit_for_bit() {
    let volatile = seed_volatile_names();
    assert!(
        volatile.len() == 35,
        "seed volatile names parsed: {}",
        volatile.len()
    );
    let mut cases = fixed_cases(&volatile);
    // 300 cases from proptest's deterministic generator, checked against
    // the oracle in one run of it.
    let mut runner = TestRunner::deterministic();
    let strategy = random_case(volatile.clone());
    for _ in 0..300 {
        cases.push(strategy.new_tree(&mut runner).unwrap().current());
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    let json: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "argv": c.argv.iter().map(|a| hexs(a)).collect::<Vec<_>>(),
                "env": c.env.iter().map(|(k, v)| [hexs(k), hexs(v)]).collect::<Vec<_>>(),
            })
        })
        .collect();
    std::fs::write(&file, serde_json::to_vec(&json).unwrap()).unwrap();
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/seed_oracle.py");
    let out = python().arg(&oracle).arg(&file).output().expect("python3");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(expected.len(), cases.len());

    for (i, (case, want)) in cases.iter().zip(&expected).enumerate() {
        let got = fp_bytes(&["--profile", "seed"], &case.argv, &case.env);
        assert_eq!(
            &got,
            want,
            "case {i}: argv {:?} env {:?}",
            case.argv
                .iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>(),
            case.env
                .iter()
                .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v)))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn seed_profile_is_also_chosen_by_keepwrap_profile_env() {
    let argv = ["python", "--api-key", "k", "--port", "1"];
    let env = [("SGLANG_RUN_ID", "1"), ("DSV41_X", "y")];
    let by_flag = fp(&["--profile", "seed"], &argv, &env);
    let mut env_with = env.to_vec();
    env_with.push(("KEEPWRAP_PROFILE", "seed"));
    assert_eq!(fp(&[], &argv, &env_with), by_flag);
    // and it is not the default: sglang ignores --api-key and --port
    assert_ne!(fp(&[], &argv, &env), by_flag);
}

// ------------------------------------------------------------- sglang profile

/// sha256 of Python's json.dumps(payload, sort_keys=True) for str-only input.
fn python_fingerprint(argv: &[&str], env: &[(&str, &str)]) -> String {
    let payload = serde_json::json!({
        "argv": argv,
        "env": env.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
    });
    let out = python()
        .args([
            "-c",
            "import hashlib, json, sys; p = json.loads(sys.argv[1]); \
             print(hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest())",
        ])
        .arg(payload.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

const LAUNCH: &[&str] = &[
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/m",
    "--tp",
    "4",
];

fn launch(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = LAUNCH.to_vec();
    v.extend_from_slice(extra);
    v
}

/// sha256 of Python's json.dumps(payload, sort_keys=True).
fn python_sha(payload: &serde_json::Value) -> String {
    let out = python()
        .args([
            "-c",
            "import hashlib, json, sys; p = json.loads(sys.argv[1]); \
             print(hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest())",
        ])
        .arg(payload.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn sglang_profile_is_sha256_of_python_json_of_the_kept_inputs() {
    let env = [
        ("SGLANG_ENABLE_JIT_DEEPGEMM", "0"),
        ("SGL_CHUNKED_PREFIX_CACHE_THRESHOLD", "4096"),
        ("FLASHINFER_CUDA_ARCH_LIST", "12.1a"),
        ("NCCL_P2P_LEVEL", "NVL"),
        ("NCCL_DEBUG", "INFO"),
        ("SGLANG_RUN_ID", "abc"),
        ("SGLANG_CACHE_DIR", "/cache"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        // no interpreter on it: the engine's version is "not found"
        ("PATH", "/nonexistent/bin"),
        ("DSV41_FOO", "1"),
    ];
    let kept_env = [
        ("SGLANG_ENABLE_JIT_DEEPGEMM", "0"),
        ("SGL_CHUNKED_PREFIX_CACHE_THRESHOLD", "4096"),
        ("FLASHINFER_CUDA_ARCH_LIST", "12.1a"),
        ("NCCL_P2P_LEVEL", "NVL"),
    ];
    let env_json: serde_json::Map<String, serde_json::Value> = kept_env
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    // An SGLang server launch: its canonical form, groups by attribute.
    let argv = launch(&[
        "--host",
        "0.0.0.0",
        "--port=30000",
        "--log-requests",
        "--chunked-prefill-size",
        "8192",
    ]);
    let want = python_sha(&serde_json::json!({
        "launch": {
            "args": [
                ["--chunked-prefill-size", "8192"],
                ["--model-path", "/models/m"],
                ["--tp-size", "4"],
            ],
            "models": {"--model-path": {"path": "no such directory"}},
            "engine": {"sglang": "not found"},
        },
        "env": env_json,
    }));
    assert_eq!(fp(&[], &argv, &env), want);
    assert_eq!(fp(&["--profile", "sglang"], &argv, &env), want);
    // Any other command: argv as given, minus the ignored arguments.
    let bench = ["python3", "bench.py", "--port", "1", "--tp", "4"];
    assert_eq!(
        fp(&[], &bench, &env),
        python_fingerprint(&["python3", "bench.py", "--tp", "4"], &kept_env)
    );
}

#[test]
fn sglang_profile_drops_ignored_args_in_both_forms() {
    let base = fp(&[], LAUNCH, &[]);
    for extra in [
        &["--host", "0.0.0.0"][..],
        &["--host=0.0.0.0"],
        &["--port", "30001"],
        &["--port=30001"],
        &["--api-key", "sk-1"],
        &["--api-key=sk-1"],
        &["--admin-api-key", "a"],
        &["--served-model-name", "m"],
        &["--log-level", "debug", "--log-level-http=warning"],
        &[
            "--ssl-keyfile",
            "/k.pem",
            "--ssl-certfile",
            "/c.pem",
            "--ssl-ca-certs=/ca",
            "--ssl-keyfile-password",
            "pw",
        ],
        &["--enable-ssl-refresh"],
        &["--dist-init-addr", "10.1.2.3:5000", "--nccl-port", "29500"],
        &[
            "--log-requests",
            "--log-requests-level",
            "2",
            "--decode-log-interval",
            "40",
        ],
        &[
            "--enable-metrics",
            "--enable-metrics-for-all-schedulers",
            "--show-time-cost",
        ],
        &[
            "--enable-trace",
            "--otlp-traces-endpoint",
            "localhost:4317",
            "--crash-dump-folder",
            "/tmp/d",
        ],
    ] {
        assert_eq!(fp(&[], &launch(extra), &[]), base, "extra args {extra:?}");
    }
    // anywhere in the command line, and not only at the end
    let mut mid = vec![
        "python3",
        "-m",
        "sglang.launch_server",
        "--port",
        "1",
        "--model-path",
        "/models/m",
    ];
    mid.extend(["--host=h", "--tp", "4"]);
    assert_eq!(fp(&[], &mid, &[]), base);
}

#[test]
fn boolean_ignored_flags_do_not_swallow_the_next_token() {
    let tp4 = fp(&[], &["python", "--tp", "4"], &[]);
    assert_eq!(
        fp(&[], &["python", "--log-requests", "--tp", "4"], &[]),
        tp4
    );
    assert_eq!(
        fp(&[], &["python", "--enable-metrics", "--tp", "4"], &[]),
        tp4
    );
    // a switch followed by a non-flag token keeps that token
    assert_eq!(
        fp(&[], &["python", "--log-requests", "stray"], &[]),
        fp(&[], &["python", "stray"], &[])
    );
    // a value flag followed by a flag does not take it as its value
    assert_eq!(fp(&[], &["python", "--host", "--tp", "4"], &[]), tp4);
    // argv[0] is never an ignored argument
    assert_ne!(fp(&[], &["--port", "1"], &[]), fp(&[], &["1"], &[]));
    // after a bare `--` everything is positional and kept
    assert_ne!(
        fp(&[], &["python", "--", "--port", "1"], &[]),
        fp(&[], &["python", "--"], &[])
    );
}

#[test]
fn shape_changing_args_change_the_fingerprint() {
    let base = fp(&[], &launch(&["--chunked-prefill-size", "8192"]), &[]);
    for argv in [
        launch(&["--chunked-prefill-size", "4096"]),
        launch(&[]),
        launch(&[
            "--chunked-prefill-size",
            "8192",
            "--cuda-graph-max-bs",
            "64",
        ]),
        launch(&[
            "--chunked-prefill-size",
            "8192",
            "--max-running-requests",
            "32",
        ]),
        launch(&["--chunked-prefill-size", "8192", "--ep", "4"]),
        launch(&["--chunked-prefill-size", "8192", "--quantization", "fp8"]),
        launch(&["--chunked-prefill-size", "8192", "--dtype", "bfloat16"]),
        launch(&[
            "--chunked-prefill-size",
            "8192",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
        ]),
        vec![
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/m",
            "--tp",
            "8",
            "--chunked-prefill-size",
            "8192",
        ],
    ] {
        assert_ne!(fp(&[], &argv, &[]), base, "argv {argv:?}");
    }
}

#[test]
fn sglang_env_selection_and_volatile_names() {
    let base_env = [
        ("SGLANG_ENABLE_TORCH_COMPILE", "0"),
        ("NCCL_P2P_LEVEL", "NVL"),
    ];
    let base = fp(&[], LAUNCH, &base_env);
    let with = |extra: (&'static str, &'static str)| {
        let mut e = base_env.to_vec();
        e.push(extra);
        fp(&[], LAUNCH, &e)
    };
    // volatile: present or changed, same fingerprint
    for name in [
        "SGLANG_RUN_ID",
        "SGLANG_HOST_IP",
        "SGLANG_PORT",
        "SGLANG_BACKUP_PORT_BASE",
        "SGLANG_TCP_STORE_PORT",
        "SGLANG_LOGGING_CONFIG_PATH",
        "SGLANG_LOG_GC",
        "SGLANG_LOG_FORWARD_ITERS",
        "SGLANG_LOG_MS",
        "SGLANG_LOG_REQUEST_EXCEEDED_MS",
        "SGLANG_LOG_REQUEST_HEADERS",
        "SGLANG_LOG_SCHEDULER_STATUS_TARGET",
        "SGLANG_LOG_SCHEDULER_STATUS_INTERVAL",
        "SGLANG_TORCH_PROFILER_DIR",
        "SGLANG_CUDA_COREDUMP_DIR",
        "FLASHINFER_LOGLEVEL",
        "FLASHINFER_LOGDEST",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG_FILE",
        "NCCL_COMM_ID",
    ] {
        assert_eq!(with((name, "1")), base, "{name}=1");
        assert_eq!(with((name, "2")), base, "{name}=2");
    }
    // not selected at all
    for name in [
        "CUDA_VISIBLE_DEVICES",
        "PATH",
        "HOME",
        "DSV41_X",
        "SPARK_X",
        "B12X_X",
        "sglang_x",
        "SGLANG",
    ] {
        assert_eq!(with((name, "1")), base, "{name}");
    }
    // selected: any change is a different launch
    for name in [
        "SGLANG_X",
        "SGL_X",
        "FLASHINFER_X",
        "NCCL_X",
        "SGLANG_FLASHINFER_AUTOTUNE_EXTEND",
    ] {
        assert_ne!(with((name, "1")), base, "{name}");
        assert_ne!(with((name, "1")), with((name, "2")), "{name}");
    }
    let mut changed = base_env.to_vec();
    changed[1].1 = "SYS";
    assert_ne!(fp(&[], LAUNCH, &changed), base);
}

#[test]
fn extensions_by_flag_and_by_keepwrap_env_lists() {
    let argv = launch(&["--foo", "1", "--bar=2", "--baz", "--tp-extra", "3"]);
    let env = [
        ("MYAPP_MODE", "a"),
        ("OTHER_X", "b"),
        ("SGLANG_NOISE", "c"),
        ("SGLANG_NOISE2", "d"),
    ];

    // --env-prefix: MYAPP_ now counts
    let plain = fp(&[], &argv, &env);
    let with_prefix = fp(&["--env-prefix", "MYAPP_"], &argv, &env);
    assert_ne!(with_prefix, plain);
    let mut env2 = env.to_vec();
    env2[0].1 = "z";
    assert_ne!(fp(&["--env-prefix", "MYAPP_"], &argv, &env2), with_prefix);
    assert_eq!(fp(&[], &argv, &env2), plain);
    // the same by KEEPWRAP_ENV_PREFIX, and comma lists equal repeated flags
    let mut keep_env = env.to_vec();
    keep_env.push(("KEEPWRAP_ENV_PREFIX", "MYAPP_"));
    assert_eq!(fp(&[], &argv, &keep_env), with_prefix);
    let both = fp(
        &["--env-prefix", "MYAPP_", "--env-prefix", "OTHER_"],
        &argv,
        &env,
    );
    assert_eq!(fp(&["--env-prefix=MYAPP_,OTHER_"], &argv, &env), both);
    let mut keep_env = env.to_vec();
    keep_env.push(("KEEPWRAP_ENV_PREFIX", "MYAPP_,OTHER_"));
    assert_eq!(fp(&[], &argv, &keep_env), both);
    // an empty prefix selects nothing (not everything)
    let mut keep_env = env.to_vec();
    keep_env.push(("KEEPWRAP_ENV_PREFIX", ","));
    assert_eq!(fp(&[], &argv, &keep_env), plain);

    // --volatile-env: equal to the environment without those names
    let without_noise = fp(&[], &argv, &env[..2]);
    assert_eq!(
        fp(
            &[
                "--volatile-env",
                "SGLANG_NOISE",
                "--volatile-env",
                "SGLANG_NOISE2"
            ],
            &argv,
            &env
        ),
        without_noise
    );
    assert_eq!(
        fp(&["--volatile-env=SGLANG_NOISE,SGLANG_NOISE2"], &argv, &env),
        without_noise
    );
    let mut keep_env = env.to_vec();
    keep_env.push(("KEEPWRAP_VOLATILE_ENV", "SGLANG_NOISE,SGLANG_NOISE2"));
    assert_eq!(fp(&[], &argv, &keep_env), without_noise);

    // --ignore-arg: FLAG VALUE, FLAG=VALUE, and FLAG before a `--` token
    let reduced = fp(&[], &launch(&["--tp-extra", "3"]), &env);
    let opts = [
        "--ignore-arg=--foo",
        "--ignore-arg=--bar",
        "--ignore-arg=--baz",
    ];
    assert_eq!(fp(&opts, &argv, &env), reduced);
    assert_eq!(
        fp(&["--ignore-arg=--foo,--bar,--baz"], &argv, &env),
        reduced
    );
    // a bare name means --name
    assert_eq!(fp(&["--ignore-arg", "foo,bar,baz"], &argv, &env), reduced);
    let mut keep_env = env.to_vec();
    keep_env.push(("KEEPWRAP_IGNORE_ARG", "--foo,--bar,--baz"));
    assert_eq!(fp(&[], &argv, &keep_env), reduced);
    // FLAG VALUE where VALUE starts with a single dash is still a value
    assert_eq!(
        fp(
            &["--ignore-arg=--foo"],
            &["python", "--foo", "-1", "--tp", "4"],
            &[]
        ),
        fp(&[], &["python", "--tp", "4"], &[])
    );
    // a prefix of a flag is not that flag
    assert_eq!(
        fp(&["--ignore-arg=--tp"], &argv, &env),
        fp(&["--ignore-arg=--tp"], &argv, &env)
    );
    assert_ne!(
        fp(&["--ignore-arg=--tp"], &["python", "--tp-extra", "3"], &[]),
        fp(&[], &["python"], &[])
    );
    // a user ignore-arg naming a profile switch keeps the switch semantics
    assert_eq!(
        fp(
            &["--ignore-arg=--log-requests"],
            &["python", "--log-requests", "x"],
            &[]
        ),
        fp(&[], &["python", "x"], &[])
    );
    // extensions apply to the seed profile as well
    assert_eq!(
        fp(
            &["--profile", "seed", "--ignore-arg=--port"],
            &["python", "--port", "1"],
            &[]
        ),
        fp(&["--profile", "seed"], &["python"], &[])
    );
}

// -------------------------------------------------------------------- explain

const CANARY: &str = "CANARY-7f3a9b2c-secret";
const CANARY2: &str = "CANARY-plain-env-value";

#[test]
fn explain_never_shows_secrets_or_env_values() {
    let env = [
        ("SGLANG_API_KEY", CANARY),
        ("HF_TOKEN", CANARY),
        ("SGLANG_PLAIN", CANARY2),
        ("NCCL_DEBUG", CANARY2),
        ("PATH", CANARY2),
        ("MYAPP_PASSWORD", CANARY),
    ];
    for (profile, extra) in [
        ("sglang", &[][..]),
        ("seed", &[][..]),
        (
            "sglang",
            &["--env-prefix=MYAPP_", "--ignore-arg=--my-token"][..],
        ),
    ] {
        let admin = format!("--admin-api-key={CANARY}");
        let argv = [
            "python",
            "-m",
            "sglang.launch_server",
            "--api-key",
            CANARY,
            "--api-key=",
            admin.as_str(),
            "--hf-token",
            CANARY,
            "--my-token",
            CANARY,
            "--tp",
            "4",
        ];
        let mut opts = vec!["--profile", profile, "--explain"];
        opts.extend_from_slice(extra);
        let out = run(&opts, &argv, &env);
        assert!(out.status.success());
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        for text in [&stdout, &stderr] {
            assert!(
                !text.contains("CANARY"),
                "{profile} {extra:?} leaked:\n{text}"
            );
        }
        // the last line is the fingerprint, as the plain command prints it
        let mut plain_opts = vec!["--profile", profile];
        plain_opts.extend_from_slice(extra);
        let plain = fp(&plain_opts, &argv, &env);
        assert_eq!(stdout.lines().last().unwrap(), plain);
        assert!(
            stdout.contains(&format!("<redacted sha256:{}>", sha12(CANARY.as_bytes()))),
            "{stdout}"
        );
    }
    // with --explain set by KEEPWRAP_EXPLAIN too
    let mut env2 = env.to_vec();
    env2.push(("KEEPWRAP_EXPLAIN", "true"));
    let out = run(&[], &["python", "--api-key", CANARY], &env2);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("profile sglang\n") && !stdout.contains("CANARY"),
        "{stdout}"
    );
}

#[test]
fn explain_format_is_stable() {
    let env = [
        ("SGLANG_B", "2"),
        ("SGLANG_A", "1"),
        ("SGLANG_API_KEY", "k"),
        ("SGLANG_RUN_ID", "now"),
        ("PATH", "/bin"),
    ];
    // any other command: argv lines
    let argv = [
        "python",
        "bench.py",
        "--port",
        "30000",
        "--tp",
        "4",
        "--api-key=s",
        "\u{e9}\n",
    ];
    let out = run(&["--explain"], &argv, &env);
    let envs = format!(
        "env \"SGLANG_A\" <sha256:{a}>\n\
         env \"SGLANG_API_KEY\" <redacted sha256:{k}>\n\
         env \"SGLANG_B\" <sha256:{b}>\n",
        a = sha12(b"1"),
        b = sha12(b"2"),
        k = sha12(b"k"),
    );
    let want = format!(
        "profile sglang\n\
         argv 0 \"python\"\n\
         argv 1 \"bench.py\"\n\
         argv 4 \"--tp\"\n\
         argv 5 \"4\"\n\
         argv 7 \"\\u00e9\\n\"\n\
         {envs}\
         ignored-arg 2 \"--port\"\n\
         ignored-arg 3 \"30000\"\n\
         ignored-arg 6 \"--api-key=\" <redacted sha256:{s}>\n\
         volatile-env \"SGLANG_RUN_ID\"\n\
         unresolved: script 'bench.py' cannot be read (No such file or directory (os error 2))\n\
         {fp}\n",
        s = sha12(b"s"),
        fp = fp(&[], &argv, &env),
    );
    out.assert().success().stdout(want).stderr("");

    // an SGLang server launch: its canonical form
    let argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--port",
        "30000",
        "--tp",
        "4",
        "--api-key=s",
        "--model=/no/such/model",
    ];
    let out = run(&["--explain"], &argv, &env);
    let want = format!(
        "profile sglang\n\
         launch sglang.launch_server, arguments by name\n\
         arg \"--model-path\" \"/no/such/model\"\n\
         arg \"--tp-size\" \"4\"\n\
         model --model-path path no such directory\n\
         engine sglang not found: python is not on PATH; the fingerprint records that, and a version found later changes it once\n\
         {envs}\
         ignored-arg \"--api-key\" <redacted sha256:{s}>\n\
         ignored-arg \"--port\" \"30000\"\n\
         volatile-env \"SGLANG_RUN_ID\"\n\
         unresolved: engine sglang not found: python is not on PATH\n\
         {fp}\n",
        s = sha12(b"s"),
        fp = fp(&[], &argv, &env),
    );
    out.assert().success().stdout(want).stderr("");
}

#[test]
fn explain_of_non_utf8_names_and_values_uses_python_escapes() {
    let out = keepwrap()
        .args([
            "fingerprint",
            "--profile",
            "seed",
            "--explain",
            "--",
            "py",
            "\u{1F980}",
        ])
        .arg(os(b"a\xffb"))
        .env(os(b"SGLANG_\xed\xa0\x80"), os(b"\xff"))
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("argv 1 \"\\ud83e\\udd80\"\n"), "{stdout}");
    assert!(stdout.contains("argv 2 \"a\\udcffb\"\n"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "env \"SGLANG_\\udced\\udca0\\udc80\" <sha256:{}>\n",
            sha12(b"\xff")
        )),
        "{stdout}"
    );
}

// ------------------------------------------------------------------ bad input

#[test]
fn no_command_is_a_usage_error() {
    for args in [
        &["fingerprint"][..],
        &["fingerprint", "--"],
        &["fingerprint", "--profile", "seed", "--"],
        &["fingerprint", "--explain"],
    ] {
        keepwrap()
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains("no COMMAND after `--`"))
            .stderr(predicate::str::contains(
                "keepwrap fingerprint [OPTIONS] -- COMMAND [ARGS...]",
            ));
    }
}

#[test]
fn unknown_profile_names_the_known_ones() {
    keepwrap()
        .args(["fingerprint", "--profile", "tgi", "--", "python"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("'tgi'"))
        .stderr(predicate::str::contains("sglang"))
        .stderr(predicate::str::contains("vllm"))
        .stderr(predicate::str::contains("trtllm"))
        .stderr(predicate::str::contains("auto"))
        .stderr(predicate::str::contains("seed"));
    keepwrap()
        .args(["fingerprint", "--", "python"])
        .env("KEEPWRAP_PROFILE", "nope")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("sglang").and(predicate::str::contains("seed")));
}

#[test]
fn a_flag_value_after_ignore_arg_may_start_with_dashes() {
    // `--ignore-arg --foo` means `--ignore-arg=--foo`, not an unknown
    // option of keepwrap's.
    let fp = |args: &[&str]| {
        let out = keepwrap()
            .arg("fingerprint")
            .args(args)
            .args(["--", "python", "--foo", "1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        out.stdout
    };
    assert_eq!(fp(&["--ignore-arg", "--foo"]), fp(&["--ignore-arg=--foo"]));
    assert_ne!(fp(&["--ignore-arg", "--foo"]), fp(&[]));
}
