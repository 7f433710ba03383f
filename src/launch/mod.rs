//! What a command means, whatever engine it runs: which program runs after
//! launcher prefixes, `env` and shell wrappers ([`analyze`]), with the
//! environment and the working directory those give it; the readers every
//! engine's parser shares (`FLAG VALUE` options, canonical JSON, models,
//! the installed package and where Python searches for it, the GPU model, `~`). What a command means to an
//! engine is the engine's to read (`crate::engine`).

pub mod canonical;
pub mod flags;
pub mod gpu;
pub mod home;
pub mod model;
pub mod package;
pub mod prefix;
pub mod shell;
pub mod sys_path;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
}

/// What the engines know of a command, asked by the reader, which names
/// none of them ([`crate::engine::servers`] gives every engine's).
#[derive(Clone, Copy)]
pub struct Servers {
    /// Whether the command (after every layer) runs a server an engine
    /// reads.
    pub runs: fn(&[OsString]) -> bool,
    /// Whether the command from its word `i` on (`words`: its words as
    /// text) names such a server, behind a program keepwrap does not read
    /// (`torchrun ... -m MODULE`).
    pub named_at: fn(&[OsString], &[String], usize) -> bool,
    /// What to write instead of a program that hides the server.
    pub instead: &'static str,
}

/// Whether a flag or variable named `name` holds a secret: its name contains
/// KEY, TOKEN, SECRET or PASSWORD, in any case. Leading dashes and anything
/// from `=` on are not part of a flag's name.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-');
    let name = name
        .split_once('=')
        .map_or(name, |(n, _)| n)
        .to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| name.contains(w))
}

/// `<sha256:XXXXXXXXXXXX>`: the first 12 hex digits of the sha256 of `value`.
pub fn value_hash(value: &[u8]) -> String {
    format!("<sha256:{}>", &crate::digest::sha256_hex(value)[..12])
}

/// `<redacted sha256:XXXXXXXXXXXX>`, for a secret's value.
pub fn redacted_hash(value: &[u8]) -> String {
    format!(
        "<redacted sha256:{}>",
        &crate::digest::sha256_hex(value)[..12]
    )
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

pub(crate) fn base(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// `python`, `python3`, `python3.11`, ... (any directory).
pub fn is_python(argv0: &str) -> bool {
    base(argv0)
        .strip_prefix("python")
        .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

pub fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter().map(|a| py_str(a.as_bytes())).collect()
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
pub fn analyze(argv: &[OsString], env: &[(OsString, OsString)], servers: Servers) -> Command {
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
        let mut c = finish(argv, env);
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
    if !(servers.runs)(&l.argv) {
        if let Some(program) = names_server(&l.argv, servers) {
            return unread(
                &l.names,
                format!("'{program}' runs the server, and keepwrap does not read its options"),
                servers.instead,
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
    }
}

/// The command as given, not read further.
fn finish(argv: &[OsString], env: &[(OsString, OsString)]) -> Command {
    Command {
        argv: argv.to_vec(),
        assigns: Vec::new(),
        env: env.to_vec(),
        cwd: None,
        exit_unproven: None,
        names: Vec::new(),
        wrapper: Wrapper::Direct,
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
    for n in shell::words::names(script) {
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
fn names_server(argv: &[OsString], servers: Servers) -> Option<String> {
    let words = strings(argv);
    let named = (1..argv.len()).any(|i| (servers.named_at)(argv, &words, i));
    named.then(|| base(&words[0]).to_string())
}

impl Command {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader with every engine's knowledge, as the product runs it.
    fn analyze(argv: &[OsString], env: &[(OsString, OsString)]) -> Command {
        super::analyze(argv, env, crate::engine::SERVERS)
    }

    fn server_args(c: &Command) -> Option<Vec<String>> {
        crate::engine::sglang::launch::server_of(&strings(&c.argv)).map(|s| s.args)
    }

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
        assert_eq!(server_args(&c), Some(v("--tp 2")));
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
        assert_eq!(server_args(&c), Some(v("--port 8000")));
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
}
