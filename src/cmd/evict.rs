//! `keepwrap evict` and `keepwrap clean`: remove stored sets.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::clock::now_secs;
use crate::events::counted;
use crate::store::{size_text, Entry, Store};

use super::status::duration_text;
use super::{lock, EXIT_USAGE};

/// Which stored sets `keepwrap evict` removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evict {
    All,
    OlderThan(std::time::Duration),
    /// A fingerprint, or a unique prefix of it (8 digits or more).
    Launch(String),
}

/// `keepwrap evict` / `keepwrap clean`: remove stored sets under the lock,
/// one line each (stderr), then a summary line (stdout); with `dry_run`,
/// say on stdout what would be removed, and remove nothing.
///
/// Without `--cache-dir`, the root is SGLang's default one, and vLLM's,
/// TensorRT-LLM's and keepwrap's root of vLLM's managed store (from the
/// same environment) too when they have a store: each has its summary
/// line, which names it when two or more have a store. A FINGERPRINT is
/// looked for in each.
pub fn evict(
    cache_dir: Option<&Path>,
    lock_timeout: Duration,
    which: Evict,
    dry_run: bool,
) -> ExitCode {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    // The default profile's engine, whose root a bare `evict` means.
    let engine = crate::engine::of(crate::engine::fingerprint::ProfileName::Auto);
    let Ok(first) = engine.root(cache_dir, &env) else {
        return super::no_root();
    };
    let mut roots = vec![first];
    if cache_dir.is_none() {
        for r in crate::engine::default_roots(&env) {
            if !roots.contains(&r) {
                roots.push(r);
            }
        }
    }
    // Each root's store opened once (a root without one is skipped below),
    // for the default profile's tree: each stored set is judged by the tree
    // it is laid out for.
    let shape = engine.shape(&env);
    let stored: Vec<Option<Store>> = roots
        .iter()
        .map(|r| Store::open_existing(r, shape))
        .collect();
    if stored.iter().filter(|s| s.is_some()).count() < 2 {
        // One root: SGLang's, else the only one that has a store.
        let i = stored.iter().position(Option::is_some).unwrap_or(0);
        return evict_root(
            &roots[i],
            stored.into_iter().nth(i).flatten(),
            lock_timeout,
            &which,
            dry_run,
            false,
        );
    }
    // Several: a fingerprint only where one of its sets is stored.
    let mut code = ExitCode::SUCCESS;
    let mut any = false;
    for (root, store) in roots.iter().zip(stored) {
        let Some(store) = store else { continue };
        if let Ok(Some(p)) = launch_prefix(&which) {
            if !store
                .entries()
                .iter()
                .any(|e| e.manifest.set.fingerprint.starts_with(&p))
            {
                continue;
            }
        }
        any = true;
        let c = evict_root(root, Some(store), lock_timeout, &which, dry_run, true);
        if c != ExitCode::SUCCESS {
            code = c;
        }
    }
    if !any {
        // No root holds it: said as for one root.
        let store = Store::open_existing(&roots[0], shape);
        return evict_root(&roots[0], store, lock_timeout, &which, dry_run, false);
    }
    code
}

