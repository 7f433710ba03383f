//! The status report as JSON: one row per cache file and per stored set,
//! totals, the statistics, and with a launch what it would do.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::cache::{self, FileInfo, FileState, Shape};
use crate::clock::now_secs;
use crate::digest::Fingerprint;
use crate::root::stats::Stats;
use crate::store::{Entry, Store};
use crate::STATE_DIR;

/// What a launch would do with the cache files and the stored sets.
#[derive(Default)]
struct Plan {
    keep: usize,
    restore: usize,
    store: usize,
    remove: usize,
}

/// Files and bytes by state.
type Totals = HashMap<&'static str, (u64, u64)>;

/// The whole report as JSON (what `--json` prints; the text form renders it).
pub fn report(root: &Path, shape: Shape, fp: Option<&Fingerprint>, verify: bool) -> Value {
    let now = now_secs();
    let files = cache::survey(root, shape, verify);
    let store = Store::open_existing(root, shape);
    let mut used: HashMap<String, u64> = HashMap::new();
    if let Some(s) = &store {
        for r in s.records() {
            used.insert(r.fingerprint.clone(), r.last_used);
        }
    }
    let entries = store.as_ref().map(Store::entries).unwrap_or_default();
    let mut plan = Plan::default();
    let mut totals = Totals::new();
    let rows = file_rows(&files, fp, &used, &mut plan, &mut totals);
    let (store_rows, stored) = store_rows(store.as_ref(), &entries, fp, &used, verify, &mut plan);
    let stats = store
        .as_ref()
        .map(|s| Stats::load(s.state_fd()))
        .unwrap_or_default();
    let mut totals_v = serde_json::Map::new();
    for (k, (n, b)) in &totals {
        totals_v.insert((*k).to_string(), json!({"files": n, "size": b}));
    }
    totals_v.insert("stored".into(), stored);
    json!({
        "root": root.display().to_string(),
        "root_exists": root.exists(),
        "now": now,
        "fingerprint": fp.map(Fingerprint::as_str),
        "files": rows,
        "store": store_rows,
        "totals": totals_v,
        "stats": stats_json(&stats),
        "plan": fp.map(|_| json!({"keep": plan.keep, "restore": plan.restore, "store": plan.store, "remove": plan.remove})),
    })
}

/// One row per cache file: its state (for launch `fp`, if given), and what
/// the launch would do with it.
fn file_rows(
    files: &[FileInfo],
    fp: Option<&Fingerprint>,
    used: &HashMap<String, u64>,
    plan: &mut Plan,
    totals: &mut Totals,
) -> Vec<Value> {
    let mut rows = Vec::with_capacity(files.len());
    for f in files {
        let (state, sfp, signed_at, why) = match &f.state {
            FileState::Signed {
                fingerprint,
                signed_at,
            } => {
                let st = match fp {
                    Some(me) if me == fingerprint => "signed for this launch",
                    Some(_) => "signed for another launch",
                    None => "signed",
                };
                (st, Some(fingerprint.as_str()), Some(*signed_at), None)
            }
            FileState::Unsigned => ("unsigned", None, None, None),
            FileState::Corrupt(why) => ("corrupt", None, None, Some(why.as_str())),
        };
        let t = totals.entry(state).or_default();
        t.0 += 1;
        t.1 += f.size;
        let action = fp.map(|_| match state {
            "signed for this launch" => {
                plan.keep += 1;
                "keep"
            }
            "signed for another launch" => {
                plan.store += 1;
                "store"
            }
            _ => {
                plan.remove += 1;
                "remove"
            }
        });
        rows.push(json!({
            "path": f.path,
            "state": state,
            "fingerprint": sfp,
            "why": why,
            "size": f.size,
            "signed_at": signed_at,
            "last_used": sfp.and_then(|s| used.get(s).copied()),
            "action": action,
        }));
    }
    rows
}

/// One row per stored set (hashed whole with `verify`, as a restore
/// would), and the totals of the store.
fn store_rows(
    store: Option<&Store>,
    entries: &[Entry],
    fp: Option<&Fingerprint>,
    used: &HashMap<String, u64>,
    verify: bool,
    plan: &mut Plan,
) -> (Vec<Value>, Value) {
    let mut stored_files = 0usize;
    let mut stored_bytes = 0u64;
    let mut rows = Vec::with_capacity(entries.len());
    let mut stored_corrupt = 0usize;
    for e in entries {
        let m = &e.manifest;
        let bad = match (store, verify) {
            (Some(s), true) => s.verify_entry(&m.set.fingerprint).err(),
            _ => None,
        };
        stored_corrupt += usize::from(bad.is_some());
        stored_files += m.set.members.len();
        stored_bytes += e.bytes;
        let last_used = used.get(&m.set.fingerprint).copied().unwrap_or(m.stored_at);
        let action = fp.map(|me| {
            if *me == m.set.fingerprint && plan.keep == 0 {
                plan.restore += m.set.members.len();
                "restore"
            } else {
                "stay"
            }
        });
        rows.push(json!({
            "path": format!("{STATE_DIR}/store/{}/", m.set.fingerprint),
            "state": if bad.is_some() { "stored, corrupt" } else { "stored" },
            "why": bad,
            "fingerprint": m.set.fingerprint,
            "files": m.set.members.len(),
            "size": e.bytes,
            "signed_at": m.set.signed_at,
            "stored_at": m.stored_at,
            "last_used": last_used,
            "action": action,
        }));
    }
    let totals = json!({"entries": entries.len(), "files": stored_files, "size": stored_bytes, "corrupt": stored_corrupt});
    (rows, totals)
}

/// The statistics, with the hit rate (percent; null before any reuse or tune).
fn stats_json(stats: &Stats) -> Value {
    let mut v = json!(stats);
    v["hit_rate"] = json!(stats.hit_rate());
    v
}
