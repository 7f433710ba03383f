//! The prediction checked against the engine that runs. A launch whose
//! engine keepwrap does not exec itself (a shell, a launcher prefix, an
//! entrypoint script in between) may give the engine more than its words
//! show. Once the engine runs, it is read from `/proc` ([`observe`]) and
//! fingerprinted from what it got: a set is signed only for a fingerprint
//! an engine actually ran with. When it differs from the set offered, and
//! the engine has not reached its cache yet, the tree is pruned again for
//! the fingerprint seen (the set offered goes back to the store, whole, for
//! the launch it belongs to; the set of the fingerprint seen comes back
//! from it, if there is one), and the next boot of the same words is
//! offered the set of what was seen ([`last_seen`]).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::digest::Fingerprint;
use crate::engine::fingerprint::{Launch, Options};
use crate::events::Event;
use crate::launch::{Command, Wrapper};

use super::commit::{Committer, Report};
use super::last_seen;
use super::observe::{Seen, Want};

/// Whether a set may be signed for what the engine runs with.
pub(super) enum Seeing {
    /// keepwrap execs the engine itself: what it read is what runs.
    AsRead,
    /// Not seen yet: nothing is signed until it is.
    Awaiting(Box<Awaiting>),
    /// Seen, and the set offered (if any) is of the fingerprint it runs with.
    Seen,
    /// Nothing is signed this boot: why.
    Refused(String),
}

/// The inputs of a launch whose fingerprint holds something the engine
/// reads only after the start (a hub revision it downloads) or that
/// keepwrap cannot find (the engine's package): taken again at done, and
/// signed only when whole then.
pub(super) struct Redo {
    pub(super) opts: Options,
    pub(super) argv: Vec<OsString>,
    pub(super) env: Vec<(OsString, OsString)>,
    /// The working directory, relative to keepwrap's.
    pub(super) cwd: Option<PathBuf>,
    /// Why the fingerprint read before the start could not be trusted.
    pub(super) why: String,
}

impl Redo {
    fn launch(&self) -> Launch {
        let mut command = crate::engine::command(&self.argv, &self.env);
        if self.cwd.is_some() {
            command.cwd.clone_from(&self.cwd);
        }
        Launch::of(&self.opts, command, &self.argv, &self.env)
    }
}

/// What the engine is checked against.
pub(super) struct Awaiting {
    /// The fingerprint of the launch's words.
    pub(super) read: Fingerprint,
    pub(super) opts: Options,
    /// The engine's working directory as read, relative to keepwrap's.
    pub(super) cwd: Option<PathBuf>,
    /// Where an input the words do not show most likely comes from.
    pub(super) source: &'static str,
    /// Which process is the engine.
    pub(super) want: Want,
    /// `--cache-dir`, when given.
    pub(super) cache_dir: Option<PathBuf>,
    /// The variables keepwrap sets for the engine so that it writes under
    /// the root keepwrap keeps ([`crate::engine::Engine::engine_env`]).
    pub(super) set: Vec<(OsString, OsString)>,
}

impl Seeing {
    /// For a launch read as `command`, whose engine keepwrap gives `set`:
    /// seen first unless keepwrap execs the engine itself.
    pub(super) fn of(
        command: &Command,
        argv: &[OsString],
        read: &Fingerprint,
        opts: &Options,
        (cache_dir, set): (Option<&Path>, &[(OsString, OsString)]),
    ) -> Seeing {
        // A command that names no engine (a launch script kept with `--keep
        // always`) is the engine itself: kept by its words.
        if command.wrapper == Wrapper::Direct || !crate::engine::is_engine(command) {
            return Seeing::AsRead;
        }
        Seeing::Awaiting(Box::new(Awaiting {
            read: read.clone(),
            opts: opts.clone(),
            cwd: command.cwd.clone(),
            source: source(argv),
            want: Want::of(command),
            cache_dir: cache_dir.map(Path::to_path_buf),
            set: set.to_vec(),
        }))
    }

    /// The engine to look for, while it is awaited.
    pub(super) fn awaited(&self) -> Option<&Want> {
        match self {
            Seeing::Awaiting(a) => Some(&a.want),
            _ => None,
        }
    }
}

