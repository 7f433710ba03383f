//! Inputs an adversary (or an unlucky manifest) hands the `sglang`
//! profile: config and model paths that are no regular file, YAML files
//! whose meaning PyYAML decides differently from their text. Each drives
//! `keepwrap fingerprint` with a deadline: PID 1 must neither hang nor
//! panic, and launches SGLang reads differently must differ.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `keepwrap fingerprint -- python3 -m sglang.launch_server ARGS` in
/// `cwd`, killed after a deadline: returns stdout, or None on a hang.
fn fingerprint(cwd: &Path, args: &[&str]) -> Option<String> {
    let mut child = Command::new(common::BIN)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("HF_HUB_CACHE", cwd.join("hub"))
        .args(["fingerprint", "--", "python3", "-m", "sglang.launch_server"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(
                status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return Some(String::from_utf8(out.stdout).unwrap().trim().to_string());
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_config_path_that_is_no_regular_file_neither_blocks_nor_reads_forever() {
    let dir = tempfile::tempdir().unwrap();
    common::mkfifo(&dir.path().join("fifo.yaml"));
    std::fs::create_dir(dir.path().join("dir.yaml")).unwrap();
    let mut seen = Vec::new();
    for path in ["fifo.yaml", "/dev/zero", "dir.yaml", "missing.yaml"] {
        let fp = fingerprint(dir.path(), &["--config", path, "--tp", "2"]);
        let fp = fp.unwrap_or_else(|| panic!("--config {path}: no answer within 20 s"));
        seen.push(fp);
    }
    // none equals the launch without a config file
    let plain = fingerprint(dir.path(), &["--tp", "2"]).unwrap();
    assert!(!seen.contains(&plain));
}

#[test]
fn a_model_config_that_is_no_regular_file_neither_blocks_nor_reads_forever() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("m")).unwrap();
    common::mkfifo(&dir.path().join("m/config.json"));
    std::fs::create_dir(dir.path().join("z")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("z/config.json")).unwrap();
    std::fs::create_dir(dir.path().join("loop")).unwrap();
    std::os::unix::fs::symlink("config.json", dir.path().join("loop/config.json")).unwrap();
    for m in ["m", "z", "loop"] {
        assert!(
            fingerprint(dir.path(), &["--model-path", m]).is_some(),
            "--model-path {m}: no answer within 20 s"
        );
    }
}

#[test]
fn a_hub_ref_that_is_a_fifo_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let refs = dir.path().join("hub/models--org--name/refs");
    std::fs::create_dir_all(&refs).unwrap();
    common::mkfifo(&refs.join("main"));
    assert!(fingerprint(dir.path(), &["--model-path", "org/name"]).is_some());
}

/// Two config files SGLang reads differently never share a fingerprint.
fn differ(a: &str, b: &str) {
    let fa = tempfile::tempdir().unwrap();
    let fb = tempfile::tempdir().unwrap();
    std::fs::write(fa.path().join("c.yaml"), a).unwrap();
    std::fs::write(fb.path().join("c.yaml"), b).unwrap();
    let x = fingerprint(fa.path(), &["--config", "c.yaml"]).unwrap();
    let y = fingerprint(fb.path(), &["--config", "c.yaml"]).unwrap();
    assert_ne!(x, y, "{a:?} and {b:?} share a fingerprint");
}

#[test]
fn a_repeated_yaml_key_means_its_last_value() {
    // PyYAML's safe_load keeps the last value of a repeated key
    differ(
        "trust-remote-code: true\ntrust-remote-code: false\n",
        "trust-remote-code: true\n",
    );
    differ(
        "cuda-graph-bs-decode: [1, 2]\ncuda-graph-bs-decode: []\n",
        "cuda-graph-bs-decode: [1, 2]\n",
    );
    differ("tp-size: 2\n'tp-size': ~\n", "tp-size: 2\n");
}

#[test]
fn a_line_break_only_pyyaml_knows_is_no_character() {
    // PyYAML folds NEL (U+0085) inside a quoted scalar to a space; `\N`
    // is the character itself
    differ(
        "chat-template: \"x\u{85}y\"\n",
        "chat-template: \"x\\Ny\"\n",
    );
}

/// `--keep auto`: which commands are engines whose cache is kept.
#[test]
fn keep_auto_tells_engines_from_other_commands() {
    use std::ffi::OsString;
    let engine = |argv: &[&str]| {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let env = [(OsString::from("PORT"), OsString::from("8000"))];
        keepwrap::engine::is_engine(&keepwrap::engine::command(&argv, &env))
    };
    let sh = |s: &str| engine(&["bash", "-lc", s]);
    for argv in [
        &["python3", "-u", "-m", "sglang.launch_server", "--tp", "2"][..],
        &["uv", "run", "python", "-m", "sglang.launch_server"],
        &["uv", "run", "-m", "sglang.launch_server"],
        &["/opt/venv/bin/python", "-m", "sglang.launch_server"],
        &[
            "torchrun",
            "--nproc-per-node",
            "8",
            "-m",
            "sglang.launch_server",
        ],
        &["sglang", "serve", "--model-path", "m"],
        &["python3", "-m", "sglang.bench_one_batch", "--tp", "2"],
        &["python3", "my_bench.py"],
        &["env", "A=1", "python3", "-m", "sglang.launch_server"],
        &[
            "numactl",
            "--cpunodebind=0",
            "python3",
            "-m",
            "sglang.launch_server",
        ],
    ] {
        assert!(engine(argv), "{argv:?} is an engine");
    }
    for s in [
        "exec python3 -m sglang.launch_server --port $PORT",
        "exec env A=1 python3 -m sglang.launch_server --port $PORT",
        "python3 -m sglang.launch_server | tee /log",
        "cd /w && exec python3 -m sglang.launch_server",
    ] {
        assert!(sh(s), "bash -lc {s:?} is an engine");
    }
    for argv in [
        &["bash"][..],
        &["sh"],
        &["bash", "-i"],
        &["sleep", "1"],
        &["nvidia-smi"],
        &["env", "A=1", "bash"],
        &["sglang", "version"],
    ] {
        assert!(!engine(argv), "{argv:?} is no engine");
    }
    for s in ["sleep infinity", "exec bash", "echo $PORT && sleep 1"] {
        assert!(!sh(s), "bash -lc {s:?} is no engine");
    }
}

#[test]
fn env_inside_a_shell_string_is_read_as_env_outside_one() {
    use std::ffi::OsString;
    let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
    let env = [(OsString::from("PORT"), OsString::from("8000"))];
    let c = keepwrap::engine::command(
        &os(&[
            "sh",
            "-c",
            "A=0 exec env A=1 python3 -m sglang.launch_server --port $PORT",
        ]),
        &env,
    );
    let server = keepwrap::engine::sglang::launch::server_of(&keepwrap::launch::strings(&c.argv))
        .expect("the server inside");
    assert_eq!(server.args, ["--port", "8000"]);
    // env's assignment wins over the shell's
    let a: Vec<_> = c.assigns.iter().filter(|(k, _)| k == "A").collect();
    assert_eq!(a.first().map(|(_, v)| v.clone()), Some(OsString::from("1")));
}

const PIECES: &[&[u8]] = &[
    b"-c",
    b"-m",
    b"sglang.launch_server",
    b"serve",
    b"sh",
    b"--tp",
    b"=",
    b"A=1",
    b"exec ",
    b"$V",
    b"\"$@\"",
    b"'",
    b"\"",
    b"\\",
    b"\n",
    b"\xff",
    b"\xed\xa0\x80",
    b"--config",
    b"--model-path",
    b"--model-type",
    b"-X",
    b"-u",
    b"--",
    b"-",
    b" ",
    b"${",
    b"}",
    b"~",
    b"\xc3\xa9",
    b"-1",
    b"--tp-size=",
    b"--no-",
    b"0",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1500))]
    /// No argv, however odd its bytes, panics the fingerprint (keepwrap is
    /// PID 1): shells, env prefixes, server arguments, invalid UTF-8.
    #[test]
    fn no_argv_panics_the_fingerprint(
        head in proptest::sample::select(&[
            "sh", "bash", "env", "python3", "sglang", "/usr/bin/env", "busybox", "python3.11",
        ][..]),
        words in proptest::collection::vec(proptest::collection::vec(proptest::sample::select(PIECES), 0..5), 0..8),
    ) {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let argv: Vec<OsString> = std::iter::once(OsString::from(head))
            .chain(words.into_iter().map(|w| OsString::from_vec(w.concat())))
            .collect();
        let env = [(OsString::from("V"), OsString::from_vec(b"x\xffy".to_vec()))];
        for profile in [keepwrap::engine::fingerprint::ProfileName::Sglang, keepwrap::engine::fingerprint::ProfileName::Seed] {
            let opts = keepwrap::engine::fingerprint::Options {
                profile,
                env_prefixes: vec!["V".into()],
                volatile_env: vec![],
                ignored_args: vec!["--tp".into(), "".into(), "-".into()],
            };
            let l = keepwrap::engine::fingerprint::Launch::new(&opts, &argv, &env);
            let _ = (l.fingerprint(), l.redacted_inputs(), l.warnings(), keepwrap::engine::is_engine(l.command()));
            let _ = (l.option("--port"), l.cluster_fingerprint(&["--node-rank".into()]));
        }
    }
}

