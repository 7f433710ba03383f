//! The launch as read before the start: its fingerprint, whether its words
//! tell all its engine reads, and the set it is offered.

use std::ffi::OsString;

use crate::digest::Fingerprint;
use crate::engine::fingerprint::{Launch, Options};
use crate::engine::Engine;
use crate::launch::{Command, Unread, Wrapper};
use crate::root::running::Identity;
use crate::store::Store;

use super::check::{Redo, Seeing};
use super::{last_seen, KeepMode, Settings};

/// The launch as read before the start.
pub(super) struct Read {
    pub(super) launch: Launch,
    /// The fingerprint of its words.
    pub(super) fingerprint: Fingerprint,
    pub(super) words: Words,
    /// Whether a set may be signed for what the engine runs with.
    pub(super) seeing: Seeing,
    /// The variables the engine is started with on top of keepwrap's
    /// environment, so that it writes where keepwrap keeps its cache.
    pub(super) set: Vec<(OsString, OsString)>,
    /// Why the launch is only supervised when those variables would not
    /// reach its engine.
    pub(super) unkept: Option<String>,
}

/// What a launch's words tell of what its engine reads.
pub(super) enum Words {
    /// All of it: the set of their fingerprint is offered.
    Whole,
    /// The fingerprint holds as a constant something the engine will read
    /// (an engine not found, a hub id not downloaded yet): no set is
    /// offered, and the fingerprint is taken again at done.
    Unresolved(Redo),
    /// The launch cannot be read whole, under `--keep auto`: the tree is
    /// pruned, and nothing is offered or signed.
    Unreadable(Unread),
}

impl Words {
    /// Whether a set is offered by the words' fingerprint.
    pub(super) fn offered(&self) -> bool {
        matches!(self, Words::Whole)
    }

    /// What the fingerprint is taken again from at done, when it is.
    pub(super) fn redo(self) -> Option<Redo> {
        match self {
            Words::Unresolved(redo) => Some(redo),
            Words::Whole | Words::Unreadable(_) => None,
        }
    }
}

