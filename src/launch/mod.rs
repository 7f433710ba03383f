//! What a launch means: which program runs (through a shell wrapper or
//! `env NAME=value` if there is one), whether it is an SGLang server, and its server arguments
//! in canonical form, merged with its `--config` file, with what the
//! fingerprint covers of its models.

pub mod args;
pub mod canonical;
pub mod config;
pub mod engine;
pub mod fingerprint;
pub mod home;
pub mod model;
pub mod shell;
mod table;
pub mod vllm;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::launch::canonical::py_str;

/// How the command was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrapper {
    /// The command itself.
    Direct,
    /// `sh -c STRING` whose one simple command was read.
    Shell,
    /// `env NAME=value... COMMAND`.
    Env,
    /// `sh -c STRING` that cannot be read safely: the reason.
    Unreadable(&'static str),
}

/// The entry point of an SGLang server launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `python -m sglang.launch_server` or `python .../sglang/launch_server.py`
    LaunchServer,
    /// `sglang serve`
    Serve,
}

/// An SGLang server launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub entry: Entry,
    /// Interpreter options before `-m` (`-u`, `-X dev`, ...).
    pub python_opts: Vec<String>,
    /// `sglang serve --model-type BACKEND` (taken out before SGLang parses).
    pub model_type: Option<String>,
    /// The server arguments (sentinel-form strings, see [`py_str`]).
    pub args: Vec<String>,
}

/// The command keepwrap runs, understood.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program that runs and its arguments: the command inside a
    /// readable shell wrapper, else the command as given.
    pub argv: Vec<OsString>,
    /// `NAME=value` assignments before the command inside a shell wrapper.
    pub assigns: Vec<(OsString, OsString)>,
    pub wrapper: Wrapper,
    pub server: Option<Server>,
}

/// Open `path` for reading only when it is a regular file: a FIFO would
/// block the open (or the read) until a writer comes, a device such as
/// `/dev/zero` never ends, and a directory holds no bytes.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

fn base(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// `python`, `python3`, `python3.11`, ... (any directory).
pub fn is_python(argv0: &str) -> bool {
    base(argv0)
        .strip_prefix("python")
        .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter().map(|a| py_str(a.as_bytes())).collect()
}

/// The SGLang server `argv` runs, if it runs one directly.
pub fn server_of(argv: &[String]) -> Option<Server> {
    let argv0 = argv.first()?;
    if base(argv0) == "sglang" && argv.get(1).is_some_and(|a| a == "serve") {
        return Some(sglang_serve(&argv[2..]));
    }
    if !is_python(argv0) {
        return None;
    }
    python_server(argv)
}

/// `sglang serve ARGS` (sglang.cli.serve): `--model-type X` selects the
/// backend and is taken out; a first positional argument is the model path.
fn sglang_serve(args: &[String]) -> Server {
    let mut rest = Vec::new();
    let mut model_type = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--model-type" {
            model_type = Some(args.get(i + 1).cloned().unwrap_or_default());
            i += 2;
            continue;
        }
        if let Some(v) = a.strip_prefix("--model-type=") {
            model_type = Some(v.to_string());
        } else {
            rest.push(a.clone());
        }
        i += 1;
    }
    if rest.first().is_some_and(|a| !a.starts_with('-')) {
        rest.insert(0, "--model-path".into());
    }
    Server {
        entry: Entry::Serve,
        python_opts: Vec::new(),
        model_type,
        args: rest,
    }
}

