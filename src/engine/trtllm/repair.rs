//! Before the start: the kept files TensorRT-LLM would fail on, or that
//! would set its ranks apart, removed so that the boot is cold instead.
//!
//! Prune already removes a file whose bytes differ from what was signed
//! (a save torn by a kill) and one no boot signed (a warmup that failed
//! still saves, in `finally`). What is left here is what TensorRT-LLM's
//! own load refuses in a file that is signed (and so trusted by its stamp
//! without being read): bytes that are no JSON object (its `json.load`
//! raises and fails the boot), no `metadata` key (its load raises), and a
//! set of `rank_<N>` sections (layouts F, F+A) or rank files (layout P)
//! that is not the launch's whole world (a rank without its section fails
//! the boot in layout F, and a rank that hits while a peer tunes can
//! desync their collectives). In layout P, a file at the bare path turns
//! tuning off for the whole boot, and goes too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;

use super::layout::{self, FILE};
use crate::engine::trtllm::launch::Layout;

/// The most bytes read of a kept file (PR 14441 saw about 30 MB).
const MAX_BYTES: u64 = 1 << 30;

/// Why the kept files `kept` (relative to `root`) must go before the
/// start of a launch of `world` ranks (when known) under `layout` (when
/// known): each file's path and why, in order.
pub fn verdicts(
    root: &Path,
    kept: &[PathBuf],
    world: Option<u64>,
    layout: Option<Layout>,
) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut ranks: BTreeSet<u64> = BTreeSet::new();
    let mut rank_files = Vec::new();
    for rel in kept {
        let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let rank = layout::rank_file(name);
        if rank.is_none() && name != FILE {
            continue;
        }
        if rank.is_none() && layout == Some(Layout::PerRank) {
            out.push((rel.clone(), BARE_PATH.to_string()));
            continue;
        }
        let keys = match read(&root.join(rel)).and_then(|b| top_keys(&b)) {
            Ok(keys) => keys,
            Err(why) => {
                out.push((rel.clone(), format!("TensorRT-LLM cannot load it ({why})")));
                continue;
            }
        };
        if let Some(r) = rank {
            ranks.insert(u64::from(r));
            rank_files.push(rel.clone());
            continue;
        }
        if let Some(why) = sections_whole(&keys, world) {
            out.push((rel.clone(), why));
        }
    }
    if !rank_files.is_empty() {
        if let Some(why) = whole(&ranks, world, "rank files") {
            out.extend(rank_files.into_iter().map(|f| (f, why.clone())));
        }
    }
    out
}

/// Why the cache file `rel` (relative to `root`) must not be kept for a
/// launch of `world` ranks (when known) under `layout` (when known), the
/// cache files beside it named `siblings` (itself among them): the
/// verdict of [`verdicts`] on one file, so that prune removes it with
/// one line and the sign at done never signs a set the next start would
/// remove (a set not whole for the world never reaches the store nor the
/// fleet).
pub fn refusal(
    root: &Path,
    rel: &Path,
    siblings: &[String],
    world: Option<u64>,
    layout: Option<Layout>,
) -> Option<String> {
    let name = rel.file_name().and_then(|n| n.to_str())?;
    let rank = layout::rank_file(name);
    if rank.is_none() && name != FILE {
        return None;
    }
    if rank.is_none() && layout == Some(Layout::PerRank) {
        return Some(BARE_PATH.to_string());
    }
    let keys = match read(&root.join(rel)).and_then(|b| top_keys(&b)) {
        Ok(keys) => keys,
        Err(why) => return Some(format!("TensorRT-LLM cannot load it ({why})")),
    };
    if rank.is_none() {
        return sections_whole(&keys, world);
    }
    let ranks: BTreeSet<u64> = siblings
        .iter()
        .filter_map(|s| layout::rank_file(s))
        .map(u64::from)
        .collect();
    whole(&ranks, world, "rank files")
}

/// Why a file at the bare path goes in layout P.
const BARE_PATH: &str = "a file at the bare path of TLLM_AUTOTUNER_CACHE_PATH turns tuning off in this release's layout (one file per rank)";

/// Why the top-level keys of the one file are not what every rank of the
/// launch loads: `metadata` and one `rank_<N>` section per rank.
fn sections_whole(keys: &[String], world: Option<u64>) -> Option<String> {
    if !keys.iter().any(|k| k == "metadata") {
        return Some("it has no metadata, and TensorRT-LLM's load fails on it".to_string());
    }
    let ranks: BTreeSet<u64> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("rank_"))
        .filter_map(|n| n.parse().ok())
        .collect();
    whole(&ranks, world, "rank sections")
}