/// A launch record planted under the cache root (its file named like a
/// fingerprint, its content anything) neither panics `explain` nor the
/// launch-time "no cache" line, nor forges a keepwrap line.
#[test]
fn a_planted_launch_record_is_only_data() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(".keepwrap");
    std::fs::create_dir_all(state.join("store")).unwrap();
    std::fs::create_dir_all(state.join("launches")).unwrap();
    let record = serde_json::json!({
        "format": 1,
        "fingerprint": "a\u{e9}\u{e9}\u{e9}\u{e9}\nkeepwrap: forged",
        "profile": "sglang",
        "inputs": {"profile": "sglang", "env": {}, "ignored_args": [],
                   "launch": {"args": [["--tp-size", "2\nkeepwrap: forged"]], "models": {}}},
        "first_signed": 1, "last_signed": 1, "last_used": 1, "files": 1,
    });
    std::fs::write(
        state
            .join("launches")
            .join(format!("{}.json", "a".repeat(64))),
        record.to_string(),
    )
    .unwrap();
    // a well-formed fingerprint with forged values
    let mut record = record;
    record["fingerprint"] = "b".repeat(64).into();
    std::fs::write(
        state
            .join("launches")
            .join(format!("{}.json", "b".repeat(64))),
        record.to_string(),
    )
    .unwrap();
    let launch = ["python3", "-m", "sglang.launch_server", "--tp", "4"];
    let explain = Command::new(common::BIN)
        .arg("explain")
        .arg("--cache-dir")
        .arg(dir.path())
        .arg("--")
        .args(launch)
        .output()
        .unwrap();
    let run = Command::new(common::BIN)
        .args(["--keep", "always", "--cache-dir"])
        .arg(dir.path())
        .arg("--")
        .args(launch)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    for (what, out) in [("explain", &explain), ("a launch", &run)] {
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("panicked"), "{what}: {text}");
        assert!(
            !text.lines().any(|l| l.starts_with("keepwrap: forged")),
            "{what}: {text}"
        );
    }
    assert!(explain.status.success());
    assert!(String::from_utf8_lossy(&explain.stdout).contains("bbbbbbbb..."));
}

