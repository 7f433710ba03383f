//! What the black-box tests share: the built binary, temp dirs, polling with
//! deadlines, and guards that clean up every process a test starts.
#![allow(dead_code)]

pub mod vllm;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub const BIN: &str = env!("CARGO_BIN_EXE_keepwrap");

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn helper(name: &str) -> PathBuf {
    repo().join("tests/helpers").join(name)
}

/// `keepwrap` with its cache root in `cache` (so tests never touch $HOME).
/// The stand-in engines of the tests are shell scripts: `KEEPWRAP_KEEP=always`
/// keeps their caches as an engine's (`--keep auto` would only supervise them).
/// Logs are JSON events, for [`log_events`]; a test of the wording
/// operators read sets `KEEPWRAP_LOG_FORMAT=text`.
pub fn keepwrap(cache: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("KEEPWRAP_CACHE_DIR", cache);
    cmd.env("KEEPWRAP_KEEP", "always");
    cmd.env_remove("KEEPWRAP_LOG");
    cmd.env("KEEPWRAP_LOG_FORMAT", "json");
    cmd
}

/// keepwrap (as [`keepwrap`], with `extra` options) on `cache` before the
/// engine of `tests/helpers/reads_at_start.py`, controlled from `ctl`:
/// it writes `write` rank files (8 a directory, each rank with entries of
/// its own); `variant`: an argument more (another fingerprint).
pub fn reads_at_start(
    cache: &Path,
    ctl: &Path,
    write: usize,
    variant: bool,
    extra: &[&str],
) -> Command {
    std::fs::write(ctl.join("write"), write.to_string()).unwrap();
    let mut cmd = keepwrap(cache);
    cmd.env("READS_CTL", ctl)
        .args(extra)
        .arg("--")
        .arg("python3")
        .arg(helper("reads_at_start.py"));
    if variant {
        cmd.arg("b");
    }
    cmd
}

/// keepwrap's log events in `stderr`: the lines `--log-format json`
/// writes, each a JSON object of the log schema (docs/troubleshooting.md,
/// "JSON logs"), each checked against it ([`check_schema`]). Other lines
/// (the engine's own) are skipped; a keepwrap line that is not valid JSON
/// or breaks the schema panics.
pub fn log_events(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with("{\"schema\""))
        .map(|l| {
            let v = serde_json::from_str::<serde_json::Value>(l)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {l}"));
            check_schema(&v, l);
            v
        })
        .collect()
}

/// The events with code `code` in `stderr` ([`log_events`]).
pub fn events_named(stderr: &str, code: &str) -> Vec<serde_json::Value> {
    log_events(stderr)
        .into_iter()
        .filter(|v| v["code"] == code)
        .collect()
}

/// The first event of code `code` whose fields include every field of
/// `fields` (a JSON object) at that value, in `stderr`'s JSON log.
pub fn find_event(
    stderr: &str,
    code: &str,
    fields: serde_json::Value,
) -> Option<serde_json::Value> {
    events_named(stderr, code)
        .into_iter()
        .find(|e| has_fields(e, &fields))
}

