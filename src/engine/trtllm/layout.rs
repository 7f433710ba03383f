//! TensorRT-LLM's cache tree, as keepwrap lays it out: one folder,
//! `autotune/`, below keepwrap's root, and in it the file the engine is
//! told to use (`TLLM_AUTOTUNER_CACHE_PATH=<root>/autotune/autotuner_cache.json`):
//!
//! - layouts F and F+A: `autotuner_cache.json`, every rank's section in it;
//! - layout P: `autotuner_cache.rank<N>.json`, one per rank (nothing at the
//!   bare path, which would turn tuning off);
//! - F+A's lock file and its temp files (names not read in source): any
//!   `autotuner_cache.json.*` and `.autotuner_cache*`, never signed nor
//!   kept;
//! - keepwrap's `<stem>.launch` sidecars and temp files.

use crate::cache::{fsx, Layout, RankId, Role, Shape, CACHE_EXT, SIDECAR_EXT};

/// The folder below the root.
pub const DIR: &str = "autotune";
/// The stem of the file the variable names.
pub const STEM: &str = "autotuner_cache";
/// The file the variable names, in [`DIR`].
pub const FILE: &str = "autotuner_cache.json";

/// keepwrap's tree for TensorRT-LLM.
pub struct Tree;

impl Layout for Tree {
    fn name(&self) -> &'static str {
        "trtllm"
    }
    fn key_depth(&self) -> usize {
        1
    }
    fn root_hint(&self) -> &'static str {
        "is --cache-dir keepwrap's own directory for TensorRT-LLM (it holds autotune/autotuner_cache*.json)?"
    }
    fn role(&self, name: &[u8]) -> Role {
        role(name)
    }
    fn is_layout_dir(&self, depth: usize, name: &[u8]) -> bool {
        depth == 0 && name == DIR.as_bytes()
    }
    fn rank_of(&self, name: &str) -> Option<RankId> {
        rank_file(name).map(|r| RankId {
            tp: r,
            pp: 0,
            dp: 0,
        })
    }
    /// F+A's lock file is left after every save, its temp file by a kill
    /// mid-save; neither is ever kept.
    fn tmp_reason(&self) -> &'static str {
        "TensorRT-LLM's lock or temp file, never kept"
    }
    fn rank_name_form(&self) -> &'static str {
        "autotuner_cache.rank<N>.json"
    }
    /// TensorRT-LLM's `metadata`: `device_name` (the GPU model CUDA
    /// reports), and the build, `lib_version` with `device_capability`
    /// (its `creation_timestamp` differs between the rank files of one
    /// set). TensorRT-LLM never checks it; keepwrap's fingerprint holds the
    /// GPU model and the version already, and the fleet matches a set to a
    /// machine by it as for the other engines.
    fn stamp_in(&self, path: &str, bytes: &[u8]) -> Option<Result<(String, String), String>> {
        Some(stamp(path, bytes))
    }
}

/// See [`Tree::stamp_in`].
fn stamp(path: &str, bytes: &[u8]) -> Result<(String, String), String> {
    use serde_json::Value;
    let parse = |b: &[u8]| serde_json::from_slice::<Value>(b).ok();
    let v = parse(bytes)
        .or_else(|| crate::cache::python_nan_to_zero(bytes).and_then(|b| parse(&b)))
        .filter(Value::is_object)
        .ok_or_else(|| format!("'{path}' is not a JSON object"))?;
    let meta = v
        .get("metadata")
        .filter(|m| m.is_object())
        .ok_or_else(|| format!("'{path}' has no metadata"))?;
    let gpu = meta
        .get("device_name")
        .and_then(Value::as_str)
        .filter(|g| !g.trim().is_empty())
        .ok_or_else(|| format!("'{path}' names no GPU model in its metadata (device_name)"))?;
    let build = serde_json::json!([meta.get("lib_version"), meta.get("device_capability")]);
    Ok((gpu.to_string(), format!("{gpu}|{build}")))
}

/// keepwrap's tree for TensorRT-LLM, as a value.
pub const TREE: Shape = Shape::of(&Tree);

