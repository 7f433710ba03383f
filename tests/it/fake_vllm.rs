//! Drives `tests/fixtures/engines/fake_vllm.py` with python3 (once through `keepwrap
//! --disable`, which only supervises) and checks that the fake reproduces what
//! vLLM does with FlashInfer's autotune cache, the bugs keepwrap must fix
//! included: the warm-boot hang of layout A under expert parallelism, and the
//! silent reuse of a cache tuned under other `VLLM_*` settings since 0.30.0.

use crate::common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Finished, Running};
use nix::sys::signal::Signal;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

fn fake() -> PathBuf {
    common::repo().join("tests/fixtures/engines/fake_vllm.py")
}

/// `python3 tests/fixtures/engines/fake_vllm.py serve /models/fake-moe ARGS...`
fn serve(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(fake())
        .args(["serve", "/models/fake-moe", "--tune-ms", "2"])
        .args(args);
    let mut cmd = common::vllm::hermetic_cmd(cmd, home);
    cmd.envs(envs.iter().copied());
    cmd
}

/// An offline boot (tune, then exit) that must end with `code`.
fn boot(home: &Path, args: &[&str], envs: &[(&str, &str)], code: i32) -> Finished {
    let mut all = vec!["--offline"];
    all.extend_from_slice(args);
    let f = Running::spawn(&mut serve(home, &all, envs)).finish(DEADLINE);
    assert_eq!(
        f.code, code,
        "args {all:?} env {envs:?}\nstdout: {:#?}\nstderr: {}",
        f.stdout, f.stderr
    );
    f
}

/// The `<sha256>/` directories of the default cache root under `home`.
fn vllm_root(home: &Path) -> PathBuf {
    home.join(".cache/vllm/flashinfer_autotune_cache")
}

/// Every file under `dir` (hidden temp files included), relative and sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// File names only (the last component of each of `files`).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = files(dir)
        .iter()
        .map(|f| f.rsplit('/').next().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn start(f: &Finished) -> Value {
    f.events("start").remove(0)
}

/// rank -> the value of `field` in that rank's autotune report
fn by_rank(f: &Finished, field: &str) -> BTreeMap<u64, Value> {
    f.events("pass")
        .into_iter()
        .map(|p| (p["rank"].as_u64().unwrap(), p[field].clone()))
        .collect()
}

fn all_are(f: &Finished, field: &str, want: Value) -> bool {
    let m = by_rank(f, field);
    !m.is_empty() && m.values().all(|v| *v == want)
}

/// `GET path` on 127.0.0.1:port: the status code, or the connect error kind.
fn get(port: u16, path: &str) -> Result<u16, ErrorKind> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.kind())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.kind())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.kind())?;
    Ok(resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

/// Bind 127.0.0.1:port with a socket that has no SO_REUSEADDR (std's has it).
fn bind_plain(port: u16) -> Result<(), nix::errno::Errno> {
    use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::new(127, 0, 0, 1, port),
    )
}