/// `python [OPTIONS] -m sglang.launch_server ARGS` (or the module's script),
/// Python's own options read as Python reads them.
fn python_server(argv: &[String]) -> Option<Server> {
    let launch_server = |python_opts: Vec<String>, args: &[String]| Server {
        entry: Entry::LaunchServer,
        python_opts,
        model_type: None,
        args: args.to_vec(),
    };
    let mut opts = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        let (target, next) = if a == "-m" {
            (argv.get(i + 1).map(String::as_str), i + 2)
        } else if let Some(m) = a.strip_prefix("-m").filter(|m| !m.is_empty()) {
            (Some(m), i + 1)
        } else if a == "-" || a.starts_with("-c") || a.starts_with("--") {
            return None;
        } else if let Some(flags) = a.strip_prefix('-') {
            // combined short options, as Python reads them: `-uB`, `-Xdev`,
            // `-um MODULE`; `-m`, `-c`, `-X` and `-W` take the rest of the
            // token or the next one
            let taking = flags.char_indices().find_map(|(k, ch)| {
                let rest = &flags[k + ch.len_utf8()..];
                if matches!(ch, 'm' | 'c' | 'X' | 'W') {
                    return Some((ch, rest));
                }
                opts.push(format!("-{ch}"));
                None
            });
            let Some((ch, rest)) = taking else {
                i += 1;
                continue;
            };
            if ch == 'c' {
                return None;
            }
            let (value, next) = if rest.is_empty() {
                (argv.get(i + 1)?.as_str(), i + 2)
            } else {
                (rest, i + 1)
            };
            if ch == 'm' {
                return (value == "sglang.launch_server")
                    .then(|| launch_server(opts, argv.get(next..).unwrap_or_default()));
            }
            opts.push(format!("-{ch}"));
            opts.push(value.to_string());
            i = next;
            continue;
        } else {
            // a script
            let server = a.ends_with("sglang/launch_server.py");
            return server.then(|| launch_server(opts, &argv[i + 1..]));
        };
        return (target == Some("sglang.launch_server"))
            .then(|| launch_server(opts, argv.get(next..).unwrap_or_default()));
    }
    None
}

/// Understand `argv`, run with environment `env`.
pub fn analyze(argv: &[OsString], env: &[(OsString, OsString)]) -> Command {
    env_prefix(argv, env).unwrap_or_else(|| analyze_command(argv, env))
}

/// `env NAME=value... COMMAND` (no options: `env -i`, `-u` change more than
/// they add, and stay a command of their own).
fn env_prefix(argv: &[OsString], env: &[(OsString, OsString)]) -> Option<Command> {
    if base(argv.first()?.to_str()?) != "env" {
        return None;
    }
    let mut assigns = Vec::new();
    let mut i = 1;
    while let Some(w) = argv.get(i).and_then(|w| w.to_str()) {
        match w.split_once('=') {
            Some((k, v)) if shell::is_name(k) => {
                assigns.push((OsString::from(k), OsString::from(v)));
                i += 1;
            }
            _ => break,
        }
    }
    let rest = &argv[i..];
    if rest.first().is_none_or(|a| a.as_bytes().starts_with(b"-")) {
        return None;
    }
    let inner_env: Vec<(OsString, OsString)> = assigns.iter().chain(env).cloned().collect();
    let mut c = analyze_command(rest, &inner_env);
    // assignments inside a shell string override env's
    c.assigns.extend(assigns);
    if c.wrapper == Wrapper::Direct {
        c.wrapper = Wrapper::Env;
    }
    Some(c)
}

