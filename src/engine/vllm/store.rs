//! One-rank launches on vLLM 0.33.0 and later keep their tactics in
//! FlashInfer's managed store (`<root>/v2/<env16>/entries/*.json`), not in
//! a rank file. That store is shared by every launch of one environment
//! and the last write wins, so keepwrap gives such a launch a store root of
//! its own, `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` set for the engine to
//! `--cache-dir` or `$VLLM_CACHE_ROOT/keepwrap-flashinfer-store`, and
//! keeps it there as it keeps rank files: pruned to this launch's set
//! before the start, signed at done, other launches' sets in the store.
//!
//! A launch whose own environment names a store (the variable, or
//! `FLASHINFER_AUTOTUNE_CACHE_DIR`) keeps it: keepwrap leaves that store
//! alone and says so, and only supervises the launch (its engine writes
//! no rank file either). A launch whose vLLM version cannot be read has its
//! store left alone too, since only 0.33.0 and later use the store
//! (earlier ones write rank files even for one rank, kept as the others).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::engine::fingerprint::Launch;
use crate::engine::vllm::launch::{self as facts, nonempty, AutotuneRoot, Layout};
use crate::launch::package::Found;

/// The variable vLLM passes to FlashInfer as the store's root.
pub const VAR: &str = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR";
/// FlashInfer's own variable for the store's root.
const FLASHINFER_VAR: &str = "FLASHINFER_AUTOTUNE_CACHE_DIR";
/// keepwrap's store root below vLLM's cache root.
pub const OWN_DIR: &str = "keepwrap-flashinfer-store";

/// What keepwrap does with a launch's managed store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneRank {
    /// Not a one-rank launch of a vLLM that uses the store: its tactics
    /// are in rank files.
    RankFiles,
    /// Kept in this root, keepwrap's own (absolute).
    Kept(PathBuf),
    /// Left alone, and the rank files kept as any launch's (a release
    /// before 0.33.0 writes them even for one rank): the store's root as
    /// the engine will find it, and why.
    Alone { store: String, why: String },
    /// The launch's own store, which it names: left alone, and the launch
    /// only supervised, since its engine writes nothing else keepwrap
    /// keeps. The store's root as the engine will find it, and why.
    Theirs { store: String, why: String },
}

/// What keepwrap does with `launch`'s managed store, given `--cache-dir`.
pub fn one_rank(launch: &Launch, cache_dir: Option<&Path>) -> OneRank {
    let Some(v) = launch.vllm() else {
        return OneRank::RankFiles;
    };
    let s = v.sizes();
    if s.world() != Some(1) || s.pp != Some(1) || s.nnodes != Some(1) {
        return OneRank::RankFiles;
    }
    let env = &launch.command().env[..];
    let theirs = || engines_store(env);
    let alone = |why: String| OneRank::Alone {
        store: theirs(),
        why,
    };
    match launch.engine().map(|p| &p.found) {
        Some(Found::Version { version, .. }) => match uses_store(version) {
            Some(true) => {}
            Some(false) => return OneRank::RankFiles,
            None => {
                return alone(format!(
                    "vLLM {version} is a release keepwrap does not know the cache of"
                ))
            }
        },
        _ => {
            return alone(
                "vLLM's version cannot be read (see the launch's engine line), and only 0.33.0 and later keep one rank's tactics there".into(),
            )
        }
    }
    let own = match own_root(launch, cache_dir) {
        Ok(own) => own,
        Err(why) => return alone(why),
    };
    let set = [VAR, FLASHINFER_VAR]
        .into_iter()
        .find_map(|k| nonempty(env, k).map(|v| (k, v)));
    // the engine's own reading of the variable (`~` expanded)
    let named = || facts::managed_store_root(env, &crate::launch::home::passwd_home).ok();
    match set {
        None => OneRank::Kept(own),
        Some((VAR, v)) if Path::new(v) == own || named().as_deref() == Some(own.as_path()) => {
            OneRank::Kept(own)
        }
        Some((k, v)) => OneRank::Theirs {
            store: theirs(),
            why: format!(
                "{k} is set for the engine ({}), and keepwrap keeps one rank's store only in a directory of its own: it only supervises this launch (unset {k} to have the store kept per launch)",
                Path::new(v).display()
            ),
        },
    }
}

/// The managed store's root as an engine run with `env` finds it (said).
fn engines_store(env: &[(OsString, OsString)]) -> String {
    facts::managed_store_root(env, &crate::launch::home::passwd_home)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("unknown: {e}"))
}

/// The managed store's root as the engine of `launch` finds it, when
/// keepwrap cannot tell whether the launch keeps its tactics there: a
/// command it does not read as a vLLM server (a launch script, whose world
/// size it cannot read), unless the vLLM version it reads uses no store.
pub fn unread(launch: &Launch) -> Option<String> {
    if launch.vllm().is_some() {
        return None;
    }
    match launch.engine().map(|p| &p.found) {
        Some(Found::Version { version, .. }) if uses_store(version) == Some(false) => None,
        _ => Some(engines_store(&launch.command().env)),
    }
}

/// Whether vLLM `version` keeps one rank's tactics in the managed store;
/// None: a release keepwrap does not know the cache of.
fn uses_store(version: &str) -> Option<bool> {
    facts::layout_for_version(version).map(|l| {
        matches!(
            l,
            Layout::PerRank {
                managed_store_for_one_rank: true,
                ..
            }
        )
    })
}

/// The variables the engine is started with: the store's root, unless the
/// launch's environment already names it.
pub fn engine_env(launch: &Launch, cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
    match one_rank(launch, cache_dir) {
        OneRank::Kept(own) if nonempty(&launch.command().env, VAR) != Some(own.as_os_str()) => {
            vec![(VAR.into(), own.into_os_string())]
        }
        _ => Vec::new(),
    }
}

/// keepwrap's store root with no `--cache-dir`, as `env` makes vLLM's cache
/// root (`$VLLM_CACHE_ROOT/keepwrap-flashinfer-store`, relative when that
/// is), whatever `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` says. Err: why
/// there is none.
pub fn default_root(env: &[(OsString, OsString)]) -> Result<PathBuf, String> {
    let env: Vec<(OsString, OsString)> = env.iter().filter(|(k, _)| k != VAR).cloned().collect();
    match facts::autotune_root(&env, &crate::launch::home::passwd_home) {
        Ok(AutotuneRoot::VllmCacheRoot(p)) => p
            .parent()
            .map(|vllm| vllm.join(OWN_DIR))
            .ok_or_else(|| format!("vLLM's cache root {} has no parent", p.display())),
        Ok(AutotuneRoot::Override(p)) => Ok(p),
        Err(e) => Err(format!("cannot tell vLLM's cache root: {e}")),
    }
}

/// keepwrap's store root for `launch`: `--cache-dir`, else
/// `keepwrap-flashinfer-store` beside `flashinfer_autotune_cache` in
/// vLLM's cache root, a relative one from the environment against the
/// engine's working directory; absolute ([`crate::engine::for_the_engine`]:
/// the engine is given it). Err: why there is none.
fn own_root(launch: &Launch, cache_dir: Option<&Path>) -> Result<PathBuf, String> {
    let root = match cache_dir {
        Some(dir) => dir.to_path_buf(),
        None => default_root(&launch.command().env)?,
    };
    Ok(crate::engine::for_the_engine(root, cache_dir, launch))
}