/// Where an input the words do not show most likely comes from, by the
/// launch's shape.
fn source(argv: &[OsString]) -> &'static str {
    let words: Vec<&str> = argv.iter().filter_map(|a| a.to_str()).collect();
    let shell = words
        .iter()
        .position(|w| crate::launch::shell::is_shell(w.trim_start_matches('-')));
    let opts: Vec<&str> = shell
        .map(|i| {
            words[i + 1..]
                .iter()
                .take_while(|w| w.starts_with('-'))
                .copied()
                .collect()
        })
        .unwrap_or_default();
    let short = |c: char| {
        opts.iter()
            .any(|w| !w.starts_with("--") && w[1..].contains(c))
    };
    let login =
        opts.contains(&"--login") || short('l') || shell.is_some_and(|i| words[i].starts_with('-'));
    if words.iter().any(|w| w.ends_with("nvidia_entrypoint.sh")) {
        "an entrypoint hook (the entrypoint.d/*.sh files nvidia_entrypoint.sh sources)"
    } else if login {
        "a login shell's profile (/etc/profile, /etc/profile.d/*, ~/.bash_profile, ~/.profile)"
    } else if short('i') {
        "an interactive shell's startup file (~/.bashrc)"
    } else if words
        .iter()
        .any(|w| w.contains("source ") || w.contains(". /") || w.contains(". ./"))
    {
        "a file the shell sources"
    } else {
        "the shell or launcher in front of the engine"
    }
}

impl Committer {
    /// The engine runs as `seen`; `touched`: it has written in the cache
    /// tree already. Every outcome is logged; the report says whether the
    /// tree was pruned again (keepwrap's own moves are not landings).
    pub(super) fn engine_seen(&mut self, seen: Seen, touched: bool) -> Option<Report> {
        let not_repruned = Some(Report::Checked { repruned: false });
        let awaiting = match std::mem::replace(&mut self.seeing, Seeing::Seen) {
            Seeing::Awaiting(a) => a,
            // Refused meanwhile (tuning was done first): it stays refused.
            other => {
                self.seeing = other;
                return not_repruned;
            }
        };
        let launch = seen_launch(&awaiting, &seen);
        if let Some(redo) = self.redo.as_mut() {
            // Taken again at done, from what the engine got.
            redo.argv.clone_from(&seen.argv);
            redo.env.clone_from(&seen.env);
            redo.cwd = launch.command().cwd.clone();
            if let Some(why) = launch.unresolved() {
                redo.why = why;
                return not_repruned;
            }
            self.redo = None;
        }
        let fingerprint = launch.fingerprint().clone();
        if let Some(why) = dropped(&awaiting, &seen) {
            // Said by the sign, which signs nothing: fail closed, never a
            // reuse of a set the engine did not read.
            self.seeing = Seeing::Refused(why);
            return not_repruned;
        }
        if let Some(root) = self.elsewhere(&launch, awaiting.cache_dir.as_deref()) {
            // Said by the sign, which signs nothing.
            self.seeing = Seeing::Refused(format!(
                "the engine writes its cache under {}, not under the root keepwrap pruned",
                crate::events::Shown(&root)
            ));
            return not_repruned;
        }
        if let Some(s) = &self.store {
            last_seen::put(s.state_fd(), &awaiting.read, &fingerprint);
        }
        if fingerprint != awaiting.read {
            self.unshare();
        }
        let inputs = launch.redacted_inputs();
        if fingerprint == self.fingerprint {
            self.inputs = inputs;
            Event::EngineAsOffered {
                pid: seen.pid,
                fingerprint: fingerprint.to_string(),
            }
            .emit();
            return not_repruned;
        }
        let differences = super::explain::diff(&self.inputs, &inputs);
        let offered = self.kept.len();
        Event::EngineDiffers {
            pid: seen.pid,
            read: awaiting.read.to_string(),
            seen: fingerprint.to_string(),
            differences,
            source: awaiting.source.to_string(),
        }
        .emit();
        if touched {
            // Its files may mix what it loaded with what it tuned, and a
            // prune now would take what it wrote.
            let why = format!(
                "the engine had written in the cache tree before it was seen, with {offered} cache {} of {} in it",
                if offered == 1 { "file" } else { "files" },
                self.fingerprint.short()
            );
            Event::NotSignedOffered { why: why.clone() }.emit();
            self.seeing = Seeing::Refused(why);
            return not_repruned;
        }
        self.fingerprint = fingerprint;
        self.inputs = inputs;
        self.reprune(&launch);
        Some(Report::Checked { repruned: true })
    }

    /// The cache root of the engine seen, when it is not this one.
    fn elsewhere(&self, launch: &Launch, cache_dir: Option<&Path>) -> Option<PathBuf> {
        if cache_dir.is_some() {
            return None;
        }
        let engine = crate::engine::of(self.profile);
        let root = engine.root_of_launch(None, launch).ok()?;
        let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let same = match (id(&root), id(&self.root)) {
            (Some(a), Some(b)) => a == b,
            _ => root == self.root,
        };
        (!same).then_some(root)
    }

    /// No share and no fleet on this boot: the engine runs with inputs the
    /// launch's words do not show, and other nodes and pods find a set by
    /// the words (said once, when there was one).
    pub(super) fn unshare(&mut self) {
        let (share, fleet) = (self.share.take(), self.fleet.take());
        if share.is_some() || fleet.is_some() {
            Event::NotSharedUnread {}.emit();
        }
    }

