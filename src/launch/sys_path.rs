//! Where the child's Python searches for a package, read without running
//! Python: the interpreter the command runs (`argv[0]` on the child's `PATH`
//! as `execvp` finds it, or for a `vllm`/`sglang` script the interpreter of
//! its `#!` line, pip's `'''exec'` form too), its virtual environment
//! (`pyvenv.cfg` beside or above it) or its prefix (the interpreter's
//! symlinks followed), and the directories `sys.path` holds in Python's
//! order: the script's directory or the working directory (`-m`, `-c`),
//! `PYTHONPATH`, the user site, then the venv's or the prefix's
//! `lib/pythonX.Y/site-packages` (and Debian's `dist-packages`); then the
//! directories the site directories' `.pth` files add.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The child's environment as the fingerprint reads it.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn base(p: &[u8]) -> &[u8] {
    p.rsplit(|&c| c == b'/').next().unwrap_or(p)
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `name` as `execvp` finds it: a path when it holds a `/` (relative to
/// `cwd`), else the first executable file `DIR/name` along `PATH` (an
/// empty entry is the working directory; glibc's default without `PATH`).
pub fn which(name: &OsStr, env: Env, cwd: &Path) -> Option<PathBuf> {
    if name.as_bytes().contains(&b'/') {
        return Some(cwd.join(name));
    }
    if name.is_empty() {
        return None;
    }
    let path = env("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.split(':')
        .map(|d| {
            if d.is_empty() {
                cwd.to_path_buf()
            } else {
                cwd.join(d)
            }
        })
        .map(|d| d.join(name))
        .find(|p| is_executable_file(p))
}

pub(super) fn read_head(p: &Path, cap: u64) -> Option<Vec<u8>> {
    let f = super::open_regular(p).ok()?;
    let mut b = Vec::new();
    f.take(cap).read_to_end(&mut b).ok()?;
    Some(b)
}

/// The interpreter a script's `#!` line names: `#!/path/python3 ...`,
/// `#!/usr/bin/env [-S] python3 ...`, or pip's long-path form `#!/bin/sh`
/// followed by `'''exec' "/path/python" "$0" "$@"`.
fn shebang(script: &Path, env: Env, cwd: &Path) -> Option<PathBuf> {
    let head = read_head(script, 4096)?;
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let first = lines.next()?.strip_prefix("#!")?.trim();
    let mut words = first.split_whitespace();
    let prog = words.next()?;
    if base(prog.as_bytes()) == b"sh" {
        let exec = lines.next()?.strip_prefix("'''exec' ")?;
        let q = exec.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let rest = &exec[1..];
        let end = rest.find(q)?;
        return Some(PathBuf::from(&rest[..end]));
    }
    if base(prog.as_bytes()) == b"env" {
        let name = words.find(|w| !w.starts_with('-'))?;
        return which(OsStr::new(name), env, cwd);
    }
    Some(PathBuf::from(prog))
}

/// How the interpreter sets `sys.path[0]` and which variables it reads.
#[derive(Debug, Default)]
struct PyFlags {
    /// `-E`, `-I`: no `PYTHON*` variables.
    ignore_env: bool,
    /// `-s`, `-I`: no user site.
    no_user_site: bool,
    /// `-P`, `-I`: no `sys.path[0]`.
    safe_path: bool,
    /// `sys.path[0]`: the script's directory, or the working directory.
    path0: Option<PathBuf>,
}

/// Read a Python command line's options (`python [OPTIONS] (-m MOD | -c
/// CMD | SCRIPT) ...`).
fn py_flags(argv: &[OsString], cwd: &Path) -> PyFlags {
    let mut f = PyFlags::default();
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        let b = a.as_bytes();
        if b == b"-" || !b.starts_with(b"-") {
            f.path0 = Some(if b == b"-" {
                cwd.to_path_buf()
            } else {
                let script = cwd.join(a);
                let real = script.canonicalize().unwrap_or(script);
                real.parent()
                    .map_or_else(|| cwd.to_path_buf(), Path::to_path_buf)
            });
            break;
        }
        if b.starts_with(b"--") {
            i += 1;
            continue;
        }
        let mut done = false;
        for (j, &c) in b.iter().enumerate().skip(1) {
            match c {
                b'E' => f.ignore_env = true,
                b's' => f.no_user_site = true,
                b'P' => f.safe_path = true,
                b'I' => {
                    f.ignore_env = true;
                    f.no_user_site = true;
                    f.safe_path = true;
                }
                b'm' | b'c' => {
                    f.path0 = Some(cwd.to_path_buf());
                    done = true;
                    break;
                }
                b'X' | b'W' => {
                    if j + 1 == b.len() {
                        i += 1; // the value is the next argument
                    }
                    break;
                }
                _ => {}
            }
        }
        if done {
            break;
        }
        i += 1;
    }
    f
}

/// `X.Y` of an interpreter file name (`python3.11`), if it has one.
fn name_version(p: &Path) -> Option<String> {
    let name = p.file_name()?.to_str()?;
    let v = name.strip_prefix("python")?;
    let (maj, min) = v.split_once('.')?;
    (!maj.is_empty()
        && !min.is_empty()
        && maj.bytes().all(|c| c.is_ascii_digit())
        && min.bytes().all(|c| c.is_ascii_digit()))
    .then(|| v.to_string())
}

/// `X.Y` of `pyvenv.cfg`'s `version = 3.11.7` (or `version_info`).
fn cfg_value<'a>(cfg: &'a str, key: &str) -> Option<&'a str> {
    cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim())
    })
}

