//! The cache side of a vLLM launch, where it differs from SGLang's: where
//! the cache is (and so the shape of the tree), when tuning is done (the
//! first `200` of `/health` on the API node; for a headless node, the
//! head's `/health` when the launch names the head and its port, else this
//! node's rank files landed and quiet, never its exit 0), and the shared file of vLLM 0.27.1-0.31.x, which hangs every warm boot of a MoE
//! model under more than one rank when it is kept.
//!
//! Everything else is the same machinery: prune keeps a set signed for this
//! launch whole or removes it whole (layout C's per-rank files are kept as
//! they are: vLLM's gate passes disjoint expert-parallel files, so they need
//! no union), the store keeps other launches' sets, sign signs what is there
//! at done, and a warm boot that writes nothing is a reuse.

pub mod launch;
pub mod layout;
pub mod store;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::cache::Shape;
use crate::done::endpoint::Endpoint;
use crate::done::{Done, DoneError};
use crate::engine::fingerprint::Launch;
use crate::engine::vllm::launch::fingerprint::VllmLaunch;

use super::{Engine, NoRoot};
use crate::engine::vllm::launch::{self as facts, AutotuneRoot, FileKind, Moe};
use crate::share::{Node, Share};
use crate::stops::Stopped;

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

/// The bytes of the model's `config.json`, when the model is a local
/// directory (16 MiB at most; never a FIFO or a device).
fn model_config(v: &VllmLaunch) -> Option<Vec<u8>> {
    let (m, _) = v.model.as_ref()?;
    let f = crate::launch::open_regular(&Path::new(m).join("config.json")).ok()?;
    let mut bytes = Vec::new();
    f.take(16 << 20).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// `autotune_configs.json` (layout A) or `autotune_config.json` (layout B):
/// one file for every rank.
fn is_shared_name(name: &str) -> bool {
    facts::file_kind(name).is_some_and(|k| matches!(k, FileKind::Shared | FileKind::LayoutB))
}

/// Why a kept shared file would hang this launch, or why it is safe.
enum Verdict {
    Remove(String),
    Keep(String),
}

fn shared_file_verdict(v: &VllmLaunch) -> Verdict {
    let world = v.sizes().world();
    let moe = facts::launch_moe(v.merged_args(), model_config(v).as_deref());
    let why_moe = match &moe {
        Moe::Yes { key, experts } => format!("a MoE model: {key} = {experts}"),
        Moe::Unsure(why) => format!("maybe a MoE model ({why}): treated as one"),
        Moe::Dense => "a dense model (its config.json names no experts)".to_string(),
    };
    match world {
        Some(1) => Verdict::Keep("a one-rank launch".into()),
        Some(w) if !moe.treat_as_moe() => Verdict::Keep(format!("{why_moe}, {w} ranks")),
        Some(w) => Verdict::Remove(format!("{why_moe}, {w} ranks")),
        None if !moe.treat_as_moe() => Verdict::Keep(why_moe),
        None => Verdict::Remove(format!(
            "{why_moe}; the number of ranks cannot be read from the launch"
        )),
    }
}

/// Why prune must not keep a shared file signed for this launch (a MoE
/// launch of more than one rank): the rule for
/// [`crate::cache::prune_then_empty`], so that such a file gets
/// one line, its removal, rather than `kept` and then `removed`.
fn refuse_shared(launch: &Launch) -> Option<impl Fn(&str) -> Option<String> + 'static> {
    let Verdict::Remove(why) = shared_file_verdict(launch.vllm()?) else {
        return None;
    };
    let reason = crate::events::shared_file_hangs(why);
    Some(move |path: &str| {
        let name = path.rsplit('/').next().unwrap_or(path);
        is_shared_name(name).then(|| reason.clone())
    })
}

