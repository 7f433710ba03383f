//! What a set was tuned on, and what this machine is: a set is for the
//! silicon and the FlashInfer build it was tuned on.
//!
//! FlashInfer stamps every cache file with `_metadata` (its version, CUDA's
//! and cuBLAS's, and `gpu`, the product name CUDA reports) and rejects a
//! whole file whose stamp differs from the running one in any field; the
//! path carries the FlashInfer version and the architecture (`sm90`).
//!
//! Without CUDA, keepwrap sees the GPUs the driver shows in
//! `/proc/driver/nvidia/gpus/*/information` (`Model: NVIDIA H100 80GB
//! HBM3`). That file names the product, not the compute capability or the
//! SM count, and the product name is what FlashInfer compares: so the model
//! is compared by name, after the spelling differences of one model are
//! taken out (case, runs of spaces, a leading `NVIDIA `). The architecture
//! is compared by the path (a file lands only under its own `sm<arch>`), and
//! the FlashInfer version cannot be seen before the engine runs: a set of
//! another version is found at publish (see `Fleet::publish`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

/// The build a cache file was tuned under: its whole `_metadata` stamp and
/// the architecture its path names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Build {
    /// The GPU model, as [`model`] spells it.
    pub gpu: String,
    /// The stamp (canonical JSON) and the architecture.
    pub id: String,
}

/// A GPU model name as compared: lowercase, single spaces, no leading
/// `nvidia ` (`NVIDIA  H100 80GB HBM3` and `nvidia h100 80gb hbm3` are one
/// model).
pub fn model(name: &str) -> String {
    let words = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = words.to_lowercase();
    lower
        .strip_prefix("nvidia ")
        .map_or(lower.clone(), str::to_string)
}

/// The build of the cache file at `path` (relative to the cache root) with
/// these bytes, or why it has none: a file whose `_metadata` names no GPU
/// model cannot be matched to a machine.
pub fn build_of(path: &str, bytes: &[u8]) -> Result<Build, String> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|_| format!("'{path}' is not a JSON object"))?;
    let meta = v
        .get("_metadata")
        .filter(|m| m.is_object())
        .ok_or_else(|| format!("'{path}' has no _metadata"))?;
    let gpu = meta
        .get("gpu")
        .and_then(Value::as_str)
        .filter(|g| !g.trim().is_empty() && g.trim() != "*")
        .ok_or_else(|| format!("'{path}' names no GPU model in its _metadata"))?;
    let version = meta.get("flashinfer_version").and_then(Value::as_str);
    let mut parts = path.split('/');
    let arch = match (parts.next(), parts.next()) {
        (Some(v), Some(arch)) if Some(v) == version => arch,
        _ => "",
    };
    Ok(Build {
        gpu: model(gpu),
        id: format!("{}|{arch}", serde_json::to_string(meta).unwrap_or_default()),
    })
}

/// The build a stamp file (`Layout::stamp_of`: the file that says what
/// the cache files beside it were tuned under) names: a JSON object whose
/// `gpu` is the GPU model, the whole object its build.
pub fn build_of_stamp(path: &str, bytes: &[u8]) -> Result<Build, String> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|_| format!("'{path}' is not a JSON object"))?;
    let gpu = v
        .as_object()
        .and_then(|o| o.get("gpu"))
        .and_then(Value::as_str)
        .filter(|g| !g.trim().is_empty() && g.trim() != "*" && g.trim() != "unknown")
        .ok_or_else(|| format!("'{path}' names no GPU model"))?;
    Ok(Build {
        gpu: model(gpu),
        id: format!("{}|", serde_json::to_string(&v).unwrap_or_default()),
    })
}

/// The stamp files of a set (`Layout::stamp_of`), each read and checked
/// once however many files it stamps: its build and text, or why not.
pub struct Stamps<'a> {
    read: &'a mut dyn FnMut(&str) -> Option<Vec<u8>>,
    /// By path: None when it cannot be read.
    seen: BTreeMap<String, Option<Checked>>,
}

/// A stamp read: its build and text, or why it is not a good one.
type Checked = Result<(Build, String), String>;

