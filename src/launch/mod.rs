//! What a launch means: which program runs (after launcher prefixes, `env`
//! and shell wrappers, see [`analyze`]), whether it is an SGLang server, and its server arguments
//! in canonical form, merged with its `--config` file, with what the
//! fingerprint covers of its models.

pub mod args;
pub mod canonical;
pub mod config;
pub mod fingerprint;
pub mod flags;
pub mod gpu;
pub mod home;
pub mod model;
pub mod package;
pub mod prefix;
pub mod shell;
mod table;
pub mod trtllm;
pub mod vllm;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::launch::canonical::py_str;

/// How the command was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrapper {
    /// The command itself.
    Direct,
    /// Inside `sh -c STRING`, every command of which was read.
    Shell,
    /// `env NAME=value... COMMAND`.
    Env,
    /// Through launcher prefixes (`numactl`, `nice`, ..., maybe `env`),
    /// each read whole.
    Prefix,
    /// A launch that cannot be read whole: why, and what to write instead.
    Unreadable(Unread),
}

/// Why a launch cannot be read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The reason, naming the prefix, shell or program.
    pub why: String,
    /// What to write instead.
    pub instead: &'static str,
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

const INSTEAD_PREFIX: &str = "write the prefix with the options keepwrap reads (docs/fingerprint.md, launch shapes), or start the engine without it";
const INSTEAD_SHELL: &str = "write the string as simple commands (ulimit, export, cd DIR, set -e, echo) then exec of the engine, or put the engine command itself after keepwrap --";
const INSTEAD_PROGRAM: &str = "put the engine command itself after keepwrap -- (python3 -m sglang.launch_server ..., vllm serve ...), behind any of the prefixes keepwrap reads";

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

/// The command keepwrap runs, understood: the engine's command after every
/// launcher prefix, `env` and shell wrapper, with the environment and the
/// working directory those give it.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program that runs and its arguments: the command after the
    /// prefixes and inside a readable shell wrapper, else the command as
    /// given.
    pub argv: Vec<OsString>,
    /// `NAME=value` assignments the prefixes and the shell make, the one
    /// that wins first.
    pub assigns: Vec<(OsString, OsString)>,
    /// The engine's environment: the assignments, then what it inherits
    /// (nothing after `env -i`, without `env -u` names), the first
    /// occurrence of a name winning.
    pub env: Vec<(OsString, OsString)>,
    /// The engine's working directory when a prefix or the shell changes it
    /// (`env -C DIR`, `cd DIR`), relative to keepwrap's.
    pub cwd: Option<PathBuf>,
    /// Why the command's exit status does not prove the engine's, if so.
    pub exit_unproven: Option<String>,
    /// The variables an unreadable shell string names (their values count).
    pub names: Vec<String>,
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

pub(crate) fn strings(argv: &[OsString]) -> Vec<String> {
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

/// The script `python [OPTIONS] SCRIPT ARGS` runs, as Python reads its
/// options; None for `-m`, `-c`, `-`, a long option, or no script.
pub fn script_of(argv: &[String]) -> Option<&str> {
    if !is_python(argv.first()?) {
        return None;
    }
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        if a == "--" {
            return argv.get(i + 1).map(String::as_str);
        }
        if a == "-" || a.starts_with("--") {
            return None;
        }
        let Some(flags) = a.strip_prefix('-') else {
            return Some(a);
        };
        let mut next = i + 1;
        for (k, ch) in flags.char_indices() {
            match ch {
                'm' | 'c' => return None,
                'X' | 'W' => {
                    if flags[k + 1..].is_empty() {
                        next = i + 2;
                    }
                    break;
                }
                _ => {}
            }
        }
        i = next;
    }
    None
}

/// The most prefixes and shells read around one engine.
const MAX_LAYERS: usize = 16;

/// What the layers read so far give the command that follows them.
struct Layers {
    argv: Vec<OsString>,
    assigns: Vec<(OsString, OsString)>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    /// `cwd` is a shell's logical directory (its last change was a `cd`),
    /// not a physical one (`env -C`).
    logical: bool,
    exit_unproven: Option<String>,
    /// The variables the shell strings read so far name.
    names: Vec<String>,
    shell: bool,
    prefix: bool,
    env_only: bool,
}