fn short_version(v: &str) -> Option<String> {
    let mut it = v.split('.');
    let (a, b) = (it.next()?, it.next()?);
    let b: String = b.chars().take_while(char::is_ascii_digit).collect();
    (!a.is_empty() && !b.is_empty()).then(|| format!("{a}.{b}"))
}

/// The `pythonX.Y` directories of `prefix/lib` (one listing), when the
/// interpreter's name does not say.
fn lib_versions(prefix: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(prefix.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| name_version(Path::new(&e.file_name())))
        .collect();
    out.sort();
    out
}

/// The site directories of a prefix, in `site.getsitepackages` order
/// (Debian's `dist-packages` included).
fn prefix_sites(prefix: &Path, versions: &[String], out: &mut Vec<PathBuf>) {
    for v in versions {
        let py = format!("python{v}");
        if prefix == Path::new("/usr") || prefix.ends_with("usr") {
            out.push(prefix.join("local/lib").join(&py).join("dist-packages"));
        }
        out.push(prefix.join("lib").join(&py).join("site-packages"));
        out.push(prefix.join("lib64").join(&py).join("site-packages"));
        out.push(prefix.join("lib/python3/dist-packages"));
        out.push(prefix.join("lib").join(&py).join("dist-packages"));
    }
}

/// The prefix and `X.Y` of a non-venv interpreter: its symlinks followed,
/// the directory above its `bin/`.
fn system_prefix(exe: &Path) -> Option<(PathBuf, Vec<String>)> {
    let real = exe.canonicalize().ok()?;
    let prefix = real.parent()?.parent()?.to_path_buf();
    let versions = match name_version(&real).or_else(|| name_version(exe)) {
        Some(v) => vec![v],
        None => lib_versions(&prefix),
    };
    Some((prefix, versions))
}

