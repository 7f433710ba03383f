//! SGLang: the root is `$SGLANG_CACHE_DIR/flashinfer/autotune` (else
//! `~/.cache/sglang/flashinfer/autotune`), its stock gate needs the rank
//! files unified, and a multi-node launch takes the union of every node's
//! rank files from the share.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::launch::fingerprint::Launch;
use crate::share::Share;
use crate::stops::Stopped;

use super::{Engine, NoRoot};

pub struct Sglang;

impl Engine for Sglang {
    /// `--cache-dir`, else `$SGLANG_CACHE_DIR/flashinfer/autotune` from the
    /// engine's environment, else `~/.cache/sglang/flashinfer/autotune`
    /// (`~`: `HOME`, else the password database, as Python expands it).
    fn root(
        &self,
        cache_dir: Option<&Path>,
        env: &[(OsString, OsString)],
    ) -> Result<PathBuf, NoRoot> {
        crate::root::place::root_from(cache_dir, env).ok_or(NoRoot::NoHome)
    }

    fn root_origin(&self, env: &[(OsString, OsString)]) -> &'static str {
        if env.iter().any(|(k, _)| k == "SGLANG_CACHE_DIR") {
            "SGLANG_CACHE_DIR"
        } else {
            super::home_origin(env)
        }
    }

    fn unifies_by_default(&self) -> bool {
        true
    }

    fn share(
        &self,
        args: &crate::share::Settings,
        launch: &Launch,
        unify: bool,
        max_age: Duration,
    ) -> Option<Share> {
        Share::new(args, launch, &launch.command().argv, unify, max_age)
    }

    /// The union of every node's rank files, written over this node's.
    fn take_share(
        &self,
        share: &Share,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
        _kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        share.take_union(root, fingerprint)
    }
}
