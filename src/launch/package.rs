//! The package finder: the engine package a launch runs and its version,
//! read without running Python. An SGLang or vLLM upgrade that keeps the
//! FlashInfer version (the cache directory) plans other shapes for the
//! same command line, so the version belongs to the launch.
//!
//! As the child's Python would find the package: the interpreter the
//! command runs (argv[0] on the child's `PATH` as `execvp` finds it, or for
//! a `vllm`/`sglang` script the interpreter of its `#!` line, pip's
//! `'''exec'` form too), its virtual environment (`pyvenv.cfg` beside or
//! above it) or its prefix (the interpreter's symlinks followed), and the
//! directories `sys.path` holds in Python's order: the script's directory or
//! the working directory (`-m`, `-c`), `PYTHONPATH`, the user site, then the
//! venv's or the prefix's `lib/pythonX.Y/site-packages` (and Debian's
//! `dist-packages`). The first directory holding `<package>/__init__.py` is
//! the engine; the `<package>-*.dist-info/METADATA` beside it gives its
//! `Version:`. An editable install (`direct_url.json` says so), or a
//! package without metadata beside it (`PYTHONPATH=src`), counts by its
//! files instead: the sha256 of its directory's listing (each entry's name,
//! type, size, modification time and inode) and of its `version.py` /
//! `_version.py`: an upgrade rewrites them. A file edited in place deeper
//! in the tree is not seen. Nothing found: said so, and the fingerprint
//! records that.
//!
//! Cost: a few `stat`s along `sys.path`, one listing of the directory that
//! holds the package, one small read of the metadata.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::digest::sha256_hex;

/// What the fingerprint records of the engine package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `Version:` of the metadata beside the package (several when several
    /// `*.dist-info` of the package lie there: all of them count).
    Version {
        version: String,
        dist_info: PathBuf,
        /// An editable install: the package's files (see [`files_digest`]),
        /// or None when they cannot be found.
        editable: Option<Option<String>>,
    },
    /// No metadata beside the package: its files.
    Files {
        dir: PathBuf,
        digest: String,
        why: String,
    },
    /// Neither: why.
    NotFound(String),
}

/// The engine package of a launch and what was found of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub package: &'static str,
    pub found: Found,
}

impl Package {
    /// The value in the fingerprint: `{"sglang": "0.5.23"}`, `{"sglang":
    /// {"version": V, "files": SHA}}` (editable), `{"sglang": {"files":
    /// SHA}}`, or `{"sglang": "not found"}`.
    pub fn to_json(&self) -> Value {
        let v = match &self.found {
            Found::Version {
                version,
                editable: None,
                ..
            } => Value::String(version.clone()),
            Found::Version {
                version,
                editable: Some(files),
                ..
            } => {
                json!({"version": version, "files": files.clone().unwrap_or_else(|| "not found".into())})
            }
            Found::Files { digest, .. } => json!({ "files": digest }),
            Found::NotFound(_) => Value::String("not found".into()),
        };
        json!({ self.package: v })
    }

    /// The `--explain` line.
    pub fn explain(&self) -> String {
        let short = |s: &str| format!("<sha256:{}>", &s[..12.min(s.len())]);
        let p = self.package;
        match &self.found {
            Found::Version {
                version,
                dist_info,
                editable,
            } => {
                let ed = match editable {
                    None => String::new(),
                    Some(Some(f)) => format!(", editable: its files {}", short(f)),
                    Some(None) => {
                        ", editable: its files cannot be found, only the version counts".into()
                    }
                };
                format!("engine {p} {version} ({}{ed})", dist_info.display())
            }
            Found::Files { dir, digest, why } => format!(
                "engine {p} files {} ({}: {why}; its directory listing and version file count)",
                short(digest),
                dir.display()
            ),
            Found::NotFound(why) => format!(
                "engine {p} not found: {why}; the fingerprint records that, and a version found later changes it once"
            ),
        }
    }
}

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