/// The rank of a layout P file name, `autotuner_cache.rank<N>.json`
/// (`N` as Python's `str(int)` writes it).
pub fn rank_file(name: &str) -> Option<u32> {
    let n = name
        .strip_prefix(STEM)?
        .strip_prefix(".rank")?
        .strip_suffix(".json")?;
    if n.is_empty() || (n.len() > 1 && n.starts_with('0')) || !n.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    n.parse().ok()
}

/// Whether `name` is a cache file: the one file, or a rank file.
pub fn is_cache_name(name: &str) -> bool {
    name == FILE || rank_file(name).is_some()
}

/// What a file name in `autotune/` makes it.
pub fn role(name: &[u8]) -> Role {
    let Ok(s) = std::str::from_utf8(name) else {
        return Role::Other;
    };
    let (cache, sidecar) = (
        std::str::from_utf8(CACHE_EXT).unwrap_or(".json"),
        std::str::from_utf8(SIDECAR_EXT).unwrap_or(".launch"),
    );
    if is_cache_name(s) {
        return Role::Cache;
    }
    if let Some(stem) = s.strip_suffix(sidecar) {
        if is_cache_name(&format!("{stem}{cache}")) {
            return Role::Sidecar;
        }
    }
    if s.len() > FILE.len() + 1 && s.starts_with(FILE) && s.as_bytes()[FILE.len()] == b'.' {
        return Role::AutotunerTmp;
    }
    if s.len() > STEM.len() + 1 && s.starts_with('.') && s[1..].starts_with(STEM) {
        return Role::AutotunerTmp;
    }
    if fsx::is_keepwrap_tmp(name) {
        return Role::KeepwrapTmp;
    }
    Role::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_tree() {
        assert!(TREE.is_layout_dir(0, b"autotune"));
        assert!(!TREE.is_layout_dir(1, b"autotune"));
        assert!(!TREE.is_layout_dir(0, b"other"));
        for n in [
            "autotuner_cache.json",
            "autotuner_cache.rank0.json",
            "autotuner_cache.rank15.json",
        ] {
            assert_eq!(role(n.as_bytes()), Role::Cache, "{n}");
            let sc = n.replace(".json", ".launch");
            assert_eq!(role(sc.as_bytes()), Role::Sidecar, "{sc}");
        }
        for n in [
            "autotuner_cache.json.lock",
            "autotuner_cache.json.tmp.1234",
            ".autotuner_cache.json.x1y2.tmp",
        ] {
            assert_eq!(role(n.as_bytes()), Role::AutotunerTmp, "{n}");
        }
        assert_eq!(role(b".keepwrap-x.tmp"), Role::KeepwrapTmp);
        for n in [
            "autotuner_cache.rank01.json",
            "autotuner_cache.rank.json",
            "autotuner_cache.rankx.json",
            "other.json",
            "autotuner_cache.json.",
            "autotuner_cache.launch.bak",
            "rank_0.json",
        ] {
            assert_eq!(role(n.as_bytes()), Role::Other, "{n}");
        }
        assert_eq!(
            TREE.rank_of("autotuner_cache.rank3.json").map(|r| r.tp),
            Some(3)
        );
        assert_eq!(TREE.rank_of(FILE), None);
        let f = br#"{"metadata": {"lib_version": "1.2.1", "creation_timestamp": 1.5, "device_name": "NVIDIA H200", "device_capability": [9, 0]}, "rank_0": {"k": {"min_time": Infinity}}}"#;
        let (gpu, id) = TREE.stamp_in(FILE, f).unwrap().unwrap();
        assert_eq!(gpu, "NVIDIA H200");
        let later = String::from_utf8_lossy(f).replace("1.5", "2.5");
        assert_eq!(
            TREE.stamp_in(FILE, later.as_bytes()).unwrap().unwrap().1,
            id
        );
        for bad in [
            &br#"{"rank_0": {}}"#[..],
            br#"{"metadata": {"device_name": ""}}"#,
            b"[1]",
        ] {
            assert!(TREE.stamp_in(FILE, bad).unwrap().is_err());
        }
        assert_ne!(TREE, crate::engine::SGLANG);
    }
}
