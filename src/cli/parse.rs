//! From the process's arguments to clap's matches: the definition with
//! empty `KEEPWRAP_*` variables taken as unset, `--ignore-arg --foo`, and
//! each parse error said in keepwrap's users' terms.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Cli, EXIT_USAGE};

pub(super) fn usage_error(what: &str) -> ExitCode {
    eprintln!("keepwrap: error: {what}");
    eprintln!("Usage: keepwrap [OPTIONS] -- COMMAND [ARGS...]   (keepwrap --help for more)");
    ExitCode::from(EXIT_USAGE)
}

/// The command line definition, with every `KEEPWRAP_*` variable that is set
/// but empty treated as unset: a template that renders `value: ""` gets the
/// default, not a usage error.
pub fn command() -> clap::Command {
    fn unset_empty(arg: clap::Arg) -> clap::Arg {
        let empty = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty {
            arg.env(None)
        } else {
            arg
        }
    }
    fn walk(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(unset_empty).mut_subcommands(walk)
    }
    let mut cmd = Cli::command();
    let any_empty = std::env::vars_os()
        .any(|(name, value)| value.is_empty() && name.as_encoded_bytes().starts_with(b"KEEPWRAP_"));
    if !any_empty {
        return cmd;
    }
    // Define the deferred subcommands' arguments, so that the walk reaches
    // them too.
    cmd.build();
    walk(cmd)
}

/// Say what a parse error means for keepwrap's users, and return status 2
/// (0 for `--help` and `--version`).
pub(super) fn parse_error(cmd: &clap::Command, argv: &[OsString], e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if let Some(msg) = env_value_error(cmd, argv, &e) {
        return usage_error(&msg);
    }
    if let Some(msg) = missing_separator(argv, &e) {
        return usage_error(&msg);
    }
    let _ = e.print();
    ExitCode::from(EXIT_USAGE)
}

/// An invalid value that came from a `KEEPWRAP_*` variable, not from the
/// command line: name the variable and its value.
fn env_value_error(cmd: &clap::Command, argv: &[OsString], e: &clap::Error) -> Option<String> {
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
    let long = shown.split([' ', '=']).next()?.strip_prefix("--")?;
    let arg = find_arg(cmd, long)?;
    let var = arg.get_env()?;
    let value = std::env::var_os(var)?;
    let flag = format!("--{long}");
    let on_command_line = argv
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == flag.as_str() || a.to_string_lossy().starts_with(&format!("{flag}=")));
    if on_command_line {
        return None;
    }
    let why = match (std::error::Error::source(e), e.get(ContextKind::ValidValue)) {
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
    };
    Some(format!(
        "invalid value {:?} in {} (for {flag}): {why}",
        value.to_string_lossy(),
        var.to_string_lossy()
    ))
}

fn find_arg<'a>(cmd: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .or_else(|| cmd.get_subcommands().find_map(|s| find_arg(s, long)))
}

/// `keepwrap python -m ...` (no `--`): say where the command goes.
fn missing_separator(argv: &[OsString], e: &clap::Error) -> Option<String> {
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
