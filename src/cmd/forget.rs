//! `keepwrap forget [--dry-run] -- COMMAND`: take one launch's signed set
//! out of the cache tree and the store (and, with `--fleet`, its HEAD out
//! of the bucket), so that its next boot tunes fresh. Under the root's
//! lock, as a launch prunes and signs; refused while a launch of it runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::cache::forget::{forget_set, has_manifest, signed_for};
use crate::cache::Shape;
use crate::clock::now_secs;
use crate::digest::Fingerprint;
use crate::engine::fingerprint::Launch;
use crate::events::counted;
use crate::root::running::Runs;
use crate::store::{size_text, Store};

/// How `keepwrap forget` runs.
pub struct Options {
    pub lock_timeout: Duration,
    pub dry_run: bool,
    /// The fleet whose HEAD of the launch is withdrawn.
    pub fleet: Option<String>,
    pub fleet_timeout: Duration,
}

/// What one launch has under a root.
#[derive(Default)]
struct Held {
    /// Its signed cache files in the tree (per fingerprint), their bytes.
    tree: Vec<(Fingerprint, Vec<String>)>,
    tree_bytes: u64,
    /// Its set manifests without signed files left.
    manifests: usize,
    /// Its stored sets: how many, their files and bytes.
    stored: usize,
    stored_files: usize,
    stored_bytes: u64,
    /// Its launch records.
    records: usize,
    /// Whether keepwrap holds a copy of its pinned set (`--pin`).
    pinned: bool,
}

impl Held {
    fn files(&self) -> usize {
        self.tree.iter().map(|(_, f)| f.len()).sum()
    }

    fn is_empty(&self) -> bool {
        self.files() == 0
            && self.manifests == 0
            && self.stored == 0
            && self.records == 0
            && !self.pinned
    }

    /// What goes, its parts that are not empty: `2 signed cache files (17.0
    /// KiB) from the tree, 1 stored set (2 files, 17.3 KiB) from the store`.
    fn text(&self) -> String {
        let mut parts = Vec::new();
        if self.files() > 0 {
            parts.push(format!(
                "{} ({}) from the tree",
                counted(self.files(), "signed cache file", "signed cache files"),
                size_text(self.tree_bytes)
            ));
        }
        if self.stored > 0 {
            parts.push(format!(
                "{} ({}, {}) from the store",
                counted(self.stored, "stored set", "stored sets"),
                counted(self.stored_files, "file", "files"),
                size_text(self.stored_bytes)
            ));
        }
        if self.pinned {
            parts.push("keepwrap's pinned copy of the set (hard links)".to_string());
        }
        if parts.is_empty() {
            // Only the records of a set whose files are gone.
            parts.push("the record of its signed set, whose files are gone".to_string());
        }
        parts.join(", ")
    }
}

