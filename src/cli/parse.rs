//! From the process's arguments to clap's matches: the definition with
//! empty `KEEPWRAP_*` variables taken as unset, `--ignore-arg --foo`, and
//! each parse error said in keepwrap's users' terms.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Cli, EXIT_USAGE};
use crate::logging::{self, LogFormat};

/// Say a usage error, in the log format the command line or
/// `KEEPWRAP_LOG_FORMAT` asks for, and return status 2.
pub(super) fn usage_error(what: &str) -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    logging::init_with(error_format(&argv), &logging::level(0, 0, Some("error")));
    crate::events::Event::UsageError {
        what: what.to_string(),
    }
    .emit();
    ExitCode::from(EXIT_USAGE)
}

/// The log format of a command line that may not parse: `--log-format F`
/// before `--`, else `KEEPWRAP_LOG_FORMAT`, else text.
fn error_format(argv: &[OsString]) -> LogFormat {
    let mut words = argv.iter().skip(1).take_while(|a| *a != "--");
    let mut asked = None;
    while let Some(a) = words.next() {
        let a = a.to_string_lossy();
        if a == "--log-format" {
            asked = words.next().map(|v| v.to_string_lossy().into_owned());
        } else if let Some(v) = a.strip_prefix("--log-format=") {
            asked = Some(v.to_string());
        }
    }
    let asked = asked.or_else(|| std::env::var("KEEPWRAP_LOG_FORMAT").ok());
    match asked.as_deref().map(str::trim) {
        Some(f) if f.eq_ignore_ascii_case("json") => LogFormat::Json,
        _ => LogFormat::Text,
    }
}

/// The command line definition, with every `KEEPWRAP_*` variable that is set
/// but empty treated as unset: a template that renders `value: ""` gets the
/// default, not a usage error.
pub fn command() -> clap::Command {
    command_ignoring(&[])
}

/// [`command`], with the variables of the top-level arguments `ignored`
/// not read either.
fn command_ignoring(ignored: &[clap::Id]) -> clap::Command {
    let unset = |arg: clap::Arg| {
        let empty = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty || ignored.contains(arg.get_id()) {
            arg.env(None)
        } else {
            arg
        }
    };
    fn walk(cmd: clap::Command, unset: &impl Fn(clap::Arg) -> clap::Arg) -> clap::Command {
        cmd.mut_args(unset).mut_subcommands(|sub| walk(sub, unset))
    }
    let mut cmd = Cli::command();
    let any_empty = std::env::vars_os()
        .any(|(name, value)| value.is_empty() && name.as_encoded_bytes().starts_with(b"KEEPWRAP_"));
    if !any_empty && ignored.is_empty() {
        return cmd;
    }
    // Define the deferred subcommands' arguments, so that the walk reaches
    // them too.
    cmd.build();
    walk(cmd, &unset)
}

/// Say what a parse error means for keepwrap's users, and return status 2
/// (0 for `--help` and `--version`).
pub(super) fn parse_error(cmd: &clap::Command, argv: &[OsString], e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let msg = env_value_error(cmd, argv, &e)
        .or_else(|| flag_value_error(&e))
        .or_else(|| missing_separator(cmd, argv, &e))
        .unwrap_or_else(|| clap_message(&e));
    usage_error(&msg)
}

/// An invalid value given on the command line.
fn flag_value_error(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let long = refused_long(e)?;
    let Some(ContextValue::String(value)) = e.get(ContextKind::InvalidValue) else {
        return None;
    };
    Some(format!("invalid value '{value}' for --{long}: {}", why(e)))
}

/// clap's own words for an error, on one line, without its usage and its
/// tips (`use '-- --bogus'` would run `--bogus` as the command).
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut said = String::new();
    for l in text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| {
            !l.is_empty() && !l.starts_with("tip:") && !l.starts_with("For more information")
        })
    {
        let l = l.strip_prefix("error: ").unwrap_or(l);
        if !said.is_empty() {
            said.push_str(if said.ends_with(':') { " " } else { "; " });
        }
        said.push_str(l);
    }
    let usage = text
        .lines()
        .find_map(|l| l.strip_prefix("Usage: "))
        .unwrap_or("keepwrap [OPTIONS] -- COMMAND [ARGS...]");
    format!("{said} (usage: {}; --help for more)", usage.trim())
}

/// The subcommand `word` is a near miss of (`stauts`: `status`).
fn near_subcommand(cmd: &clap::Command, word: &str) -> Option<String> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let here = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb))
                    .min(row[j] + 1)
                    .min(here + 1);
                prev = here;
            }
        }
        row[b.len()]
    }
    let word = word.to_ascii_lowercase();
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name())
        .map(|name| (distance(&word, name), name))
        .filter(|(d, name)| {
            *d <= 2.min(name.len() / 3 + 1) || (word.len() >= 3 && name.starts_with(&word))
        })
        .min()
        .map(|(_, name)| name.to_string())
}

