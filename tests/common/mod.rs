//! What the black-box tests share: the built binary, temp dirs, polling with
//! deadlines, and guards that clean up every process a test starts.
#![allow(dead_code)]

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
pub fn keepwrap(cache: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("KEEPWRAP_CACHE_DIR", cache);
    cmd.env_remove("KEEPWRAP_LOG");
    cmd.env("KEEPWRAP_DISABLE", "1"); // TEMP until cache lands
    cmd
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
    fn drop(&mut self) {
        let pid = self.pid();
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