/// A config file within the size limit but of a million values is refused
/// before it is turned into a million tokens (PID 1 must not spend hundreds
/// of MiB on it); a config file of ordinary size is read.
#[test]
fn a_config_of_a_million_values_is_not_expanded() {
    use keepwrap::engine::sglang::launch::config::{read, Outcome, Unparsable};
    let dir = tempfile::tempdir().unwrap();
    let wide = dir.path().join("wide.yaml");
    let items = vec!["1"; 1_000_000].join(",");
    std::fs::write(&wide, format!("cuda-graph-bs-decode: [{items}]\n")).unwrap();
    match read(&wide) {
        (Outcome::Unparsable(why), Some(_)) => assert_eq!(why, Unparsable::TooManyValues),
        (other, _) => panic!("{:?}", std::mem::discriminant(&other)),
    }
    let keys = dir.path().join("keys.yaml");
    let text: String = (0..500_000).map(|i| format!("k{i}: 1\n")).collect();
    std::fs::write(&keys, text).unwrap();
    assert!(matches!(read(&keys).0, Outcome::Unparsable(_)));
    let ok = dir.path().join("ok.yaml");
    let items = vec!["8"; 5_000].join(", ");
    std::fs::write(
        &ok,
        format!("cuda-graph-bs-decode: [{items}]\ntp-size: 4\n"),
    )
    .unwrap();
    assert!(matches!(read(&ok).0, Outcome::Args(a) if a.len() == 5_003));
}

#[test]
fn combined_interpreter_flags_are_read_as_python_reads_them() {
    use std::ffi::OsString;
    let server = |s: &str| {
        let argv: Vec<OsString> = s.split(' ').map(OsString::from).collect();
        keepwrap::engine::sglang::launch::server_of(&keepwrap::launch::strings(
            &keepwrap::engine::command(&argv, &[]).argv,
        ))
    };
    let a = server("python3 -um sglang.launch_server --tp 2").expect("a server");
    let b = server("python3 -u -m sglang.launch_server --tp 2").unwrap();
    assert_eq!((a.python_opts, a.args), (b.python_opts, b.args));
    let c = server("python3 -uBmsglang.launch_server --tp 2").expect("a server");
    assert_eq!(c.python_opts, ["-u", "-B"]);
    assert!(server("python3 -uc import").is_none());
    // a benchmark reads the server's arguments, and is no server
    let b = server("python3 -um sglang.bench_one_batch").expect("read with the server's table");
    assert!(!b.entry.is_server());
}