impl Layers {
    /// `assigns` (the first one of a name wins) become the environment's
    /// first entries.
    fn assign(&mut self, assigns: Vec<(OsString, OsString)>) {
        let env = std::mem::take(&mut self.env);
        self.env = assigns.iter().cloned().chain(env).collect();
        let old = std::mem::take(&mut self.assigns);
        self.assigns = assigns.into_iter().chain(old).collect();
    }

    /// A physical change of directory (`env -C DIR`): the kernel resolves
    /// `..` after following symlinks.
    fn chdir(&mut self, dir: &Path) {
        self.cwd = Some(match &self.cwd {
            Some(c) => c.join(dir),
            None => dir.to_path_buf(),
        });
        self.logical = false;
    }

    /// A shell's `cd DIR`, resolved as the shell resolves it (logically):
    /// `..` removes the previous component of the logical path, symlinks
    /// unresolved. The shell's logical path starts from `$PWD` when it names
    /// its directory, else from the physical one.
    fn cd(&mut self, dir: &str) {
        let target = Path::new(dir);
        let dotdot = target
            .components()
            .any(|c| c == std::path::Component::ParentDir);
        if !dotdot {
            // no `..`: the same path either way (as written, as before)
            self.chdir(target);
            self.logical = true;
            return;
        }
        let base = match (&self.cwd, self.logical) {
            _ if target.is_absolute() => PathBuf::from("/"),
            (Some(c), true) => c.clone(),
            (Some(c), false) => c.canonicalize().unwrap_or_else(|_| c.clone()),
            (None, _) => PathBuf::new(),
        };
        let folded = fold(&base, target).or_else(|| {
            // `..` above a relative start: the shell's logical directory
            let start = shell_start(&self.env)?;
            fold(&start.join(&base), target)
        });
        self.cwd = Some(match folded {
            Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
            Some(p) => p,
            None => base.join(target),
        });
        self.logical = true;
    }
}