impl Read {
    /// Read `command` (`argv` as [`Settings::keeps`] read it) in `env`.
    pub(super) fn of(
        args: &Settings,
        command: Command,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Read {
        let opts = args.fingerprint.clone();
        let launch = Launch::of(&opts, command, argv, env);
        let (launch, set, unkept, env) = with_engine_env(args, &opts, launch, argv, env);
        let env = &env[..];
        let fingerprint = launch.fingerprint().clone();
        let words = match (&launch.command().wrapper, args.keep, launch.unresolved()) {
            (Wrapper::Unreadable(u), KeepMode::Auto, _) => Words::Unreadable(u.clone()),
            (_, _, Some(why)) => Words::Unresolved(Redo {
                opts: opts.clone(),
                argv: argv.to_vec(),
                env: env.to_vec(),
                cwd: None,
                why,
            }),
            (_, _, None) => Words::Whole,
        };
        let seeing = match &words {
            Words::Unreadable(u) => {
                Seeing::Refused(format!("the launch cannot be read whole ({u})"))
            }
            _ => Seeing::of(
                launch.command(),
                argv,
                &fingerprint,
                &opts,
                (args.cache_dir.as_deref(), &set),
            ),
        };
        Read {
            launch,
            fingerprint,
            words,
            seeing,
            set,
            unkept,
        }
    }

    /// This launch among the launches using the root.
    pub(super) fn identity(&self, args: &Settings, engine: &dyn Engine) -> Identity {
        let launch = &self.launch;
        launch.identity(
            &crate::engine::fingerprint::node_local(&args.share),
            engine.rank_flags(launch),
            &engine.ranks(launch),
        )
    }

    /// The line of a launch whose words do not tell all its engine reads.
    pub(super) fn say(&self, argv: &[OsString]) {
        match &self.words {
            Words::Whole => {}
            Words::Unresolved(r) => {
                crate::events::Event::UnresolvedLaunch { why: r.why.clone() }.emit();
            }
            Words::Unreadable(u) => crate::events::Event::UnreadablePruned {
                program: argv
                    .first()
                    .map(|a| crate::launch::canonical::py_str(a.as_encoded_bytes()))
                    .unwrap_or_default(),
                why: u.why.clone(),
                instead: u.instead.to_string(),
            }
            .emit(),
        }
    }

    /// The fingerprint whose set is offered. A launch whose engine keepwrap
    /// does not exec itself is offered the set of what its engine was last
    /// seen with.
    pub(super) fn offer(&self, store: Option<&Store>) -> Fingerprint {
        let read = &self.fingerprint;
        match (&self.seeing, store) {
            _ if !self.words.offered() => Fingerprint::of(NOTHING_OFFERED),
            (Seeing::Awaiting(_), Some(s)) => match last_seen::get(s.state_fd(), read) {
                Some(seen) => {
                    crate::events::Event::OfferedAsSeen {
                        read: read.to_string(),
                        seen: seen.to_string(),
                    }
                    .emit();
                    seen
                }
                None => read.clone(),
            },
            _ => read.clone(),
        }
    }
}

/// What prune keeps for a launch that is offered no set: the files signed
/// for the fingerprint of these bytes, which no launch has (a launch's is
/// the sha256 of its canonical JSON).
const NOTHING_OFFERED: &[u8] = b"keepwrap: no set is offered to this launch";

/// The launch as its engine will run it when its engine wants variables of
/// keepwrap's ([`Engine::engine_env`]): read again with them, which leaves
/// its fingerprint as it was. With the variables, why the launch is only
/// supervised when they would not reach its engine (a launch that clears
/// its environment), and the environment it was read in.
#[allow(clippy::type_complexity)]
fn with_engine_env(
    args: &Settings,
    opts: &Options,
    launch: Launch,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> (
    Launch,
    Vec<(OsString, OsString)>,
    Option<String>,
    Vec<(OsString, OsString)>,
) {
    let engine = crate::engine::of(launch.profile());
    let set = engine.engine_env(&launch, args.cache_dir.as_deref());
    if set.is_empty() {
        return (launch, set, None, env.to_vec());
    }
    let mut with: Vec<(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| set.iter().all(|(s, _)| s != k))
        .cloned()
        .collect();
    with.extend(set.iter().cloned());
    // keepwrap's own variables are never in the fingerprint
    let mut opts = opts.clone();
    opts.volatile_env
        .extend(set.iter().map(|(k, _)| k.to_string_lossy().into_owned()));
    let again = Launch::of(&opts, crate::engine::command(argv, &with), argv, &with);
    let lost = lost(&set, &again.command().env);
    if lost.is_empty() && again.fingerprint() == launch.fingerprint() {
        return (again, set, None, with);
    }
    let why = if lost.is_empty() {
        "the launch reads differently with the variables keepwrap sets for its engine".to_string()
    } else {
        format!(
            "keepwrap sets {} for the engine to keep its cache, and the launch does not pass it on (env -i, env -u, unset) or sets it itself (NAME=value in the command)",
            lost.join(", ")
        )
    };
    (
        launch,
        Vec::new(),
        Some(format!("{why}: supervising only")),
        env.to_vec(),
    )
}

/// The names of the variables of `set` (keepwrap's for the engine) that the
/// engine's environment `env` does not have with the same value.
pub(super) fn lost(set: &[(OsString, OsString)], env: &[(OsString, OsString)]) -> Vec<String> {
    // the first occurrence of a name is what the engine gets: a value the
    // command sets itself (`env NAME=value`, `NAME=value exec ...`) wins
    // over keepwrap's
    set.iter()
        .filter(|(k, v)| env.iter().find(|(ek, _)| ek == k).map(|(_, ev)| ev) != Some(v))
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect()
}