/// `keepwrap forget`: forget `launch` under `root` (and in the fleet).
pub fn forget(root: Option<(PathBuf, Shape)>, launch: &Launch, o: Options) -> ExitCode {
    let Some((root, shape)) = root else {
        return super::no_root();
    };
    crate::events::set_root(&root);
    let read = launch.fingerprint();
    let short = read.short();
    let store = Store::open_existing(&root, shape);
    // The set a boot of these words is offered: its own, or that of what
    // its engine last ran as.
    let mut fps = vec![read.clone()];
    if let Some(seen) = store.as_ref().and_then(|s| crate::keeper::seen_as(s, read)) {
        if seen != *read {
            fps.push(seen);
        }
    }
    let lock = match (&store, o.dry_run) {
        (Some(s), false) => match super::lock(s, o.lock_timeout, "keepwrap forget") {
            Ok(l) => Some(l),
            Err(e) => {
                super::failed(format!(
                    "cannot take the cache lock of {}: {e}; nothing is forgotten",
                    root.display()
                ));
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    if let Some(run) = store.as_ref().and_then(|s| running(s, &fps)) {
        super::failed(format!(
            "launch {short} runs on {} ({run}): a boot of it must not lose its set while it runs; stop it first (nothing is forgotten)",
            root.display()
        ));
        return ExitCode::FAILURE;
    }
    let held = held(&root, shape, store.as_ref(), &fps);
    let mut line = if held.is_empty() {
        format!(
            "nothing to forget for launch {short}: it has no signed set under {}",
            root.display()
        )
    } else if o.dry_run {
        format!("would forget launch {short}: {}", held.text())
    } else {
        match remove(&root, store.as_ref(), &fps, &held) {
            Ok(()) => format!(
                "forgot launch {short}: removed {}; its next boot tunes fresh",
                held.text()
            ),
            Err(e) => {
                super::failed(format!(
                    "cannot forget launch {short} under {}: {e}",
                    root.display()
                ));
                return ExitCode::FAILURE;
            }
        }
    };
    drop(lock);
    let mut code = ExitCode::SUCCESS;
    if let Some(url) = &o.fleet {
        match withdraw(url, o.fleet_timeout, launch, o.dry_run) {
            Ok(text) => line.push_str(&format!("; {text}")),
            Err(e) => {
                super::failed(format!(
                    "fleet: cannot withdraw the HEAD of launch {short} from {}: {e}",
                    crate::fleet::s3::redact(url)
                ));
                code = ExitCode::FAILURE;
            }
        }
    }
    if o.dry_run {
        line.push_str(" (dry run: nothing removed)");
    }
    line.push('\n');
    if !super::print(line.as_bytes()) {
        return ExitCode::FAILURE;
    }
    code
}

/// A live launch of one of `fps` on the store's root, as its marker names
/// it (the markers are only read: a dry run changes nothing).
fn running(store: &Store, fps: &[Fingerprint]) -> Option<String> {
    let state = store.state_fd();
    crate::cache::fsx::lstat_at(state, crate::root::running::RUNNING_DIR).ok()?;
    let runs = Runs::open_in(state).ok()?;
    runs.scan()
        .into_iter()
        .find(|s| s.live() && fps.contains(&s.id.fingerprint))
        .map(|s| format!("pid {} on host {}, since {}", s.pid, s.host, s.since()))
}

/// What the launches `fps` hold under `root`.
fn held(root: &Path, shape: Shape, store: Option<&Store>, fps: &[Fingerprint]) -> Held {
    let mut h = Held::default();
    for fp in fps {
        let files = signed_for(root, shape, fp.as_str());
        h.tree_bytes += files.iter().map(|(_, size)| size).sum::<u64>();
        if files.is_empty() && has_manifest(root, fp.as_str()) {
            h.manifests += 1;
        }
        h.tree
            .push((fp.clone(), files.into_iter().map(|(p, _)| p).collect()));
    }
    if let Some(s) = store {
        for e in s.entries() {
            if fps.iter().any(|fp| *fp == e.manifest.set.fingerprint) {
                h.stored += 1;
                h.stored_files += e.manifest.set.members.len();
                h.stored_bytes += e.bytes;
            }
        }
        h.records = fps
            .iter()
            .filter(|fp| s.record(fp.as_str()).is_some())
            .count();
    }
    h.pinned = fps
        .iter()
        .any(|fp| crate::keeper::has_pinned_copy(root, fp.as_str()));
    h
}

/// Remove what [`held`] found (under the lock).
fn remove(
    root: &Path,
    store: Option<&Store>,
    fps: &[Fingerprint],
    held: &Held,
) -> std::io::Result<()> {
    for (fp, files) in &held.tree {
        forget_set(root, fp.as_str(), files)?;
    }
    for fp in fps {
        crate::keeper::unpin(root, fp.as_str())?;
    }
    if let Some(s) = store {
        s.evict_where(now_secs(), "keepwrap forget", |e, _| {
            fps.iter().any(|fp| *fp == e.manifest.set.fingerprint)
        });
        for fp in fps {
            s.forget_record(fp.as_str())?;
        }
    }
    Ok(())
}

/// Withdraw the launch's HEAD from the fleet at `url` (none with
/// `dry_run`): what the line says of it.
fn withdraw(
    url: &str,
    timeout: Duration,
    launch: &Launch,
    dry_run: bool,
) -> Result<String, String> {
    use crate::publish::Storage;
    let client = crate::fleet::client_of(url, timeout)?;
    let key =
        crate::fleet::head_key(&client, launch.profile(), launch.fingerprint()).map_err(|why| {
            format!("this machine shows no GPU model, which names the launch in the bucket ({why})")
        })?;
    let bucket: &dyn Storage = &client;
    let shown = crate::fleet::s3::redact(url);
    let there = bucket
        .get(&key, 1 << 16)
        .map_err(|e| e.to_string())?
        .is_some();
    if !there {
        return Ok(format!("the fleet {shown} holds no HEAD for it"));
    }
    if dry_run {
        return Ok(format!("would withdraw its HEAD from the fleet {shown}"));
    }
    bucket.delete(&key).map_err(|e| e.to_string())?;
    Ok(format!("withdrew its HEAD from the fleet {shown}"))
}