/// `rel` after `base`, `.` dropped and each `..` removing the component
/// before it (at `/`, `/` stays); None when a `..` would climb above a
/// relative `base`.
fn fold(base: &Path, rel: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in base.components().chain(rel.components()) {
        match c {
            Component::RootDir => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if out.as_os_str().is_empty() {
                    return None;
                }
                if out != Path::new("/") {
                    out.pop();
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The logical directory a shell started in keepwrap's working directory
/// begins with: `$PWD` when it is absolute and names that directory (as
/// shells import it), else the physical directory.
fn shell_start(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    };
    let pwd = env
        .iter()
        .find(|(k, _)| k == "PWD")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute() && same(p, Path::new(".")));
    pwd.or_else(|| std::env::current_dir().ok())
}

/// Understand `argv`, run with environment `env`: the one reading of what
/// the engine launch is that the fingerprint, the done rule, the probe's
/// address, the profile and `--keep auto` all use. Launcher prefixes
/// ([`prefix`]), `env`, and `sh -c` strings of simple commands are read
/// layer by layer, in any nesting, down to the engine's command.
pub fn analyze(argv: &[OsString], env: &[(OsString, OsString)]) -> Command {
    let mut l = Layers {
        argv: argv.to_vec(),
        assigns: Vec::new(),
        env: env.to_vec(),
        cwd: None,
        logical: false,
        exit_unproven: None,
        names: Vec::new(),
        shell: false,
        prefix: false,
        env_only: true,
    };
    // as written; the variables every shell string on the way names count
    let unread = |names: &[String], why: String, instead| {
        let mut c = finish(argv, env, None);
        c.wrapper = Wrapper::Unreadable(Unread { why, instead });
        c.names = names.to_vec();
        c
    };
    let mut layers = 0;
    while let Some(argv0) = l.argv.first() {
        let is_shell = argv0.to_str().is_some_and(shell::is_shell);
        if !is_shell && !prefix::is_prefix(argv0.as_bytes()) {
            break;
        }
        if layers == MAX_LAYERS {
            return unread(
                &l.names,
                format!("more than {MAX_LAYERS} launcher prefixes and shells nested"),
                INSTEAD_PREFIX,
            );
        }
        layers += 1;
        if let Some(p) = prefix::read(&l.argv) {
            let p = match p {
                Ok(p) => p,
                Err(why) => return unread(&l.names, why, INSTEAD_PREFIX),
            };
            if p.clear_env {
                l.env.clear();
                l.assigns.clear();
            }
            l.env.retain(|(k, _)| !p.unset.contains(k));
            l.assigns.retain(|(k, _)| !p.unset.contains(k));
            l.assign(p.assigns);
            if let Some(dir) = &p.chdir {
                l.chdir(Path::new(dir));
            }
            if let Some(why) = p.exit_unproven {
                l.exit_unproven.get_or_insert_with(|| why.to_string());
            }
            l.env_only &= p.name == "env";
            l.prefix = true;
            l.argv.drain(..p.command_at);
            continue;
        }
        match read_shell(&mut l) {
            Ok(true) => {}
            Ok(false) => break,
            Err(why) => return unread(&l.names, format!("the shell string: {why}"), INSTEAD_SHELL),
        }
    }
    let server = server_of(&strings(&l.argv));
    if server.is_none() && vllm::recognise(&l.argv).is_none() {
        if let Some(program) = names_server(&l.argv) {
            return unread(
                &l.names,
                format!("'{program}' runs the server, and keepwrap does not read its options"),
                INSTEAD_PROGRAM,
            );
        }
    }
    let wrapper = if l.shell {
        Wrapper::Shell
    } else if l.prefix && l.env_only {
        Wrapper::Env
    } else if l.prefix {
        Wrapper::Prefix
    } else {
        Wrapper::Direct
    };
    Command {
        argv: l.argv,
        assigns: l.assigns,
        env: l.env,
        cwd: l.cwd,
        exit_unproven: l.exit_unproven,
        names: Vec::new(),
        wrapper,
        server,
    }
}

/// The command as given, not read further.
fn finish(argv: &[OsString], env: &[(OsString, OsString)], server: Option<Server>) -> Command {
    Command {
        argv: argv.to_vec(),
        assigns: Vec::new(),
        env: env.to_vec(),
        cwd: None,
        exit_unproven: None,
        names: Vec::new(),
        wrapper: Wrapper::Direct,
        server,
    }
}

/// Read the shell command `l.argv` into the command it runs: `Ok(false)`
/// when it runs no `-c` string (the shell is the command).
fn read_shell(l: &mut Layers) -> Result<bool, String> {
    let words = l
        .argv
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or("bytes that are not UTF-8")?;
    let (script, positional) = match shell::c_string(&words)? {
        Some(s) => s,
        None => return Ok(false),
    };
    if let Some((k, _)) = l
        .env
        .iter()
        .find(|(k, _)| k.to_str().is_some_and(shell::env_changes_the_string))
    {
        return Err(format!(
            "{} in the environment, which changes what the shell runs",
            k.to_string_lossy()
        ));
    }
    for n in shell::names(script) {
        if !l.names.contains(&n) {
            l.names.push(n);
        }
    }
    let env = &l.env;
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .and_then(|(_, v)| v.to_str().map(str::to_string))
    };
    let read = shell::read(script, &lookup, positional)?;
    for dir in &read.cds {
        l.cd(dir);
        // `cd` into no directory: the shell goes on where it was
        if !l.cwd.as_deref().is_some_and(Path::is_dir) {
            return Err(format!(
                "cd to '{}', which is no directory",
                dir.escape_debug()
            ));
        }
    }
    let os = |(k, v): (String, String)| (OsString::from(k), OsString::from(v));
    l.assign(read.exports.into_iter().map(os).collect());
    l.assign(read.simple.assigns.into_iter().map(os).collect());
    l.argv = read.simple.argv.into_iter().map(OsString::from).collect();
    l.shell = true;
    Ok(true)
}

/// The program before a server launch that keepwrap does not read
/// (`torchrun ... -m sglang.launch_server`, `uv run vllm serve`), if the
/// command names one after its first word.
fn names_server(argv: &[OsString]) -> Option<String> {
    let words = strings(argv);
    let named = (1..words.len()).any(|i| {
        let w = words[i].as_str();
        w == "sglang.launch_server"
            || w.ends_with("sglang/launch_server.py")
            || (base(w) == "sglang" && words.get(i + 1).is_some_and(|n| n == "serve"))
            || vllm::recognise(&argv[i..]).is_some()
            || w == "vllm.entrypoints.openai.api_server"
    });
    named.then(|| base(&words[0]).to_string())
}

impl Command {
    /// `--keep auto`: whether this command is an engine whose cache is
    /// kept. An SGLang, vLLM or TensorRT-LLM server; or any command one of whose words names a
    /// Python interpreter or starts with `sglang` (an offline script, an
    /// `sglang` entry point, `numactl ... python ...`); or a shell string
    /// that cannot be read but mentions `python` or `sglang`. Everything
    /// else (`bash`, `sleep`, `nvidia-smi`, a script) is only supervised.
    pub fn is_engine(&self) -> bool {
        if self.server.is_some()
            || vllm::recognise(&self.argv).is_some()
            || trtllm::recognise(&self.argv).is_some()
        {
            return true;
        }
        let words = strings(&self.argv);
        if let Wrapper::Unreadable(_) = self.wrapper {
            return words
                .iter()
                .any(|w| w.contains("python") || w.contains("sglang") || w.contains("vllm"));
        }
        let names = |w: &String| is_python(w) || base(w).starts_with("sglang");
        match words.first().map(|w| base(w)) {
            Some("sglang") => words
                .get(1)
                .is_some_and(|s| s == "serve" || s == "generate"),
            _ => words.iter().any(names),
        }
    }

    /// Why the command's exit status may not be the engine's: a launch not
    /// read whole that wraps an engine (`sh -c 'python3 ... || true'`),
    /// `timeout --preserve-status`. A shell string that names no engine
    /// (kept with `--keep always`: a launch script) is the engine itself.
    pub fn exit_unproven_why(&self) -> Option<String> {
        match &self.wrapper {
            Wrapper::Unreadable(u) if self.is_engine() => Some(u.why.clone()),
            _ => self.exit_unproven.clone(),
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

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn os(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn env_of(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn reads_prefixes_env_and_shells_down_to_the_engine() {
        let outer = env_of(&[("SGLANG_B", "2"), ("PORT", "8000")]);
        let c = analyze(
            &os(
                "numactl -N 0 nice -n 5 env -u SGLANG_B A=1 python3 -m sglang.launch_server --tp 2",
            ),
            &outer,
        );
        assert_eq!(c.wrapper, Wrapper::Prefix);
        assert_eq!(c.server.as_ref().map(|s| s.args.clone()), Some(v("--tp 2")));
        assert_eq!(c.env, env_of(&[("A", "1"), ("PORT", "8000")]));
        let c = analyze(&os("env -i A=1 -- python3 x"), &outer);
        assert_eq!(c.wrapper, Wrapper::Env);
        // `--` ends env's options; what follows is its command
        assert_eq!(c.argv, os("-- python3 x"));
        let c = analyze(&os("env -i A=1 python3 x"), &outer);
        assert_eq!((c.env, c.argv), (env_of(&[("A", "1")]), os("python3 x")));
        // a shell inside a prefix inside a shell
        let script = "ulimit -n 1; export SGLANG_C=3; cd /; exec nice env -C tmp python3 -m sglang.launch_server --port $PORT";
        let argv = [
            OsString::from("env"),
            "-C".into(),
            "/w".into(),
            "bash".into(),
            "-c".into(),
            script.into(),
        ];
        let c = analyze(&argv, &outer);
        assert_eq!(c.wrapper, Wrapper::Shell);
        assert_eq!(c.server.map(|s| s.args), Some(v("--port 8000")));
        assert_eq!(c.cwd, Some(PathBuf::from("/tmp")));
        assert_eq!(c.env[0], (OsString::from("SGLANG_C"), OsString::from("3")));
        assert!(c.exit_unproven.is_none());
        let c = analyze(&os("timeout --preserve-status 5 python3 x"), &outer);
        assert!(c.exit_unproven.is_some());
    }

    #[test]
    fn a_launch_it_cannot_read_whole_says_why() {
        let unread = |argv: &[OsString]| match analyze(argv, &[]).wrapper {
            Wrapper::Unreadable(u) => u.why,
            w => panic!("{argv:?}: {w:?}"),
        };
        assert!(
            unread(&os("numactl --weird python3 -m sglang.launch_server")).starts_with("numactl: ")
        );
        assert!(unread(&os("uv run python -m sglang.launch_server"))
            .starts_with("'uv' runs the server"));
        assert!(
            unread(&os("torchrun --nproc-per-node 8 -m sglang.launch_server"))
                .starts_with("'torchrun'")
        );
        assert!(unread(&os("nsys profile vllm serve m")).starts_with("'nsys'"));
        let deep = "nice ".repeat(MAX_LAYERS + 1) + "python3 x";
        assert!(unread(&os(&deep)).starts_with("more than"));
        let c = analyze(
            &[
                OsString::from("sh"),
                "-c".into(),
                "a $CPS | b ${P:-1}".into(),
            ],
            &[],
        );
        assert_eq!(c.names, ["CPS", "P"]);
        assert!(matches!(c.wrapper, Wrapper::Unreadable(_)));
        // a prefix not read inside a readable string: the string's variables count
        let inner = "exec numactl --bogus python3 -m sglang.launch_server --port $PORT";
        let port = env_of(&[("PORT", "1")]);
        let c = analyze(&[OsString::from("sh"), "-c".into(), inner.into()], &port);
        assert!(matches!(c.wrapper, Wrapper::Unreadable(_)));
        assert_eq!(c.names, ["PORT"]);
        // other commands are no launch to read
        for s in ["python3 bench.py", "nice -n 5 python3 bench.py", "sleep 1"] {
            assert!(
                !matches!(analyze(&os(s), &[]).wrapper, Wrapper::Unreadable(_)),
                "{s}"
            );
        }
    }

    #[test]
    fn cd_is_logical_and_env_c_physical() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("x")).unwrap();
        std::os::unix::fs::symlink(root.join("a/b"), root.join("x/current")).unwrap();
        let sh = |script: String| {
            let argv = [OsString::from("sh"), "-c".into(), script.into()];
            analyze(&argv, &[]).cwd
        };
        let r = root.display();
        // `..` of the logical path: the directory the link is in
        assert_eq!(
            sh(format!(
                "cd {r}/x/current/.. && exec python3 -m sglang.launch_server"
            )),
            Some(root.join("x"))
        );
        assert_eq!(
            sh(format!(
                "cd {r}/x/current; cd ../current/./..; exec python3 x"
            )),
            Some(root.join("x"))
        );
        assert_eq!(
            sh("cd /..; exec python3 x".into()),
            Some(PathBuf::from("/"))
        );
        // `env -C` is a chdir: the kernel's `..`, after the link
        let argv = os(&format!("env -C {r}/x/current/.. python3 x"));
        let c = analyze(&argv, &[]).cwd.unwrap();
        assert_eq!(c.canonicalize().unwrap(), root.join("a"));
        // a shell after `env -C` starts from the physical directory
        let argv = [
            OsString::from("env"),
            "-C".into(),
            root.join("x/current").into(),
            "sh".into(),
            "-c".into(),
            "cd .. && exec python3 x".into(),
        ];
        assert_eq!(analyze(&argv, &[]).cwd, Some(root.join("a")));
        // a relative `..` above the start: from $PWD when it names the
        // working directory
        let here = std::env::current_dir().unwrap();
        let parent = here.parent().unwrap_or(&here).to_path_buf();
        let argv = [
            OsString::from("sh"),
            "-c".into(),
            "cd .. && exec python3 x".into(),
        ];
        let pwd = env_of(&[("PWD", here.to_str().unwrap())]);
        assert_eq!(analyze(&argv, &pwd).cwd, Some(parent.clone()));
        // ... a PWD naming another directory is not the shell's
        let stale = env_of(&[("PWD", "/nonexistent/dir")]);
        let physical = here.canonicalize().unwrap();
        assert_eq!(
            analyze(&argv, &stale).cwd,
            Some(physical.parent().unwrap_or(&physical).to_path_buf())
        );
        // no `..`: as written
        assert_eq!(
            sh(format!("cd {r}/./x; exec python3 x")).map(PathBuf::into_os_string),
            Some(OsString::from(format!("{r}/./x")))
        );
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
