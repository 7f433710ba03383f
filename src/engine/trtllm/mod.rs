//! TensorRT-LLM (`trtllm-serve`, PyTorch backend): its autotuner keeps
//! tactics only in the file `TLLM_AUTOTUNER_CACHE_PATH` names, and never
//! checks the GPU or the build a file was tuned under. keepwrap owns that
//! path: it sets the variable for the engine to one fixed file in a root
//! of its own (`<root>/autotune/autotuner_cache.json`, [`layout`]) and
//! keeps that file per launch as it keeps rank files: before the start
//! prune leaves only the set signed for this launch's fingerprint (which
//! holds the GPU models and the `tensorrt_llm` version) and the store
//! restores it, so another launch's tactics never reach the engine; at
//! done (the first 200 of `/health`) the file is signed again, since the
//! engine rewrites it at every boot. Before the start, what the engine
//! would fail on is removed ([`repair`]): the boot is then cold, never
//! failed.
//!
//! Behind `mpirun`/`srun` (`trtllm-llmapi-launch`), one keepwrap around
//! the launcher keeps the set of every rank; a set that is not whole for
//! the launch's world is never signed ([`repair::refusal`]).

pub mod launch;
pub mod layout;
pub mod repair;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cache::Shape;
use crate::done::endpoint::Endpoint;
use crate::done::{Done, DoneError};
use crate::engine::fingerprint::Launch;
use crate::engine::trtllm::launch::{self as facts, CACHE_VAR, DEFAULT_PORT};
use crate::launch::package::Found;
use crate::share::Share;
use crate::stops::Stopped;

use super::{Engine, NoRoot};
pub use layout::TREE;

/// keepwrap's root for TensorRT-LLM below the home, when no `--cache-dir`.
const HOME_ROOT: &str = "~/.cache/keepwrap/trtllm";

/// The root: `--cache-dir`, else `~/.cache/keepwrap/trtllm` (`~`: `HOME`,
/// else the password database).
fn root(cache_dir: Option<&Path>, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    if let Some(dir) = cache_dir {
        return Some(dir.to_path_buf());
    }
    let home = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.as_os_str());
    crate::launch::home::expanduser(
        OsStr::new(HOME_ROOT),
        home,
        &crate::launch::home::passwd_home,
    )
}

/// The file the engine is told to use for `launch`: absolute, in the
/// launch's root. None: no root.
fn cache_path(launch: &Launch, cache_dir: Option<&Path>) -> Option<PathBuf> {
    let root = Trtllm.root_of_launch(cache_dir, launch).ok()?;
    let root = if root.is_relative() {
        std::env::current_dir().ok()?.join(root)
    } else {
        root
    };
    Some(root.join(layout::DIR).join(layout::FILE))
}

/// The launch's own value of the variable, when it names another file.
fn theirs(launch: &Launch, ours: &Path) -> Option<PathBuf> {
    value_other_than(&launch.command().env, ours)
}

/// The variable's value in `env`, when it names another file than `ours`.
fn value_other_than(env: &[(OsString, OsString)], ours: &Path) -> Option<PathBuf> {
    env.iter()
        .find(|(k, _)| k == CACHE_VAR)
        .map(|(_, v)| PathBuf::from(v))
        .filter(|v| v.as_os_str() != ours.as_os_str())
}

/// The layout of the launch's TensorRT-LLM release, when its version is
/// read.
fn release_layout(launch: &Launch) -> Option<facts::Layout> {
    match launch.engine().map(|p| &p.found) {
        Some(Found::Version { version, .. }) => facts::layout_for_version(version),
        _ => None,
    }
}

/// The engine's version as the launch line shows it.
fn release(launch: &Launch) -> String {
    match launch.engine().map(|p| &p.found) {
        Some(Found::Version { version, .. }) => format!("tensorrt_llm {version}"),
        Some(Found::Files { .. }) => "tensorrt_llm's files".to_string(),
        _ => "no tensorrt_llm version".to_string(),
    }
}

/// `/health` on the launch's `--host` (loopback for `localhost`, the
/// default, and a wildcard bind) and `--port` (8000).
fn endpoint(launch: &Launch) -> Endpoint {
    let (host, port) = match launch.trtllm() {
        Some(t) => (t.option("--host"), t.option("--port")),
        None => (None, None),
    };
    let host = host.filter(|h| h != "localhost");
    Endpoint::health(host.as_deref(), port.as_deref(), DEFAULT_PORT, false)
}

/// Before the start: remove each kept file [`repair::verdicts`] names,
/// with its sidecar, one line each; what stays is kept.
fn before_start(root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
    let world = launch.trtllm().and_then(|t| t.sizes().world);
    let gone = repair::verdicts(root, kept, world, release_layout(launch));
    for (rel, why) in gone {
        let removed =
            [rel.clone(), rel.with_extension("launch")]
                .iter()
                .all(|f| match std::fs::remove_file(root.join(f)) {
                    Ok(()) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                    Err(e) => {
                        crate::events::Event::TrtllmCannotRemove {
                            path: f.clone(),
                            error: e.to_string(),
                        }
                        .emit();
                        false
                    }
                });
        if removed {
            crate::events::Event::TrtllmFileRemoved {
                path: rel.clone(),
                why,
            }
            .emit();
            kept.retain(|k| *k != rel);
        }
    }
}

/// TensorRT-LLM's side of the seam.
pub struct Trtllm;

impl Engine for Trtllm {
    fn root(
        &self,
        cache_dir: Option<&Path>,
        env: &[(OsString, OsString)],
    ) -> Result<PathBuf, NoRoot> {
        root(cache_dir, env).ok_or(NoRoot::NoHome)
    }