/// Why `ranks` are not 0..world (or, the world unknown, 0..n).
fn whole(ranks: &BTreeSet<u64>, world: Option<u64>, what: &str) -> Option<String> {
    let n = ranks.len() as u64;
    let contiguous = ranks.iter().enumerate().all(|(i, &r)| i as u64 == r);
    let shown = || {
        ranks
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match world {
        _ if n == 0 => Some(format!("it has no {what}")),
        Some(w) if !contiguous || n != w => Some(format!(
            "its {what} are for ranks {} and the launch runs {}",
            shown(),
            crate::events::counted(w as usize, "rank", "ranks")
        )),
        None if !contiguous => Some(format!(
            "its {what} are for ranks {}, not every rank from 0",
            shown()
        )),
        _ => None,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = crate::launch::open_regular(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The keys of a JSON object as Python's `json` reads it (`Infinity` and
/// `NaN` included), or why the bytes are none.
fn top_keys(bytes: &[u8]) -> Result<Vec<String>, String> {
    let parse = |b: &[u8]| {
        serde_json::from_slice::<std::collections::BTreeMap<String, IgnoredAny>>(b)
            .map(|m| m.into_keys().collect::<Vec<String>>())
    };
    match parse(bytes) {
        Ok(keys) => Ok(keys),
        Err(e) => match crate::cache::python_nan_to_zero(bytes) {
            Some(fixed) => parse(&fixed).map_err(|_| format!("not a JSON object: {e}")),
            None => Err(format!("not a JSON object: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(files: &[(&str, &str)], world: Option<u64>, layout: Option<Layout>) -> Vec<String> {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("autotune")).unwrap();
        let mut kept = Vec::new();
        for (name, body) in files {
            let rel = PathBuf::from("autotune").join(name);
            std::fs::write(t.path().join(&rel), body).unwrap();
            kept.push(rel);
        }
        verdicts(t.path(), &kept, world, layout)
            .into_iter()
            .map(|(p, why)| format!("{}: {why}", p.display()))
            .collect()
    }

    const F: Option<Layout> = Some(Layout::File);

    #[test]
    fn a_whole_file_stays() {
        let body = r#"{"metadata": {}, "rank_0": {"k": {"min_time": Infinity}}, "rank_1": {}}"#;
        assert!(run(&[(FILE, body)], Some(2), F).is_empty());
        assert!(run(&[(FILE, body)], None, F).is_empty());
        assert!(run(&[(FILE, body)], None, None).is_empty());
    }

    #[test]
    fn what_the_engine_fails_on_goes() {
        let torn = r#"{"metadata": {}, "rank_0": {"k": {"min_ti"#;
        let v = run(&[(FILE, torn)], Some(1), F);
        assert_eq!(v.len(), 1);
        assert!(v[0].contains("cannot load it (not a JSON object"), "{v:?}");
        let v = run(&[(FILE, r#"{"rank_0": {}}"#)], Some(1), F);
        assert!(v[0].contains("no metadata"), "{v:?}");
        let v = run(&[(FILE, r#"{"metadata": {}, "rank_0": {}}"#)], Some(2), F);
        assert!(
            v[0].ends_with("its rank sections are for ranks 0 and the launch runs 2 ranks"),
            "{v:?}"
        );
        let v = run(&[(FILE, r#"{"metadata": {}, "rank_1": {}}"#)], None, F);
        assert!(v[0].ends_with("not every rank from 0"), "{v:?}");
        let v = run(&[(FILE, r#"{"metadata": {}}"#)], None, F);
        assert!(v[0].ends_with("it has no rank sections"), "{v:?}");
    }

    #[test]
    fn one_file_refused_as_the_next_start_would_remove_it() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("autotune")).unwrap();
        let put = |name: &str, body: &str| {
            let rel = PathBuf::from("autotune").join(name);
            std::fs::write(t.path().join(&rel), body).unwrap();
            rel
        };
        let one = put(FILE, r#"{"metadata": {}, "rank_0": {}}"#);
        let said = |rel: &Path, siblings: &[&str], world, layout| {
            let siblings: Vec<String> = siblings.iter().map(|s| s.to_string()).collect();
            refusal(t.path(), rel, &siblings, world, layout)
        };
        assert_eq!(said(&one, &[FILE], Some(1), F), None);
        assert_eq!(
            said(&one, &[FILE], Some(2), F).as_deref(),
            Some("its rank sections are for ranks 0 and the launch runs 2 ranks")
        );
        let p = Some(Layout::PerRank);
        assert!(said(&one, &[FILE], Some(1), p)
            .unwrap()
            .contains("bare path"));
        let r0 = put("autotuner_cache.rank0.json", r#"{"metadata": {}}"#);
        let names = ["autotuner_cache.rank0.json", "autotuner_cache.rank1.json"];
        assert_eq!(said(&r0, &names, Some(2), p), None);
        assert_eq!(
            said(&r0, &names[..1], Some(2), p).as_deref(),
            Some("its rank files are for ranks 0 and the launch runs 2 ranks")
        );
        let torn = put("autotuner_cache.rank1.json", "{");
        assert!(said(&torn, &names, Some(2), p)
            .unwrap()
            .contains("cannot load it"));
        assert_eq!(
            said(Path::new("autotune/other.json"), &[], Some(2), p),
            None
        );
    }

    #[test]
    fn rank_files_are_whole_for_the_world_or_all_go() {
        let p = Some(Layout::PerRank);
        let obj = r#"{"metadata": {}}"#;
        let both = [
            ("autotuner_cache.rank0.json", obj),
            ("autotuner_cache.rank1.json", obj),
        ];
        assert!(run(&both, Some(2), p).is_empty());
        let v = run(&both, Some(4), p);
        assert_eq!(v.len(), 2, "{v:?}");
        let v = run(&[("autotuner_cache.rank0.json", "{")], Some(1), p);
        assert!(v[0].contains("cannot load it"), "{v:?}");
        // the bare path in layout P
        let v = run(&[(FILE, obj), both[0]], Some(1), p);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("turns tuning off"), "{v:?}");
    }
}
