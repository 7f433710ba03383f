//! Events of the vLLM profile: its cache root, the one shared cache file of
//! vLLM 0.27.1-0.31.x, FlashInfer's managed store, and a headless node's
//! own rank files taken back from the share.

use std::fmt::Display;
use std::path::Path;

use super::Shown;

const TARGET: &str = "keepwrap::keeper";
const SHARE: &str = "keepwrap::share";

/// vLLM's cache root cannot be found.
pub fn no_vllm_cache_root(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "no_vllm_cache_root",
        error = %error,
        "no cache root: {error}; the launch goes on without keeping the cache"
    );
}

/// The shared cache file is kept: the launch is not a MoE model under more
/// than one rank (`why`). At debug level: the file's verdict is prune's
/// `kept` line; this says why that is safe.
pub fn kept_shared_file(path: &Path, why: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "kept_shared_file",
        path = %Shown(path),
        reason = %why,
        "kept {}: vLLM 0.27.1-0.31.x's one shared cache file hangs only a MoE model under more than one rank, and this is {why}",
        Shown(path)
    );
}

/// Why the shared cache file is removed for this launch (`why`: what makes
/// it a MoE launch of more than one rank): prune's reason for such a file
/// signed for it, and the text of [`removed_shared_file`].
pub fn shared_file_hangs(why: impl Display) -> String {
    format!("vLLM 0.27.1-0.31.x keeps one cache file for all ranks with rank 0's MoE tactics only, and a kept one hangs every warm boot of a MoE model under more than one rank until the 30-minute collective timeout (vLLM issues 57423, 54618; fixed in vLLM 0.32.0 by per-rank files): the engine re-tunes ({why})")
}

/// The shared cache file the store restored for this launch is removed:
/// kept, it hangs every warm boot. (One prune kept is refused there, with
/// the same reason, in prune's `removed` line.)
pub fn removed_shared_file(path: &Path, why: impl Display) {
    tracing::info!(
        target: TARGET,
        event = "removed_shared_file",
        path = %Shown(path),
        reason = %why,
        "removed {}: {}",
        Shown(path),
        shared_file_hangs(&why)
    );
}

pub fn cannot_remove_shared_file(path: &Path, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_remove_shared_file",
        path = %Shown(path),
        error = %error,
        "cannot remove {}: {error}",
        Shown(path)
    );
}

/// A one-rank launch of vLLM 0.33.0 or later: its tactics live in
/// FlashInfer's managed store, left alone.
pub fn managed_store(store: &str) {
    tracing::info!(
        target: TARGET,
        event = "managed_store",
        store,
        "a one-rank launch: vLLM 0.33.0 and later keep its tactics in FlashInfer's managed store ({store}), which keepwrap leaves alone: one rank cannot desynchronise, entries are keyed by their shape and the environment, and a bad entry is a miss"
    );
}

pub fn share_cannot_write_own(error: impl Display) {
    tracing::warn!(
        target: SHARE,
        event = "share_cannot_write_own",
        error = %error,
        "share: cannot write this node's rank files: {error}; single-node behaviour"
    );
}

/// This node's own published rank files were written back and signed.
pub fn share_restored_own(files: usize, nodes: u32) {
    let files_text = super::counted(files, "rank file", "rank files");
    tracing::info!(
        target: SHARE,
        event = "share_restored_own",
        files,
        nodes,
        "share: restored this node's {files_text} from the share, published with every other node's for this launch ({nodes} nodes), and signed them"
    );
}

/// A Ray launch (`--distributed-executor-backend ray`, `-dpb ray`): its
/// workers write their rank files from Ray's processes, on the nodes Ray
/// picks, with each node's own Ray environment; keepwrap cannot vouch for
/// them and leaves vLLM's cache as vLLM leaves it.
pub fn ray_launch(arg: &str) {
    tracing::info!(
        target: TARGET,
        event = "ray_launch",
        arg,
        "a Ray launch ({arg}): vLLM's workers run as Ray actors on whichever nodes Ray places them, each writing its rank file with its own node's Ray environment (which wins over this launch's), so keepwrap can tell neither which rank files are written here nor under which settings: it leaves vLLM's cache as vLLM leaves it (nothing kept, signed or removed) and only supervises; to keep the cache run the nodes with --nnodes/--node-rank instead"
    );
}
