//! The cache side of a vLLM launch, where it differs from SGLang's: where
//! the cache is (and so the shape of the tree), when tuning is done (the
//! first `200` of `/health` on the API node; for a headless node, the
//! head's `/health` when the launch names the head and its port, else this
//! node's rank files landed and quiet, never its exit 0: `done.rs`), and the shared file of vLLM 0.27.1-0.31.x, which hangs every warm boot of a MoE
//! model under more than one rank when it is kept (`shared_file.rs`). A
//! multi-node launch's nodes and share: `nodes.rs`.
//!
//! Everything else is the same machinery: prune keeps a set signed for this
//! launch whole or removes it whole (layout C's per-rank files are kept as
//! they are: vLLM's gate passes disjoint expert-parallel files, so they need
//! no union), the store keeps other launches' sets, sign signs what is there
//! at done, and a warm boot that writes nothing is a reuse.

mod done;
pub mod launch;
pub mod layout;
pub mod nodes;
mod shared_file;
pub mod store;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cache::Shape;
use crate::done::endpoint::Endpoint;
use crate::done::{Done, DoneError};
use crate::engine::fingerprint::Launch;

use super::{Engine, NoRoot};
use crate::engine::vllm::launch::{self as facts, AutotuneRoot};
use crate::share::Share;
use crate::stops::Stopped;
use done::server_done;
use nodes::{node, share, take_own, RANK_FLAGS};
use shared_file::{before_start, plan_shared_files, refuse_shared};