impl<'a> Stamps<'a> {
    /// The stamps `read` gives by their path.
    pub fn new(read: &'a mut dyn FnMut(&str) -> Option<Vec<u8>>) -> Stamps<'a> {
        Stamps {
            read,
            seen: BTreeMap::new(),
        }
    }

    /// The text of each stamp read and found good, by its path.
    pub fn texts(self) -> BTreeMap<String, String> {
        self.seen
            .into_iter()
            .filter_map(|(at, got)| Some((at, got?.ok()?.1)))
            .collect()
    }
}

/// The build of the cache file at `path` in a tree of `shape`: its own
/// stamp in the engine's form ([`crate::cache::Shape::stamp_in`]), else its
/// `_metadata`, else, for a layout whose files carry none, its stamp
/// file's, which `stamps` gives (checked as the engine writes it).
pub fn build_in(
    shape: crate::cache::Shape,
    path: &str,
    bytes: &[u8],
    stamps: &mut Stamps<'_>,
) -> Result<Build, String> {
    if let Some(stamp) = shape.stamp_in(path, bytes) {
        return stamp.map(|(gpu, id)| Build {
            gpu: model(&gpu),
            id,
        });
    }
    let Some(at) = shape.stamp_of(path) else {
        return build_of(path, bytes);
    };
    let Stamps { read, seen } = stamps;
    let got = seen.entry(at.clone()).or_insert_with_key(|at| {
        let bytes = read(at)?;
        Some((|| {
            shape.check_stamp(at, &bytes)?;
            let text = String::from_utf8(bytes).map_err(|_| format!("'{at}' is not UTF-8"))?;
            let build = build_of_stamp(at, text.as_bytes())?;
            Ok((build, text))
        })())
    });
    match got {
        None => Err(format!(
            "'{at}', which says what '{path}' was tuned under, cannot be read"
        )),
        Some(Ok((build, _))) => Ok(build.clone()),
        Some(Err(why)) => Err(why.clone()),
    }
}

/// The one GPU model this machine shows in `dir` (the driver's
/// `/proc/driver/nvidia/gpus`), or why none can be compared: no such
/// directory (no NVIDIA driver, or a container that hides it), no
/// `Model:` line, or GPUs of several models.
pub fn machine_model(dir: &Path) -> Result<String, String> {
    let models: BTreeSet<String> = crate::launch::gpu::models_in(dir)?
        .iter()
        .map(|m| model(m))
        .collect();
    let mut it = models.iter();
    match (it.next(), it.next()) {
        (Some(m), None) => Ok(m.clone()),
        _ => Err(format!(
            "{} shows GPUs of {} models",
            dir.display(),
            models.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_model_two_spellings() {
        assert_eq!(model("NVIDIA  H100 80GB HBM3\t"), "h100 80gb hbm3");
        assert_eq!(
            model("nvidia h100 80gb hbm3"),
            model("NVIDIA H100 80GB HBM3")
        );
        assert_ne!(model("NVIDIA H200"), model("NVIDIA H100 80GB HBM3"));
    }

    #[test]
    fn a_file_builds_from_its_stamp_and_its_path() {
        let f = br#"{"_metadata": {"flashinfer_version": "0.7.2", "gpu": "NVIDIA H200"}, "k": 1}"#;
        let b = build_of("0.7.2/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json", f).unwrap();
        assert_eq!(b.gpu, "h200");
        assert!(b.id.ends_with("|sm90"), "{}", b.id);
        let other = build_of("0.7.2/sm100/0123456789abcdef/rank_tp0_pp0_dp0.json", f).unwrap();
        assert_ne!(b, other);
        assert!(build_of("p", br#"{"k": 1}"#).is_err());
        assert!(build_of("p", br#"{"_metadata": {"gpu": "*"}}"#).is_err());
        assert!(build_of("p", b"[1]").is_err());
    }

    #[test]
    fn the_machine_shows_one_model_or_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(machine_model(&d.path().join("none")).is_err());
        for (bus, m) in [
            ("0000:18:00.0", "NVIDIA H100 80GB HBM3"),
            ("0000:2a:00.0", "NVIDIA H100 80GB HBM3"),
        ] {
            std::fs::create_dir(d.path().join(bus)).unwrap();
            std::fs::write(
                d.path().join(bus).join("information"),
                format!("Model: \t\t {m}\nIRQ: 1\n"),
            )
            .unwrap();
        }
        assert_eq!(machine_model(d.path()).unwrap(), "h100 80gb hbm3");
        std::fs::create_dir(d.path().join("x")).unwrap();
        std::fs::write(
            d.path().join("x").join("information"),
            "Model: NVIDIA H200\n",
        )
        .unwrap();
        assert!(machine_model(d.path()).unwrap_err().contains("2 models"));
    }
}
