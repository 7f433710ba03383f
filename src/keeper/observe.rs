//! The engine that actually runs: found among the processes keepwrap
//! started, and read from `/proc` (its argv, its environment and its
//! working directory), so that what keepwrap read from the launch's words
//! is checked against what the engine got. A login shell's profile, an
//! entrypoint's hooks, a sourced file or a `cd` show here, and nowhere in
//! the words.
//!
//! The engine is the shallowest process of the tree under keepwrap's child
//! that runs what the words say the engine is ([`Want`]): an SGLang or a
//! vLLM server, the same script with the same arguments, or (for a launch
//! keepwrap cannot read whole) any server it recognises. Shells, launcher
//! prefixes and any other Python a profile or a launch script runs first
//! (a `conda` hook, a `pip install`, a GPU check) are looked through.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use crate::done::owner::children;
use crate::engine::{self, Engine};
use crate::launch::{is_python, prefix, shell, Command, Wrapper};

/// Which process is the engine, by what the launch's words say it runs.
#[derive(Clone)]
pub enum Want {
    /// This engine's server launch.
    Engine(&'static dyn Engine),
    /// This command, with another spelling of its program allowed
    /// (`python3` for `/usr/bin/python3.11`).
    Argv(Vec<OsString>),
    /// Any engine's server launch (as [`Engine::runs`] says): a launch
    /// keepwrap cannot read whole. Plain Python never is: a launch script's helper
    /// (`python3 -c 'import torch'`) must not be taken for its engine.
    Any,
}

impl Want {
    pub fn of(command: &Command) -> Want {
        if matches!(command.wrapper, Wrapper::Unreadable(_)) {
            Want::Any
        } else if let Some(engine) = engine::ALL.into_iter().find(|e| e.runs(&command.argv)) {
            Want::Engine(engine)
        } else {
            Want::Argv(command.argv.clone())
        }
    }

    /// Whether `argv` (as [`as_command`] gives it) is the engine.
    fn matches(&self, argv: &[OsString]) -> bool {
        match self {
            Want::Engine(engine) => is_engine(argv) && engine.runs(argv),
            Want::Argv(want) => {
                let program = |a: &[OsString]| {
                    let a0 = a.first().map(|a| a.to_string_lossy().into_owned());
                    let a0 = a0.unwrap_or_default();
                    if is_python(&a0) {
                        "python".to_string()
                    } else {
                        a0.rsplit('/').next().unwrap_or_default().to_string()
                    }
                };
                !shell::is_shell(&program(argv))
                    && program(argv) == program(want)
                    && argv.get(1..) == want.get(1..)
            }
            Want::Any => engine::ALL
                .into_iter()
                .any(|e| Want::Engine(e).matches(argv)),
        }
    }
}

/// Most processes looked at in one look.
const MAX_PROCS: usize = 256;
/// The largest argv or environment read of one process.
const MAX_BYTES: u64 = 4 << 20;

/// What the engine process got when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub pid: u32,
    /// Its command line, as the engine's own command (a console script run
    /// through its shebang shows as the script).
    pub argv: Vec<OsString>,
    /// The environment it started with.
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory.
    pub cwd: PathBuf,
}

/// The engine among `child` and its descendants, if it runs yet: None
/// while the child is still keepwrap's fork or a shell, a prefix or a
/// profile's command, and when the engine's process cannot be read (another
/// user's, or gone meanwhile).
pub fn find_engine(child: u32, want: &Want) -> Option<Seen> {
    let mut todo = std::collections::VecDeque::from([child]);
    let mut seen = HashSet::new();
    while let Some(pid) = todo.pop_front() {
        if !seen.insert(pid) || seen.len() > MAX_PROCS {
            continue;
        }
        let Some(argv) = read_argv(pid) else {
            continue;
        };
        if want.matches(&as_command(argv.clone())) {
            return read(pid, argv);
        }
        todo.extend(children(&pid.to_string()));
    }
    None
}

/// Whether a process running `argv` is the engine: Python, or an engine's
/// own command (its console script, when not run through its shebang).
fn is_engine(argv: &[OsString]) -> bool {
    let Some(argv0) = argv.first().and_then(|a| a.to_str()) else {
        return false;
    };
    if shell::is_shell(argv0) || prefix::is_prefix(argv0.as_bytes()) {
        return false;
    }
    is_python(argv0) || is_console_script(argv0.as_bytes())
}

/// The rest of what `pid` got, with its argv read again after: a process
/// that ran another program in between is not read (the next look finds
/// it).
fn read(pid: u32, argv: Vec<OsString>) -> Option<Seen> {
    let env = read_env(pid)?;
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    (read_argv(pid)? == argv).then(|| Seen {
        pid,
        argv: as_command(argv),
        env,
        cwd,
    })
}