fn is_event(line: &str, kind: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event"] == kind)
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn layout_c_keeps_per_rank_files_and_a_warm_boot_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let ep = ["-tp", "2", "--enable-expert-parallel"];
    let b1 = boot(home.path(), &ep, &[], 0);
    let s = start(&b1);
    assert_eq!(s["layout"], "C");
    assert_eq!(s["version"], "0.33.0");
    assert!(
        b1.tuned_by_rank().values().all(|&t| t > 0),
        "cold boot tunes"
    );
    assert!(all_are(&b1, "saved", "created".into()));
    let root = vllm_root(home.path());
    let listed = files(&root);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (f, want) in listed.iter().zip(["dp0_rank0", "dp0_rank1"]) {
        let parts: Vec<&str> = f.split('/').collect();
        assert_eq!(parts[..2], ["0.7.2.post1", "90a"], "{f}");
        assert!(
            parts[2].len() == 64 && parts[2].chars().all(|c| c.is_ascii_hexdigit()),
            "{f}"
        );
        assert_eq!(parts[3], format!("autotune_configs_{want}.json"));
    }
    // FlashInfer's save_configs format; under EP each rank's MoE entries
    // are its own, so the files differ
    let bytes = |f: &String| std::fs::read(root.join(f)).unwrap();
    for f in &listed {
        let text = String::from_utf8(bytes(f)).unwrap();
        assert!(
            text.starts_with("{\n  \"_metadata\": {\n    \"flashinfer_version\": \"0.7.2.post1\""),
            "{text:.80}"
        );
        let obj: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(obj.keys().next_back().unwrap(), "_generation");
    }
    assert_ne!(bytes(&listed[0]), bytes(&listed[1]));
    let before: Vec<(Vec<u8>, std::time::SystemTime)> = listed
        .iter()
        .map(|f| {
            let p = root.join(f);
            (bytes(f), std::fs::metadata(p).unwrap().modified().unwrap())
        })
        .collect();

    // Warm boot: the gate keeps the disjoint files, the dummy runs are skipped,
    // nothing is tuned and nothing is written.
    let b2 = boot(home.path(), &ep, &[], 0);
    assert_eq!(b2.tuned(), 0);
    assert!(all_are(&b2, "gate", "kept".into()));
    assert!(all_are(&b2, "saved", "none".into()));
    assert!(all_are(&b2, "fallback", 0.into()));
    assert_eq!(b2.tactics(), b1.tactics(), "the kept tactics are used");
    assert_eq!(files(&root), listed);
    for (f, (b, m)) in listed.iter().zip(&before) {
        let p = root.join(f);
        assert_eq!(&std::fs::read(&p).unwrap(), b);
        assert_eq!(&std::fs::metadata(&p).unwrap().modified().unwrap(), m);
    }

    // One rank's file missing: the whole group re-tunes, and each rank saves anew.
    std::fs::remove_file(root.join(&listed[1])).unwrap();
    let b3 = boot(home.path(), &ep, &[], 0);
    assert!(all_are(&b3, "gate", "differs".into()));
    assert!(b3.tuned_by_rank().values().all(|&t| t > 0));
    assert_eq!(files(&root), listed);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn layout_c_gate_a_corrupt_file_or_a_refused_load_retunes_all_a_json_array_fails() {
    let home = tempfile::tempdir().unwrap();
    let tp = ["-tp", "2"];
    boot(home.path(), &tp, &[], 0);
    let root = vllm_root(home.path());
    let listed = files(&root);
    std::fs::write(root.join(&listed[1]), "not json").unwrap();
    let b = boot(home.path(), &tp, &[], 0);
    assert!(all_are(&b, "gate", "differs".into()));
    assert!(b.tuned_by_rank().values().all(|&t| t > 0));

    // Rank 1 runs in another environment: its load is refused, so every
    // rank clears what it loaded and re-tunes; rank 1 does not overwrite a
    // file of another environment.
    let kept = std::fs::read(root.join(&listed[0])).unwrap();
    let other = [("FAKE_METADATA_RANK1_CUDA_VERSION", "12.9")];
    let b = boot(home.path(), &tp, &other, 0);
    assert!(all_are(&b, "gate", "cleared".into()));
    let load = by_rank(&b, "load");
    assert_eq!((&load[&0], &load[&1]), (&"ok".into(), &"rejected".into()));
    assert!(b.tuned_by_rank().values().all(|&t| t > 0));
    let saved = by_rank(&b, "saved");
    assert_eq!(
        (&saved[&0], &saved[&1]),
        (&"merged".into(), &"skipped".into())
    );
    assert_ne!(std::fs::read(root.join(&listed[0])).unwrap(), kept);

    std::fs::write(root.join(&listed[1]), "[1, 2]").unwrap();
    let b = boot(home.path(), &tp, &[], 1);
    assert!(b.stderr.contains("TypeError"), "{}", b.stderr);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn layout_a_under_ep_hangs_on_a_warm_boot_and_not_on_a_cold_one() {
    let home = tempfile::tempdir().unwrap();
    let env = [("FAKE_VLLM_LAYOUT", "A")];
    let ep = ["-tp", "2", "-ep"];
    let b1 = boot(home.path(), &ep, &env, 0);
    assert_eq!(start(&b1)["version"], "0.31.0");
    assert!(b1.tuned_by_rank().values().all(|&t| t > 0));
    // rank 0 alone saves, into the one shared file
    let saved = by_rank(&b1, "saved");
    assert_eq!(saved[&0], "created");
    assert_eq!(saved[&1], "none");
    assert_eq!(names(&vllm_root(home.path())), ["autotune_configs.json"]);

    // Warm boot: rank 0's file reaches every rank; rank 0 hits every shape,
    // rank 1 misses its own MoE shapes: the real engine waits 30 minutes.
    let b2 = boot(home.path(), &ep, &env, 89);
    let hang = b2.events("hang");
    assert!(!hang.is_empty(), "{:#?}", b2.stdout);
    let counts = hang[0]["counts"].as_array().unwrap();
    assert_eq!(counts[0], 0, "rank 0 hits everything: {counts:?}");
    assert!(counts[1].as_u64().unwrap() > 0, "{counts:?}");
    assert!(b2.stderr.contains("CPU-group timeout"), "{}", b2.stderr);
    assert!(b2.events("pass").is_empty(), "no rank finished tuning");

    // Without the shared file the same launch boots again (cold).
    std::fs::remove_dir_all(vllm_root(home.path())).unwrap();
    let b3 = boot(home.path(), &ep, &env, 0);
    assert!(b3.tuned() > 0);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn layout_a_warm_boots_that_do_not_hang() {
    let home = tempfile::tempdir().unwrap();
    // A dense model (its config.json names no experts) under EP.
    let dense = home.path().join("dense");
    std::fs::create_dir(&dense).unwrap();
    std::fs::write(
        dense.join("config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}"#,
    )
    .unwrap();
    let env = [("FAKE_VLLM_LAYOUT", "A")];
    let cmd = |model: &Path, args: &[&str], code| {
        let mut c = Command::new("python3");
        c.arg(fake())
            .arg("serve")
            .arg(model)
            .args(["--offline", "--tune-ms", "2"])
            .args(args);
        let mut c = common::vllm::hermetic_cmd(c, home.path());
        c.envs(env);
        let f = Running::spawn(&mut c).finish(DEADLINE);
        assert_eq!(f.code, code, "{args:?}: {}", f.stderr);
        f
    };
    let b1 = cmd(&dense, &["-tp", "2", "-ep"], 0);
    assert_eq!(start(&b1)["experts"], 0);
    let b2 = cmd(&dense, &["-tp", "2", "-ep"], 0);
    assert_eq!(b2.tuned(), 0, "dense shapes are shared by every rank");
    assert!(all_are(&b2, "gate", "broadcast".into()));
    // rank 0 rewrites the shared file on every boot, even with nothing tuned
    assert_eq!(by_rank(&b2, "saved")[&0], "merged");

    // One rank: nobody to wait for.
    let moe = Path::new("/models/fake-moe");
    cmd(moe, &[], 0);
    assert_eq!(cmd(moe, &[], 0).tuned(), 0);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn a_changed_vllm_variable_silently_reuses_the_cache_from_0_30_on() {
    let home = tempfile::tempdir().unwrap();
    let ep = ["-tp", "2", "-ep"];
    let with = |backend: &'static str, version: &'static str| {
        [
            ("VLLM_FLASHINFER_MOE_BACKEND", backend),
            ("FAKE_VLLM_VERSION", version),
        ]
    };
    // 0.33.0: same directory, the gate keeps the files, the dummy runs are
    // skipped: the other backend's MoE shapes run untuned, and nothing says so.
    let b1 = boot(home.path(), &ep, &with("throughput", "0.33.0"), 0);
    let b2 = boot(home.path(), &ep, &with("latency", "0.33.0"), 0);
    assert_eq!(start(&b1)["cache_dir"], start(&b2)["cache_dir"]);
    assert_eq!(b2.tuned(), 0);
    assert!(all_are(&b2, "gate", "kept".into()));
    let fallback = by_rank(&b2, "fallback");
    assert!(
        fallback.values().all(|v| v.as_u64().unwrap() > 0),
        "{fallback:?}"
    );

    // 0.32.0: kept too, but the dummy runs profile the misses (in lock step).
    let b3 = boot(home.path(), &ep, &with("throughput", "0.32.0"), 0);
    let b4 = boot(home.path(), &ep, &with("latency", "0.32.0"), 0);
    assert_eq!(start(&b3)["cache_dir"], start(&b4)["cache_dir"]);
    assert!(all_are(&b4, "gate", "kept".into()));
    assert_eq!(
        b4.tuned_by_rank(),
        fallback
            .keys()
            .map(|&r| (r, fallback[&r].as_u64().unwrap()))
            .collect()
    );
    assert!(all_are(&b4, "fallback", 0.into()));

    // 0.31.0 (layout A): one folder for both too; the shared file is loaded.
    let tp = ["-tp", "2"];
    let a1 = boot(home.path(), &tp, &with("throughput", "0.31.0"), 0);
    let a2 = boot(home.path(), &tp, &with("latency", "0.31.0"), 0);
    assert_eq!(start(&a1)["cache_dir"], start(&a2)["cache_dir"]);
    assert!(all_are(&a2, "gate", "broadcast".into()));
    assert!(a2.hit() > 0);

    // 0.29.0: the environment is in the key: another directory, a full tune.
    let b5 = boot(home.path(), &tp, &with("throughput", "0.29.0"), 0);
    let b6 = boot(home.path(), &tp, &with("latency", "0.29.0"), 0);
    assert_ne!(start(&b5)["cache_dir"], start(&b6)["cache_dir"]);
    assert!(b6.tuned_by_rank().values().all(|&t| t > 0));
    assert!(all_are(&b6, "hit", 0.into()));
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn cache_root_and_launch_shapes_follow_vllm() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let root_of = |envs: &[(&str, &str)]| {
        let b = boot(h, &[], envs, 0);
        start(&b)["cache_root"].as_str().unwrap().to_string()
    };
    let v = "0.32.0"; // one rank on 0.33.0 uses the managed store instead
    let d = |p: &str| h.join(p).display().to_string();
    assert_eq!(
        root_of(&[("FAKE_VLLM_VERSION", v)]),
        d(".cache/vllm/flashinfer_autotune_cache/0.7.0.post1/90a")
    );
    let xdg = d("xdg");
    assert_eq!(
        root_of(&[("FAKE_VLLM_VERSION", v), ("XDG_CACHE_HOME", &xdg)]),
        d("xdg/vllm/flashinfer_autotune_cache/0.7.0.post1/90a")
    );
    let vroot = d("vroot");
    assert_eq!(
        root_of(&[
            ("FAKE_VLLM_VERSION", v),
            ("XDG_CACHE_HOME", &xdg),
            ("VLLM_CACHE_ROOT", &vroot),
            ("FLASHINFER_CUDA_ARCH_LIST", "10.0a 9.0a")
        ]),
        d("vroot/flashinfer_autotune_cache/0.7.0.post1/90a_100a")
    );
    // the override has no version and arch levels; "~" is expanded
    assert_eq!(
        root_of(&[
            ("FAKE_VLLM_VERSION", v),
            ("VLLM_CACHE_ROOT", &vroot),
            ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "~/override")
        ]),
        d("override")
    );
    assert_eq!(
        names(&h.join("override")),
        ["autotune_configs_dp0_rank0.json"]
    );

    // Every launch shape reaches the same engine: `vllm serve` on PATH,
    // the api_server module, the CLI module, `--model` in serve, a --config
    // file, underscores in flag names.
    let engines = common::repo().join("tests/fixtures/engines");
    let path = format!(
        "{}:{}",
        engines.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let yaml = h.join("serve.yaml");
    std::fs::write(
        &yaml,
        "tensor-parallel-size: 2\nenable-expert-parallel: true\n",
    )
    .unwrap();
    let yaml = yaml.display().to_string();
    let shapes: Vec<Vec<&str>> = vec![
        vec!["vllm", "serve", "/m/x", "-tp", "2", "-ep"],
        vec![
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/m/x",
            "-tp",
            "2",
            "-ep",
        ],
        vec![
            "python3",
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            "/m/x",
            "--tensor_parallel_size=2",
            "-ep",
        ],
        vec!["vllm", "serve", "-tp", "2", "--model", "/m/x", "-ep"],
        vec!["vllm", "serve", "/m/x", "--config", &yaml],
    ];
    let mut dirs = Vec::new();
    for argv in &shapes {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]).args(["--offline", "--tune-ms", "2"]);
        let mut c = common::vllm::hermetic_cmd(c, h);
        c.env("PATH", &path).env("PYTHONPATH", &engines);
        let f = Running::spawn(&mut c).finish(DEADLINE);
        assert_eq!(f.code, 0, "{argv:?}: {}", f.stderr);
        assert_eq!(start(&f)["world"], 2, "{argv:?}");
        dirs.push(start(&f)["cache_dir"].clone());
    }
    assert!(
        dirs.windows(2).all(|w| w[0] == w[1]),
        "one launch: {dirs:?}"
    );

    // A bad command line is exit 2 with the reason.
    let mut c = Command::new("python3");
    c.arg(fake()).args(["serve", "--tune-ms", "2"]);
    let f = Running::spawn(&mut common::vllm::hermetic_cmd(c, h)).finish(DEADLINE);
    assert_eq!(f.code, 2);
    assert!(f.stderr.contains("No model specified"), "{}", f.stderr);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn one_rank_on_0_33_uses_flashinfers_managed_store() {
    let home = tempfile::tempdir().unwrap();
    let b1 = boot(home.path(), &[], &[], 0);
    assert_eq!(start(&b1)["layout"], "managed");
    assert!(b1.tuned() > 0);
    assert!(all_are(&b1, "saved", "published".into()));
    assert!(!vllm_root(home.path()).exists(), "no vLLM file");
    let store = home.path().join(".cache/flashinfer/autotune/v2");
    let listed = files(&store);
    assert!(listed.iter().any(|f| f.ends_with("/manifest.json")));
    let entries = listed.iter().filter(|f| f.contains("/entries/")).count() as u64;
    assert_eq!(entries, b1.tuned(), "one entry file per tuned shape");
    let b2 = boot(home.path(), &[], &[], 0);
    assert_eq!(b2.tuned(), 0);
    assert_eq!(b2.hit(), b1.tuned());
    assert_eq!(b2.tactics(), b1.tactics());
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn api_port_refuses_connections_until_ready_then_answers_200() {
    let home = tempfile::tempdir().unwrap();
    let port = crate::common::free_port();
    let p = port.to_string();
    let args = [
        "-tp",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        &p,
        "--load-ms",
        "800",
    ];
    let mut r = Running::spawn(&mut serve(home.path(), &args, &[]));
    r.wait_stdout("the start line", DEADLINE, |l| is_event(l, "start"));
    // bound from the start (a socket without SO_REUSEADDR cannot take the port), not listening
    assert_eq!(bind_plain(port), Err(nix::errno::Errno::EADDRINUSE));
    let mut seen: Vec<Result<u16, ErrorKind>> = Vec::new();
    common::wait_for("/health 200", DEADLINE, || {
        let now = get(port, "/health");
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        (now == Ok(200)).then_some(())
    });
    assert_eq!(seen, [Err(ErrorKind::ConnectionRefused), Ok(200)]);
    r.wait_stdout("the server line", DEADLINE, |l| {
        l == format!("Starting vLLM server on http://127.0.0.1:{port}")
    });
    r.guard.signal(Signal::SIGTERM);
    let f = r.finish(DEADLINE);
    assert_eq!(f.code, 0, "SIGTERM once serving: {}", f.stderr);
    assert_eq!(f.events("pass").len(), 2);
    assert!(f.stderr.contains("Application startup complete."));

    // SIGTERM during startup: vLLM dies of the KeyboardInterrupt it raises.
    let args = [
        "-tp",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        &p,
        "--load-ms",
        "20000",
    ];
    let mut r = Running::spawn(&mut serve(home.path(), &args, &[]));
    r.wait_stdout("the start line", DEADLINE, |l| is_event(l, "start"));
    r.guard.signal(Signal::SIGTERM);
    let pid = r.guard.pid();
    let f = r.finish(DEADLINE);
    assert_eq!(f.code, 130, "{}", f.stderr);
    common::wait_for("the ranks to go", DEADLINE, || {
        nix::sys::signal::killpg(pid, None).is_err().then_some(())
    });
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn headless_node_serves_nothing_and_exits_0_on_sigterm() {
    let h0 = tempfile::tempdir().unwrap();
    let h1 = tempfile::tempdir().unwrap();
    let master = crate::common::free_port().to_string();
    let api = crate::common::free_port();
    let api1 = crate::common::free_port().to_string();
    let node = |home: &Path, rank: &str, extra: &[&str]| {
        let mut args = vec![
            "-tp",
            "4",
            "-ep",
            "--nnodes",
            "2",
            "--node-rank",
            rank,
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            &master,
            "--host",
            "127.0.0.1",
        ];
        args.extend_from_slice(extra);
        Running::spawn(&mut serve(home, &args, &[]))
    };

    // A headless node alone: its ranks wait for the head; SIGTERM is exit 0
    // although nothing was tuned.
    let mut n1 = node(h1.path(), "1", &["--headless", "--port", &api1]);
    let s = n1.wait_stdout("the start line", DEADLINE, |l| is_event(l, "start"));
    let s: Value = serde_json::from_str(&s).unwrap();
    assert_eq!(s["headless"], true);
    let ranks: Vec<u64> = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [2, 3]);
    n1.guard.signal(Signal::SIGTERM);
    let f = n1.finish(DEADLINE);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(f.events("pass").is_empty());
    assert!(files(h1.path()).is_empty(), "{:?}", files(h1.path()));

    // Both nodes: each writes its own ranks' files; only the head serves.
    let api_s = api.to_string();
    let mut n1 = node(h1.path(), "1", &["--headless", "--port", &api1]);
    let n0 = node(h0.path(), "0", &["--port", &api_s]);
    common::wait_for("the head's /health 200", DEADLINE, || {
        (get(api, "/health") == Ok(200)).then_some(())
    });
    n1.wait_stdout("the headless node's ranks", DEADLINE, |l| {
        is_event(l, "ready")
    });
    assert_eq!(
        get(api1.parse().unwrap(), "/health"),
        Err(ErrorKind::ConnectionRefused)
    );
    assert_eq!(
        names(&vllm_root(h0.path())),
        [
            "autotune_configs_dp0_rank0.json",
            "autotune_configs_dp0_rank1.json"
        ]
    );
    assert_eq!(
        names(&vllm_root(h1.path())),
        [
            "autotune_configs_dp0_rank2.json",
            "autotune_configs_dp0_rank3.json"
        ]
    );
    n1.guard.signal(Signal::SIGTERM);
    n0.guard.signal(Signal::SIGTERM);
    let (f1, f0) = (n1.finish(DEADLINE), n0.finish(DEADLINE));
    assert_eq!((f0.code, f1.code), (0, 0), "{}\n{}", f0.stderr, f1.stderr);
    let modes: Vec<Value> = f1
        .events("ready")
        .iter()
        .map(|r| r["mode"].clone())
        .collect();
    assert_eq!(modes, ["headless"]);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn data_parallel_across_two_nodes_folds_dp_into_the_world() {
    let h0 = tempfile::tempdir().unwrap();
    let h1 = tempfile::tempdir().unwrap();
    let rpc = crate::common::free_port().to_string();
    let common_args = [
        "-tp",
        "2",
        "-ep",
        "-dp",
        "2",
        "-dpl",
        "1",
        "-dpa",
        "127.0.0.1",
        "-dpp",
        &rpc,
    ];
    let mut a1 = common_args.to_vec();
    a1.extend(["-dpr", "1", "--headless", "--offline"]);
    let mut a0 = common_args.to_vec();
    a0.push("--offline");
    let n1 = Running::spawn(&mut serve(h1.path(), &a1, &[]));
    let n0 = Running::spawn(&mut serve(h0.path(), &a0, &[]));
    let (f0, f1) = (n0.finish(DEADLINE), n1.finish(DEADLINE));
    assert_eq!((f0.code, f1.code), (0, 0), "{}\n{}", f0.stderr, f1.stderr);
    assert_eq!(
        names(&vllm_root(h0.path())),
        [
            "autotune_configs_dp0_rank0.json",
            "autotune_configs_dp0_rank1.json"
        ]
    );
    assert_eq!(
        names(&vllm_root(h1.path())),
        [
            "autotune_configs_dp1_rank2.json",
            "autotune_configs_dp1_rank3.json"
        ]
    );
    // every rank of both nodes in one tuning group: the dense tactics agree
    let shared: std::collections::BTreeSet<String> = f0
        .events("tactics")
        .iter()
        .chain(f1.events("tactics").iter())
        .map(|t| t["shared_sha256"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(shared.len(), 1, "{shared:?}");
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn crash_mid_tune_saves_nothing_crash_mid_save_leaves_a_partial_temp() {
    let home = tempfile::tempdir().unwrap();
    let tp = ["-tp", "2", "-ep"];
    let f = boot(home.path(), &tp, &[("FAKE_VLLM_CRASH", "1:tune")], 137);
    assert!(f.stderr.contains("killing myself"), "{}", f.stderr);
    assert!(f.events("pass").is_empty());
    assert_eq!(
        files(&vllm_root(home.path())),
        Vec::<String>::new(),
        "nothing saved"
    );

    // rank 1 dies while saving; rank 0 saved its file before
    let f = boot(home.path(), &tp, &[("FAKE_VLLM_CRASH", "1:save")], 137);
    let saved = by_rank(&f, "saved");
    assert_eq!(saved.keys().copied().collect::<Vec<_>>(), [0]);
    let listed = names(&vllm_root(home.path()));
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[1], "autotune_configs_dp0_rank0.json");
    assert!(
        listed[0].starts_with(".autotuner_") && listed[0].ends_with(".tmp"),
        "{listed:?}"
    );

    // the set is incomplete: the next boot re-tunes every rank
    let f = boot(home.path(), &tp, &[], 0);
    assert!(all_are(&f, "gate", "differs".into()));
    assert!(f.tuned_by_rank().values().all(|&t| t > 0));
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn keepwrap_disable_passes_the_hang_through() {
    let home = tempfile::tempdir().unwrap();
    let engines = common::repo().join("tests/fixtures/engines");
    let path = format!(
        "{}:{}",
        engines.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |code| {
        let mut c = Command::new(common::BIN);
        c.args([
            "--disable",
            "--",
            "vllm",
            "serve",
            "/models/fake-moe",
            "-tp",
            "2",
            "-ep",
        ])
        .args(["--offline", "--tune-ms", "2"]);
        let mut c = common::vllm::hermetic_cmd(c, home.path());
        c.env("PATH", &path)
            .env("FAKE_VLLM_LAYOUT", "A")
            .env("KEEPWRAP_CACHE_DIR", home.path().join("kw"))
            .env_remove("KEEPWRAP_LOG");
        let f = Running::spawn(&mut c).finish(DEADLINE);
        assert_eq!(f.code, code, "{}", f.stderr);
        f
    };
    assert!(run(0).tuned() > 0);
    // The exit status is the promise (passed through, 89); which ranks
    // report the hang before the launcher ends the others varies with timing.
    assert!(!run(89).events("hang").is_empty());
}
