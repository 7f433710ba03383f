//! `keepwrap config`: the effective settings of a launch, each with where it
//! came from (a flag, a `KEEPWRAP_*` variable, or the default), as `ccache -p`
//! shows them.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use serde_json::{json, Map, Value};

use crate::engine::fingerprint::Launch;
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
        // The fleet's URL without user info or query (credentials).
        let value = if long == "fleet" {
            value.map(|v| crate::fleet::s3::redact(&v))
        } else {
            value
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
fn root_setting(
    run: &Settings,
    cache_dir: &Setting,
    launch: Option<&Launch>,
    env: &[(OsString, OsString)],
) -> Setting {
    let profile = launch.map_or_else(
        || run.fingerprint.profile.without_command(),
        Launch::profile,
    );
    let engine = crate::engine::of(profile);
    let root = engine.root(run.cache_dir.as_deref(), env).ok();
    let (source, origin) = if run.cache_dir.is_some() {
        (cache_dir.source, cache_dir.origin.clone())
    } else {
        ("default", Some(engine.root_origin(env).to_string()))
    };
    Setting {
        name: "cache-root".into(),
        value: root.map(|r| r.display().to_string()),
        source,
        origin,
        variable: None,
    }
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
    let launch = (!command.is_empty()).then(|| Launch::new(&run.fingerprint, command, &env));
    let root = cache_dir.map(|c| root_setting(run, c, launch.as_ref(), &env));
    all.extend(root);
    all.push(log_setting(level));
    if let Some(launch) = &launch {
        let for_command = command_settings(&all, run, launch);
        all.extend(for_command);
    }
    if let Some(launch) = &launch {
        let engine = crate::engine::of(launch.profile());
        crate::engine::warn_cache_dir(engine, run.cache_dir.as_deref(), command, &env);
    }
    if json {
        print_json(cmd, &all);
    } else {
        print_text(&all);
    }
    ExitCode::SUCCESS
}

/// The log filter, and what it came from.
fn log_setting(level: &LogLevel) -> Setting {
    Setting {
        name: "log".into(),
        value: Some(level.filter.clone()),
        source: level.source,
        origin: match level.source {
            "variable" => Some("KEEPWRAP_LOG".into()),
            "flag" => Some("-v/-q".into()),
            _ => None,
        },
        variable: Some("KEEPWRAP_LOG".into()),
    }
}

/// For a launch named after `--`: the done rule and the profile it
/// resolves to, each from where the setting it resolves came from.
fn command_settings(all: &[Setting], run: &Settings, launch: &Launch) -> [Setting; 2] {
    let done = all.iter().find(|s| s.name == "done");
    let engine = crate::engine::of(launch.profile());
    let resolved = match engine.done(&run.done, launch) {
        Ok(d) => format!("tuning is done {}", d.headless_quiet(run.headless_quiet)),
        Err(e) => e.to_string(),
    };
    let source = done.map_or("default", |d| d.source);
    let done = Setting {
        name: "done-for-command".into(),
        value: Some(resolved),
        source,
        origin: done.and_then(|d| d.origin.clone()),
        variable: None,
    };
    let profile = all.iter().find(|s| s.name == "profile");
    let profile = Setting {
        name: "profile-for-command".into(),
        value: Some(launch.profile().as_str().to_string()),
        source: profile.map_or("default", |p| p.source),
        origin: profile.and_then(|p| p.origin.clone()),
        variable: None,
    };
    [done, profile]
}

/// A setting's value as JSON, typed by its option (`cmd`'s): a switch a
/// boolean, a duration its seconds, a size its bytes, anything else the
/// text as written.
fn typed(cmd: &Command, name: &str, text: &str) -> Value {
    let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(name)) else {
        return Value::String(text.to_string());
    };
    let kind = arg
        .get_value_names()
        .and_then(|n| n.first())
        .map(|n| n.as_str());
    let switch = matches!(
        arg.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    match kind {
        _ if switch => text
            .parse::<bool>()
            .map_or_else(|_| json!(text), Value::Bool),
        Some("DURATION") => crate::clock::parse_duration(text).map_or_else(
            |_| json!(text),
            |d| match d.subsec_nanos() {
                0 => json!(d.as_secs()),
                _ => json!(d.as_secs_f64()),
            },
        ),
        Some("SIZE") => crate::store::parse_size(text).map_or_else(|_| json!(text), |b| json!(b)),
        _ => Value::String(text.to_string()),
    }
}

/// One object per setting: its value (typed, see [`typed`]) and its text,
/// source, and where it came from.
fn print_json(cmd: &Command, all: &[Setting]) {
    let mut obj = Map::new();
    for s in all {
        let mut entry = Map::new();
        let value = s
            .value
            .as_deref()
            .map_or(Value::Null, |t| typed(cmd, &s.name, t));
        entry.insert("value".into(), value);
        entry.insert(
            "text".into(),
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
}

/// One line per setting: `(source origin)  name = value`, aligned.
fn print_text(all: &[Setting]) {
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
