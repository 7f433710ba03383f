//! `keepwrap status`: every cache file and store entry under a cache root,
//! with its state, size, when it was signed and last used, totals and the
//! statistics; with `-- COMMAND`, what that launch would keep, restore,
//! store and remove. Reads sidecars and manifests only (`--verify` also
//! hashes the cache files), so it stays fast on large trees.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cache::{self, FileState};
use crate::clock::now_secs;
use crate::digest::short;
use crate::launch::fingerprint::{Launch, Options};
use crate::root::stats::Stats;
use crate::store::{ago, size_text, Store};
use crate::STATE_DIR;

/// Run `keepwrap status`.
pub fn run(
    root: Option<std::path::PathBuf>,
    opts: &Options,
    command: &[OsString],
    json_out: bool,
    zero: bool,
    verify: bool,
    store_max_size: u64,
) -> ExitCode {
    let Some(root) = root else {
        eprintln!(
            "keepwrap: error: no cache root: neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set"
        );
        return ExitCode::FAILURE;
    };
    if zero {
        match zero_stats(&root) {
            Ok(()) => eprintln!("keepwrap: statistics reset"),
            Err(e) => {
                eprintln!(
                    "keepwrap: error: cannot reset the statistics under {}: {e}",
                    root.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let fp = (!command.is_empty()).then(|| {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        Launch::new(opts, command, &env).fingerprint().to_string()
    });
    let mut report = report(&root, fp.as_deref(), verify);
    report["store_max_size"] = json!(store_max_size);
    let text = if json_out {
        let mut v = serde_json::to_vec_pretty(&report).expect("a Value serializes");
        v.push(b'\n');
        v
    } else {
        render(&report).into_bytes()
    };
    if !print(&text) {
        return ExitCode::FAILURE;
    }
    let corrupt = report["totals"]["corrupt"]["files"].as_u64().unwrap_or(0);
    let stored = report["totals"]["stored"]["corrupt"].as_u64().unwrap_or(0);
    if verify && corrupt > 0 {
        eprintln!(
            "keepwrap: status --verify: {corrupt} corrupt or mismatched cache files (see the corrupt rows); the next launch removes them"
        );
    }
    if verify && stored > 0 {
        eprintln!(
            "keepwrap: status --verify: {stored} stored sets are not intact (see the corrupt rows); they are removed when their launch returns"
        );
    }
    if verify && corrupt + stored > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `42.0 s`, `12 min 5 s`, `3 h 20 min`, `2 days 4 h`: how long something
/// took or lasts.
pub fn duration_text(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let whole = d.as_secs();
    let (days, h, m, sec) = (
        whole / 86400,
        whole % 86400 / 3600,
        whole % 3600 / 60,
        whole % 60,
    );
    match (days, h) {
        (0, 0) => format!("{m} min {sec} s"),
        (0, h) => format!("{h} h {m} min"),
        (1, h) => format!("1 day {h} h"),
        (d, h) => format!("{d} days {h} h"),
    }
}

fn ms_text(v: &Value) -> String {
    duration_text(std::time::Duration::from_millis(v.as_u64().unwrap_or(0)))
}

fn zero_stats(root: &Path) -> std::io::Result<()> {
    let store = Store::open(root)?;
    let _lock = lock(
        &store,
        std::time::Duration::from_secs(60),
        "keepwrap status --zero",
    )?;
    Stats::zero(store.state_fd())
}

/// The lock of the store's root, or why not.
fn lock(
    store: &Store,
    timeout: std::time::Duration,
    what: &str,
) -> std::io::Result<crate::root::lock::CacheLock> {
    crate::root::lock::acquire(store.state_fd(), timeout, what).map_err(|e| match e {
        crate::root::lock::LockError::Io(e) => e,
        crate::root::lock::LockError::TimedOut(who) => std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("the lock is held by {who}"),
        ),
    })
}

/// Which stored sets `keepwrap evict` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evict {
    All,
    OlderThan(std::time::Duration),
    /// A fingerprint, or a unique prefix of it (8 digits or more).
    Launch(String),
}

/// `keepwrap evict` / `keepwrap clean`: remove stored sets under the lock,
/// one line each (stderr), then a summary line (stdout).
pub fn evict(cache_dir: Option<&Path>, lock_timeout: Duration, which: Evict) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let Some(root) = crate::keeper::root_from(cache_dir, &env) else {
        eprintln!(
            "keepwrap: error: no cache root: neither --cache-dir, SGLANG_CACHE_DIR nor HOME is set"
        );
        return ExitCode::FAILURE;
    };
    let Some(store) = Store::open_existing(&root) else {
        println!(
            "evicted 0 stored sets (0 files, 0 B): {} has no store",
            root.display()
        );
        return ExitCode::SUCCESS;
    };
    let launch = match &which {
        Evict::Launch(prefix) => {
            let p = prefix.to_ascii_lowercase();
            if p.len() < 8 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                eprintln!("keepwrap: error: {prefix:?} is not a fingerprint (8 to 64 hex digits)");
                return ExitCode::from(super::EXIT_USAGE);
            }
            Some(p)
        }
        _ => None,
    };
    let _lock = match lock(&store, lock_timeout, "keepwrap evict") {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "keepwrap: error: cannot take the cache lock of {}: {e}",
                root.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let now = now_secs();
    if let Some(p) = &launch {
        let matching: Vec<String> = store
            .entries()
            .into_iter()
            .map(|e| e.manifest.fingerprint)
            .filter(|fp| fp.starts_with(p.as_str()))
            .collect();
        if matching.len() != 1 {
            eprintln!(
                "keepwrap: error: {} stored sets match {p}{}",
                matching.len(),
                if matching.is_empty() {
                    ""
                } else {
                    ": give more digits"
                }
            );
            return ExitCode::FAILURE;
        }
    }
    let why = match &which {
        Evict::All => "keepwrap evict --all".to_string(),
        Evict::OlderThan(d) => format!("keepwrap evict --older-than {}", duration_text(*d)),
        Evict::Launch(_) => "keepwrap evict FINGERPRINT".to_string(),
    };
    let evicted = store.evict_where(now, &why, |e, used| match &which {
        Evict::All => true,
        Evict::OlderThan(d) => now.saturating_sub(used) > d.as_secs(),
        Evict::Launch(_) => launch
            .as_deref()
            .is_some_and(|p| e.manifest.fingerprint.starts_with(p)),
    });
    let files: usize = evicted.iter().map(|e| e.manifest.members.len()).sum();
    let bytes: u64 = evicted.iter().map(|e| e.bytes).sum();
    let n = evicted.len() as u64;
    if n > 0 {
        crate::root::stats::Stats::update(store.state_fd(), |st| st.evicted += n);
    }
    let left = store.entries();
    println!(
        "evicted {n} stored sets ({files} files, {}); {} left in the store ({})",
        size_text(bytes),
        left.len(),
        size_text(left.iter().map(|e| e.bytes).sum())
    );
    ExitCode::SUCCESS
}

/// The whole report as JSON (what `--json` prints; the text form renders it).
pub fn report(root: &Path, fp: Option<&str>, verify: bool) -> Value {
    let now = now_secs();
    let files = cache::survey(root, verify);
    let store = Store::open_existing(root);
    let mut used: HashMap<String, u64> = HashMap::new();
    if let Some(s) = &store {
        for r in s.records() {
            used.insert(r.fingerprint.clone(), r.last_used);
        }
    }
    let entries = store.as_ref().map(Store::entries).unwrap_or_default();

    let mut rows = Vec::with_capacity(files.len());
    let (mut keep, mut to_store, mut remove) = (0usize, 0usize, 0usize);
    let mut totals: HashMap<&'static str, (u64, u64)> = HashMap::new();
    for f in &files {
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
                keep += 1;
                "keep"
            }
            "signed for another launch" => {
                to_store += 1;
                "store"
            }
            _ => {
                remove += 1;
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
    let mut stored_files = 0usize;
    let mut stored_bytes = 0u64;
    let mut store_rows = Vec::with_capacity(entries.len());
    let mut restore = 0usize;
    let mut stored_corrupt = 0usize;
    for e in &entries {
        let m = &e.manifest;
        // With --verify, every stored set is hashed whole, as a restore would.
        let bad = match (&store, verify) {
            (Some(s), true) => s.verify_entry(&m.fingerprint).err(),
            _ => None,
        };
        stored_corrupt += usize::from(bad.is_some());
        stored_files += m.members.len();
        stored_bytes += e.bytes;
        let last_used = used.get(&m.fingerprint).copied().unwrap_or(m.stored_at);
        let action = fp.map(|me| {
            if me == m.fingerprint && keep == 0 {
                restore += m.members.len();
                "restore"
            } else {
                "stay"
            }
        });
        store_rows.push(json!({
            "path": format!("{STATE_DIR}/store/{}/", m.fingerprint),
            "state": if bad.is_some() { "stored, corrupt" } else { "stored" },
            "why": bad,
            "fingerprint": m.fingerprint,
            "files": m.members.len(),
            "size": e.bytes,
            "signed_at": m.signed_at,
            "stored_at": m.stored_at,
            "last_used": last_used,
            "action": action,
        }));
    }
    let stats = store
        .as_ref()
        .map(|s| Stats::load(s.state_fd()))
        .unwrap_or_default();
    let mut totals_v = serde_json::Map::new();
    for (k, (n, b)) in &totals {
        totals_v.insert((*k).to_string(), json!({"files": n, "size": b}));
    }
    totals_v.insert(
        "stored".into(),
        json!({"entries": entries.len(), "files": stored_files, "size": stored_bytes, "corrupt": stored_corrupt}),
    );
    json!({
        "root": root.display().to_string(),
        "now": now,
        "fingerprint": fp,
        "files": rows,
        "store": store_rows,
        "totals": totals_v,
        "stats": stats_json(&stats),
        "plan": fp.map(|_| json!({"keep": keep, "restore": restore, "store": to_store, "remove": remove})),
    })
}

/// The statistics, with the hit rate (percent; null before any reuse or tune).
fn stats_json(stats: &Stats) -> Value {
    let mut v = json!(stats);
    v["hit_rate"] = json!(stats.hit_rate());
    v
}

fn when(v: &Value, now: u64) -> String {
    v.as_u64().map_or_else(|| "-".to_string(), |t| ago(t, now))
}

/// The text form of [`report`].
pub fn render(r: &Value) -> String {
    use std::fmt::Write as _;
    let now = r["now"].as_u64().unwrap_or_else(now_secs);
    let mut out = String::with_capacity(128 * (r["files"].as_array().map_or(0, Vec::len) + 8));
    let _ = writeln!(out, "cache root {}", r["root"].as_str().unwrap_or(""));
    if let Some(fp) = r["fingerprint"].as_str() {
        let _ = writeln!(out, "launch {}", short(fp));
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
            let _ = write!(out, " ({n} files)");
        }
        if let Some(why) = row["why"].as_str() {
            let _ = write!(out, " ({why})");
        }
        out.push('\n');
    }
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
        " {} stored in {} entries ({})",
        s["files"],
        s["entries"],
        size_text(s["size"].as_u64().unwrap_or(0))
    );
    if let Some(limit) = r["store_max_size"].as_u64().filter(|&l| l > 0) {
        let used = s["size"].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "store: {} of {} (--store-max-size), {:.0}% used",
            size_text(used),
            size_text(limit),
            100.0 * used as f64 / limit as f64
        );
    }
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
        "what the cache saved: hit rate {hit_rate} ({reuses} reuses of {} launches that reused or tuned); tuning time saved {} (tuning boots took {})",
        reuses + tunes,
        ms_text(&st["saved_ms"]),
        ms_text(&st["tuning_ms"])
    );
    if let Some(p) = r["plan"].as_object() {
        let _ = writeln!(
            out,
            "this launch would keep {}, restore {}, store {} and remove {} cache files",
            p["keep"], p["restore"], p["store"], p["remove"]
        );
    }
    out
}

