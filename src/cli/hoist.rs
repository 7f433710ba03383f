//! Options written before a subcommand (`keepwrap --cache-dir X evict
//! --all`): each one the subcommand takes applies to it, as if written after
//! its name; any other is refused. None is dropped.

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::{CleanCmd, Cli, EvictCmd, FingerprintArgs, Sub};

/// Top-level arguments that every subcommand takes (clap hands them down;
/// a subcommand is always strict), or that are not options of a launch.
const EVERYWHERE: [&str; 7] = [
    "log_format",
    "verbose",
    "quiet",
    "strict",
    "show_config",
    "help",
    "version",
];

fn on_command_line(m: &ArgMatches, id: &str) -> bool {
    m.try_get_raw(id).is_ok_and(|v| v.is_some())
        && m.value_source(id) == Some(ValueSource::CommandLine)
}

/// One subcommand's share of the options written before it.
struct Hoist<'a> {
    top: &'a ArgMatches,
    sub: &'a ArgMatches,
    name: &'a str,
    /// The top-level ids the subcommand takes.
    taken: Vec<&'static str>,
}

impl Hoist<'_> {
    fn flag(&self, id: &str) -> String {
        format!("--{}", id.replace('_', "-"))
    }

    /// A single value: the one written before the subcommand, unless it is
    /// also written after it (refused, as any repeated option).
    fn one<T: Clone>(
        &mut self,
        top_id: &'static str,
        sub_id: &str,
        top: &T,
        sub: &mut T,
    ) -> Result<(), String> {
        self.taken.push(top_id);
        if !on_command_line(self.top, top_id) {
            return Ok(());
        }
        if on_command_line(self.sub, sub_id) {
            return Err(format!(
                "the argument '{}' cannot be used multiple times (it is written both before and after `{}`)",
                self.flag(sub_id),
                self.name
            ));
        }
        *sub = top.clone();
        Ok(())
    }

    /// A list: the values written before the subcommand, then those written
    /// after it (a flag wins over its variable, as everywhere).
    fn many(&mut self, id: &'static str, top: &[String], sub: &mut Vec<String>) {
        self.taken.push(id);
        if !on_command_line(self.top, id) {
            return;
        }
        let after = if on_command_line(self.sub, id) {
            std::mem::take(sub)
        } else {
            Vec::new()
        };
        *sub = top.iter().cloned().chain(after).collect();
    }

    fn fingerprint(
        &mut self,
        top: &FingerprintArgs,
        sub: &mut FingerprintArgs,
    ) -> Result<(), String> {
        self.one("profile", "profile", &top.profile, &mut sub.profile)?;
        self.many("env_prefix", &top.env_prefix, &mut sub.env_prefix);
        self.many("volatile_env", &top.volatile_env, &mut sub.volatile_env);
        self.many("ignore_arg", &top.ignore_arg, &mut sub.ignore_arg);
        Ok(())
    }

    /// The first option written before the subcommand that it does not take.
    fn refused(&self, cmd: &clap::Command) -> Option<String> {
        let id = cmd
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .find(|id| {
                !EVERYWHERE.contains(id)
                    && !self.taken.contains(id)
                    && on_command_line(self.top, id)
            })?;
        let flag = match id {
            "command" => "-- COMMAND".to_string(),
            "dir" => "--share".to_string(),
            id => self.flag(id),
        };
        Some(format!(
            "{flag} is an option of a launch: `keepwrap {}` does not take it (keepwrap {} --help lists what it takes)",
            self.name, self.name
        ))
    }
}

/// Apply the options written before the subcommand to it, or say which one
/// it does not take.
pub(super) fn hoist(
    cmd: &clap::Command,
    matches: &ArgMatches,
    cli: &mut Cli,
) -> Result<(), String> {
    let Some((name, sub_m)) = matches.subcommand() else {
        return Ok(());
    };
    let mut h = Hoist {
        top: matches,
        sub: sub_m,
        name,
        taken: Vec::new(),
    };
    let run = &cli.run;
    match &mut cli.subcommand {
        // `config` shows the options written before it.
        Some(Sub::Config(_)) | None => return Ok(()),
        Some(Sub::Completions(_) | Sub::Man) => {}
        Some(Sub::Fingerprint(c)) => h.fingerprint(&run.fingerprint, &mut c.fingerprint)?,
        Some(Sub::Explain(c)) => {
            h.fingerprint(&run.fingerprint, &mut c.fingerprint)?;
            h.one("cache_dir", "cache_dir", &run.cache_dir, &mut c.cache_dir)?;
        }
        Some(Sub::Status(c)) => {
            h.fingerprint(&run.fingerprint, &mut c.fingerprint)?;
            h.one("cache_dir", "cache_dir", &run.cache_dir, &mut c.cache_dir)?;
            h.one(
                "store_max_size",
                "store_max_size",
                &run.store_max_size,
                &mut c.store_max_size,
            )?;
            h.one("dir", "share", &run.share.dir, &mut c.share)?;
        }
        Some(Sub::Evict(EvictCmd { root, .. }) | Sub::Clean(CleanCmd { root, .. })) => {
            h.one(
                "cache_dir",
                "cache_dir",
                &run.cache_dir,
                &mut root.cache_dir,
            )?;
            h.one(
                "lock_timeout",
                "lock_timeout",
                &run.lock_timeout,
                &mut root.lock_timeout,
            )?;
        }
        Some(Sub::Forget(c)) => {
            h.fingerprint(&run.fingerprint, &mut c.fingerprint)?;
            h.one("cache_dir", "cache_dir", &run.cache_dir, &mut c.cache_dir)?;
            h.one(
                "lock_timeout",
                "lock_timeout",
                &run.lock_timeout,
                &mut c.lock_timeout,
            )?;
            h.one("url", "fleet", &run.fleet.url, &mut c.fleet)?;
            h.one(
                "fleet_timeout",
                "fleet_timeout",
                &run.fleet.fleet_timeout,
                &mut c.fleet_timeout,
            )?;
        }
        Some(Sub::ShareStatus(c)) => h.one("dir", "share", &run.share.dir, &mut c.share)?,
        Some(Sub::Fleet(c)) => h.one("url", "fleet", &run.fleet.url, &mut c.url)?,
    }
    match h.refused(cmd) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