/// The directories `sys.path` searches for the package, in order, and how
/// many of them come before the site directories (whose `.pth` files the
/// `site` module reads), or why they cannot be told.
pub(super) fn search_path(
    argv: &[OsString],
    env: Env,
    cwd: &Path,
) -> Result<(Vec<PathBuf>, usize), String> {
    let argv0 = argv.first().ok_or("no command")?;
    let (exe, flags) = if super::is_python(&String::from_utf8_lossy(argv0.as_bytes())) {
        let exe = which(argv0, env, cwd)
            .ok_or_else(|| format!("{} is not on PATH", argv0.to_string_lossy()))?;
        (exe, py_flags(argv, cwd))
    } else {
        let script = which(argv0, env, cwd)
            .ok_or_else(|| format!("{} is not on PATH", argv0.to_string_lossy()))?;
        let exe = shebang(&script, env, cwd)
            .ok_or_else(|| format!("{} names no interpreter in a #! line", script.display()))?;
        let dir = script
            .canonicalize()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        let mut f = PyFlags {
            path0: dir,
            ..PyFlags::default()
        };
        if let Some(head) = read_head(&script, 4096) {
            // `#!/path/python3 -E` and the like
            let line = head.split(|&c| c == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            for w in line
                .split_whitespace()
                .skip(1)
                .filter(|w| w.starts_with('-'))
            {
                f.ignore_env |= w.contains('E') || w.contains('I');
                f.no_user_site |= w.contains('s') || w.contains('I');
            }
        }
        (exe, f)
    };
    let ignore_env = flags.ignore_env;
    let pyenv = |n: &str| {
        if ignore_env {
            None
        } else {
            env(n).filter(|v| !v.is_empty())
        }
    };
    let mut dirs = Vec::new();
    if !flags.safe_path && pyenv("PYTHONSAFEPATH").is_none() {
        dirs.extend(flags.path0);
    }
    if let Some(pp) = pyenv("PYTHONPATH") {
        dirs.extend(pp.split(':').filter(|d| !d.is_empty()).map(|d| cwd.join(d)));
    }
    let bin = exe.parent().ok_or("the interpreter has no directory")?;
    let cfg_path = [bin.join("pyvenv.cfg"), bin.join("../pyvenv.cfg")]
        .into_iter()
        .find(|p| p.is_file());
    let versions;
    let mut system = None;
    let venv_prefix = match &cfg_path {
        Some(cfg) => {
            let text = read_head(cfg, 64 << 10)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let prefix = bin.parent().unwrap_or(bin).to_path_buf();
            let named = name_version(&exe)
                .or_else(|| exe.canonicalize().ok().and_then(|r| name_version(&r)))
                .or_else(|| cfg_value(&text, "version").and_then(short_version))
                .or_else(|| cfg_value(&text, "version_info").and_then(short_version));
            versions = match named {
                Some(v) => vec![v],
                None => lib_versions(&prefix),
            };
            if cfg_value(&text, "include-system-site-packages")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            {
                if let Some(home) = cfg_value(&text, "home") {
                    let base_exe = Path::new(home).join(format!(
                        "python{}",
                        versions.first().map_or("3", String::as_str)
                    ));
                    system = system_prefix(&base_exe);
                }
            }
            Some(prefix)
        }
        None => {
            let (prefix, v) = system_prefix(&exe)
                .ok_or_else(|| format!("{} cannot be resolved", exe.display()))?;
            versions = v;
            system = Some((prefix, versions.clone()));
            None
        }
    };
    let before_sites = dirs.len();
    if venv_prefix.is_none() && !flags.no_user_site && pyenv("PYTHONNOUSERSITE").is_none() {
        let user_base = match pyenv("PYTHONUSERBASE") {
            Some(b) => Some(PathBuf::from(b)),
            None => {
                let home = env("HOME").map(OsString::from);
                super::home::expanduser(
                    OsStr::new("~/.local"),
                    home.as_deref(),
                    &super::home::passwd_home,
                )
            }
        };
        if let Some(ub) = user_base {
            for v in &versions {
                dirs.push(ub.join(format!("lib/python{v}/site-packages")));
            }
        }
    }
    if let Some(prefix) = &venv_prefix {
        for v in &versions {
            dirs.push(prefix.join(format!("lib/python{v}/site-packages")));
            dirs.push(prefix.join(format!("lib64/python{v}/site-packages")));
        }
    }
    if let Some((prefix, v)) = &system {
        prefix_sites(prefix, v, &mut dirs);
    }
    let mut seen = std::collections::HashSet::new();
    let mut first_site = 0;
    let mut k = 0;
    dirs.retain(|d| {
        let keep = seen.insert(d.clone());
        if keep && k < before_sites {
            first_site += 1;
        }
        k += 1;
        keep
    });
    Ok((dirs, first_site))
}

/// The most `.pth` files read per site directory, and bytes read of each.
const MAX_PTH_FILES: usize = 256;
const MAX_PTH_BYTES: u64 = 64 << 10;

/// The directories the `.pth` files of `sites` add to `sys.path`, as
/// Python's `site` module adds them: each site directory's `*.pth` files in
/// name order (not hidden ones), each line a path relative to the site
/// directory, added when it is an existing directory; `#` comments, blank
/// lines and `import` lines (code, never run here) are skipped.
pub(super) fn pth_dirs(sites: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for site in sites {
        let mut names: Vec<OsString> = std::fs::read_dir(site)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| {
                let b = n.as_bytes();
                b.ends_with(b".pth") && !b.starts_with(b".")
            })
            .collect();
        names.sort();
        for name in names.into_iter().take(MAX_PTH_FILES) {
            let Some(b) = read_head(&site.join(&name), MAX_PTH_BYTES) else {
                continue;
            };
            for line in b.split(|&c| c == b'\n') {
                let line = line.trim_ascii_end();
                if line.is_empty()
                    || line.starts_with(b"#")
                    || line.starts_with(b"import ")
                    || line.starts_with(b"import\t")
                {
                    continue;
                }
                let dir = site.join(OsStr::from_bytes(line));
                if dir.is_dir() && !out.contains(&dir) && !sites.contains(&dir) {
                    out.push(dir);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags() {
        assert_eq!(
            name_version(Path::new("/usr/bin/python3.11")).as_deref(),
            Some("3.11")
        );
        assert_eq!(name_version(Path::new("/usr/bin/python3")), None);
        assert_eq!(short_version("3.12.1").as_deref(), Some("3.12"));
        let cwd = Path::new("/w");
        let v = |s: &str| s.split_whitespace().map(OsString::from).collect::<Vec<_>>();
        let f = py_flags(&v("python3 -u -X dev -m sglang.launch_server"), cwd);
        assert_eq!(f.path0.as_deref(), Some(cwd));
        let f = py_flags(&v("python3 -Es -msglang"), cwd);
        assert!(f.ignore_env && f.no_user_site && !f.safe_path);
        let f = py_flags(&v("python3 -I x/launch.py"), cwd);
        assert!(f.safe_path);
        assert_eq!(f.path0.as_deref(), Some(Path::new("/w/x")));
    }

    #[test]
    fn shebang_forms() {
        let t = tempfile::tempdir().unwrap();
        let env = |_: &str| None;
        let script = t.path().join("vllm");
        let cases = [
            (
                "#!/opt/venv/bin/python3\nimport x\n",
                Some("/opt/venv/bin/python3"),
            ),
            (
                "#!/opt/venv/bin/python3 -E\n",
                Some("/opt/venv/bin/python3"),
            ),
            (
                "#!/bin/sh\n'''exec' \"/very/long/venv/bin/python3\" \"$0\" \"$@\"\n' '''\n",
                Some("/very/long/venv/bin/python3"),
            ),
            ("#!/usr/bin/env no-such-interpreter-here\n", None),
            ("no shebang\n", None),
            ("#!\n", None),
        ];
        for (text, want) in cases {
            std::fs::write(&script, text).unwrap();
            assert_eq!(
                shebang(&script, &env, t.path()).as_deref(),
                want.map(Path::new),
                "{text:?}"
            );
        }
    }
}
