//! The GPU models this machine shows without CUDA: the `Model:` line of
//! each `<dir>/<bus id>/information` the NVIDIA driver writes under
//! `/proc/driver/nvidia/gpus`. TensorRT-LLM loads a cache file tuned on
//! another GPU without a word, so its launch's fingerprint carries them;
//! the fleet matches a set to a machine by them.

use std::collections::BTreeSet;
use std::path::Path;

/// What the fingerprint records when no model can be read.
pub const NO_GPU: &str = "no GPU model seen";

/// The models the driver shows in `dir`, each once, spelled as the driver
/// does with runs of blanks made one space, or why none is seen: no such
/// directory (no NVIDIA driver, a container that hides it) or no `Model:`
/// line.
pub fn models_in(dir: &Path) -> Result<BTreeSet<String>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut seen = BTreeSet::new();
    for e in entries.flatten().take(64) {
        let Ok(f) = crate::launch::open_regular(&e.path().join("information")) else {
            continue;
        };
        // a /proc file says size 0: read to its end, at most 64 KiB
        let mut text = Vec::new();
        if std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 16), &mut text).is_err() {
            continue;
        }
        for line in String::from_utf8_lossy(&text).lines() {
            if let Some(m) = line.strip_prefix("Model:") {
                let m = m.split_whitespace().collect::<Vec<_>>().join(" ");
                if !m.is_empty() {
                    seen.insert(m);
                }
            }
        }
    }
    if seen.is_empty() {
        return Err(format!(
            "{}/*/information names no GPU model",
            dir.display()
        ));
    }
    Ok(seen)
}

/// [`models_in`], sorted and joined by `, `.
pub fn models_shown(dir: &Path) -> Result<String, String> {
    Ok(models_in(dir)?.into_iter().collect::<Vec<_>>().join(", "))
}

/// [`models_shown`] of the driver's directory (a test's, in the
/// `failpoints` build).
pub fn machine_gpus() -> Result<String, String> {
    models_shown(&crate::failpoint::nvidia_gpus_dir())
}