/// [`evict`] in one root (`store`: its store, if it has one); `named`:
/// the summary line names the root.
fn evict_root(
    root: &Path,
    store: Option<Store>,
    lock_timeout: Duration,
    which: &Evict,
    dry_run: bool,
    named: bool,
) -> ExitCode {
    crate::events::set_root(root);
    // Each stored set is judged by the cache tree its files are laid out
    // for: the root may be any engine's.
    let Some(store) = store else {
        println!(
            "{} 0 stored sets (0 files, 0 B): {} has no store",
            if dry_run { "would evict" } else { "evicted" },
            root.display()
        );
        return ExitCode::SUCCESS;
    };
    // "the store", or, beside another root's, "the store of ROOT".
    let the_store = if named {
        format!("the store of {}", root.display())
    } else {
        "the store".to_string()
    };
    let launch = match launch_prefix(which) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let now = now_secs();
    let pick = |e: &Entry, used: u64| match which {
        Evict::All => true,
        Evict::OlderThan(d) => now.saturating_sub(used) > d.as_secs(),
        Evict::Launch(_) => launch
            .as_deref()
            .is_some_and(|p| e.manifest.set.fingerprint.starts_with(p)),
    };
    if dry_run {
        // Read only: no lock, so it answers while a launch holds it.
        if launch.as_deref().is_some_and(|p| !matches_one(&store, p)) {
            return ExitCode::FAILURE;
        }
        return would_evict(&store, now, pick, &the_store);
    }
    let _lock = match lock(&store, lock_timeout, "keepwrap evict") {
        Ok(l) => l,
        Err(e) => {
            super::failed(format!(
                "cannot take the cache lock of {}: {e}",
                root.display()
            ));
            return ExitCode::FAILURE;
        }
    };
    if launch.as_deref().is_some_and(|p| !matches_one(&store, p)) {
        return ExitCode::FAILURE;
    }
    let why = match which {
        Evict::All => "keepwrap evict --all".to_string(),
        Evict::OlderThan(d) => format!("keepwrap evict --older-than {}", duration_text(*d)),
        Evict::Launch(_) => "keepwrap evict FINGERPRINT".to_string(),
    };
    let evicted = store.evict_where(now, &why, pick);
    let files: usize = evicted.iter().map(|e| e.manifest.set.members.len()).sum();
    let bytes: u64 = evicted.iter().map(|e| e.bytes).sum();
    let n = evicted.len() as u64;
    if n > 0 {
        crate::root::stats::Stats::update(store.state_fd(), |st| st.evicted += n);
    }
    let left = store.entries();
    println!(
        "evicted {} ({}, {}); {} left in {the_store} ({})",
        counted(n as usize, "stored set", "stored sets"),
        counted(files, "file", "files"),
        size_text(bytes),
        left.len(),
        size_text(left.iter().map(|e| e.bytes).sum())
    );
    ExitCode::SUCCESS
}

/// `--dry-run`: one line per stored set `pick` selects, least recently
/// used first, then the summary; nothing is removed.
fn would_evict(
    store: &Store,
    now: u64,
    pick: impl Fn(&Entry, u64) -> bool,
    the_store: &str,
) -> ExitCode {
    let all = store.entries();
    let mut picked: Vec<(u64, &Entry)> = all
        .iter()
        .map(|e| (store.last_used(e), e))
        .filter(|(used, e)| pick(e, *used))
        .collect();
    picked.sort_by_key(|(used, e)| (*used, e.manifest.set.fingerprint.clone()));
    let mut text = String::new();
    for (used, e) in &picked {
        text.push_str(&format!(
            "would evict the stored set of launch {}... ({}, {}, last used {})\n",
            &e.manifest.set.fingerprint[..e.manifest.set.fingerprint.len().min(8)],
            counted(e.manifest.set.members.len(), "file", "files"),
            size_text(e.bytes),
            crate::store::ago(*used, now)
        ));
    }
    let files: usize = picked
        .iter()
        .map(|(_, e)| e.manifest.set.members.len())
        .sum();
    let bytes: u64 = picked.iter().map(|(_, e)| e.bytes).sum();
    text.push_str(&format!(
        "would evict {} ({}, {}) of {} in {the_store} ({}) (dry run: nothing evicted)\n",
        counted(picked.len(), "stored set", "stored sets"),
        counted(files, "file", "files"),
        size_text(bytes),
        all.len(),
        size_text(all.iter().map(|e| e.bytes).sum())
    ));
    if super::print(text.as_bytes()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The fingerprint prefix a `keepwrap evict FINGERPRINT` names, in lower
/// case; Err (said on stderr) when it is not one.
fn launch_prefix(which: &Evict) -> Result<Option<String>, ExitCode> {
    match which {
        Evict::Launch(prefix) => {
            let p = prefix.to_ascii_lowercase();
            if p.len() < 8 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                crate::events::Event::UsageError {
                    what: format!("{prefix:?} is not a fingerprint (8 to 64 hex digits)"),
                }
                .emit();
                return Err(ExitCode::from(EXIT_USAGE));
            }
            Ok(Some(p))
        }
        _ => Ok(None),
    }
}

/// Whether exactly one stored set's fingerprint starts with `prefix` (said
/// on stderr when not).
fn matches_one(store: &Store, prefix: &str) -> bool {
    let matching: Vec<String> = store
        .entries()
        .into_iter()
        .map(|e| e.manifest.set.fingerprint)
        .filter(|fp| fp.starts_with(prefix))
        .collect();
    if matching.len() != 1 {
        super::failed(format!(
            "{} {prefix}{}",
            counted(matching.len(), "stored set matches", "stored sets match"),
            if matching.is_empty() {
                ""
            } else {
                ": give more digits"
            }
        ));
        return false;
    }
    true
}