/// The NUL-separated strings of `/proc/PID/<what>`, at most [`MAX_BYTES`].
fn read_nul(pid: u32, what: &str) -> Option<Vec<Vec<u8>>> {
    use std::io::Read;
    let f = std::fs::File::open(format!("/proc/{pid}/{what}")).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_BYTES).read_to_end(&mut buf).ok()?;
    if buf.last() == Some(&0) {
        buf.pop();
    }
    if buf.is_empty() {
        return Some(Vec::new());
    }
    Some(buf.split(|b| *b == 0).map(<[u8]>::to_vec).collect())
}

fn read_argv(pid: u32) -> Option<Vec<OsString>> {
    let argv: Vec<OsString> = read_nul(pid, "cmdline")?
        .into_iter()
        .map(OsString::from_vec)
        .collect();
    (!argv.is_empty()).then_some(argv)
}

fn read_env(pid: u32) -> Option<Vec<(OsString, OsString)>> {
    Some(
        read_nul(pid, "environ")?
            .into_iter()
            .filter_map(|kv| {
                let eq = kv.iter().position(|b| *b == b'=')?;
                Some((
                    OsString::from_vec(kv[..eq].to_vec()),
                    OsString::from_vec(kv[eq + 1..].to_vec()),
                ))
            })
            .collect(),
    )
}

/// Whether `path` (any directory) is an engine's own command.
fn is_console_script(path: &[u8]) -> bool {
    let base = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
    engine::ALL
        .into_iter()
        .any(|e| e.commands().iter().any(|c| c.as_bytes() == base))
}

/// An engine's console script (`vllm`, `sglang`) run through its shebang shows as
/// `python3 /usr/bin/vllm serve ...`: the command is the script's.
fn as_command(argv: Vec<OsString>) -> Vec<OsString> {
    let script = argv.get(1).map(|s| s.as_bytes()).unwrap_or_default();
    let base = script.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let python = argv.first().and_then(|a| a.to_str()).is_some_and(is_python);
    if python && is_console_script(base) && starts_with_shebang(script) {
        return argv[1..].to_vec();
    }
    argv
}

fn starts_with_shebang(path: &[u8]) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    std::fs::File::open(std::ffi::OsStr::from_bytes(path))
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == b"#!")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn shells_and_prefixes_are_looked_through() {
        assert!(!is_engine(&v("bash -lc x")));
        assert!(!is_engine(&v("/usr/bin/numactl -N 0 python3")));
        assert!(!is_engine(&v("keepwrap -- sh -c x")));
        assert!(is_engine(&v("/usr/bin/python3.11 -m sglang.launch_server")));
        assert!(is_engine(&v("vllm serve m")));
        assert!(!is_engine(&v("uv run python3 x.py")));
    }

    #[test]
    fn the_engine_is_what_the_words_say_it_runs() {
        let server = Want::Engine(crate::engine::ALL[0]);
        assert!(server.matches(&v("/usr/bin/python3.11 -m sglang.launch_server --tp 2")));
        assert!(!server.matches(&v("python3 /opt/conda/bin/conda shell.posix hook")));
        let vllm = Want::Engine(crate::engine::ALL[1]);
        assert!(vllm.matches(&v("/usr/local/bin/vllm serve m")));
        assert!(!vllm.matches(&v("python3 -m sglang.launch_server")));
        let script = Want::Argv(v("python3 gen.py --n 2"));
        assert!(script.matches(&v("/usr/bin/python3.11 gen.py --n 2")));
        assert!(!script.matches(&v("python3 gen.py --n 3")));
        assert!(!script.matches(&v("python3 -c pass")));
        assert!(!Want::Any.matches(&v("python3 -c pass")));
        assert!(Want::Any.matches(&v("python3 -m sglang.launch_server --tp 2")));
        assert!(Want::Any.matches(&v("vllm serve m")));
    }

    #[test]
    fn this_process_is_read_whole() {
        let me = std::process::id();
        let argv = read_argv(me).unwrap();
        let seen = read(me, argv.clone()).unwrap();
        assert_eq!(seen.argv, argv);
        assert_eq!(seen.cwd, std::env::current_dir().unwrap());
        let path = std::env::var_os("PATH");
        assert_eq!(
            seen.env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone()),
            path
        );
    }

    #[test]
    fn a_console_script_through_its_shebang_is_the_script() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("vllm");
        std::fs::write(&script, "#!/usr/bin/env python3\n").unwrap();
        let s = script.to_str().unwrap();
        assert_eq!(
            as_command(v(&format!("python3 {s} serve m"))),
            v(&format!("{s} serve m"))
        );
        // a script of another name is Python's argument
        let other = dir.path().join("gen.py");
        std::fs::write(&other, "#!/usr/bin/env python3\n").unwrap();
        let o = other.to_str().unwrap();
        assert_eq!(
            as_command(v(&format!("python3 {o}"))),
            v(&format!("python3 {o}"))
        );
    }
}