fn read_head(p: &Path, cap: u64) -> Option<Vec<u8>> {
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
fn search_path(argv: &[OsString], env: Env, cwd: &Path) -> Result<(Vec<PathBuf>, usize), String> {
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
fn pth_dirs(sites: &[PathBuf]) -> Vec<PathBuf> {
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

/// A distribution name as the `*.dist-info` directory spells it
/// (lowercase, runs of `-`, `_`, `.` as `_`).
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The `<package>-*.dist-info` (and `.egg-info`) entries of `dir`, sorted.
fn dist_infos(dir: &Path, package: &str) -> Vec<PathBuf> {
    let want = normalize(package);
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let stem = name
                .strip_suffix(".dist-info")
                .or_else(|| name.strip_suffix(".egg-info"))?;
            let dist = stem.split('-').next()?;
            (normalize(dist) == want).then(|| e.path())
        })
        .collect();
    out.sort();
    out
}

/// `Version:` of a distribution's `METADATA` (`PKG-INFO` of an egg).
fn metadata_version(info: &Path) -> Option<String> {
    let file = if info.extension().is_some_and(|e| e == "egg-info") {
        info.join("PKG-INFO")
    } else {
        info.join("METADATA")
    };
    let head = read_head(&file, 64 << 10)?;
    let text = String::from_utf8_lossy(&head);
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Whether `direct_url.json` marks an editable install, and the directory it
/// names (`file://...`).
fn editable(info: &Path) -> Option<Option<PathBuf>> {
    let b = read_head(&info.join("direct_url.json"), 64 << 10)?;
    let v: Value = serde_json::from_slice(&b).ok()?;
    if v["dir_info"]["editable"] != Value::Bool(true) {
        return None;
    }
    Some(
        v["url"]
            .as_str()
            .and_then(|u| u.strip_prefix("file://"))
            .map(PathBuf::from),
    )
}

/// The package's files, cheaply: sha256 over its directory's listing (name,
/// type, size, modification time, inode of each entry, sorted by name) and
/// the bytes of its `version.py` and `_version.py`. Python's own bytecode
/// cache (`__pycache__`, written at the first import of a checkout) is not
/// the engine's code, and does not count.
pub fn files_digest(dir: &Path) -> Option<String> {
    let mut entries: Vec<(Vec<u8>, String)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name() != "__pycache__")
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let kind = if m.is_dir() {
                'd'
            } else if m.is_file() {
                'f'
            } else {
                'o'
            };
            Some((
                e.file_name().as_bytes().to_vec(),
                format!(
                    "{kind} {} {}.{} {}",
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ino()
                ),
            ))
        })
        .collect();
    entries.sort();
    let mut all = Vec::new();
    for (name, meta) in entries {
        all.extend_from_slice(&name);
        all.push(0);
        all.extend_from_slice(meta.as_bytes());
        all.push(b'\n');
    }
    for v in ["version.py", "_version.py"] {
        if let Some(b) = read_head(&dir.join(v), 1 << 20) {
            all.extend_from_slice(v.as_bytes());
            all.push(0);
            all.extend_from_slice(&sha256_hex(&b).into_bytes());
            all.push(b'\n');
        }
    }
    Some(sha256_hex(&all))
}

/// The package an editable install maps: `__editable__.*.pth` lines that
/// are directories, or a setuptools finder's `MAPPING`, in `site`.
fn editable_location(site: &Path, package: &str, hint: Option<&Path>) -> Option<PathBuf> {
    let pkg_in = |d: &Path| {
        let p = d.join(package);
        p.join("__init__.py").is_file().then_some(p)
    };
    if let Some(h) = hint {
        if let Some(p) = pkg_in(h).or_else(|| pkg_in(&h.join("python"))) {
            return Some(p);
        }
    }
    let want = normalize(package);
    for e in std::fs::read_dir(site).ok()?.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("__editable__") || !normalize(name).contains(&want) {
            continue;
        }
        let Some(b) = read_head(&e.path(), 64 << 10) else {
            continue;
        };
        let text = String::from_utf8_lossy(&b);
        if name.ends_with(".pth") {
            for l in text.lines().filter(|l| !l.starts_with("import")) {
                if let Some(p) = pkg_in(Path::new(l.trim())) {
                    return Some(p);
                }
            }
        } else if name.ends_with(".py") {
            // MAPPING: dict[str, str] = {'sglang': '/src/python/sglang'}
            for q in ['\'', '"'] {
                let key = format!("{q}{package}{q}: {q}");
                if let Some(at) = text.find(&key) {
                    let rest = &text[at + key.len()..];
                    if let Some(end) = rest.find(q) {
                        return Some(PathBuf::from(&rest[..end]));
                    }
                }
            }
        }
    }
    None
}

/// Find the engine package `package` the command `argv` imports.
pub fn find(package: &'static str, argv: &[OsString], env: Env, cwd: &Path) -> Package {
    let found = match search_path(argv, env, cwd) {
        Err(why) => Found::NotFound(why),
        Ok((dirs, first_site)) => match find_in(package, &dirs) {
            // before giving up: the directories `.pth` path files add
            // (setuptools develop, legacy editable installs, conda develop)
            Found::NotFound(why) => {
                let extra = pth_dirs(&dirs[first_site..]);
                match find_in(package, &extra) {
                    Found::NotFound(_) if extra.is_empty() => Found::NotFound(why),
                    Found::NotFound(more) => Found::NotFound(format!(
                        "{why}; nor in the directories of .pth files ({})",
                        more.split_once(" in ").map_or(more.as_str(), |(_, d)| d)
                    )),
                    f => f,
                }
            }
            f => f,
        },
    };
    Package { package, found }
}

fn versioned(package: &str, site: &Path, infos: &[PathBuf]) -> Option<Found> {
    let first = infos.first()?;
    let mut versions: Vec<String> = infos
        .iter()
        .map(|i| metadata_version(i).unwrap_or_else(|| "unreadable".into()))
        .collect();
    versions.dedup();
    let edit = infos.iter().find_map(|i| editable(i));
    let editable = edit.map(|hint| {
        editable_location(site, package, hint.as_deref()).and_then(|d| files_digest(&d))
    });
    Some(Found::Version {
        version: versions.join(" "),
        dist_info: first.clone(),
        editable,
    })
}