    /// `TLLM_AUTOTUNER_CACHE_PATH`, keepwrap's file for the launch, over
    /// any value of the launch's own (said at the launch).
    fn engine_env(&self, launch: &Launch, cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
        match cache_path(launch, cache_dir) {
            Some(ours) if theirs(launch, &ours).is_some() || !set(launch) => {
                vec![(CACHE_VAR.into(), ours.into_os_string())]
            }
            _ => Vec::new(),
        }
    }

    fn runs(&self, argv: &[OsString]) -> bool {
        facts::recognise(argv).is_some()
    }

    fn commands(&self) -> &'static [&'static str] {
        &[facts::COMMAND]
    }

    fn shape(&self, _env: &[(OsString, OsString)]) -> Shape {
        TREE
    }

    fn root_origin(&self, env: &[(OsString, OsString)]) -> &'static str {
        super::home_origin(env)
    }

    fn unifies_by_default(&self) -> bool {
        false
    }

    /// One node.
    fn node(&self, _launch: &Launch) -> Result<crate::share::Node, String> {
        Ok(crate::share::Node { nnodes: 1, rank: 0 })
    }

    /// Never: one keepwrap runs around the launcher, on rank 0's node, and
    /// every rank writes to its root; `--share` gets one line saying so.
    fn share(
        &self,
        args: &crate::share::Settings,
        _launch: &Launch,
        _shape: Shape,
        _unify: bool,
        _max_age: Duration,
    ) -> Option<Share> {
        if let Some(dir) = &args.dir {
            crate::events::Event::TrtllmShareNotUsed { dir: dir.clone() }.emit();
        }
        None
    }

    fn take_share(
        &self,
        _share: &Share,
        _root: &Path,
        _fingerprint: &crate::digest::Fingerprint,
        _kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        Ok(None)
    }

    fn note_launch(&self, launch: &Launch, cache_dir: Option<&Path>) {
        let Some(ours) = cache_path(launch, cache_dir) else {
            return;
        };
        // the launch as given, in keepwrap's own environment: the launch
        // keepwrap reads holds keepwrap's value already
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let given = crate::engine::command(launch.argv(), &env);
        if let Some(theirs) = value_other_than(&given.env, &ours) {
            crate::events::Event::TrtllmCachePathOverridden {
                theirs,
                ours: ours.clone(),
            }
            .emit();
        }
        let gpu = match launch.trtllm().map(|t| &t.gpu) {
            Some(Ok(m)) => m.clone(),
            Some(Err(why)) => format!("{} ({why})", facts::NO_GPU),
            None => "no GPU model read (not a trtllm-serve launch)".to_string(),
        };
        crate::events::Event::TrtllmCacheKept {
            path: ours,
            gpu,
            engine: release(launch),
        }
        .emit();
        note_attention_dp(launch);
    }

    /// A signed file the next start would remove ([`repair::refusal`]):
    /// removed at prune with one line, and never signed at done.
    fn refuse_at_prune(&self, launch: &Launch) -> Option<super::Refuse> {
        // the launch as keepwrap runs it names keepwrap's file:
        // `<root>/autotune/autotuner_cache.json`
        let ours = launch
            .command()
            .env
            .iter()
            .find(|(k, _)| k == CACHE_VAR)
            .map(|(_, v)| PathBuf::from(v))?;
        let root = ours.parent()?.parent()?.to_path_buf();
        let world = launch.trtllm().and_then(|t| t.sizes().world);
        let layout = release_layout(launch);
        Some(Box::new(move |path: &str| {
            let rel = Path::new(path);
            let siblings = cache_names(&root.join(rel.parent().unwrap_or(Path::new(""))));
            repair::refusal(&root, rel, &siblings, world, layout)
        }))
    }

    fn before_start(&self, root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
        before_start(root, launch, kept);
    }

    /// The first 200 of `/health` on a `trtllm-serve` launch's host and
    /// port; any other command: its exit.
    fn server_done(&self, launch: &Launch) -> Option<Result<Done, DoneError>> {
        launch.trtllm()?;
        Some(Ok(Done::Health(endpoint(launch))))
    }

    fn health(&self, launch: &Launch) -> Endpoint {
        endpoint(launch)
    }
}

/// A launch whose `--enable_attention_dp` switch or
/// `--extra_llm_api_options` file turns attention-DP on: one line says a
/// warm start can hang, and how to start cold.
fn note_attention_dp(launch: &Launch) {
    if launch
        .trtllm()
        .is_some_and(|t| facts::attention_dp_flag(t.given()))
    {
        crate::events::Event::TrtllmAttentionDpFlag {}.emit();
    }
    let Some(path) = launch.trtllm().and_then(|t| t.extra_path.as_ref()) else {
        return;
    };
    let Ok(f) = crate::launch::open_regular(path) else {
        return;
    };
    let mut text = String::new();
    if std::io::Read::read_to_string(&mut std::io::Read::take(f, 16 << 20), &mut text).is_ok()
        && facts::attention_dp(&text)
    {
        crate::events::Event::TrtllmAttentionDp { file: path.clone() }.emit();
    }
}

/// The names of the cache files in `dir` (none when it cannot be read).
fn cache_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| layout::is_cache_name(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the launch's own environment sets the variable.
fn set(launch: &Launch) -> bool {
    launch.command().env.iter().any(|(k, _)| k == CACHE_VAR)
}

#[cfg(test)]
mod tests;