/// Why a vLLM launch has no cache root keepwrap can name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot tell vLLM's cache directory: {0}")]
pub struct NoVllmRoot(#[from] facts::RootError);

/// The root keepwrap guards for a vLLM launch: `--cache-dir` if given,
/// else vLLM's own (`$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`, else
/// `$VLLM_CACHE_ROOT/flashinfer_autotune_cache`, ...; `~` expanded as the
/// engine's Python does: `HOME`, else the password database). Err: why
/// there is none.
fn root(cache_dir: Option<&Path>, env: &[(OsString, OsString)]) -> Result<PathBuf, NoVllmRoot> {
    if let Some(dir) = cache_dir {
        return Ok(dir.to_path_buf());
    }
    let computed = facts::autotune_root(env, &crate::launch::home::passwd_home)?;
    Ok(computed.path().to_path_buf())
}

/// The folders sit right in the root when
/// `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` is set, else below
/// `<flashinfer version>/<arch>/`.
fn shape(env: &[(OsString, OsString)]) -> Shape {
    let computed = facts::autotune_root(env, &crate::launch::home::passwd_home);
    if matches!(computed, Ok(AutotuneRoot::Override(_))) {
        layout::FLAT
    } else {
        layout::TREE
    }
}

/// A Ray launch (`--distributed-executor-backend ray`, `-dpb ray`, on the
/// command line or in its `--config` file): true, and one line says why its
/// cache is left as vLLM leaves it. Its workers are Ray actors that write
/// their rank files on whichever nodes Ray places them, with each node's
/// Ray environment filled in from this launch's only where the node has no
/// value: which files land here, and under which settings they were tuned,
/// cannot be told from the launch (fail closed: nothing is signed), and
/// removing what is there would make every boot re-tune while still
/// guarding nothing on the other nodes (nothing lost: nothing is removed
/// either; vLLM's own gate decides, as without keepwrap). A command keepwrap
/// does not read as vLLM's but runs under `--profile vllm` (a launch
/// script) is read whole for the same arguments.
fn under_ray(launch: &Launch) -> bool {
    let Some(arg) = ray_arg(launch) else {
        return false;
    };
    crate::events::Event::RayLaunch {
        arg: arg.to_string(),
    }
    .emit();
    true
}

/// The argument that makes `launch` a Ray launch ([`under_ray`]).
fn ray_arg(launch: &Launch) -> Option<String> {
    match launch.vllm() {
        Some(v) => facts::ray_backend(v.merged_args()),
        None => facts::ray_backend(launch.argv()),
    }
}

/// `status -- COMMAND` for a launch keepwrap only supervises (a Ray launch,
/// [`under_ray`]; one that names its own managed store,
/// [`names_its_store`]): nothing is kept, restored, stored or removed;
/// every file is left as it is, and the plan says why.
fn plan_left_alone(report: &mut serde_json::Value, launch: &Launch, cache_dir: Option<&Path>) {
    let why = match (ray_arg(launch), store::one_rank(launch, cache_dir)) {
        (Some(arg), _) => format!(
            "a Ray launch ({arg}): keepwrap only supervises it and leaves vLLM's cache as vLLM leaves it"
        ),
        (None, store::OneRank::Theirs { store, why }) => {
            format!("FlashInfer's managed store ({store}) is left alone: {why}")
        }
        _ => return,
    };
    for rows in ["files", "store"] {
        for row in report[rows].as_array_mut().into_iter().flatten() {
            row["action"] = if rows == "files" { "leave" } else { "stay" }.into();
        }
    }
    report["plan"] =
        serde_json::json!({"keep": 0, "restore": 0, "store": 0, "remove": 0, "why": why});
}

/// A one-rank launch (world 1, one stage, one node) on vLLM 0.33.0 and
/// later: one line says where FlashInfer's managed store is kept, or why it
/// is left alone ([`store::one_rank`]); so does a launch whose world size
/// cannot be read ([`store::unread`]).
fn note_managed_store(launch: &Launch, cache_dir: Option<&Path>) {
    match store::one_rank(launch, cache_dir) {
        store::OneRank::RankFiles => {
            if let Some(store) = store::unread(launch) {
                crate::events::Event::ManagedStoreUnread { store }.emit();
            }
        }
        store::OneRank::Kept(root) => crate::events::Event::ManagedStoreKept {
            store: root.join("v2"),
            var: store::VAR.to_string(),
        }
        .emit(),
        store::OneRank::Alone { store, why } => crate::events::Event::ManagedStore {
            store,
            why,
            supervising: false,
        }
        .emit(),
        store::OneRank::Theirs { store, why } => crate::events::Event::ManagedStore {
            store,
            why,
            supervising: true,
        }
        .emit(),
    }
}

/// A one-rank launch that names its own managed store
/// ([`store::OneRank::Theirs`]): true, and one line says why keepwrap only
/// supervises it. Its engine writes its tactics there and nowhere else, so
/// there is nothing for keepwrap to keep, and nothing to say at done.
fn names_its_store(launch: &Launch, cache_dir: Option<&Path>) -> bool {
    let store::OneRank::Theirs { store, why } = store::one_rank(launch, cache_dir) else {
        return false;
    };
    crate::events::Event::ManagedStore {
        store,
        why,
        supervising: true,
    }
    .emit();
    true
}

/// vLLM's side of the seam: the functions above and in this folder's files.
pub struct Vllm;

impl Engine for Vllm {
    /// vLLM's own reading: `--nnodes`/`--node-rank`, or a data-parallel
    /// launch spread over nodes (`--data-parallel-size-local`, its start
    /// rank). A command that is no vLLM server: one node.
    fn node(&self, launch: &Launch) -> Result<crate::share::Node, String> {
        launch
            .vllm()
            .map_or(Ok(crate::share::Node { nnodes: 1, rank: 0 }), node)
    }

    fn root(
        &self,
        cache_dir: Option<&Path>,
        env: &[(OsString, OsString)],
    ) -> Result<PathBuf, NoRoot> {
        root(cache_dir, env).map_err(NoRoot::Vllm)
    }

    fn runs(&self, argv: &[OsString]) -> bool {
        facts::recognise(argv).is_some()
    }

    fn commands(&self) -> &'static [&'static str] {
        &["vllm"]
    }

    fn shape(&self, env: &[(OsString, OsString)]) -> Shape {
        shape(env)
    }

    fn root_origin(&self, env: &[(OsString, OsString)]) -> &'static str {
        [
            "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
            "VLLM_CACHE_ROOT",
            "XDG_CACHE_HOME",
        ]
        .into_iter()
        .find(|v| crate::root::place::is_set(env, v))
        .unwrap_or_else(|| super::home_origin(env))
    }

    /// vLLM's gate passes per-rank files as they are.
    fn unifies_by_default(&self) -> bool {
        false
    }

    fn share(
        &self,
        args: &crate::share::Settings,
        launch: &Launch,
        shape: Shape,
        _unify: bool,
        max_age: std::time::Duration,
    ) -> Option<Share> {
        share(args, launch, shape, max_age)
    }

    /// Each node keeps its own ranks' files; a node whose cache is empty
    /// takes its own back from a complete set.
    fn take_share(
        &self,
        share: &Share,
        root: &Path,
        fingerprint: &crate::digest::Fingerprint,
        kept: &[PathBuf],
    ) -> Result<Option<Vec<PathBuf>>, Stopped> {
        if !kept.is_empty() {
            return Ok(None);
        }
        take_own(share, root, fingerprint)
    }

    fn left_alone(&self, launch: &Launch, cache_dir: Option<&Path>) -> bool {
        under_ray(launch) || names_its_store(launch, cache_dir)
    }

    fn note_launch(&self, launch: &Launch, cache_dir: Option<&Path>) {
        note_managed_store(launch, cache_dir);
    }

    /// A one-rank launch whose managed store keepwrap keeps: the store's
    /// root of its own.
    fn root_of_launch(&self, cache_dir: Option<&Path>, launch: &Launch) -> Result<PathBuf, NoRoot> {
        if let store::OneRank::Kept(root) = store::one_rank(launch, cache_dir) {
            return Ok(root);
        }
        let root = Engine::root(self, cache_dir, &launch.command().env)?;
        Ok(super::where_the_engine_runs(root, cache_dir, launch))
    }

    fn shape_of_launch(&self, cache_dir: Option<&Path>, launch: &Launch) -> Shape {
        match store::one_rank(launch, cache_dir) {
            store::OneRank::Kept(_) => crate::engine::flashinfer::STORE,
            _ => shape(&launch.command().env),
        }
    }

    fn engine_env(&self, launch: &Launch, cache_dir: Option<&Path>) -> Vec<(OsString, OsString)> {
        store::engine_env(launch, cache_dir)
    }

    fn refuse_at_prune(&self, launch: &Launch) -> Option<super::Refuse> {
        refuse_shared(launch).map(|f| Box::new(f) as super::Refuse)
    }

    fn before_start(&self, root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
        // the root is the launch's own store when the launch would keep it
        // there, were that root its `--cache-dir`
        if store::one_rank(launch, Some(root)) == store::OneRank::Kept(root.to_path_buf()) {
            crate::engine::flashinfer::kept::check_kept(root, kept);
        } else {
            before_start(root, launch, kept);
        }
    }

    /// The first 200 of `/health` on the API node; a headless node's
    /// head, else its rank files landed and quiet ([`server_done`]). A
    /// command keepwrap does not read as vLLM's: as SGLang's.
    fn server_done(&self, launch: &Launch) -> Option<Result<Done, DoneError>> {
        match launch.vllm() {
            Some(v) => Some(server_done(v)),
            None => super::sglang::Sglang.server_done(launch),
        }
    }

    fn health(&self, launch: &Launch) -> Endpoint {
        super::sglang::health(launch)
    }

    /// With vLLM's short aliases, for a launch keepwrap reads as vLLM's.
    fn rank_flags(&self, launch: &Launch) -> &'static [&'static str] {
        if launch.vllm().is_some() {
            &RANK_FLAGS
        } else {
            &super::sglang::RANK_FLAGS
        }
    }

    fn plan(&self, report: &mut serde_json::Value, launch: &Launch, cache_dir: Option<&Path>) {
        plan_shared_files(report, launch);
        plan_left_alone(report, launch, cache_dir);
    }

    fn pin_why_not(&self, launch: &Launch, cache_dir: Option<&Path>) -> Option<String> {
        match store::one_rank(launch, cache_dir) {
            store::OneRank::Kept(_) => None,
            store::OneRank::Alone { why, .. } | store::OneRank::Theirs { why, .. } => {
                Some(format!("FlashInfer's managed store is left alone ({why})"))
            }
            store::OneRank::RankFiles => Some(super::PIN_RANK_FILES.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vllm::launch::fingerprint::VllmLaunch;
    use crate::launch::Wrapper;

    /// A launch as vLLM's reading gives it, for the tests of this folder.
    pub(super) fn launch(args: &str) -> VllmLaunch {
        let argv: Vec<OsString> = args.split_whitespace().map(OsString::from).collect();
        VllmLaunch::new(&argv, &Wrapper::Direct, Path::new("/nonexistent"), &|_| {
            None
        })
        .unwrap()
    }
}