fn find_in(package: &'static str, dirs: &[PathBuf]) -> Found {
    let mut portion = None;
    for d in dirs {
        let pkg = d.join(package);
        if pkg.join("__init__.py").is_file() {
            let infos = dist_infos(d, package);
            if let Some(f) = versioned(package, d, &infos) {
                return f;
            }
            return match files_digest(&pkg) {
                Some(digest) => Found::Files {
                    dir: pkg,
                    digest,
                    why: format!("no *.dist-info of {package} beside it"),
                },
                None => Found::NotFound(format!("{} cannot be listed", pkg.display())),
            };
        }
        if portion.is_none() && pkg.is_dir() {
            portion = Some(pkg);
        }
    }
    // not on sys.path as a directory: an editable install's metadata, or a
    // namespace package's first portion
    for d in dirs {
        let infos = dist_infos(d, package);
        if let Some(f) = versioned(package, d, &infos) {
            return f;
        }
    }
    if let Some(pkg) = portion {
        if let Some(digest) = files_digest(&pkg) {
            return Found::Files {
                dir: pkg,
                digest,
                why: "a namespace package (no __init__.py)".into(),
            };
        }
    }
    Found::NotFound(format!(
        "no {package}/__init__.py in {}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn python_writing_its_bytecode_cache_changes_no_files_digest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("__init__.py"), "x = 1\n").unwrap();
        let before = files_digest(d.path());
        std::fs::create_dir(d.path().join("__pycache__")).unwrap();
        std::fs::write(d.path().join("__pycache__/__init__.cpython-311.pyc"), "c").unwrap();
        assert_eq!(files_digest(d.path()), before);
        std::fs::write(d.path().join("new.py"), "").unwrap();
        assert_ne!(files_digest(d.path()), before);
    }
    use super::*;

    #[test]
    fn names_and_flags() {
        assert_eq!(normalize("Foo.Bar-baz__x"), "foo_bar_baz_x");
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

    #[test]
    fn pth_directories_are_followed_before_giving_up() {
        let t = tempfile::tempdir().unwrap();
        let venv = t.path().join("venv");
        let site = venv.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::create_dir_all(&site).unwrap();
        let py = venv.join("bin/python3");
        std::fs::write(&py, "not run\n").unwrap();
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            "home = /usr/bin\nversion = 3.11.7\n",
        )
        .unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("sglang")).unwrap();
        std::fs::write(src.join("sglang/__init__.py"), "").unwrap();
        std::fs::create_dir_all(src.join("sglang.egg-info")).unwrap();
        std::fs::write(
            src.join("sglang.egg-info/PKG-INFO"),
            "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9.dev0\n\n",
        )
        .unwrap();
        // an `import` line naming a directory holding the package is code,
        // not a path; comments and missing directories are skipped
        let decoy = t.path().join("decoy");
        std::fs::create_dir_all(decoy.join("sglang")).unwrap();
        std::fs::write(decoy.join("sglang/__init__.py"), "").unwrap();
        let pth = format!(
            "# a comment\nimport sys; sys.path.insert(0, {:?})\n../../../../missing\n../../../../src  \n",
            decoy.display()
        );
        std::fs::write(site.join("easy-install.pth"), pth).unwrap();
        let path = format!("{}", venv.join("bin").display());
        let env = move |n: &str| (n == "PATH").then(|| path.clone());
        let argv: Vec<OsString> = ["python3", "-m", "sglang.launch_server"]
            .iter()
            .map(OsString::from)
            .collect();
        let cwd = t.path().join("venv");
        let e = find("sglang", &argv, &env, &cwd);
        match &e.found {
            Found::Version {
                version, dist_info, ..
            } => {
                assert_eq!(version, "0.5.9.dev0");
                assert!(dist_info.starts_with(site.join("../../../../src")), "{e:?}");
            }
            f => panic!("{f:?}"),
        }
        // without the path line: not found, and said so
        std::fs::write(
            site.join("easy-install.pth"),
            "import sys\n# ../../../../src\n",
        )
        .unwrap();
        let e = find("sglang", &argv, &env, &cwd);
        assert!(matches!(e.found, Found::NotFound(_)), "{e:?}");
        // a hidden .pth file is not read
        std::fs::write(site.join(".hidden.pth"), "../../../../src\n").unwrap();
        let e = find("sglang", &argv, &env, &cwd);
        assert!(matches!(e.found, Found::NotFound(_)), "{e:?}");
    }

    #[test]
    fn no_panic_on_odd_commands() {
        let env = |_: &str| None;
        for argv in [
            vec![],
            vec![OsString::from("")],
            vec![OsString::from("python3")],
        ] {
            let _ = find("sglang", &argv, &env, Path::new("/nonexistent"));
        }
    }
}
