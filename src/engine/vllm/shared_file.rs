//! vLLM 0.27.1-0.31.x's shared file (`autotune_configs.json`, layout B's
//! `autotune_config.json`): kept, it holds only rank 0's MoE tactics and
//! hangs every warm boot of a MoE model under more than one rank. Refused
//! at the prune, removed before the start, shown as removed by `status`;
//! kept for a dense model or one rank.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::engine::fingerprint::Launch;
use crate::engine::vllm::launch::fingerprint::VllmLaunch;
use crate::engine::vllm::launch::{self as facts, FileKind, Moe};

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
pub(super) fn refuse_shared(launch: &Launch) -> Option<impl Fn(&str) -> Option<String> + 'static> {
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
pub(super) fn plan_shared_files(report: &mut serde_json::Value, launch: &Launch) {
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
pub(super) fn before_start(root: &Path, launch: &Launch, kept: &mut Vec<PathBuf>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vllm::tests::launch;

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
}
