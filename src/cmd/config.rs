//! `keepwrap config`: the effective settings of a launch, each with where it
//! came from (a flag, a `KEEPWRAP_*` variable, or the default), as `ccache -p`
//! shows them; and the check that `--cache-dir` is where the engine writes.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use serde_json::{json, Map, Value};

use crate::keeper::Settings;
use crate::logging::LogLevel;

/// Top-level arguments that are not settings of a launch.
const NOT_SETTINGS: [&str; 5] = ["help", "version", "verbose", "quiet", "show_config"];

/// One effective setting.
struct Setting {
    name: String,
    /// `None`: unset (off).
    value: Option<String>,
    /// `default`, `variable` or `flag`.
    source: &'static str,
    /// The variable or flag it came from, when not the default.
    origin: Option<String>,
    /// The variable that sets it, if one does.
    variable: Option<String>,
}

fn settings(cmd: &Command, matches: &ArgMatches) -> Vec<Setting> {
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&id) || arg.is_positional() {
            continue;
        }
        let value = match matches.try_get_one::<bool>(id) {
            Ok(Some(b)) => Some(b.to_string()),
            _ => matches.get_raw(id).map(|vals| {
                vals.map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            }),
        };
        let (source, origin) = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => ("flag", Some(format!("--{long}"))),
            Some(ValueSource::EnvVariable) => (
                "variable",
                arg.get_env().map(|v| v.to_string_lossy().into_owned()),
            ),
            _ => ("default", None),
        };
        out.push(Setting {
            name: long.to_string(),
            value,
            source,
            origin,
            variable: arg.get_env().map(|v| v.to_string_lossy().into_owned()),
        });
    }
    out
}

/// The cache root a run would guard, and what it came from.
fn root_setting(run: &Settings, cache_dir: &Setting, env: &[(OsString, OsString)]) -> Setting {
    let root = crate::keeper::cache_root(run, env);
    let (source, origin) = if run.cache_dir.is_some() {
        (cache_dir.source, cache_dir.origin.clone())
    } else if set(env, "SGLANG_CACHE_DIR") {
        ("default", Some("SGLANG_CACHE_DIR".to_string()))
    } else {
        ("default", Some("HOME".to_string()))
    };
    Setting {
        name: "cache-root".into(),
        value: root.map(|r| r.display().to_string()),
        source,
        origin,
        variable: None,
    }
}

fn set(env: &[(OsString, OsString)], name: &str) -> bool {
    env.iter().any(|(k, v)| k == name && !v.is_empty())
}

/// Print the effective settings (text, or JSON with `json`).
pub fn print(
    cmd: &Command,
    matches: &ArgMatches,
    run: &Settings,
    level: &LogLevel,
    command: &[OsString],
    json: bool,
) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut all = settings(cmd, matches);
    let cache_dir = all.iter().find(|s| s.name == "cache-dir");
    let root = cache_dir.map(|c| root_setting(run, c, &env));
    all.extend(root);
    all.push(Setting {
        name: "log".into(),
        value: Some(level.filter.clone()),
        source: level.source,
        origin: match level.source {
            "variable" => Some("KEEPWRAP_LOG".into()),
            "flag" => Some("-v/-q".into()),
            _ => None,
        },
        variable: Some("KEEPWRAP_LOG".into()),
    });
    if !command.is_empty() {
        let done = all.iter().find(|s| s.name == "done");
        let launch = crate::launch::fingerprint::Launch::new(&run.fingerprint, command, &env);
        let resolved = match run.done.resolve(&launch) {
            Ok(d) => format!("tuning is done {d}"),
            Err(e) => e,
        };
        let source = done.map_or("default", |d| d.source);
        all.push(Setting {
            name: "done-for-command".into(),
            value: Some(resolved),
            source,
            origin: done.and_then(|d| d.origin.clone()),
            variable: None,
        });
    }
    warn_cache_dir(run.cache_dir.as_deref(), command, &env);
    if json {
        let mut obj = Map::new();
        for s in &all {
            let mut entry = Map::new();
            entry.insert(
                "value".into(),
                s.value.clone().map_or(Value::Null, Value::String),
            );
            entry.insert("source".into(), json!(s.source));
            if let Some(o) = &s.origin {
                entry.insert("from".into(), json!(o));
            }
            if let Some(v) = &s.variable {
                entry.insert("variable".into(), json!(v));
            }
            obj.insert(s.name.clone(), Value::Object(entry));
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Value::Object(obj)).unwrap_or_default()
        );
    } else {
        let tags: Vec<String> = all
            .iter()
            .map(|s| match &s.origin {
                Some(o) => format!("({} {o})", s.source),
                None => format!("({})", s.source),
            })
            .collect();
        let width = tags.iter().map(String::len).max().unwrap_or(0);
        for (s, tag) in all.iter().zip(&tags) {
            let value = s.value.as_deref().unwrap_or("(off)");
            println!("{tag:width$}  {} = {value}", s.name);
        }
    }
    ExitCode::SUCCESS
}

