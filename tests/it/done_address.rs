//! "Done" is the engine's own readiness, on the address the engine serves:
//! the host and port as the engine reads them (its `--config` file typed
//! as PyYAML types it, the port as Python's `int()` reads it), every
//! address of this host checked against the engine's process tree, HTTPS
//! servers probed over TLS, and a headless vLLM node that never guesses the
//! head's port.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// `port` written as YAML 1.1 and Python's `int()` both read it, with an
/// underscore: `3155_5` for 31555.
fn underscored(port: u16) -> String {
    format!("{}_{}", port / 10, port % 10)
}

/// keepwrap's outcome lines: one of them ends every launch's waiting.
const OUTCOMES: [&str; 4] = ["signed", "reused", "nothing_to_keep", "nothing_signed"];

/// Boot `cmd` until keepwrap logs its outcome (or the deadline), then stop
/// it with TERM.
fn until_signed(cmd: &mut Command) -> Finished {
    until_outcome(Running::spawn(cmd))
}

fn until_outcome(r: Running) -> Finished {
    wait_for("keepwrap's outcome line", T, || {
        r.log_events()
            .iter()
            .any(|e| OUTCOMES.contains(&e["code"].as_str().unwrap_or("")))
            .then_some(())
    });
    r.guard.signal(Signal::SIGTERM);
    r.finish(T)
}

/// What the launch line says decides done.
fn done_line(f: &Finished) -> String {
    f.event("launch")["done"].as_str().unwrap().to_string()
}

/// The launch line names `/health` on loopback at `port`, and both rank
/// files were signed.
fn probed_and_signed(f: &Finished, port: u16) {
    let done = done_line(f);
    assert!(
        done.contains(&format!("GET http://127.0.0.1:{port}/health")),
        "{}",
        f.stderr
    );
    assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
}

/// `keepwrap KW -- python3 -m sglang.launch_server --model-path
/// /models/fake-moe --tune-ms 2 ARGS` (the fake engine as SGLang), its
/// cache in `home`.
fn kw_sglang(home: &Path, kw: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env_remove("KEEPWRAP_DONE")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("PYTHONPATH", repo().join("tests/fixtures/engines"))
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args(kw)
        .args(["--", "python3", "-m", "sglang.launch_server"])
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(args);
    cmd
}

#[test]
fn an_sglang_config_files_host_and_port_are_probed_as_sglang_reads_them() {
    let h = home();
    let port = free_port();
    let cfg = h.path().join("serve.yaml");
    // the most common lines: an unquoted wildcard host, a port with a
    // digit separator (an int to PyYAML, 31555 to SGLang's argparse)
    std::fs::write(
        &cfg,
        format!("host: 0.0.0.0\nport: {}\ntp-size: 2\n", underscored(port)),
    )
    .unwrap();
    let f = until_signed(&mut kw_sglang(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--config", cfg.to_str().unwrap()],
    ));
    probed_and_signed(&f, port);
}

#[test]
fn an_sglang_port_with_a_digit_separator_on_the_command_line_is_probed() {
    let h = home();
    let port = free_port();
    let p = underscored(port);
    let f = until_signed(&mut kw_sglang(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--tp", "2", "--port", &p],
    ));
    probed_and_signed(&f, port);
}

#[test]
fn a_vllm_config_files_host_and_port_are_probed_as_vllm_reads_them() {
    let h = home();
    let port = free_port();
    let cfg = h.path().join("serve.yaml");
    std::fs::write(
        &cfg,
        format!(
            "host: 0.0.0.0\nport: {}\ntensor-parallel-size: 2\n",
            underscored(port)
        ),
    )
    .unwrap();
    let f = until_signed(&mut common::vllm::kw_vllm(
        h.path(),
        &["--probe-interval", "50ms"],
        &["--config", cfg.to_str().unwrap()],
        &[],
    ));
    probed_and_signed(&f, port);
}

/// A headless vLLM node serves nothing, and its launch does not say the
/// head's API port (it needs none): the head serving on another port than
/// 8000 must not leave the node unsigned (on every boot its ranks, and so
/// the whole cluster's, would tune again). It signs once its own rank file
/// has landed and is quiet, and a warm boot of both nodes tunes nothing.
#[test]
fn a_headless_vllm_node_without_a_port_signs_its_rank_files() {
    let tmp = home();
    let homes = [tmp.path().join("node0"), tmp.path().join("node1")];
    let port = free_port().to_string();
    let master = free_port().to_string();
    let boot = || {
        let kw = ["--probe-interval", "50ms", "--headless-quiet", "300ms"];
        common::vllm::two_nodes(&homes, &kw, |rank| {
            let mut args: Vec<String> = [
                "-tp",
                "2",
                "-ep",
                "--nnodes",
                "2",
                "--node-rank",
                &rank.to_string(),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                &master,
            ]
            .map(String::from)
            .into();
            if rank == 0 {
                args.extend(["--port".to_string(), port.clone()]);
            } else {
                args.push("--headless".into());
            }
            args
        })
    };
    let [head, headless] = boot();
    assert_eq!(
        done_line(&headless),
        "when this headless node's 1 rank file (autotune_configs_dp0_rank1.json) have landed and no cache file has for 300ms",
        "{}",
        headless.stderr
    );
    for f in [&head, &headless] {
        assert!(f.logged_with("signed", json!({"files": 1})), "{}", f.stderr);
    }
    assert!(head.tuned() + headless.tuned() > 0);
    let [head, headless] = boot();
    for f in [&head, &headless] {
        assert!(f.logged_with("reused", json!({"files": 1})), "{}", f.stderr);
    }
    assert_eq!(head.tuned() + headless.tuned(), 0, "{}", headless.stderr);
}

