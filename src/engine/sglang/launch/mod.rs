//! How an SGLang launch is read: its entry point (`python -m
//! sglang.launch_server`, `sglang serve`, an offline benchmark that takes
//! the server's arguments), its server arguments merged with its
//! `--config` file ([`config`]) and grouped as SGLang's parser groups them
//! ([`args`], with the generated option table), and what the fingerprint
//! covers of its models ([`Canonical`]).

pub mod args;
pub mod config;
pub mod models;
mod table;

use std::path::Path;

use serde_json::{Map, Value};

use crate::launch::{base, is_python};

/// The entry point of an SGLang server launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `python -m sglang.launch_server` or `python .../sglang/launch_server.py`
    LaunchServer,
    /// `sglang serve`
    Serve,
    /// `python -m MODULE` of an offline benchmark that reads the server's
    /// arguments (`ServerArgs.add_cli_args`) with plain `parse_args`: no
    /// `--config` merge. The module as written.
    Bench(&'static str),
}

/// The modules of SGLang that take the server's arguments
/// (`ServerArgs.add_cli_args`) and run the engine in their own process:
/// 0.5.23's `sglang.benchmark.*` and the older (or shim) `sglang.bench_*`.
pub const BENCH_MODULES: &[&str] = &[
    "sglang.bench_one_batch",
    "sglang.bench_offline_throughput",
    "sglang.bench_one_batch_server",
    "sglang.benchmark.one_batch",
    "sglang.benchmark.offline_throughput",
    "sglang.benchmark.one_batch_server",
];

impl Entry {
    /// A server (`sglang.launch_server`, `sglang serve`), not a benchmark.
    pub fn is_server(self) -> bool {
        !matches!(self, Entry::Bench(_))
    }

    /// What `--explain` calls it.
    pub fn name(self) -> &'static str {
        match self {
            Entry::LaunchServer => "sglang.launch_server",
            Entry::Serve => "sglang serve",
            Entry::Bench(m) => m,
        }
    }
}

/// The entry of `python -m MODULE`, when MODULE reads the server's
/// arguments.
fn module_entry(module: &str) -> Option<Entry> {
    if module == "sglang.launch_server" {
        return Some(Entry::LaunchServer);
    }
    BENCH_MODULES
        .iter()
        .find(|m| **m == module)
        .map(|m| Entry::Bench(m))
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

/// Whether `words` (from a word after a program keepwrap does not read)
/// name an SGLang server: `MODULE` of `-m MODULE`, its script, `sglang
/// serve`.
pub fn named(words: &[String]) -> bool {
    let Some(w) = words.first() else {
        return false;
    };
    w == "sglang.launch_server"
        || w.ends_with("sglang/launch_server.py")
        || (base(w) == "sglang" && words.get(1).is_some_and(|n| n == "serve"))
}

/// Whether `words` run an engine under `--keep auto` the way SGLang's
/// users start one besides its server: an `sglang` entry point that starts
/// an engine (`sglang serve`, `sglang generate`), or any command one of
/// whose words names a Python interpreter or starts with `sglang` (an
/// offline script, `numactl ... python ...`).
pub fn runs_engine(words: &[String]) -> bool {
    match words.first().map(|w| base(w)) {
        Some("sglang") => words
            .get(1)
            .is_some_and(|s| s == "serve" || s == "generate"),
        _ => words
            .iter()
            .any(|w| is_python(w) || base(w).starts_with("sglang")),
    }
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
    let server = |entry, python_opts: Vec<String>, args: &[String]| Server {
        entry,
        python_opts,
        model_type: None,
        args: args.to_vec(),
    };
    let launch_server =
        |python_opts: Vec<String>, args: &[String]| server(Entry::LaunchServer, python_opts, args);
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
                return module_entry(value)
                    .map(|e| server(e, opts, argv.get(next..).unwrap_or_default()));
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
        return target
            .and_then(module_entry)
            .map(|e| server(e, opts, argv.get(next..).unwrap_or_default()));
    }
    None
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
        // prepare_server_args merges only `--config FILE`, exactly once;
        // a benchmark's plain parse_args never does.
        if let ([i], true) = (&at[..], server.entry.is_server()) {
            let i = *i;
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
        let models = models::models(&parsed, cwd, env);
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
        if let Entry::Bench(module) = self.server.entry {
            m.insert("module".into(), module.into());
        }
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
    use crate::launch::script_of;

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
        let b = server_of(&v("python3 -m sglang.bench_one_batch --tp 2")).unwrap();
        assert_eq!(b.entry, Entry::Bench("sglang.bench_one_batch"));
        assert!(!b.entry.is_server());
        let b = server_of(&v(
            "python3 -u -msglang.benchmark.offline_throughput --tp 2",
        ))
        .unwrap();
        assert_eq!(b.args, v("--tp 2"));
        assert!(server_of(&v("python3 -m sglang.bench_serving --tp 2")).is_none());
        assert_eq!(script_of(&v("python3 gen.py --tp 2")), Some("gen.py"));
        assert_eq!(
            script_of(&v("python3 -u -X dev -Wignore /x/gen.py")),
            Some("/x/gen.py")
        );
        assert_eq!(script_of(&v("python3 -- -gen.py")), Some("-gen.py"));
        for s in [
            "python3 -m x",
            "python3 -c x",
            "python3 -",
            "python3 --help",
            "python3",
            "sh gen.py",
        ] {
            assert_eq!(script_of(&v(s)), None, "{s}");
        }
        assert!(server_of(&v("python3 bench.py")).is_none());
        assert!(server_of(&v("python3 -c x")).is_none());
        assert!(server_of(&v("python3 /x/sglang/launch_server.py --tp 2")).is_some());
        assert!(server_of(&v("sglang version")).is_none());
    }
}
