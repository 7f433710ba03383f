//! The command line: `keepwrap [OPTIONS] -- COMMAND [ARGS...]` and the
//! subcommands. Every option also reads a `KEEPWRAP_*` variable, so that a
//! Dockerfile can configure the entrypoint.
//!
//! `args.rs` defines the arguments, `parse.rs` turns the process's
//! arguments into them (and explains a parse error); here, each
//! subcommand is handed to the module that runs it.

mod args;
mod forget;
mod hoist;
mod parse;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::FromArgMatches;

pub use args::{
    CleanCmd, Cli, ConfigCmd, EvictCmd, ExplainCmd, FingerprintArgs, FingerprintCmd, RootArgs,
    RunArgs, ShareArgs, ShareStatusCmd, StatusCmd, Sub, MIN_PROBE, MIN_QUIET,
};
pub use forget::ForgetCmd;
pub use parse::command;

pub use crate::clock::{parse_duration, MAX_DURATION};
use crate::engine::fingerprint::{self, Launch};
use crate::logging;

pub use crate::cmd::EXIT_USAGE;

use parse::{attach_dashed_values, parse_error, usage_error};

/// Parse the command line, run what it asks, and return the exit status.
pub fn main() -> ExitCode {
    let argv = attach_dashed_values(std::env::args_os().collect());
    let parse::Lenient {
        cmd,
        matches,
        invalid,
    } = match parse::lenient(&argv) {
        Ok(p) => p,
        Err(e) => return parse_error(&command(), &argv, e),
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return parse_error(&cmd, &argv, e),
    };
    if let Err(e) = hoist::hoist(&cmd, &matches, &mut cli) {
        return usage_error(&e);
    }
    // An invalid setting of a launch is said and the engine starts; under
    // --strict, and for anything but a launch, it is a usage error.
    let launch = cli.subcommand.is_none() && !cli.show_config && !cli.command.is_empty();
    if let Some(first) = invalid.first().filter(|_| cli.strict || !launch) {
        return usage_error(&first.what);
    }
    let level = logging::level(
        cli.verbose,
        cli.quiet,
        std::env::var("KEEPWRAP_LOG").ok().as_deref(),
    );
    logging::init_with(cli.log_format, &level);
    for i in &invalid {
        let then = if i.cache {
            "the engine starts; keepwrap leaves the cache alone for this launch (only supervises)"
                .to_string()
        } else {
            format!(
                "the engine starts with the default {} {}",
                i.flag, i.default
            )
        };
        crate::events::Event::SettingInvalid {
            what: i.what.to_string(),
            option: i.flag.to_string(),
            variable: i.variable.as_deref().map(str::to_string),
            value: i.value.to_string(),
            then: then.to_string(),
        }
        .emit();
    }
    cli.run.invalid = invalid
        .iter()
        .filter(|i| i.cache)
        .map(|i| i.variable.clone().unwrap_or_else(|| i.flag.to_string()))
        .collect();
    if cli.show_config {
        return crate::cmd::config::print(
            &cmd,
            &matches,
            &cli.run.settings().cache,
            &level,
            &cli.command,
            false,
        );
    }
    match cli.subcommand {
        Some(Sub::Evict(cmd)) => evict(cmd),
        Some(Sub::Clean(cmd)) => crate::cmd::evict::evict(
            cmd.root.cache_dir.as_deref(),
            cmd.root.lock_timeout,
            crate::cmd::evict::Evict::All,
            cmd.dry_run,
        ),
        Some(Sub::Config(c)) => crate::cmd::config::print(
            &cmd,
            &matches,
            &cli.run.settings().cache,
            &level,
            &c.command,
            c.json,
        ),
        Some(Sub::ShareStatus(cmd)) => share_status(cmd),
        Some(Sub::Fleet(cmd)) => {
            let Some(url) = cmd.url.as_deref() else {
                return usage_error("no fleet: keepwrap fleet --fleet s3://BUCKET/PREFIX ls (or KEEPWRAP_FLEET=URL)");
            };
            match cmd.action {
                args::FleetAction::Ls => crate::cmd::fleet::ls(url, cmd.fleet_timeout),
                args::FleetAction::Gc {
                    older_than,
                    dry_run,
                } => crate::cmd::fleet::gc(url, cmd.fleet_timeout, older_than, dry_run),
                args::FleetAction::Check { fleet_mode } => {
                    crate::cmd::fleet::check(url, cmd.fleet_timeout, fleet_mode)
                }
            }
        }
        Some(Sub::Fingerprint(cmd)) => print_fingerprint(cmd),
        Some(Sub::Status(cmd)) => status(cmd),
        Some(Sub::Explain(cmd)) => explain(cmd),
        Some(Sub::Forget(cmd)) => forget::forget(cmd),
        Some(Sub::Completions(c)) => {
            let mut out = Vec::new();
            clap_complete::generate(c.shell, &mut command(), "keepwrap", &mut out);
            write_out(&out)
        }
        Some(Sub::Man) => man(),
        None => {
            if cli.command.is_empty() {
                return usage_error("no COMMAND after `--`: what should keepwrap run?");
            }
            crate::supervisor::run(&cli.run.settings(), cli.command)
        }
    }
}

