//! Drives `python3 tests/fixtures/engines/fake_engine.py` directly (no keepwrap) and checks that the fake
//! reproduces the engine facts keepwrap relies on, including the bug keepwrap fixes
//! (SGLang 40320: the stock entry gate drops every rank's cache under expert parallelism).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::os::unix::process::CommandExt;

const DEADLINE: Duration = Duration::from_secs(20);
const TUNE_MS: &str = "2";

fn engine_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines/fake_engine.py")
}

/// A running fake launch in its own process group; dropping it kills the whole group.
struct Launch {
    child: Child,
    pgid: Pid,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

impl Launch {
    fn spawn(cache: &Path, args: &[&str], envs: &[(&str, &str)]) -> Launch {
        let mut cmd = Command::new("python3");
        cmd.arg(engine_path())
            .args(["--model-path", "/models/fake-moe"])
            .args(args)
            .env("SGLANG_CACHE_DIR", cache)
            .env("FAKE_DIST_TIMEOUT_S", "20")
            .env_remove("SGLANG_FLASHINFER_AUTOTUNE_CACHE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn python3 fake_engine.py");
        let pgid = Pid::from_raw(child.id() as i32);
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Launch {
            child,
            pgid,
            lines,
            stdout: Vec::new(),
            stderr,
            status: None,
        }
    }

    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.stdout.push(line);
        }
    }

    /// Wait for a stdout line satisfying `pred`, up to the deadline.
    fn wait_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(l) = self.stdout.iter().find(|l| pred(l)) {
                return l.clone();
            }
            let left = end.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "line not seen; stdout: {:#?}", self.stdout);
            if let Ok(line) = self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                self.stdout.push(line);
            }
        }
    }

    fn wait(&mut self) -> ExitStatus {
        let end = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            assert!(Instant::now() < end, "fake engine did not exit in time");
            thread::sleep(Duration::from_millis(20));
        };
        self.status = Some(status);
        // let the reader threads catch the last lines (they end at EOF)
        let end = Instant::now() + Duration::from_secs(5);
        while let Ok(line) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.stdout.push(line);
        }
        status
    }

    fn events(&mut self, kind: &str) -> Vec<Value> {
        self.drain();
        self.stdout
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == kind)
            .collect()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn group_alive(&self) -> bool {
        killpg(self.pgid, None).is_ok()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = killpg(self.pgid, Signal::SIGKILL);
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Run an offline boot to completion; returns the launch (for its events) after asserting the code.
fn boot(cache: &Path, args: &[&str], envs: &[(&str, &str)], code: i32) -> Launch {
    let mut all = vec!["--offline", "--tune-ms", TUNE_MS];
    all.extend_from_slice(args);
    let mut l = Launch::spawn(cache, &all, envs);
    let st = l.wait();
    assert_eq!(
        st.code(),
        Some(code),
        "args {all:?}\nstdout: {:#?}\nstderr: {}",
        l.stdout,
        l.stderr()
    );
    l
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// rank -> tactics sha256 (or shared_sha256)
fn tactics(l: &mut Launch, field: &str) -> BTreeMap<u64, String> {
    l.events("tactics")
        .iter()
        .map(|v| (u(v, "rank"), v[field].as_str().unwrap().to_string()))
        .collect()
}

fn rank_files(root: &Path) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    resp.split_whitespace().nth(1)?.parse().ok()
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn ep4_stock_gate_drops_every_boot_fixed_gate_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let ep = ["--tp", "4", "--ep", "4"];

    let mut b1 = boot(dir.path(), &ep, &[], 0);
    let p1 = b1.events("pass");
    assert_eq!(p1.len(), 8, "4 ranks x (decode, extend)");
    for p in &p1 {
        assert!(
            u(p, "tuned") > 0 && u(p, "hit") == 0,
            "boot 1 tunes all: {p}"
        );
    }
    let t1 = tactics(&mut b1, "sha256");
    assert_eq!(t1.len(), 4);
    // EP: each rank tunes its own MoE shapes, so the whole-shape digests differ across ranks...
    let distinct: std::collections::BTreeSet<_> = t1.values().collect();
    assert_eq!(distinct.len(), 4, "EP ranks use different MoE shapes");
    // ...while the dense shapes all ranks share carry the same tactics.
    let shared: std::collections::BTreeSet<_> =
        tactics(&mut b1, "shared_sha256").into_values().collect();
    assert_eq!(shared.len(), 1, "shared shapes agree across ranks");

    // The bug: boot 2 with the stock gate sees four different files and deletes them all.
    let mut args = ep.to_vec();
    args.extend(["--gate", "stock"]);
    let mut b2 = boot(dir.path(), &args, &[], 0);
    for p in b2.events("pass") {
        assert_eq!(p["gate"], "dropped", "{p}");
        assert_eq!(u(&p, "hit"), 0, "{p}");
        assert!(u(&p, "tuned") > 0, "{p}");
    }
    let t2 = tactics(&mut b2, "sha256");
    assert_ne!(t1, t2, "re-tuned tactics are re-drawn");

    // PR 40420: the fixed gate keeps the disjoint per-rank files; nothing is tuned.
    let mut args = ep.to_vec();
    args.extend(["--gate", "fixed"]);
    let mut b3 = boot(dir.path(), &args, &[], 0);
    let p3 = b3.events("pass");
    assert_eq!(p3.len(), 8);
    for p in &p3 {
        assert_eq!(p["gate"], "kept", "{p}");
        assert_eq!(u(p, "tuned"), 0, "{p}");
        assert!(u(p, "hit") > 0, "{p}");
    }
    assert_eq!(tactics(&mut b3, "sha256"), t2, "kept cache = same tactics");
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn tp4_without_ep_stock_gate_keeps_agreeing_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut b1 = boot(dir.path(), &["--tp", "4"], &[], 0);
    let t1 = tactics(&mut b1, "sha256");
    let distinct: std::collections::BTreeSet<_> = t1.values().collect();
    assert_eq!(distinct.len(), 1, "without EP every shape is shared");

    let mut b2 = boot(dir.path(), &["--tp", "4"], &[], 0);
    let p2 = b2.events("pass");
    assert_eq!(p2.len(), 8);
    for p in &p2 {
        assert_eq!(p["gate"], "kept", "{p}");
        assert_eq!(u(p, "tuned"), 0, "{p}");
    }
    assert_eq!(tactics(&mut b2, "sha256"), t1);
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn partial_hit_desynchronises_the_ranks() {
    let big = tempfile::tempdir().unwrap();
    let small = tempfile::tempdir().unwrap();
    let args = |chunk: &'static str| {
        [
            "--tp",
            "2",
            "--gate",
            "fixed",
            "--chunked-prefill-size",
            chunk,
        ]
    };
    boot(big.path(), &args("4096"), &[], 0);
    boot(small.path(), &args("2048"), &[], 0);
    // rank 0 gets the file of the launch with the bigger chunked-prefill size
    let src = rank_files(big.path())
        .into_iter()
        .find(|p| p.ends_with("rank_tp0_pp0_dp0.json"))
        .unwrap();
    let dst = rank_files(small.path())
        .into_iter()
        .find(|p| p.ends_with("rank_tp0_pp0_dp0.json"))
        .unwrap();
    assert_eq!(
        src.strip_prefix(big.path()).unwrap(),
        dst.strip_prefix(small.path()).unwrap(),
        "chunked-prefill size is not in the cache key"
    );
    std::fs::copy(&src, &dst).unwrap();

    let mut b = boot(small.path(), &args("4096"), &[], 86);
    let d = b.events("desync");
    assert!(!d.is_empty(), "desync event");
    assert_eq!(d[0]["pass"], "extend");
    assert_eq!(d[0]["counts"], serde_json::json!([0, 3]));
    let err = b.stderr();
    assert!(
        err.contains("desync") && err.contains("rank 0: 0, rank 1: 3"),
        "{err}"
    );
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn all_ranks_corrupt_gate_agrees_and_load_raises() {
    let dir = tempfile::tempdir().unwrap();
    boot(dir.path(), &["--tp", "2"], &[], 0);
    for f in rank_files(dir.path()) {
        std::fs::write(f, "not json").unwrap();
    }
    let b = boot(dir.path(), &["--tp", "2"], &[], 1);
    assert!(b.stderr().contains("JSONDecodeError"), "{}", b.stderr());
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn server_health_503_then_200_and_sigterm_stops_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::common::free_port();
    let port_s = port.to_string();
    let mut l = Launch::spawn(
        dir.path(),
        &[
            "--tp",
            "2",
            "--port",
            &port_s,
            "--tune-ms",
            "5",
            "--load-ms",
            "700",
        ],
        &[],
    );
    let end = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while seen.last() != Some(&200) {
        assert!(Instant::now() < end, "health never 200: {seen:?}");
        if let Some(code) = http_status(port, "/health") {
            if seen.last() != Some(&code) {
                seen.push(code);
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen, vec![503, 200], "503 while starting, then 200");
    assert_eq!(http_status(port, "/health_generate"), Some(200));
    l.wait_line(|s| s == "The server is fired up and ready to roll!");
    assert_eq!(l.events("pass").len(), 4);

    killpg(l.pgid, None).expect("group alive");
    nix::sys::signal::kill(l.pgid, Signal::SIGTERM).unwrap();
    let st = l.wait();
    assert_eq!(st.code(), Some(0), "stderr: {}", l.stderr());
    let end = Instant::now() + Duration::from_secs(5);
    while l.group_alive() {
        assert!(Instant::now() < end, "rank processes outlived the launcher");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn ranks_die_when_the_launcher_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::common::free_port().to_string();
    let mut l = Launch::spawn(
        dir.path(),
        &["--tp", "2", "--port", &port, "--tune-ms", "5"],
        &[],
    );
    l.wait_line(|s| s.contains("\"event\": \"ready\""));
    nix::sys::signal::kill(l.pgid, Signal::SIGKILL).unwrap();
    l.wait();
    let end = Instant::now() + Duration::from_secs(5);
    while l.group_alive() {
        assert!(Instant::now() < end, "orphaned rank processes");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn saved_file_format_matches_save_configs() {
    let dir = tempfile::tempdir().unwrap();
    boot(
        dir.path(),
        &["--megamoe", "--moe-runner-backend", "flashinfer_trtllm"],
        &[
            ("FAKE_FLASHINFER_VERSION", "0.7.9"),
            ("FAKE_GPU_ARCH", "100"),
        ],
        0,
    );
    let files = rank_files(dir.path());
    assert_eq!(
        files.len(),
        1,
        "one rank file, no temp files left: {files:?}"
    );
    let f = &files[0];
    let rel = f
        .strip_prefix(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let parts: Vec<&str> = rel.split('/').collect();
    assert_eq!(
        &parts[..4],
        &["flashinfer", "autotune", "0.7.9", "sm100"],
        "{rel}"
    );
    assert!(
        parts[4].len() == 16 && parts[4].chars().all(|c| c.is_ascii_hexdigit()),
        "{rel}"
    );
    assert!(
        parts[5].starts_with("rank_tp0_pp0_dp0_gpuGPU-") && parts[5].ends_with(".json"),
        "{rel}"
    );

    let text = std::fs::read_to_string(f).unwrap();
    assert!(
        text.starts_with("{\n  \"_metadata\": {\n    \"flashinfer_version\": \"0.7.9\""),
        "indent=2"
    );
    let obj: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let keys: Vec<&String> = obj.keys().collect();
    assert_eq!(keys[0], "_metadata");
    assert_eq!(keys[1], "_records");
    assert_eq!(keys[keys.len() - 1], "_generation");
    let entries = &keys[2..keys.len() - 1];
    assert!(!entries.is_empty());
    assert!(
        entries.windows(2).all(|w| w[0] < w[1]),
        "entries sorted by key"
    );
    for k in entries {
        assert!(k.starts_with("('flashinfer::"), "{k}");
        let v = obj[k.as_str()].as_array().unwrap();
        assert_eq!(
            v.len(),
            4,
            "FlashInfer 0.7 value: runner, tactic, policy, stats"
        );
        assert!(k.contains(v[0].as_str().unwrap()));
        assert!(v[3]["time_ms"].is_number());
    }
    assert_eq!(obj["_metadata"]["cutlass_dsl_version"], "4.3.0");

    let recipe = "import hashlib,json,sys\n\
                  o=json.load(open(sys.argv[1])); o.pop('_generation')\n\
                  print(hashlib.sha256(json.dumps(o,sort_keys=True,separators=(',',':')).encode()).hexdigest())";
    let out = Command::new("python3")
        .args(["-c", recipe])
        .arg(f)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        obj["_generation"].as_str().unwrap(),
        String::from_utf8(out.stdout).unwrap().trim()
    );
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn two_nodes_on_one_machine_share_tactics() {
    let c0 = tempfile::tempdir().unwrap();
    let c1 = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", crate::common::free_port());
    let node = |r: &'static str| {
        vec![
            "--offline",
            "--tune-ms",
            TUNE_MS,
            "--tp",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            r,
            "--dist-init-addr",
        ]
    };
    let mut a1 = node("1");
    a1.push(&addr);
    let mut a0 = node("0");
    a0.push(&addr);
    // node 1 first: its ranks must wait for node 0's store
    let mut n1 = Launch::spawn(c1.path(), &a1, &[]);
    let mut n0 = Launch::spawn(c0.path(), &a0, &[]);
    assert_eq!(n0.wait().code(), Some(0), "node 0: {}", n0.stderr());
    assert_eq!(n1.wait().code(), Some(0), "node 1: {}", n1.stderr());
    let t0 = tactics(&mut n0, "shared_sha256");
    let t1 = tactics(&mut n1, "shared_sha256");
    assert_eq!(t0.keys().copied().collect::<Vec<_>>(), vec![0]);
    assert_eq!(t1.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        t0[&0], t1[&1],
        "ranks on different nodes agree on shared tactics"
    );
    let f0 = rank_files(c0.path());
    let f1 = rank_files(c1.path());
    assert!(
        f0.len() == 1 && f0[0].ends_with("rank_tp0_pp0_dp0.json"),
        "{f0:?}"
    );
    assert!(
        f1.len() == 1 && f1[0].ends_with("rank_tp1_pp0_dp0.json"),
        "{f1:?}"
    );
}

#[test]
#[ignore = "slow: run by .ci/run"]
fn cache_off_writes_a_new_runs_file_each_boot() {
    let dir = tempfile::tempdir().unwrap();
    let off = [("SGLANG_FLASHINFER_AUTOTUNE_CACHE", "0")];
    boot(dir.path(), &["--tp", "2"], &off, 0);
    let mut b = boot(dir.path(), &["--tp", "2"], &off, 0);
    for p in b.events("pass") {
        assert_eq!(p["gate"], "n/a");
        assert!(u(&p, "tuned") > 0);
    }
    let files = rank_files(dir.path());
    assert_eq!(files.len(), 4, "2 ranks x 2 boots: {files:?}");
    assert!(files.iter().all(|f| f.parent().unwrap().ends_with("runs")));
}