/// [`analyze`] without an `env` prefix.
fn analyze_command(argv: &[OsString], env: &[(OsString, OsString)]) -> Command {
    let direct = |wrapper| Command {
        argv: argv.to_vec(),
        assigns: Vec::new(),
        server: server_of(&strings(argv)),
        wrapper,
    };
    let Some(argv0) = argv.first().and_then(|a| a.to_str()) else {
        return direct(Wrapper::Direct);
    };
    if !shell::is_shell(argv0) {
        return direct(Wrapper::Direct);
    }
    let Some(words) = argv
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
    else {
        return direct(Wrapper::Unreadable("bytes that are not UTF-8"));
    };
    let (script, positional) = match shell::c_string(&words) {
        Ok(Some(s)) => s,
        Ok(None) => return direct(Wrapper::Direct),
        Err(why) => return direct(Wrapper::Unreadable(why)),
    };
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .and_then(|(_, v)| v.to_str().map(str::to_string))
    };
    match shell::split(script, &lookup, positional) {
        Ok(simple) => {
            let argv: Vec<OsString> = simple.argv.iter().map(OsString::from).collect();
            let assigns: Vec<(OsString, OsString)> = simple
                .assigns
                .into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
            let inner_env: Vec<(OsString, OsString)> = assigns.iter().chain(env).cloned().collect();
            if let Some(mut c) = env_prefix(&argv, &inner_env) {
                // `exec env NAME=value... COMMAND`: env's assignments first
                c.assigns.extend(assigns);
                if matches!(c.wrapper, Wrapper::Direct | Wrapper::Env) {
                    c.wrapper = Wrapper::Shell;
                }
                return c;
            }
            Command {
                server: server_of(&simple.argv),
                argv,
                assigns,
                wrapper: Wrapper::Shell,
            }
        }
        Err(why) => direct(Wrapper::Unreadable(why)),
    }
}

impl Command {
    /// `--keep auto`: whether this command is an engine whose cache is
    /// kept. An SGLang server; or any command one of whose words names a
    /// Python interpreter or starts with `sglang` (an offline script, an
    /// `sglang` entry point, `numactl ... python ...`); or a shell string
    /// that cannot be read but mentions `python` or `sglang`. Everything
    /// else (`bash`, `sleep`, `nvidia-smi`, a script) is only supervised.
    pub fn is_engine(&self) -> bool {
        if self.server.is_some() || vllm::recognise(&self.argv).is_some() {
            return true;
        }
        let words = strings(&self.argv);
        if let Wrapper::Unreadable(_) = self.wrapper {
            return words
                .iter()
                .any(|w| w.contains("python") || w.contains("sglang"));
        }
        let names = |w: &String| is_python(w) || base(w).starts_with("sglang");
        match words.first().map(|w| base(w)) {
            Some("sglang") => words
                .get(1)
                .is_some_and(|s| s == "serve" || s == "generate"),
            _ => words.iter().any(names),
        }
    }

    /// The one line that says why this command is only supervised.
    pub fn not_engine_line(&self) -> String {
        let name = self
            .argv
            .first()
            .map(|a| py_str(a.as_bytes()))
            .unwrap_or_default();
        format!(
            "'{}' is no engine launch (--keep auto): supervising only, the cache is left alone (--keep always keeps it)",
            name.escape_debug()
        )
    }
}

/// The config file of a server launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// As written on the command line.
    pub path: String,
    /// sha256 of its bytes, when they could be read.
    pub sha256: Option<String>,
    pub outcome: config::Outcome,
}

/// A server launch in canonical form.
#[derive(Debug, Clone)]
pub struct Canonical {
    pub server: Server,
    /// The command line merged with the config file, grouped.
    pub parsed: args::Parsed,
    pub config: Option<ConfigFile>,
    /// `(option, description)` per model argument (see [`model::describe`]).
    pub models: Vec<(&'static str, Value)>,
}

/// Marker value of a `--config` SGLang does not merge (`--config=FILE`, an
/// abbreviation, a repeat): the file's content, not its path.
fn config_marker(path: &str, cwd: &Path) -> String {
    match config::read(&cwd.join(path)).1 {
        Some(h) => format!("\0config-file:{h}"),
        None => "\0config-file:unreadable".into(),
    }
}

impl Canonical {
    /// Merge, group and describe `server`, reading files relative to `cwd`
    /// (the engine's working directory) and the hub cache from `env`.
    pub fn new(server: &Server, cwd: &Path, env: &dyn Fn(&str) -> Option<String>) -> Canonical {
        let at: Vec<usize> = server
            .args
            .iter()
            .enumerate()
            .filter(|(_, a)| *a == "--config")
            .map(|(i, _)| i)
            .collect();
        let mut tokens = server.args.clone();
        let mut cfg = None;
        // prepare_server_args merges only `--config FILE`, exactly once.
        if let [i] = at[..] {
            if i + 1 < tokens.len() {
                let path = tokens[i + 1].clone();
                let (outcome, sha256) = config::read(&cwd.join(&path));
                let rest: Vec<String> = tokens[..i]
                    .iter()
                    .chain(&tokens[i + 2..])
                    .cloned()
                    .collect();
                tokens = match &outcome {
                    config::Outcome::Args(a) => a.iter().cloned().chain(rest).collect(),
                    _ => rest,
                };
                cfg = Some(ConfigFile {
                    path,
                    sha256,
                    outcome,
                });
            }
        }
        let mut parsed = args::parse(&tokens);
        for g in parsed
            .groups
            .iter_mut()
            .filter(|g| g.known && g.key == "config")
        {
            for v in g.values.iter_mut() {
                *v = config_marker(v, cwd);
            }
        }
        let models = model::sglang_models(&parsed, cwd, env);
        Canonical {
            server: server.clone(),
            parsed,
            config: cfg,
            models,
        }
    }