/// `keepwrap share-status --json`: every node publication of the share, by
/// cluster, with the nodes that have not published.
pub fn share_status_json(share: &Path) -> ExitCode {
    let pubs = match crate::share::status_or_report(share) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let now = now_secs();
    let clusters: Vec<Value> = crate::share::by_cluster(&pubs)
        .into_iter()
        .map(|(cluster, nodes)| {
            let n = nodes.iter().map(|p| p.nnodes).max().unwrap_or(0);
            let mut rows: Vec<Value> = nodes
                .iter()
                .map(|p| {
                    let state = if p.published_at.is_some() && p.problem.is_none() {
                        "published"
                    } else {
                        "unusable"
                    };
                    json!({
                        "node_rank": p.node_rank,
                        "nnodes": p.nnodes,
                        "state": state,
                        "published_at": p.published_at,
                        "published_at_utc": p.published_at_utc,
                        "age_secs": p.published_at.map(|t| now.saturating_sub(t)),
                        "files": p.files,
                        "size": p.bytes,
                        "problem": p.problem,
                    })
                })
                .collect();
            for r in 0..n {
                if !nodes.iter().any(|p| p.node_rank == r) {
                    rows.push(json!({"node_rank": r, "nnodes": n, "state": "not published"}));
                }
            }
            rows.sort_by_key(|v| v["node_rank"].as_u64());
            json!({"cluster_fingerprint": cluster, "nnodes": n, "nodes": rows})
        })
        .collect();
    let out = json!({"share": share.display().to_string(), "now": now, "clusters": clusters});
    let mut text = serde_json::to_vec_pretty(&out).expect("a Value serializes");
    text.push(b'\n');
    if print(&text) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Write `text` to stdout; false when it cannot (a closed pipe).
fn print(text: &[u8]) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text).and_then(|()| stdout.flush()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::duration_text;
    use std::time::Duration;

    #[test]
    fn durations_read_the_same_everywhere() {
        for (secs, text) in [
            (0.04, "0.0 s"),
            (42.05, "42.0 s"),
            (59.9, "59.9 s"),
            (60.0, "1 min 0 s"),
            (725.0, "12 min 5 s"),
            (12_000.0, "3 h 20 min"),
            (86_400.0 + 3600.0, "1 day 1 h"),
            (30.0 * 86_400.0, "30 days 0 h"),
        ] {
            assert_eq!(duration_text(Duration::from_secs_f64(secs)), text, "{secs}");
        }
    }
}