/// The codes of the troubleshooting reference (every code keepwrap logs
/// has its row there, held by `troubleshooting::`).
pub fn known_codes() -> &'static std::collections::BTreeSet<String> {
    static CODES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    CODES.get_or_init(|| {
        let doc = std::fs::read_to_string(repo().join("docs/troubleshooting.md")).unwrap();
        doc.lines()
            .filter(|l| l.starts_with("| `") || l.starts_with("| see `"))
            .flat_map(|l| {
                let cell = l.trim_start_matches('|').split(" | ").next().unwrap_or("");
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

/// Panics unless `e` (the JSON log line `line`) holds to the log schema:
/// `schema` 1, `timestamp`, `level` (`ERROR` ... `TRACE`), `target`
/// (`keepwrap...`), `code` (a known code), `message` (without the
/// `keepwrap:` prefix), `launch` (16 hex digits), `root` (a string or
/// null); durations (`*_s`) and counts as numbers, fingerprints whole.
pub fn check_schema(e: &serde_json::Value, line: &str) {
    let fail = |what: &str| panic!("a log line breaks the schema ({what}): {line}");
    let Some(o) = e.as_object() else {
        fail("not an object")
    };
    if o.get("schema").and_then(serde_json::Value::as_u64) != Some(1) {
        fail("schema is not 1");
    }
    let keys: Vec<&str> = o.keys().map(String::as_str).take(8).collect();
    if keys
        != [
            "schema",
            "timestamp",
            "level",
            "target",
            "code",
            "message",
            "launch",
            "root",
        ]
    {
        fail("the required keys, in order");
    }
    for key in ["timestamp", "level", "target", "code", "message", "launch"] {
        if !o[key].is_string() {
            fail(&format!("{key} is not a string"));
        }
    }
    if !["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&o["level"].as_str().unwrap()) {
        fail("level");
    }
    if !o["target"].as_str().unwrap().starts_with("keepwrap") {
        fail("target");
    }
    if !known_codes().contains(o["code"].as_str().unwrap()) {
        fail("code is not a code of the troubleshooting reference");
    }
    if o["message"].as_str().unwrap().starts_with("keepwrap:") {
        fail("message with the prefix");
    }
    let launch = o["launch"].as_str().unwrap();
    if launch.len() != 16 || !launch.bytes().all(|b| b.is_ascii_hexdigit()) {
        fail("launch is not 16 hex digits");
    }
    if !(o["root"].is_string() || o["root"].is_null()) {
        fail("root is neither a string nor null");
    }
    for (k, v) in o {
        if k.ends_with("_s") && !(v.is_number() || v.is_null()) {
            fail(&format!("{k} is not a number of seconds"));
        }
        if ["files", "kept", "removed", "stored", "late", "pid"].contains(&k.as_str())
            && !v.is_number()
        {
            fail(&format!("{k} is not a number"));
        }
        // counted only for a metrics file
        if k == "entries" && !(v.is_number() || v.is_null()) {
            fail("entries is neither a number nor null");
        }
    }
}

/// Poll `f` until it returns `Some`, or panic with `what` at the deadline.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A spawned process whose process group (and itself) is killed on drop,
/// so a failing test leaves nothing behind. Spawn it in its own group.
pub struct Guard {
    pub child: Child,
}

impl Guard {
    /// Spawn `cmd` in a new process group.
    pub fn spawn(cmd: &mut Command) -> Guard {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        Guard {
            child: cmd.spawn().expect("spawn"),
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).expect("kill");
    }

    /// Wait for exit with a deadline; returns the exit code (or 128+signal).
    pub fn wait(&mut self, timeout: Duration) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let status = wait_for("the process to exit", timeout, || {
            self.child.try_wait().expect("try_wait")
        });
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
    }
}

impl Drop for Guard {
    /// Its descendants first, each with its process group (an engine
    /// keepwrap started is in a group of its own, its ranks in the
    /// engine's): a test that fails while keepwrap runs leaves no engine
    /// behind. Then its own group, and itself.
    fn drop(&mut self) {
        let pid = self.pid();
        let mut descendants = Vec::new();
        let mut next = vec![pid.as_raw()];
        while let Some(p) = next.pop() {
            for c in children_of(p) {
                if !descendants.contains(&c) {
                    descendants.push(c);
                    next.push(c);
                }
            }
        }
        for d in descendants {
            let _ = kill(Pid::from_raw(-d), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(d), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
        let _ = kill(pid, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Lines of a report file (empty if it does not exist yet).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The state letter of a process from /proc (`None` once it is gone).
pub fn proc_state(pid: i32) -> Option<char> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|s| s.trim().chars().next())
}

/// Children of `pid`, from /proc/<pid>/task/*/children.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// SIGKILL keepwrap (`kw`'s pid) and, at once, its children and their
/// process groups: a machine that loses power mid-boot.
pub fn sigkill_with_children(kw: i32) {
    let children = children_of(kw);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(kw),
        nix::sys::signal::Signal::SIGKILL,
    );
    for pid in children {
        for target in [-pid, pid] {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(target),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A process whose stdout lines and stderr are collected as they come.
pub struct Running {
    pub guard: Guard,
    lines: std::sync::mpsc::Receiver<String>,
    pub stdout: Vec<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// Set once stderr reached its end.
    stderr_done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How a process ended, with everything it printed.
pub struct Finished {
    pub code: i32,
    pub stdout: Vec<String>,
    pub stderr: String,
}

impl Running {
    pub fn spawn(cmd: &mut Command) -> Running {
        use std::io::{BufRead, BufReader, Read};
        use std::process::Stdio;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut guard = Guard::spawn(cmd);
        let (tx, lines) = std::sync::mpsc::channel();
        let out = guard.child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = guard.child.stderr.take().unwrap();
        let stderr_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = stderr_done.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        Running {
            guard,
            lines,
            stdout: Vec::new(),
            stderr,
            stderr_done,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.stdout.push(l);
        }
    }

    /// keepwrap's events so far (whole lines only).
    pub fn log_events(&self) -> Vec<serde_json::Value> {
        log_events(complete_lines(&self.stderr()))
    }

    /// Wait until keepwrap logged event `name` (JSON logs); the event.
    pub fn wait_event(&mut self, name: &str, timeout: Duration) -> serde_json::Value {
        self.wait_event_where(name, timeout, |_| true)
    }

    /// Wait until keepwrap logged one of the events `names` (JSON logs).
    pub fn wait_any_event(&mut self, names: &[&str], timeout: Duration) -> serde_json::Value {
        wait_for(&format!("one of {names:?} on stderr"), timeout, || {
            self.drain();
            log_events(complete_lines(&self.stderr()))
                .into_iter()
                .find(|e| e["code"].as_str().is_some_and(|n| names.contains(&n)))
        })
    }

    /// Wait until keepwrap logged event `name` with `pred` true of it.
    pub fn wait_event_where(
        &mut self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        wait_for(&format!("event {name} on stderr"), timeout, || {
            self.drain();
            let err = self.stderr();
            events_named(complete_lines(&err), name)
                .into_iter()
                .find(|e| pred(e))
        })
    }

    /// Wait until keepwrap logged event `name` with every field of
    /// `fields` at that value.
    pub fn wait_event_with(
        &mut self,
        name: &str,
        fields: serde_json::Value,
        timeout: Duration,
    ) -> serde_json::Value {
        self.wait_event_where(name, timeout, |e| has_fields(e, &fields))
    }

    /// Wait until stderr contains `needle`.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) {
        wait_for(&format!("'{needle}' on stderr"), timeout, || {
            self.drain();
            self.stderr().contains(needle).then_some(())
        });
    }

    /// Wait until a stdout line satisfies `pred`; return it.
    pub fn wait_stdout(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        wait_for(what, timeout, || {
            self.drain();
            self.stdout.iter().find(|l| pred(l)).cloned()
        })
    }

    /// Wait for the exit (with a deadline) and collect the rest of the output.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let code = self.guard.wait(timeout);
        // The pipes close when the process and its group are gone.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => self.stdout.push(l),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) if Instant::now() > deadline => break,
                Err(_) => {}
            }
        }
        // ... and stderr too: its reader may still be behind.
        while !self.stderr_done.load(std::sync::atomic::Ordering::SeqCst)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let stderr = self.stderr();
        Finished {
            code,
            stdout: std::mem::take(&mut self.stdout),
            stderr,
        }
    }
}

/// The fake engine of `tests/fixtures/engines/`: what its JSON lines say about one boot.
impl Finished {
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        self.stdout
            .iter()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == kind)
            .collect()
    }

    /// Shapes profiled, summed over every rank and pass.
    pub fn tuned(&self) -> u64 {
        self.events("pass")
            .iter()
            .map(|p| p["tuned"].as_u64().unwrap())
            .sum()
    }

    /// Shapes profiled per global rank.
    pub fn tuned_by_rank(&self) -> std::collections::BTreeMap<u64, u64> {
        let mut m = std::collections::BTreeMap::new();
        for p in self.events("pass") {
            *m.entry(p["rank"].as_u64().unwrap()).or_default() += p["tuned"].as_u64().unwrap();
        }
        m
    }

    /// Cache hits, summed over every rank and pass.
    pub fn hit(&self) -> u64 {
        self.events("pass")
            .iter()
            .map(|p| p["hit"].as_u64().unwrap())
            .sum()
    }

    /// Digest of the tactics each global rank ended up using.
    pub fn tactics(&self) -> std::collections::BTreeMap<u64, String> {
        self.events("tactics")
            .iter()
            .map(|t| {
                (
                    t["rank"].as_u64().unwrap(),
                    t["sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// keepwrap's lines as an operator reads them: the `keepwrap:` lines
    /// of text logs, and the events of JSON logs shown the same way
    /// (`keepwrap: warning: ` and the message).
    pub fn log(&self) -> Vec<String> {
        self.stderr
            .lines()
            .filter_map(|l| {
                if l.starts_with("keepwrap:") {
                    return Some(l.to_string());
                }
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                v.get("schema")?;
                let prefix = match v["level"].as_str()? {
                    "ERROR" => "error: ",
                    "WARN" => "warning: ",
                    "DEBUG" | "TRACE" => "debug: ",
                    _ => "",
                };
                Some(format!("keepwrap: {prefix}{}", v["message"].as_str()?))
            })
            .collect()
    }

    pub fn logged(&self, needle: &str) -> bool {
        self.log().iter().any(|l| l.contains(needle))
    }

    /// keepwrap's events, from JSON logs.
    pub fn log_events(&self) -> Vec<serde_json::Value> {
        log_events(&self.stderr)
    }

    /// keepwrap's events named `name`.
    pub fn events_named(&self, name: &str) -> Vec<serde_json::Value> {
        events_named(&self.stderr, name)
    }

    /// Did keepwrap log event `name`?
    pub fn has_event(&self, name: &str) -> bool {
        !self.events_named(name).is_empty()
    }

    /// Did keepwrap log event `name` with every field of `fields` (a JSON
    /// object) at that value?
    pub fn logged_with(&self, name: &str, fields: serde_json::Value) -> bool {
        self.events_named(name)
            .iter()
            .any(|e| has_fields(e, &fields))
    }

    /// Did the launch line say tuning is done at the first 200 from
    /// `/health` on 127.0.0.1:`port`?
    pub fn probes_port(&self, port: &str) -> bool {
        let done = format!("when GET http://127.0.0.1:{port}/health first answers 200");
        self.logged_with("launch", serde_json::json!({ "done": done }))
    }

    /// keepwrap's warnings: its events at level WARN.
    pub fn warnings(&self) -> Vec<serde_json::Value> {
        self.log_events()
            .into_iter()
            .filter(|e| e["level"] == "WARN")
            .collect()
    }

    /// Does an event named `name` have field `field` starting with `prefix`
    /// (and `path`, when given, equal to it)?
    pub fn logged_starting(&self, name: &str, field: &str, prefix: &str) -> bool {
        self.events_named(name)
            .iter()
            .any(|e| e[field].as_str().is_some_and(|v| v.starts_with(prefix)))
    }

    /// The one event named `name`, or a panic naming what was logged.
    pub fn event(&self, name: &str) -> serde_json::Value {
        let mut found = self.events_named(name);
        assert_eq!(
            found.len(),
            1,
            "expected one {name} event; logged:\n{}",
            self.stderr
        );
        found.remove(0)
    }
}

pub fn fake_engine() -> PathBuf {
    repo().join("tests/fixtures/engines/fake_engine.py")
}

/// `keepwrap [kw_args] -- python3 tests/fixtures/engines/fake_engine.py --model-path
/// /models/m [engine_args]`, with `SGLANG_CACHE_DIR=<home>/sglang` so the
/// default cache root applies.
pub fn keepwrap_engine(home: &Path, kw_args: &[&str], engine_args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env_remove("KEEPWRAP_CACHE_DIR")
        .env("SGLANG_CACHE_DIR", home.join("sglang"))
        .env("FAKE_DIST_TIMEOUT_S", "20")
        .args(kw_args)
        .arg("--")
        .arg("python3")
        .arg(fake_engine())
        .args(["--model-path", "/models/fake-moe", "--tune-ms", "2"])
        .args(engine_args);
    cmd
}

/// A TCP port on 127.0.0.1 that was free a moment ago and that no test of
/// this process was given before: the kernel may hand the port it just
/// freed to the next `bind` to port 0, so two picks in a row (a launch's
/// API port and its rendezvous port) or two tests' picks could be the
/// same port, and a launch bound twice to one port hangs.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

#[test]
fn free_port_never_gives_a_port_twice() {
    let ports: Vec<u16> = (0..1000).map(|_| free_port()).collect();
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ports.len());
}

/// `keepwrap fingerprint --explain -- ARGV` run in `cwd` with only `HOME=cwd`
/// and `env` in its environment; asserts success, returns stdout (the
/// fingerprint is its last line).
pub fn explain_in(
    cwd: &Path,
    env: &[(&str, &str)],
    argv: &[impl AsRef<std::ffi::OsStr>],
) -> String {
    let out = Command::new(BIN)
        .current_dir(cwd)
        .env_clear()
        .env("HOME", cwd)
        .envs(env.iter().copied())
        .args(["fingerprint", "--explain", "--"])
        .args(argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Run `cmd`, which must succeed, and read its stdout as JSON.
pub fn json_out(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A fresh home for one launch (removed when dropped).
pub fn home() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Every sidecar (`*.launch`) below `root`, sorted.
pub fn sidecars(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "launch") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// The cache root keepwrap derives from `keepwrap_engine`'s environment.
pub fn cache_root(home: &Path) -> PathBuf {
    home.join("sglang/flashinfer/autotune")
}

/// Cache files (`*.json` outside `runs/` and hidden dirs) under `root`,
/// relative and sorted.
pub fn cache_files(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                if name != "runs" && !name.to_string_lossy().starts_with('.') {
                    walk(root, &p, out);
                }
            } else if name.to_string_lossy().ends_with(".json") {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Run to the end with a deadline.
pub fn boot(cmd: &mut Command) -> Finished {
    Running::spawn(cmd).finish(Duration::from_secs(60))
}

/// [`boot`] with `KEEPWRAP_LOG=debug`: each file's prune line (`kept`,
/// `stored`, `removed`) is at debug level.
pub fn boot_debug(cmd: &mut Command) -> Finished {
    boot(cmd.env("KEEPWRAP_LOG", "debug"))
}

/// Run a short command to the end (60 s deadline, then KILL) and collect all
/// of its output: both pipes are read to their end before it returns.
pub fn output(cmd: &mut Command) -> Finished {
    output_within(cmd, Duration::from_secs(60))
}

/// [`output`] with a deadline sized to what the command waits for.
pub fn output_within(cmd: &mut Command, deadline: Duration) -> Finished {
    use std::process::Stdio;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(deadline) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} did not exit within {deadline:?}");
        }
    };
    Finished {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `cmd` without any `KEEPWRAP_*` variable of the test's own environment.
pub fn without_keepwrap_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("KEEPWRAP_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Wait until no process holds a file open below `dir` (from
/// /proc/*/fd). After a SIGKILL of keepwrap, its engine lives on holding
/// the launch's marker in `<root>/.keepwrap/running`, and the next launch
/// rightly runs hands-off beside it: a test that wants the next launch to
/// recover waits for the orphan to end first.
pub fn wait_until_nothing_holds(dir: &Path, timeout: Duration) {
    let holds = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| {
                std::fs::read_dir(p.path().join("fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(dir)))
            })
    };
    wait_for(
        &format!("no process to hold a file in {}", dir.display()),
        timeout,
        || (!holds()).then_some(()),
    );
}

/// `tini -s`, started as a container runtime starts PID 1 (see
/// `with_default_signals`): tini passes the dispositions it inherits on to
/// its child, and the comparisons are about tini, not about the caller.
pub fn tini() -> Command {
    let mut cmd = Command::new("tini");
    cmd.arg("-s");
    with_default_signals(&mut cmd);
    cmd
}

/// Start `cmd` with every signal at its default disposition and none
/// blocked, whatever the caller ignores (`nohup` ignores SIGHUP, a shell's
/// background job SIGINT and SIGQUIT).
pub fn with_default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls signal(2),
    // sigemptyset(3) and sigprocmask(2), which are async-signal-safe; it
    // allocates nothing. signal(2) fails harmlessly on SIGKILL, SIGSTOP and
    // the C library's own 32 and 33.
    unsafe {
        cmd.pre_exec(|| {
            for n in 1..=64 {
                libc::signal(n, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        })
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: impl AsRef<[u8]>) -> String {
    bytes.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A named pipe at `p` (its parent directories made).
pub fn mkfifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

/// Whether this test may make mount namespaces (root, and `unshare --mount`
/// works here).
pub fn can_mount() -> bool {
    is_root()
        && have("unshare")
        && Command::new("unshare")
            .args(["--mount", "true"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// `unshare --mount sh -c 'SETUP && exec "$@"' ARG0 CMD...`: `inner` (its
/// arguments, directory and environment) in a private mount namespace after
/// the shell `setup` ran with `$0` = `arg0`.
pub fn in_mount_ns(setup: &str, arg0: &Path, inner: &Command) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", &format!("{setup} && exec \"$@\"")])
        .arg(arg0)
        .arg(inner.get_program())
        .args(inner.get_args());
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}

/// A file system of its own for the calling test thread: the thread leaves
/// the process's mount namespace (its own, private, which ends with the
/// thread and takes the mount with it) and mounts a fresh 16 MiB ext4 image
/// made in `dir` at `dir/disk`; processes the thread starts see it too.
/// `None` without root or loop devices. A disk that no other test writes
/// to: no other test's `syncfs` writes back its pages.
pub fn own_disk(dir: &Path) -> Option<PathBuf> {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    if !is_root() || !have("mkfs.ext4") || !Path::new("/dev/loop-control").exists() {
        return None;
    }
    let image = dir.join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    unshare(CloneFlags::CLONE_NEWNS).unwrap();
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .unwrap();
    let disk = dir.join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&image)
        .arg(&disk)
        .output()
        .unwrap();
    assert!(mounted.status.success(), "{mounted:?}");
    Some(disk)
}

/// A test that needs something this machine may lack (root, `unshare`,
/// tini): true when it is there. Under CI (`CI` set, as `.ci/run` runs,
/// which installs every such tool and runs as root) a missing need fails the
/// test, so CI never passes one silently; elsewhere the test says why it
/// did not run, and passes.
pub fn has_need(ok: bool, need: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs {need}, and CI must run it"
        );
        eprintln!("not run: needs {need}");
    }
    ok
}

/// `s` up to its last newline: a line still being written is not read.
pub fn complete_lines(s: &str) -> &str {
    &s[..s.rfind('\n').map_or(0, |i| i + 1)]
}

/// Has `event` every field of `fields` (a JSON object) at that value?
pub fn has_fields(event: &serde_json::Value, fields: &serde_json::Value) -> bool {
    fields
        .as_object()
        .expect("fields: a JSON object")
        .iter()
        .all(|(k, v)| &event[k] == v)
}

/// A cold boot that kept FlashInfer's managed store in keepwrap's store
/// root `root`: its launch line names the root, it tuned, the engine wrote
/// `entries` entry files there (some), and all were signed.
pub fn assert_cold_store(cold: &Finished, root: &Path, entries: usize) {
    assert_eq!(
        cold.event("launch")["root"],
        serde_json::json!(root),
        "{}",
        cold.stderr
    );
    assert!(cold.tuned() > 0, "{:#?}", cold.stdout);
    assert!(entries > 0, "the engine wrote its store in keepwrap's root");
    assert!(
        cold.logged_with("signed", serde_json::json!({ "files": entries })),
        "{}",
        cold.stderr
    );
}

/// Whether `f` removed a file whose path ends in `name` as changed after
/// it was signed.
pub fn removed_as_changed(f: &Finished, name: &str) -> bool {
    f.events_named("removed").iter().any(|e| {
        e["path"].as_str().unwrap_or("").ends_with(name)
            && e["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("changed after signing")
    })
}