    /// The engine ended and was never seen (gone between two looks, or no
    /// process ran what the words say the engine is).
    pub(super) fn engine_unseen(&mut self) {
        self.refuse_awaited("keepwrap never saw the engine it started (it ended between two looks, or no process of the launch ran what its words say)");
    }

    fn refuse_awaited(&mut self, why: &str) {
        if self.seeing.awaited().is_some() {
            self.seeing = Seeing::Refused(why.to_string());
        }
    }

    /// The fingerprint taken again at done, for a launch that could not be
    /// fingerprinted whole before the start: false (said) when it still
    /// cannot.
    pub(super) fn redo_at_done(&mut self) -> bool {
        let Some(redo) = self.redo.take() else {
            return true;
        };
        let launch = redo.launch();
        if let Some(why) = launch.unresolved() {
            Event::NotSignedUnresolved { why }.emit();
            self.redo = Some(redo);
            return false;
        }
        self.fingerprint = launch.fingerprint().clone();
        self.inputs = launch.redacted_inputs();
        Event::ResolvedAtDone {
            fingerprint: self.fingerprint.to_string(),
        }
        .emit();
        true
    }

    /// Whether a sign may sign: not before the engine was seen, nor after
    /// it was refused (the one line says why).
    pub(super) fn may_sign(&mut self) -> bool {
        self.refuse_awaited("tuning was done before keepwrap saw the engine (no process of the launch ran what its words say)");
        match &self.seeing {
            Seeing::AsRead | Seeing::Seen => self.redo_at_done(),
            Seeing::Awaiting(_) => false,
            Seeing::Refused(why) => {
                Event::NotSignedUnseen { why: why.clone() }.emit();
                false
            }
        }
    }

    /// Prune the tree again, for the fingerprint the engine runs with: the
    /// set offered goes to the store; this fingerprint's set comes back from
    /// it.
    fn reprune(&mut self, launch: &Launch) {
        let Ok(_lock) = self.commit_lock() else {
            self.seeing = Seeing::Refused(
                "the cache lock could not be had to take the set offered back".to_string(),
            );
            return;
        };
        // the engine's rule for what runs, at this prune and at done
        self.refuse = crate::engine::of(self.profile).refuse_at_prune(launch);
        let Some((mut pruned, trash, _)) = super::prepare::prune(
            &self.root,
            self.shape,
            &self.fingerprint,
            self.store.as_ref(),
            self.refuse.as_ref(),
        ) else {
            self.seeing = Seeing::Refused("the tree could not be pruned for what runs".to_string());
            return;
        };
        if pruned.kept.is_empty() {
            if let Some(r) = self
                .store
                .as_ref()
                .and_then(|s| s.restore(&self.fingerprint))
            {
                Event::Restored {
                    files: r.paths.len(),
                    fingerprint: self.fingerprint.to_string(),
                    signed_ago: crate::store::ago(r.signed_at, crate::clock::now_secs())
                        .to_string(),
                }
                .emit();
                pruned.kept = r.paths;
            }
        }
        self.kept = pruned.kept;
        trash.run();
    }
}

/// Why the engine seen does not write under the root keepwrap pruned: it
/// runs without a variable keepwrap set for it so that it would (unset or
/// changed on the way, by a profile or a script). None when it has them
/// all.
fn dropped(awaiting: &Awaiting, seen: &Seen) -> Option<String> {
    let lost = super::read::lost(&awaiting.set, &seen.env);
    (!lost.is_empty()).then(|| {
        format!(
            "the engine runs without {} as keepwrap set it (most likely dropped by {}), so it writes its cache elsewhere, not under the root keepwrap pruned",
            lost.join(", "),
            awaiting.source
        )
    })
}

/// The launch the engine runs: its argv and environment as seen, read from
/// its working directory (said as the words said it when it is the same
/// directory, so that a launch read right is fingerprinted alike).
fn seen_launch(awaiting: &Awaiting, seen: &Seen) -> Launch {
    let mut command = crate::engine::command(&seen.argv, &seen.env);
    command.cwd = cwd_as_read(awaiting.cwd.as_deref(), &seen.cwd);
    Launch::of(&awaiting.opts, command, &seen.argv, &seen.env)
}

fn cwd_as_read(read: Option<&Path>, seen: &Path) -> Option<PathBuf> {
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let Some(seen_id) = id(seen) else {
        return Some(seen.to_path_buf());
    };
    let read = read.unwrap_or(Path::new("."));
    if id(read) == Some(seen_id) {
        return (read != Path::new(".")).then(|| read.to_path_buf());
    }
    Some(seen.to_path_buf())
}