/// `keepwrap man`: clap_mangen's page, with an ENVIRONMENT section of
/// every `KEEPWRAP_*` variable and the option it sets.
fn man() -> ExitCode {
    let cmd = command();
    let roff = |s: &str| s.replace('\\', "\\\\").replace('-', "\\-");
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    // clap_mangen's page, its subcommands listed here: its own section
    // cites a page per subcommand (`keepwrap-evict(1)`), and there is one
    // page, this one.
    let rendered = man
        .render_title(&mut out)
        .and_then(|()| man.render_name_section(&mut out))
        .and_then(|()| man.render_synopsis_section(&mut out))
        .and_then(|()| man.render_description_section(&mut out))
        .and_then(|()| man.render_options_section(&mut out));
    if rendered.is_err() {
        return ExitCode::FAILURE;
    }
    let mut subs = String::from(".SH SUBCOMMANDS\n");
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        subs.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff(sub.get_name()),
            roff(&sub.get_about().map(|a| a.to_string()).unwrap_or_default())
        ));
    }
    out.extend_from_slice(subs.as_bytes());
    if man.render_extra_section(&mut out).is_err() {
        return ExitCode::FAILURE;
    }
    let mut subs = String::from(".SH EXIT STATUS\n");
    for (code, what) in [
        ("N", "the engine's own exit status"),
        ("128+N", "the engine died of signal N; or stop signal N (TERM, INT, HUP, QUIT) came before the engine started"),
        ("127", "the command is not found"),
        ("126", "the command cannot be executed"),
        ("2", "keepwrap's own usage error: nothing ran"),
        ("1", "a subcommand could not do its work (status \\-\\-verify: a file is not as signed; fleet check: a check failed)"),
    ] {
        subs.push_str(&format!(".TP\n\\fB{code}\\fR\n{what}\n"));
    }
    subs.push_str("Nothing keepwrap does with the cache changes the engine's exit status.\n");
    out.extend_from_slice(subs.as_bytes());
    if man
        .render_version_section(&mut out)
        .and_then(|()| man.render_authors_section(&mut out))
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    let mut env = String::from(".SH ENVIRONMENT\nEvery option of a launch also reads a variable; a flag wins over its variable, an empty variable is unset.\n");
    for arg in cmd.get_arguments() {
        if let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) {
            env.push_str(&format!(
                ".TP\n\\fB{}\\fR\nas \\fB{}\\fR\n",
                roff(&var.to_string_lossy()),
                roff(&format!("--{long}"))
            ));
        }
    }
    env.push_str(
        ".TP\n\\fBKEEPWRAP_LOG\\fR\nthe log level or filter (as \\fB\\-v\\fR/\\fB\\-q\\fR)\n",
    );
    out.extend_from_slice(env.as_bytes());
    write_out(&out)
}

