//! The text form of the status report.

use std::fmt::Write as _;

use serde_json::Value;

use crate::clock::now_secs;
use crate::digest::short;
use crate::events::counted;
use crate::store::{ago, size_text};

use super::ms_text;

/// The text form of [`report`](super::report).
pub fn render(r: &Value) -> String {
    let now = r["now"].as_u64().unwrap_or_else(now_secs);
    let mut out = String::with_capacity(128 * (r["files"].as_array().map_or(0, Vec::len) + 8));
    let _ = writeln!(
        out,
        "cache root {}{}",
        r["root"].as_str().unwrap_or(""),
        if r["root_exists"] == false {
            ": does not exist (nothing is cached here; the first launch creates it)"
        } else {
            ""
        }
    );
    if let Some(fp) = r["fingerprint"].as_str() {
        let _ = writeln!(out, "launch {}", short(fp));
    }
    if r["seen_as"].is_string() {
        let _ = writeln!(
            out,
            "(the fingerprint its engine last ran with: its words do not show all it gets)"
        );
    }
    let action_col = r["fingerprint"].is_string();
    let _ = writeln!(
        out,
        "{:<38} {:>10}  {:<16} {:<16} {}PATH",
        "STATE",
        "SIZE",
        "SIGNED",
        "LAST USED",
        if action_col { "ACTION   " } else { "" }
    );
    rows(&mut out, r, now, action_col);
    totals(&mut out, r);
    statistics(&mut out, r, now);
    if let Some(p) = r["plan"].as_object() {
        let _ = writeln!(
            out,
            "this launch would keep {}, restore {}, store {} and remove {}",
            p["keep"],
            p["restore"],
            p["store"],
            counted(
                p["remove"].as_u64().unwrap_or(0) as usize,
                "cache file",
                "cache files"
            )
        );
        if let Some(why) = p.get("why").and_then(Value::as_str) {
            let _ = writeln!(out, "{why}");
        }
    }
    if let Some(p) = r["pinned"].as_object() {
        let n = |k: &str| p[k].as_u64().unwrap_or(0) as usize;
        let _ = writeln!(
            out,
            "pinned (--pin): {} kept as signed; its last boot tuned {} the set lacks (for that boot only) and had {} of its files put back",
            counted(n("files"), "cache file", "cache files"),
            counted(n("missing"), "shape", "shapes"),
            n("changed")
        );
    }
    out
}

/// One line per cache file and stored set.
fn rows(out: &mut String, r: &Value, now: u64, action_col: bool) {
    let rows = r["files"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(r["store"].as_array().into_iter().flatten());
    for row in rows {
        let mut state = row["state"].as_str().unwrap_or("").to_string();
        if let Some(fp) = row["fingerprint"].as_str() {
            if state == "signed"
                || state == "signed for another launch"
                || state.starts_with("stored")
            {
                state = format!("{state} {}", short(fp));
            }
        }
        let size = size_text(row["size"].as_u64().unwrap_or(0));
        let _ = write!(
            out,
            "{state:<38} {size:>10}  {:<16} {:<16} ",
            when(&row["signed_at"], now),
            when(&row["last_used"], now)
        );
        if action_col {
            let _ = write!(out, "{:<8} ", row["action"].as_str().unwrap_or(""));
        }
        out.push_str(row["path"].as_str().unwrap_or(""));
        if let Some(n) = row["files"].as_u64() {
            let _ = write!(out, " ({})", counted(n as usize, "file", "files"));
        }
        if let Some(why) = row["why"].as_str() {
            let _ = write!(out, " ({why})");
        }
        out.push('\n');
    }
}

/// The totals by state, the store and its limit.
fn totals(out: &mut String, r: &Value) {
    let _ = write!(out, "totals:");
    let t = &r["totals"];
    for k in [
        "signed",
        "signed for this launch",
        "signed for another launch",
        "unsigned",
        "corrupt",
    ] {
        if let Some(v) = t.get(k) {
            let _ = write!(
                out,
                " {} {k} ({}),",
                v["files"],
                size_text(v["size"].as_u64().unwrap_or(0))
            );
        }
    }
    let s = &t["stored"];
    let _ = writeln!(
        out,
        " {} stored in {} {} ({})",
        s["files"],
        s["entries"],
        if s["entries"] == 1 {
            "entry"
        } else {
            "entries"
        },
        size_text(s["size"].as_u64().unwrap_or(0))
    );
    let used = s["size"].as_u64().unwrap_or(0);
    if r["store_max_size"].as_u64() == Some(0) {
        let _ = writeln!(
            out,
            "store: {} (--store-max-size 0: no limit)",
            size_text(used)
        );
    }
    if let Some(limit) = r["store_max_size"].as_u64().filter(|&l| l > 0) {
        let _ = writeln!(
            out,
            "store: {} of {} (--store-max-size), {:.0}% used",
            size_text(used),
            size_text(limit),
            100.0 * used as f64 / limit as f64
        );
    }
}

/// The statistics and what the cache saved.
fn statistics(out: &mut String, r: &Value, now: u64) {
    let st = &r["stats"];
    let _ = writeln!(
        out,
        "statistics{}: launches {}, reuses {}, tunes {}, removed {}, stored {}, restored {}, evicted {}",
        st["since"]
            .as_u64()
            .filter(|&s| s > 0)
            .map(|s| format!(" (since {})", ago(s, now)))
            .unwrap_or_default(),
        st["launches"], st["reuses"], st["tunes"], st["removed"], st["stored"], st["restored"], st["evicted"]
    );
    let (reuses, tunes) = (
        st["reuses"].as_u64().unwrap_or(0),
        st["tunes"].as_u64().unwrap_or(0),
    );
    let hit_rate = st["hit_rate"]
        .as_f64()
        .map_or_else(|| "-".to_string(), |h| format!("{h:.0}%"));
    let _ = writeln!(
        out,
        "what the cache saved: hit rate {hit_rate} ({} of {} that reused or tuned); tuning time saved {} (tuning boots took {})",
        counted(reuses as usize, "reuse", "reuses"),
        counted((reuses + tunes) as usize, "launch", "launches"),
        ms_text(&st["saved_ms"]),
        ms_text(&st["tuning_ms"])
    );
}

fn when(v: &Value, now: u64) -> String {
    v.as_u64().map_or_else(|| "-".to_string(), |t| ago(t, now))
}