    /// The canonical launch as JSON, leaving out the groups `drop` says.
    pub fn to_json(&self, drop: &dyn Fn(&args::Group) -> bool) -> Value {
        let mut m = Map::new();
        if !self.server.python_opts.is_empty() {
            m.insert("python".into(), self.server.python_opts.clone().into());
        }
        if let Some(t) = &self.server.model_type {
            m.insert("model_type".into(), t.clone().into());
        }
        let groups: Vec<Value> = self
            .parsed
            .groups
            .iter()
            .filter(|g| !drop(g))
            .map(|g| g.tokens().into())
            .collect();
        m.insert("args".into(), groups.into());
        if let Some(c) = &self.config {
            match &c.outcome {
                config::Outcome::Args(_) => {}
                config::Outcome::Unreadable(_) => {
                    m.insert("config".into(), "unreadable".into());
                }
                config::Outcome::Unparsable(_) => {
                    // the bytes: a file this module does not read may still be
                    // one SGLang reads (tags, anchors)
                    let sha = c.sha256.clone().unwrap_or_default();
                    m.insert("config".into(), format!("unparsable {sha}").into());
                }
            }
        }
        let models: Map<String, Value> = self
            .models
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        m.insert("models".into(), models.into());
        Value::Object(m)
    }

    /// The warning for a config file that could not be used, if any.
    pub fn config_warning(&self) -> Option<String> {
        let c = self.config.as_ref()?;
        let why = match &c.outcome {
            config::Outcome::Args(_) => return None,
            config::Outcome::Unreadable(e) => format!("cannot be read ({e})"),
            config::Outcome::Unparsable(e) => format!("cannot be used ({e})"),
        };
        Some(format!(
            "config file '{}' {why}: the fingerprint records that, and the launch goes on",
            c.path.escape_debug()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn entry_points() {
        let a = server_of(&v("python3 -m sglang.launch_server --tp 2")).unwrap();
        assert_eq!(a.args, ["--tp", "2"]);
        let b = server_of(&v("/usr/bin/python3.11 -u -msglang.launch_server --tp 2")).unwrap();
        assert_eq!((b.args, b.python_opts), (v("--tp 2"), v("-u")));
        let c = server_of(&v("sglang serve /m --model-type=llm --tp 2")).unwrap();
        assert_eq!(c.args, v("--model-path /m --tp 2"));
        assert_eq!(c.model_type.as_deref(), Some("llm"));
        assert!(server_of(&v("python3 -m sglang.bench_one_batch --tp 2")).is_none());
        assert!(server_of(&v("python3 bench.py")).is_none());
        assert!(server_of(&v("python3 -c x")).is_none());
        assert!(server_of(&v("python3 /x/sglang/launch_server.py --tp 2")).is_some());
        assert!(server_of(&v("sglang version")).is_none());
    }
}