/// `path` without `.` components and with `..` folded lexically, or its
/// canonical form when it exists (so a symlinked mount compares equal).
fn normal(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Does the command run SGLang (an argument naming it: `sglang.launch_server`,
/// `sglang serve`, `.../sglang/launch_server.py`, `sglang.bench_one_batch`)?
fn runs_sglang(argv: &[OsString]) -> bool {
    argv.iter()
        .any(|a| a.to_string_lossy().to_ascii_lowercase().contains("sglang"))
}

/// The engine's cache directory, and the variable it derives from, when
/// `--cache-dir` is neither it nor below it as the child's environment
/// defines it and the command runs SGLang: the engine then writes elsewhere,
/// and keepwrap would guard a directory the engine never reads.
pub fn outside_engine_cache(
    cache_dir: Option<&Path>,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> Option<(PathBuf, &'static str)> {
    let dir = cache_dir?;
    if !runs_sglang(argv) {
        return None;
    }
    let engine = crate::keeper::root_from(None, env)?;
    if normal(dir).starts_with(normal(&engine)) {
        return None;
    }
    let from = if set(env, "SGLANG_CACHE_DIR") {
        "$SGLANG_CACHE_DIR/flashinfer/autotune"
    } else {
        "$HOME/.cache/sglang/flashinfer/autotune"
    };
    Some((engine, from))
}

/// Warn when `--cache-dir` is not where the engine writes
/// ([`outside_engine_cache`]).
pub fn warn_cache_dir(cache_dir: Option<&Path>, argv: &[OsString], env: &[(OsString, OsString)]) {
    if let (Some(dir), Some((engine, from))) =
        (cache_dir, outside_engine_cache(cache_dir, argv, env))
    {
        tracing::warn!(
            "--cache-dir {} is not under the engine's cache directory {} ({from}): the engine writes its autotune cache there, so keepwrap does not protect it; set SGLANG_CACHE_DIR instead (one per pod: SGLANG_CACHE_DIR=/cache/$(POD_NAME))",
            dir.display(),
            engine.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sglang() -> Vec<OsString> {
        ["python3", "-m", "sglang.launch_server"]
            .map(OsString::from)
            .to_vec()
    }

    #[test]
    fn only_an_sglang_command_is_checked() {
        let e = env(&[("HOME", "/nonexistent/home")]);
        let other = ["python3", "serve.py"].map(OsString::from).to_vec();
        assert_eq!(
            outside_engine_cache(Some(Path::new("/c")), &other, &e),
            None
        );
        let serve = ["sglang", "serve"].map(OsString::from).to_vec();
        assert!(outside_engine_cache(Some(Path::new("/c")), &serve, &e).is_some());
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn cache_dir_under_the_engine_directory_is_quiet() {
        let e = env(&[("SGLANG_CACHE_DIR", "/nonexistent/c")]);
        for ok in [
            "/nonexistent/c/flashinfer/autotune",
            "/nonexistent/c/flashinfer/autotune/",
            "/nonexistent/c/./flashinfer/autotune/0.7.2",
            "/nonexistent/x/../c/flashinfer/autotune",
        ] {
            assert_eq!(
                outside_engine_cache(Some(Path::new(ok)), &sglang(), &e),
                None,
                "{ok}"
            );
        }
        assert_eq!(outside_engine_cache(None, &sglang(), &e), None);
        assert_eq!(
            outside_engine_cache(Some(Path::new("/x")), &sglang(), &[]),
            None,
            "no engine dir known"
        );
    }

    #[test]
    fn cache_dir_elsewhere_warns_naming_both() {
        let e = env(&[("HOME", "/nonexistent/home")]);
        let (engine, from) =
            outside_engine_cache(Some(Path::new("/cache/pod-1")), &sglang(), &e).unwrap();
        assert_eq!(
            engine,
            Path::new("/nonexistent/home/.cache/sglang/flashinfer/autotune")
        );
        assert_eq!(from, "$HOME/.cache/sglang/flashinfer/autotune");
        let e = env(&[("SGLANG_CACHE_DIR", "/nonexistent/c"), ("HOME", "/h")]);
        let (_, from) =
            outside_engine_cache(Some(Path::new("/nonexistent/c")), &sglang(), &e).unwrap();
        assert_eq!(from, "$SGLANG_CACHE_DIR/flashinfer/autotune");
        // A prefix of the name is not a parent directory.
        let w = outside_engine_cache(
            Some(Path::new("/nonexistent/c/flashinfer/autotune2")),
            &sglang(),
            &e,
        );
        assert!(w.is_some());
    }
}