/// `status -- COMMAND`: the shared files the launch would keep but removes
/// before the start ([`before_start`]) are shown as removed, with why.
fn plan_shared_files(report: &mut serde_json::Value, launch: &Launch) {
    let Some(v) = launch.vllm() else {
        return;
    };
    let Verdict::Remove(why) = shared_file_verdict(v) else {
        return;
    };
    let mut moved = 0u64;
    if let Some(rows) = report["files"].as_array_mut() {
        for row in rows {
            let shared = row["path"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .is_some_and(is_shared_name);
            if shared && row["action"] == "remove" && row["why"].is_null() {
                // never signed: the last boot kept nothing
                row["why"] = format!(
                    "vLLM 0.27.1-0.31.x's shared file hangs a warm boot of a MoE model under more than one rank ({why}): this launch keeps nothing"
                )
                .into();
            }
            if shared && row["action"] == "keep" {
                row["action"] = "remove".into();
                row["why"] = format!(
                    "vLLM 0.27.1-0.31.x's shared file hangs a warm boot of a MoE model under more than one rank ({why})"
                )
                .into();
                moved += 1;
            }
        }
    }
    let plan = &mut report["plan"];
    if let (Some(keep), Some(remove)) = (plan["keep"].as_u64(), plan["remove"].as_u64()) {
        plan["keep"] = (keep - moved.min(keep)).into();
        plan["remove"] = (remove + moved).into();
    }
}

/// Before the engine starts: the shared `autotune_configs.json` (and
/// `autotune_config.json`) of vLLM 0.27.1-0.31.x that prune kept (or the
/// store restored) for this launch is removed when the launch runs a MoE
/// model under more than one rank (or might: when unsure, remove), since
/// holding only rank 0's MoE tactics it hangs every warm boot; kept for a
/// dense model or one rank. One line per file says which and why.
fn before_start(root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
    let Some(v) = launch.vllm() else {
        return;
    };
    let shared = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_shared_name)
    };
    if !kept.iter().any(shared) {
        return;
    }
    let verdict = shared_file_verdict(v);
    kept.retain(|p| {
        if !shared(p) {
            return true;
        }
        match &verdict {
            Verdict::Keep(why) => {
                crate::events::Event::KeptSharedFile {
                    path: p.to_path_buf(),
                    reason: why.to_string(),
                }
                .emit();
                true
            }
            Verdict::Remove(why) => {
                let sidecar = p.with_extension("launch");
                let gone = [p, &sidecar].iter().all(|f| {
                    crate::engine::flashinfer::kept::remove(&root.join(f))
                        .map_err(|e| {
                            crate::events::Event::CannotRemoveSharedFile {
                                path: f.to_path_buf(),
                                error: e.to_string(),
                            }
                            .emit()
                        })
                        .is_ok()
                });
                if gone {
                    crate::events::Event::RemovedSharedFile {
                        path: p.to_path_buf(),
                        reason: why.to_string(),
                    }
                    .emit();
                }
                !gone
            }
        }
    });
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

/// This node's place in a multi-node vLLM launch: `--nnodes N --node-rank
/// R` (TP/PP across nodes), or for data parallelism across nodes
/// `-dp D -dpl L` with `-dpr S` (or `-dpn S`): node S/L of D/L.
pub fn node(v: &VllmLaunch) -> Result<Node, String> {
    let s = v.sizes();
    let n = |x: Option<u64>, what: &str| {
        x.and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| format!("{what} cannot be read from the launch"))
    };
    let (nnodes, rank) = match (s.nnodes, s.dp_size_local) {
        (Some(nn), _) if nn > 1 => (n(s.nnodes, "--nnodes")?, n(s.node_rank, "--node-rank")?),
        (_, Some(local)) if local > 0 && s.dp.is_some_and(|d| d > local && d % local == 0) => {
            let start = s.dp_start_rank.or(s.dp_rank).unwrap_or(0);
            (
                n(s.dp.map(|d| d / local), "--data-parallel-size")?,
                n(Some(start / local), "--data-parallel-start-rank")?,
            )
        }
        _ => (1, 0),
    };
    if rank >= nnodes {
        return Err(format!("node {rank} is out of range for {nnodes} nodes"));
    }
    Ok(Node { nnodes, rank })
}

/// The share of a vLLM launch (`--share DIR`): each node publishes its own
/// ranks' signed files; no union is ever taken (vLLM's gate passes
/// per-rank files as they are).
fn share(
    args: &crate::share::Settings,
    launch: &Launch,
    shape: Shape,
    max_age: std::time::Duration,
) -> Option<Share> {
    let v = launch.vllm()?;
    Share::for_node(args, &launch.cluster_of(args), node(v), shape, max_age)
}

