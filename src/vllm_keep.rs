//! The cache side of a vLLM launch, where it differs from SGLang's: where
//! the cache is (and so the shape of the tree), when tuning is done, and the
//! shared file of vLLM 0.27.1-0.31.x, which hangs every warm boot of a MoE
//! model under more than one rank when it is kept.
//!
//! Everything else is the same machinery: prune keeps a set signed for this
//! launch whole or removes it whole (layout C's per-rank files are kept as
//! they are: vLLM's gate passes disjoint expert-parallel files, so they need
//! no union), the store keeps other launches' sets, sign signs what is there
//! at done, and a warm boot that writes nothing is a reuse.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::cache::layout_vllm::{set_shape, Shape};
use crate::fingerprint::vllm::VllmLaunch;
use crate::fingerprint::Launch;
use crate::launch::vllm::{self as facts, AutotuneRoot, FileKind, Moe};
use crate::ready::{Done, Endpoint};

/// vLLM's default API port.
pub const DEFAULT_PORT: u16 = 8000;

/// The root keepwrap guards for a vLLM launch, and the shape of its tree
/// (set for the process): `--cache-dir` if given, else vLLM's own
/// (`$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`, else
/// `$VLLM_CACHE_ROOT/flashinfer_autotune_cache`, ...). The folders sit right
/// in the root when `VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR` is set, else below
/// `<flashinfer version>/<arch>/`. Err: why there is none.
pub fn root(cache_dir: Option<&Path>, env: &[(OsString, OsString)]) -> Result<PathBuf, String> {
    let computed = facts::autotune_root(env);
    let flat = matches!(computed, Ok(AutotuneRoot::Override(_)));
    set_shape(if flat {
        Shape::VllmFlat
    } else {
        Shape::VllmTree
    });
    if let Some(dir) = cache_dir {
        return Ok(dir.to_path_buf());
    }
    match computed {
        Ok(r) => Ok(r.path().to_path_buf()),
        Err(e) => Err(format!("cannot tell vLLM's cache directory: {e}")),
    }
}

/// The root for a subcommand (`status`, `explain`, `evict`): vLLM's when
/// the profile is `vllm`, else SGLang's.
pub fn root_for(
    profile: crate::fingerprint::ProfileName,
    cache_dir: Option<&Path>,
    env: &[(OsString, OsString)],
) -> Option<PathBuf> {
    if profile == crate::fingerprint::ProfileName::Vllm {
        return root(cache_dir, env).ok();
    }
    crate::keep::root_from(cache_dir, env)
}

/// `--done auto` for a vLLM server launch: the first 200 from `/health` on
/// its `--host`/`--port` (8000; loopback for a wildcard bind). A server on
/// a Unix socket (`--uds`) cannot be probed: Err says what to give.
pub fn auto_done(v: &VllmLaunch) -> Result<Done, String> {
    if v.option("--uds").is_some() {
        return Err(
            "a vLLM server on a Unix socket (--uds) cannot be probed: give --done health=URL or --done quiet=DURATION".into(),
        );
    }
    let host = match v.option("--host").as_deref().unwrap_or("127.0.0.1") {
        "0.0.0.0" | "" => "127.0.0.1".to_string(),
        "::" | "[::]" => "[::1]".to_string(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    };
    let port = v
        .option("--port")
        .and_then(|p| p.parse().ok())
        .unwrap_or(DEFAULT_PORT);
    Ok(Done::Health(Endpoint {
        host,
        port,
        path: "/health".into(),
    }))
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

/// Before the engine starts: the shared `autotune_configs.json` (and
/// `autotune_config.json`) of vLLM 0.27.1-0.31.x that prune kept (or the
/// store restored) for this launch is removed when the launch runs a MoE
/// model under more than one rank (or might: when unsure, remove), since
/// holding only rank 0's MoE tactics it hangs every warm boot; kept for a
/// dense model or one rank. One line per file says which and why.
pub fn before_start(root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
    let Some(v) = launch.vllm() else {
        return;
    };
    let shared = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(facts::file_kind)
            .is_some_and(|k| matches!(k, FileKind::Shared | FileKind::LayoutB))
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
                tracing::info!(
                    "kept {}: vLLM 0.27.1-0.31.x's one shared cache file hangs only a MoE model under more than one rank, and this is {why}",
                    p.display()
                );
                true
            }
            Verdict::Remove(why) => {
                let sidecar = p.with_extension("launch");
                let gone = [p, &sidecar].iter().all(|f| {
                    match std::fs::remove_file(root.join(f)) {
                        Ok(()) => true,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                        Err(e) => {
                            tracing::warn!("cannot remove {}: {e}", f.display());
                            false
                        }
                    }
                });
                if gone {
                    tracing::info!(
                        "removed {}: vLLM 0.27.1-0.31.x keeps one cache file for all ranks with rank 0's MoE tactics only, and a kept one hangs every warm boot of a MoE model under more than one rank until the 30-minute collective timeout (vLLM issues 57423, 54618; fixed in vLLM 0.32.0 by per-rank files): the engine re-tunes ({why})",
                        p.display()
                    );
                }
                !gone
            }
        }
    });
}

/// A one-rank launch (world 1, one stage, one node): vLLM 0.33.0 and later
/// keep its tactics in FlashInfer's managed store, not in a rank file. That
/// store is left alone, and one line says so: with one rank no tuning group
/// can desynchronise, FlashInfer keys each entry by its exact shape and the
/// environment (so another launch finds its own shapes or tunes them), and
/// a bad entry is a miss, never an error. Keeping it per launch would move a
/// directory FlashInfer shares between launches by design.
pub fn note_managed_store(launch: &Launch, env: &[(OsString, OsString)]) {
    let Some(v) = launch.vllm() else {
        return;
    };
    let s = v.sizes();
    if s.world() != Some(1) || s.pp != Some(1) || s.nnodes != Some(1) {
        return;
    }
    let store = facts::managed_store_root(env)
        .map(|p| p.join("v2").display().to_string())
        .unwrap_or_else(|e| format!("unknown: {e}"));
    tracing::info!(
        "a one-rank launch: vLLM 0.33.0 and later keep its tactics in FlashInfer's managed store ({store}), which keepwrap leaves alone: one rank cannot desynchronise, entries are keyed by their shape and the environment, and a bad entry is a miss"
    );
}