/// The long name (without `--`) of the option whose value `e` refuses.
fn refused_long(e: &clap::Error) -> Option<&str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    shown.split([' ', '=']).next()?.strip_prefix("--")
}

/// Where `flag` is written on the command line (before `--`): its index,
/// and how many words it takes (2 for `--flag VALUE`, 1 for `--flag=VALUE`).
fn written_at(argv: &[OsString], flag: &str) -> Option<(usize, usize)> {
    let attached = format!("{flag}=");
    argv.iter()
        .enumerate()
        .skip(1)
        .take_while(|(_, a)| *a != "--")
        .find_map(|(i, a)| {
            if a == flag {
                Some((i, 2))
            } else {
                a.to_string_lossy().starts_with(&attached).then_some((i, 1))
            }
        })
}

/// An invalid value that came from a `KEEPWRAP_*` variable, not from the
/// command line: name the variable and its value.
fn env_value_error(cmd: &clap::Command, argv: &[OsString], e: &clap::Error) -> Option<String> {
    let long = refused_long(e)?;
    let arg = find_arg(cmd, long)?;
    let var = arg.get_env()?;
    let value = std::env::var_os(var)?;
    let flag = format!("--{long}");
    if written_at(argv, &flag).is_some() {
        return None;
    }
    Some(format!(
        "invalid value {:?} in {} (for {flag}): {}",
        value.to_string_lossy(),
        var.to_string_lossy(),
        why(e)
    ))
}

/// Why clap refused a value, in one line.
fn why(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match (std::error::Error::source(e), e.get(ContextKind::ValidValue)) {
        (Some(src), _)
            if e.kind() == ErrorKind::InvalidValue || !src.to_string().contains("boolean") =>
        {
            src.to_string()
        }
        (Some(src), _) => format!("{src} (1/0, true/false, yes/no, on/off)"),
        (None, Some(ContextValue::Strings(valid))) => {
            format!("expected one of {}", valid.join(", "))
        }
        _ => "not a valid value".to_string(),
    }
}

/// A keepwrap setting whose value could not be read, taken out of this
/// launch: its default instead, or the cache left alone.
pub(super) struct Invalid {
    /// The line that says it, as the usage error does.
    pub what: String,
    /// `--grace`
    pub flag: String,
    /// The variable it came from, when not from the command line.
    pub variable: Option<String>,
    pub value: String,
    /// A setting of the cache (not of the supervision).
    pub cache: bool,
    /// Its default, as `--help` shows it.
    pub default: String,
}

/// The command line parsed with every invalid keepwrap setting taken out.
pub(super) struct Lenient {
    pub cmd: clap::Command,
    pub matches: clap::ArgMatches,
    pub invalid: Vec<Invalid>,
}

/// Parse `argv`; a keepwrap setting (an option of a launch) whose value is
/// invalid is taken out, from the command line or by ignoring its variable,
/// and parsing goes on. Err: an error that is not such a setting's (or the
/// first one, when too many).
pub(super) fn lenient(argv: &[OsString]) -> Result<Lenient, clap::Error> {
    let mut argv = argv.to_vec();
    let mut unset: Vec<clap::Id> = Vec::new();
    let mut invalid = Vec::new();
    let mut first = None;
    loop {
        let mut cmd = command_ignoring(&unset);
        let e = match cmd.try_get_matches_from_mut(&argv) {
            Ok(matches) => {
                return Ok(Lenient {
                    cmd,
                    matches,
                    invalid,
                })
            }
            Err(e) => e,
        };
        let Some(bad) = (invalid.len() < 64)
            .then(|| take_out(&cmd, &mut argv, &mut unset, &e))
            .flatten()
        else {
            return Err(first.unwrap_or(e));
        };
        invalid.push(bad);
        first.get_or_insert(e);
    }
}