/// An HTTP server answering 200 to everything on `HOST PORT` for `MS`
/// milliseconds, then gone: another process on the engine's port.
const FOREIGN: &str = r#"
import socket, sys, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
s.settimeout(0.05)
end = time.monotonic() + int(sys.argv[3]) / 1000
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except OSError:
        continue
    c.settimeout(2)
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    except OSError:
        pass
    c.close()
"#;

/// The address the test's own network namespace adds to its `lo`: an
/// address of "this host" that is neither loopback nor the wildcard (a
/// pod's own IP, `--host $(POD_IP)`). Never the machine's own address.
const POD_IP: &str = "10.200.0.7";

/// `unshare -n sh -c 'lo up, POD_IP on lo, the foreign server for MS (an
/// orphan: outside keepwrap's tree), exec keepwrap KW -- staged engine
/// STEPS'` on the cache `root`.
fn in_own_netns(root: &Path, kw: &[&str], foreign: (u16, u32), steps: &[&str]) -> Command {
    let inner = keepwrap(root);
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-n",
        "sh",
        "-c",
        "ip link set lo up && ip addr add \"$1\"/32 dev lo && \
         (python3 -c \"$2\" \"$1\" \"$3\" \"$4\" </dev/null >/dev/null 2>&1 &) && \
         shift 4 && exec \"$@\"",
        "sh",
        POD_IP,
        FOREIGN,
        &foreign.0.to_string(),
        &foreign.1.to_string(),
    ]);
    cmd.arg(inner.get_program())
        .args(inner.get_args())
        .args(kw)
        .arg("--")
        .arg("python3")
        .arg(helper("staged_engine.py"))
        .args(steps);
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}