/// Generated text on stdout (completions, the man page).
fn write_out(text: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// `keepwrap evict`.
fn evict(cmd: EvictCmd) -> ExitCode {
    let which = match (cmd.all, cmd.older_than, cmd.fingerprint) {
        (_, Some(d), _) => crate::cmd::evict::Evict::OlderThan(d),
        (_, None, Some(fp)) => crate::cmd::evict::Evict::Launch(fp),
        _ => crate::cmd::evict::Evict::All,
    };
    crate::cmd::evict::evict(
        cmd.root.cache_dir.as_deref(),
        cmd.root.lock_timeout,
        which,
        cmd.dry_run,
    )
}

/// `keepwrap share-status`.
fn share_status(cmd: ShareStatusCmd) -> ExitCode {
    match &cmd.share {
        None => usage_error("no share: keepwrap share-status --share DIR (or KEEPWRAP_SHARE=DIR)"),
        Some(dir) if cmd.json => crate::cmd::share_status::share_status_json(dir),
        Some(dir) => crate::share::print_status(dir),
    }
}

/// `keepwrap fingerprint`.
fn print_fingerprint(cmd: FingerprintCmd) -> ExitCode {
    if cmd.command.is_empty() {
        return usage_error(
            "no COMMAND after `--`: keepwrap fingerprint [OPTIONS] -- COMMAND [ARGS...]",
        );
    }
    fingerprint::print(&cmd.fingerprint.options(), &cmd.command, cmd.explain)
}

/// `keepwrap status`, then the share's when `--share` names one. With no
/// command, no `--cache-dir` and `--profile auto`, every default root that
/// exists is shown in turn (`--json`: the first, naming the others).
fn status(cmd: StatusCmd) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let opts = cmd.fingerprint.options();
    let launch = (!cmd.command.is_empty()).then(|| Launch::new(&opts, &cmd.command, &env));
    let mut roots = match (&launch, &cmd.cache_dir, opts.profile) {
        (None, None, fingerprint::ProfileName::Auto) => crate::engine::existing_default_roots(&env),
        _ => Vec::new(),
    };
    if roots.is_empty() {
        roots.extend(root_of(
            &opts,
            launch.as_ref(),
            cmd.cache_dir.as_deref(),
            &env,
        ));
    }
    let shown = if cmd.json {
        roots.len().min(1)
    } else {
        roots.len()
    };
    let others: Vec<&std::path::Path> = roots[shown..].iter().map(|(r, _)| r.as_path()).collect();
    let mut code = ExitCode::SUCCESS;
    let mut each: Vec<Option<(std::path::PathBuf, crate::cache::Shape)>> =
        roots[..shown].iter().cloned().map(Some).collect();
    if each.is_empty() {
        each.push(None);
    }
    for (i, root) in each.into_iter().enumerate() {
        if i > 0 {
            println!();
        }
        let fleet = crate::cmd::fleet::state_json(
            root.as_ref().map(|(root, _)| root.as_path()),
            std::env::var("KEEPWRAP_FLEET")
                .ok()
                .filter(|u| !u.is_empty())
                .as_deref(),
            std::env::var("KEEPWRAP_FLEET_MODE").ok().as_deref(),
        );
        let mut extra = serde_json::Map::new();
        extra.insert("fleet".into(), fleet.clone());
        if !others.is_empty() {
            extra.insert("other_roots".into(), serde_json::json!(others));
        }
        let c = crate::cmd::status::run(
            root,
            launch.as_ref().map(|l| (l, cmd.cache_dir.as_deref())),
            cmd.json,
            cmd.zero,
            cmd.verify,
            cmd.store_max_size,
            extra,
        );
        if c == ExitCode::SUCCESS && !cmd.json {
            crate::cmd::fleet::print_state(&fleet);
        }
        if c != ExitCode::SUCCESS {
            code = c;
        }
    }
    match &cmd.share {
        Some(dir) if code == ExitCode::SUCCESS => {
            println!("\nshare {}:", dir.display());
            crate::share::print_status(dir)
        }
        _ => code,
    }
}

/// The root of `launch`'s engine (with no command, the profile's), with
/// the shape of its tree (with no command, the tree the root holds).
fn root_of(
    opts: &fingerprint::Options,
    launch: Option<&Launch>,
    cache_dir: Option<&std::path::Path>,
    env: &[(OsString, OsString)],
) -> Option<(std::path::PathBuf, crate::cache::Shape)> {
    let profile = launch.map_or_else(|| opts.profile.without_command(), Launch::profile);
    let engine = crate::engine::of(profile);
    match launch {
        Some(launch) => {
            let root = engine.root_of_launch(cache_dir, launch).ok()?;
            Some((root, engine.shape_of_launch(cache_dir, launch)))
        }
        None => {
            // the tree the root holds, which may be another engine's
            let root = engine.root(cache_dir, env).ok()?;
            let shape = crate::cache::Shape::found_in(&root, engine.shape(env));
            Some((root, shape))
        }
    }
}

/// `keepwrap explain`.
fn explain(cmd: ExplainCmd) -> ExitCode {
    if cmd.command.is_empty() {
        return usage_error(
            "no COMMAND after `--`: keepwrap explain [OPTIONS] -- COMMAND [ARGS...]",
        );
    }
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let opts = cmd.fingerprint.options();
    let launch = Launch::new(&opts, &cmd.command, &env);
    let root = root_of(&opts, Some(&launch), cmd.cache_dir.as_deref(), &env);
    crate::cmd::explain::print(root, &launch)
}