/// The invalid setting of `e`, taken out of `argv` (or its variable added
/// to `unset`); None when `e` is not a launch option's invalid value.
fn take_out(
    cmd: &clap::Command,
    argv: &mut Vec<OsString>,
    unset: &mut Vec<clap::Id>,
    e: &clap::Error,
) -> Option<Invalid> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let (long, why) = match refused_long(e) {
        Some(long) => (long.to_string(), why(e)),
        None if e.kind() == ErrorKind::InvalidUtf8 => {
            (not_utf8(cmd, argv, unset)?, "not UTF-8".to_string())
        }
        None => return None,
    };
    let long = long.as_str();
    let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long))?;
    let flag = format!("--{long}");
    let id = arg.get_id().as_str();
    let default = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    let default = match (id, default.is_empty()) {
        (_, false) => default.join(","),
        ("kill_group" | "strict", true) => "false".into(),
        (_, true) => "off".into(),
    };
    let (what, variable, value) = match written_at(argv, &flag) {
        Some((at, words)) => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(v)) => v.clone(),
                _ => {
                    let written = argv[at + words - 1].to_string_lossy();
                    let attached = written.strip_prefix(&format!("{flag}="));
                    attached.unwrap_or(&written).to_string()
                }
            };
            argv.drain(at..(at + words).min(argv.len()));
            let what = format!("invalid value '{value}' for {flag}: {why}");
            (what, None, value)
        }
        None => {
            let var = arg.get_env()?;
            let value = std::env::var_os(var)?.to_string_lossy().into_owned();
            let var = var.to_string_lossy().into_owned();
            unset.push(arg.get_id().clone());
            let what = format!("invalid value {value:?} in {var} (for {flag}): {why}");
            (what, Some(var), value)
        }
    };
    Some(Invalid {
        what,
        flag,
        variable,
        value,
        cache: !super::args::SUPERVISION.contains(&id),
        default,
    })
}

/// The top-level option whose value is not UTF-8: written on the command
/// line (before `--`), else from its variable (one not `unset` yet).
fn not_utf8(cmd: &clap::Command, argv: &[OsString], unset: &[clap::Id]) -> Option<String> {
    let long_of = |word: &OsString| {
        let bytes = word.as_encoded_bytes().strip_prefix(b"--")?;
        let name = bytes.split(|b| *b == b'=').next()?;
        let name = std::str::from_utf8(name).ok()?;
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(name))
            .map(|_| name.to_string())
    };
    let words: Vec<&OsString> = argv.iter().take_while(|a| *a != "--").collect();
    for (i, w) in words.iter().enumerate().skip(1) {
        if w.to_str().is_some() {
            continue;
        }
        return long_of(w).or_else(|| long_of(words[i - 1]));
    }
    cmd.get_arguments()
        .filter(|a| !unset.contains(a.get_id()))
        .find(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.to_str().is_none())
        })
        .and_then(|a| a.get_long().map(str::to_string))
}

fn find_arg<'a>(cmd: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .or_else(|| cmd.get_subcommands().find_map(|s| find_arg(s, long)))
}

/// `keepwrap python -m ...` (no `--`): say where the command goes; and
/// `keepwrap stauts`: which subcommand it nearly is.
fn missing_separator(cmd: &clap::Command, argv: &[OsString], e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
    ) {
        return None;
    }
    if argv.iter().skip(1).any(|a| a == "--") {
        return None;
    }
    let found = match e
        .get(ContextKind::InvalidArg)
        .or_else(|| e.get(ContextKind::InvalidSubcommand))
    {
        Some(ContextValue::String(s)) => s.clone(),
        _ => return None,
    };
    if found.starts_with('-') {
        return None;
    }
    let at = argv.iter().skip(1).position(|a| *a == *found.as_str())? + 1;
    // Each word as a shell would need it: plain, or quoted with escapes (so
    // no control character reaches the terminal).
    let word = |a: &OsString| {
        let s = a.to_string_lossy();
        let plain = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
        if plain {
            s.into_owned()
        } else {
            format!("{s:?}")
        }
    };
    let mut words: Vec<String> = vec!["keepwrap".into()];
    words.extend(argv[1..at].iter().map(word));
    words.push("--".into());
    words.extend(argv[at..].iter().map(word));
    let hint = words.join(" ");
    let found = word(&argv[at]);
    if let Some(meant) = near_subcommand(cmd, &argv[at].to_string_lossy()) {
        return Some(format!(
            "unknown subcommand '{found}': did you mean `keepwrap {meant}`? (a command to run goes after `--`: {hint})"
        ));
    }
    Some(format!(
        "unexpected argument '{found}': the command to run goes after `--`, as in: {hint}"
    ))
}

/// Options whose value is itself a flag name (`--ignore-arg --foo`).
const DASHED_VALUE_OPTIONS: [&str; 1] = ["--ignore-arg"];

/// `--ignore-arg --foo` as `--ignore-arg=--foo`, before the first bare `--`,
/// so the value is not taken for an unknown option of keepwrap's.
pub(super) fn attach_dashed_values(argv: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a);
            out.extend(it);
            break;
        }
        if let Some(opt) = DASHED_VALUE_OPTIONS.iter().find(|o| a == **o) {
            let next = it.as_slice().first();
            if let Some(v) = next.filter(|v| v.as_encoded_bytes().starts_with(b"-") && *v != "--") {
                let mut joined = OsString::from(format!("{opt}="));
                joined.push(v);
                out.push(joined);
                it.next();
                continue;
            }
        }
        out.push(a);
    }
    out
}