/// Before the engine starts, on a node that kept nothing: when every node
/// of this launch has a verified publication, place this node's own
/// published rank files back and sign them ([`crate::publish::place`]).
/// Never a partial set: one node missing, or one file that does not
/// verify, and nothing is taken (one line says which). The files signed,
/// if any.
fn take_own(
    share: &Share,
    root: &Path,
    fingerprint: &crate::digest::Fingerprint,
) -> Result<Option<Vec<PathBuf>>, Stopped> {
    let me = share.parts().2;
    let Some(nodes) = share.gather_all()? else {
        return Ok(None);
    };
    let Some(own) = nodes.into_iter().find(|n| n.rank == me.rank) else {
        return Ok(None);
    };
    if own.files.is_empty() {
        return Ok(None);
    }
    Ok(
        match crate::publish::place(root, share.shape(), fingerprint, &own.files) {
            Ok(signed) => {
                crate::events::Event::ShareRestoredOwn {
                    files: own.files.len(),
                    nodes: me.nnodes,
                }
                .emit();
                Some(signed)
            }
            Err(crate::publish::NotPlaced::Write(e)) => {
                crate::events::Event::ShareCannotWriteOwn {
                    error: e.to_string(),
                }
                .emit();
                None
            }
            Err(crate::publish::NotPlaced::Sign(e)) => {
                crate::events::Event::ShareCannotSign {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                None
            }
        },
    )
}

/// vLLM's side of the seam: the functions above.
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

/// vLLM's default API port.
const DEFAULT_PORT: u16 = 8000;

/// `--done auto` for a vLLM server launch: the first 200 from `/health` on
/// its `--host`/`--port` (8000; loopback for a wildcard bind). A server on
/// a Unix socket (`--uds`) cannot be probed: Err says what to give.
fn server_done(v: &VllmLaunch) -> Result<Done, DoneError> {
    let sizes = v.sizes();
    if sizes.headless {
        return headless_done(v, &sizes);
    }
    if v.option("--uds").is_some() {
        return Err(DoneError::UnixSocket);
    }
    // ssl.CERT_REQUIRED: the probe has no client certificate to give
    if v.option("--ssl-cert-reqs")
        .as_deref()
        .and_then(crate::done::endpoint::python_u16)
        == Some(2)
    {
        return Err(DoneError::ClientCertificate);
    }
    Ok(Done::Health(health(
        v.option("--host").as_deref().unwrap_or("127.0.0.1"),
        v,
    )))
}

/// `/health` on `host` (a wildcard bind probed on loopback) and the
/// launch's `--port` (8000).
fn health(host: &str, v: &VllmLaunch) -> Endpoint {
    let tls = crate::done::endpoint::serves_tls(|f| v.option(f));
    Endpoint::health(Some(host), v.option("--port").as_deref(), DEFAULT_PORT, tls)
}

/// How long a headless node's rank files must be quiet once they have all
/// landed: every local rank saves once, after a barrier, so they land
/// together and nothing follows. The default of `--headless-quiet`, which
/// replaces it ([`Done::headless_quiet`]).
const HEADLESS_QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// `--done auto` for a headless node (`--headless`), which serves nothing
/// (vLLM's `run_headless` starts only engine cores or workers, whose
/// readiness goes to the head, never to a port of this node) and needs no
/// `--port`. When the launch names the head (`--master-addr` for TP/PP
/// across nodes, `--data-parallel-address` for DP) and the API port
/// (`--port`, as the head's own launch says it), the head's `/health`;
/// else this node's expected rank files (layout C) landed and quiet. Never
/// a guessed 8000, which the head need not use (the node would never sign,
/// and the cluster would tune on every boot); never its exit 0.
fn headless_done(v: &VllmLaunch, sizes: &facts::ParallelSizes) -> Result<Done, DoneError> {
    let head = v
        .option("--master-addr")
        .or_else(|| v.option("--data-parallel-address"));
    if let Some(addr) = head.filter(|_| v.option("--port").is_some()) {
        return Ok(Done::HeadHealth(health(&addr, v)));
    }
    match sizes.local_rank_files() {
        Some(names) if !names.is_empty() => Ok(Done::RankFiles(names, HEADLESS_QUIET)),
        _ => Err(DoneError::HeadlessUnknown),
    }
}

/// SGLang's [`super::sglang::RANK_FLAGS`] and vLLM's short aliases of the
/// first three, for a vLLM launch.
pub const RANK_FLAGS: [&str; 7] = [
    "--node-rank",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--dp-rank",
    "-r",
    "-dpn",
    "-dpr",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::Wrapper;

    fn launch(args: &str) -> VllmLaunch {
        let argv: Vec<OsString> = args.split_whitespace().map(OsString::from).collect();
        VllmLaunch::new(&argv, &Wrapper::Direct, Path::new("/nonexistent"), &|_| {
            None
        })
        .unwrap()
    }

    #[test]
    fn nodes() {
        let node = |a: &str| node(&launch(a));
        assert_eq!(node("vllm serve m -tp 2"), Ok(Node { nnodes: 1, rank: 0 }));
        assert_eq!(
            node("vllm serve m -tp 4 --nnodes 2 --node-rank 1 --headless"),
            Ok(Node { nnodes: 2, rank: 1 })
        );
        assert_eq!(
            node("vllm serve m -dp 4 -dpl 2 -dpr 2 --headless"),
            Ok(Node { nnodes: 2, rank: 1 })
        );
        assert_eq!(
            node("vllm serve m -dp 4 -dpl 2"),
            Ok(Node { nnodes: 2, rank: 0 })
        );
        assert!(node("vllm serve m -tp 4 --nnodes 2 --node-rank 2").is_err());
    }

    #[test]
    fn the_shared_file_is_removed_when_in_doubt() {
        let remove = |a: &str| matches!(shared_file_verdict(&launch(a)), Verdict::Remove(_));
        // no config.json (a hub name or a missing directory): treated as MoE
        assert!(remove("vllm serve m -tp 2"));
        assert!(remove("vllm serve m -tp 2 -ep"));
        assert!(!remove("vllm serve m"));
        assert!(!remove("vllm serve m -tp 1 -dp 1"));
        assert!(remove("vllm serve m -tp x"));
        // a dense config.json
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"hidden_size": 64}"#).unwrap();
        let m = dir.path().display().to_string();
        assert!(!remove(&format!("vllm serve {m} -tp 4")));
        assert!(remove(&format!("vllm serve {m} -tp 4 -ep")));
        std::fs::write(dir.path().join("config.json"), r#"{"num_experts": 8}"#).unwrap();
        assert!(remove(&format!("vllm serve {m} -tp 4")));
        assert!(!remove(&format!("vllm serve {m}")));
    }

    fn done(args: &str) -> Result<Done, DoneError> {
        server_done(&launch(args))
    }

    #[test]
    fn done_rules() {
        let health = |host: &str, port: u16| {
            Done::Health(Endpoint {
                host: host.into(),
                port,
                path: "/health".into(),
                tls: false,
            })
        };
        assert_eq!(done("vllm serve m"), Ok(health("127.0.0.1", 8000)));
        assert_eq!(
            done("vllm serve m --host 0.0.0.0 --port=9000"),
            Ok(health("127.0.0.1", 9000))
        );
        assert_eq!(done("vllm serve m --host ::1"), Ok(health("[::1]", 8000)));
        assert!(done("vllm serve m --uds /tmp/s").is_err());
        assert_eq!(
            done("vllm serve m --ssl-certfile c --ssl-keyfile k --port 9"),
            Ok(Done::Health(Endpoint {
                host: "127.0.0.1".into(),
                port: 9,
                path: "/health".into(),
                tls: true,
            }))
        );
        assert_eq!(
            done("vllm serve m --ssl-certfile c --ssl-keyfile k --ssl-cert-reqs 2"),
            Err(DoneError::ClientCertificate)
        );
        assert!(done("vllm serve m --ssl-certfile c --ssl-cert-reqs 1").is_ok());
        let files = |ranks: std::ops::Range<u64>, within: u64| {
            Ok(Done::RankFiles(
                ranks
                    .map(|r| format!("autotune_configs_dp{}_rank{r}.json", r / within))
                    .collect(),
                HEADLESS_QUIET,
            ))
        };
        // the head and its port named: the head's /health
        assert_eq!(
            done("vllm serve m -tp 2 -n 2 -r 1 --master-addr 10.0.0.1 --headless --port 8001"),
            Ok(Done::HeadHealth(Endpoint {
                host: "10.0.0.1".into(),
                port: 8001,
                path: "/health".into(),
                tls: false,
            }))
        );
        // no port: this node's own rank files, never a guessed 8000
        assert_eq!(
            done("vllm serve m -tp 2 -n 2 -r 1 --master-addr 10.0.0.1 --headless"),
            files(1..2, 2)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpl 2 -dpr 2 -dpa 10.0.0.1 --headless"),
            files(2..4, 1)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpl 2 -dpr 2 -tp 2 --headless"),
            files(4..8, 2)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpr 2 -dpa 10.0.0.1 --headless"),
            Err(DoneError::HeadlessUnknown)
        );
        assert!(done("vllm serve m -dp 4 -dpr 2 --headless").is_err());
    }
}