/// `--host` is the pod's own IP: another process answering 200 on that
/// address mid-tune is not the engine, whatever the address (it was
/// trusted as a remote server's, and rank 0's file alone was signed).
#[test]
#[ignore = "needs root and unshare"]
fn another_process_on_an_address_of_this_host_is_not_the_engine() {
    if !has_need(
        is_root() && have("unshare") && have("ip"),
        "root, unshare and ip",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let port = 30000 + (std::process::id() % 20000) as u16;
    let url = format!("http://{POD_IP}:{port}/health");
    let serve = format!("serve:{POD_IP}:{port}");
    // rank 0, a pause, rank 1, then the engine's own server once the
    // foreign one (3 s) is gone, as SGLang binds only once every rank is done
    let steps = [
        "onterm:0",
        "write:0",
        "sleep:1500",
        "write:1",
        &serve,
        "mark:serving",
        "wait",
    ];
    let kw = [
        "--done",
        &format!("health={url}"),
        "--probe-interval",
        "50ms",
    ];
    let f = until_signed(&mut in_own_netns(&root, &kw, (port, 3000), &steps));
    let events = f.log_events();
    let at = |pred: &dyn Fn(&serde_json::Value) -> bool| events.iter().position(pred);
    let rank1 = at(&|e| {
        e["code"] == "landed"
            && e["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("rank_tp1_pp0_dp0.json"))
    });
    let done = at(&|e| e["code"] == "tuning_done");
    assert!(
        rank1.is_some() && done > rank1,
        "done only after rank 1 landed: {}",
        f.stderr
    );
    assert!(
        f.events_named("port_not_engines")
            .iter()
            .any(|e| e["url"] == url.as_str()),
        "{}",
        f.stderr
    );
    assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
}

/// A self-signed certificate and its key for `localhost`, made now with
/// the `openssl` command in `dir`: (cert, key).
fn self_signed(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        cert.to_str().unwrap().to_string(),
        key.to_str().unwrap().to_string(),
    )
}

/// An HTTPS server (`--ssl-certfile`, `--ssl-keyfile`) is probed over TLS:
/// the plain-HTTP probe never got its 200, and nothing was ever signed.
#[test]
fn an_sglang_https_server_is_probed_over_tls() {
    if !has_need(have("openssl"), "openssl") {
        return;
    }
    let h = home();
    let (cert, key) = self_signed(h.path());
    let port = free_port();
    let p = port.to_string();
    let f = until_signed(&mut kw_sglang(
        h.path(),
        &["--probe-interval", "50ms"],
        &[
            "--tp",
            "2",
            "--port",
            &p,
            "--ssl-certfile",
            &cert,
            "--ssl-keyfile",
            &key,
        ],
    ));
    assert!(
        done_line(&f).contains(&format!("GET https://127.0.0.1:{port}/health")),
        "{}",
        f.stderr
    );
    assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
}

/// The same for vLLM (whose port is bound at start and listens once the
/// engine is up), and `--done health=https://...` is a rule.
#[test]
fn a_vllm_https_server_is_probed_over_tls_and_an_https_url_is_a_rule() {
    if !has_need(have("openssl"), "openssl") {
        return;
    }
    let h = home();
    let (cert, key) = self_signed(h.path());
    for rule in [None, Some("https://localhost:{port}/health")] {
        let port = free_port();
        let p = port.to_string();
        let mut kw = vec!["--probe-interval".to_string(), "50ms".to_string()];
        if let Some(url) = rule {
            kw.extend([
                "--done".into(),
                format!("health={}", url.replace("{port}", &p)),
            ]);
        }
        let kw: Vec<&str> = kw.iter().map(String::as_str).collect();
        let args = [
            "-tp",
            "2",
            "--port",
            &p,
            "--ssl-certfile",
            &cert,
            "--ssl-keyfile",
            &key,
        ];
        let home = h.path().join(format!("{}", rule.is_some()));
        std::fs::create_dir_all(&home).unwrap();
        let f = until_signed(&mut common::vllm::kw_vllm(&home, &kw, &args, &[]));
        let host = if rule.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        assert!(
            done_line(&f).contains(&format!("GET https://{host}:{port}/health")),
            "{}",
            f.stderr
        );
        assert!(f.logged_with("signed", json!({"files": 2})), "{}", f.stderr);
    }
}

/// Answers no query: a UDP socket on 127.0.0.1:53 that says `listening`
/// once bound and `query` on each datagram it takes, and never replies.
const SILENT_DNS: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
print("listening", flush=True)
while True:
    s.recvfrom(512)
    print("query", flush=True)
"#;

/// The name of the probed host takes long to resolve (a headless node's
/// leader not in DNS yet, a DNS server that does not answer): the lookup
/// runs off the poll loop, so a signal sent meanwhile reaches the engine
/// at once, not after the resolver gives up (30 s here). In a network and
/// mount namespace of its own: `/etc/resolv.conf` names a server on its
/// loopback that never answers.
#[test]
#[ignore = "needs root and unshare"]
fn a_name_that_takes_long_to_resolve_does_not_delay_signals() {
    if !has_need(
        is_root() && have("unshare") && have("nsenter") && have("ip"),
        "root, unshare, nsenter and ip",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("resolv.conf");
    // A lookup the signal waited for would take this long at the least.
    let lookup_timeout = Duration::from_secs(30);
    std::fs::write(
        &conf,
        format!(
            "nameserver 127.0.0.1\noptions timeout:{} attempts:1\n",
            lookup_timeout.as_secs()
        ),
    )
    .unwrap();
    let mut dns = Running::spawn(
        Command::new("unshare")
            .args(["--net", "--mount", "sh", "-c"])
            .arg("ip link set lo up && mount --bind \"$0\" /etc/resolv.conf && exec python3 -c \"$1\"")
            .arg(&conf)
            .arg(SILENT_DNS),
    );
    dns.wait_stdout("the DNS server", Duration::from_secs(20), |l| {
        l == "listening"
    });
    let report = tmp.path().join("report");
    let mut kw = keepwrap(&tmp.path().join("cache"));
    kw.args([
        "--done",
        "health=http://leader.keepwrap-test.invalid:8000/health",
        "--probe-interval",
        "50ms",
        "--",
        "sh",
        "-c",
        "trap 'echo usr1 >> \"$0\"' USR1; echo ready >> \"$0\"; while :; do sleep 0.05; done",
    ])
    .arg(&report);
    let mut entered = Command::new("nsenter");
    entered
        .arg("-t")
        .arg(dns.guard.pid().as_raw().to_string())
        .args(["--net", "--mount", "--"])
        .arg(kw.get_program())
        .args(kw.get_args());
    for (k, v) in kw.get_envs() {
        match v {
            Some(v) => entered.env(k, v),
            None => entered.env_remove(k),
        };
    }
    let r = Running::spawn(&mut entered);
    wait_for("the engine to start", Duration::from_secs(20), || {
        lines(&report).iter().any(|l| l == "ready").then_some(())
    });
    dns.wait_stdout("the probe's name lookup", Duration::from_secs(20), |l| {
        l == "query"
    });
    let sent = std::time::Instant::now();
    r.guard.signal(nix::sys::signal::Signal::SIGUSR1);
    // Not held by the lookup: well before its timeout, and not a bound on
    // how fast a loaded host forwards.
    wait_for(
        "USR1 to reach the engine while the name is being looked up",
        lookup_timeout / 2,
        || lines(&report).iter().any(|l| l == "usr1").then_some(()),
    );
    let took = sent.elapsed();
    r.guard.signal(nix::sys::signal::Signal::SIGTERM);
    let f = r.finish(Duration::from_secs(20));
    assert!(
        took < lookup_timeout / 2,
        "forwarded after {took:?}: {}",
        f.stderr
    );
}
