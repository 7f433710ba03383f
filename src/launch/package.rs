//! The package finder: the engine package a launch runs and its version,
//! read without running Python. An SGLang or vLLM upgrade that keeps the
//! FlashInfer version (the cache directory) plans other shapes for the
//! same command line, so the version belongs to the launch.
//!
//! Along the directories the child's Python searches (`sys_path.rs`),
//! the first directory holding `<package>/__init__.py` is the engine; the `<package>-*.dist-info/METADATA` beside it gives its
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

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::sys_path::{pth_dirs, read_head, search_path, Env};
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
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn distribution_names_normalize() {
        assert_eq!(normalize("Foo.Bar-baz__x"), "foo_bar_baz_x");
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
