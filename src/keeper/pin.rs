//! `--pin`: the set signed for a launch is the set its engine is given at
//! every boot, byte for byte, whatever the engine writes meanwhile.
//!
//! Mode bits cannot promise that: an engine running as root (the usual
//! container) writes through a read-only directory. So keepwrap keeps a
//! hard link of each member as signed in its state directory, and puts
//! the set back instead:
//!
//! - at done (and again at exit, for what landed after done): each member
//!   the engine replaced or removed is linked back, and each cache file it
//!   added (a shape the set lacks, tuned for this boot only) is removed;
//!   nothing the engine wrote is signed, only the stamps of the set as
//!   signed are recorded again;
//! - before every start: the same for what a killed keepwrap could not put
//!   back, then prune checks the set as always.
//!
//! ```text
//! .keepwrap/pinned/<fp>/set.json      {"id"}: the set pinned (written last)
//! .keepwrap/pinned/<fp>/files/<path>  a hard link of each member as signed
//! .keepwrap/pinned/<fp>/last.json     the last pinned boot, for `status`
//! ```
//!
//! An engine that publishes through a temp file renamed over an entry (as
//! the managed store does) leaves the linked inode as signed. A write into
//! the file itself changes both names: prune then finds the member changed
//! after signing and the whole set goes, as without `--pin` (the boot says
//! so at done, and reuses and publishes nothing). A file of the copy is
//! put back only once checked to be the file signed for its path
//! ([`back`]): a planted one never reaches the tree. A pin is only
//! used while its set is the one signed for its launch (the same set id);
//! a first boot under `--pin` has none, tunes, and its set is pinned once
//! signed.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cache::{self, fsx, Settle, Shape};
use crate::digest::Fingerprint;
use crate::done::watch::Stamp;
use crate::engine::fingerprint::Launch;
use crate::engine::Engine;
use crate::events::Event;
use crate::root::stats::Stats;
use crate::STATE_DIR;

use super::commit::{as_read, Committer, SignKind};
use back::{put_back, PutBack, Signed};

mod back;
use super::Settings;

const PINNED: &str = "pinned";
const LIST: &str = "set.json";
const FILES: &str = "files";
const LAST: &str = "last.json";

/// Whether a running launch pins its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Not pinned.
    Off,
    /// `--pin` and no set yet: the set signed at done is pinned.
    First,
    /// The set is pinned; what the engine did to it so far this boot.
    Held { missing: usize, changed: usize },
    /// The set pinned is no longer the one signed for the launch (said
    /// once): nothing more is signed.
    Lost,
}

#[derive(Serialize, Deserialize)]
struct List {
    id: String,
}

/// A pinned boot: the set's files, the shapes the engine tuned that it
/// lacks, the members it replaced or removed; when (seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub files: usize,
    pub missing: usize,
    pub changed: usize,
    #[serde(default)]
    pub at: u64,
}

fn pins(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(PINNED)
}

fn dir(root: &Path, fp: &str) -> PathBuf {
    pins(root).join(fp)
}

/// The id and the member paths of the set signed for `fp` in the tree.
fn committed(root: &Path, fp: &str, shape: Shape) -> Option<(String, Vec<String>)> {
    let root_fd = fsx::open_root(root).ok()?;
    let sets = cache::open_sets(root_fd.as_fd(), false).ok()?;
    let m = cache::read_manifest(Some(sets.as_fd()), fp, shape).ok()?;
    Some((m.id, m.members.into_iter().map(|m| m.path).collect()))
}

/// The id of the set the pin of `fp` holds.
fn pinned_id(root: &Path, fp: &str) -> Option<String> {
    let bytes = std::fs::read(dir(root, fp).join(LIST)).ok()?;
    serde_json::from_slice::<List>(&bytes).ok().map(|l| l.id)
}

/// The id of the set signed for `fp` in the tree, read without its
/// members (the pin was taken from that manifest, checked whole).
fn committed_id(root: &Path, fp: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Id {
        id: String,
    }
    let path = root
        .join(STATE_DIR)
        .join("sets")
        .join(cache::manifest_name(fp));
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<Id>(&bytes).ok().map(|m| m.id)
}

/// Whether the pin of `fp` holds the set signed for it now.
fn valid(root: &Path, fp: &str) -> bool {
    committed_id(root, fp).is_some_and(|id| pinned_id(root, fp).as_deref() == Some(id.as_str()))
}

/// Before prune, under the lock: every pin that holds its launch's set
/// puts it back (another launch's too, which prune then stores whole);
/// then every pin but this launch's goes (taken again when its launch is
/// back), and so does this launch's when it does not pin (`pinning`) or
/// when it no longer holds the set signed in the tree.
pub(super) fn at_start(root: &Path, shape: Shape, fp: &Fingerprint, pinning: bool) {
    let Ok(list) = std::fs::read_dir(pins(root)) else {
        return;
    };
    for e in list.flatten() {
        let name = e.file_name();
        let Some(other) = name.to_str().filter(|n| cache::is_sha256_hex(n)) else {
            if name.to_string_lossy().contains(".in-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
            continue;
        };
        let ours = other == fp.as_str();
        if !valid(root, other) {
            let _ = std::fs::remove_dir_all(e.path());
            continue;
        }
        let back = put_back(root, &e.path(), &mut Signed::new(root, other, shape));
        if back.restored > 0 && ours {
            Event::PinPutBack {
                restored: back.restored,
                fingerprint: fp.to_string(),
            }
            .emit();
        }
        // another launch's set goes to the store whole: its copy is of no
        // more use, and its links would keep the set's bytes once evicted
        if distrusted(&back, other) || !ours || !pinning {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether the put back `back` of launch `fp`'s pin found files of the
/// copy that are not the ones signed: then one line names the first, and
/// the copy is to go (taken again from the set as checked).
fn distrusted(back: &PutBack, fp: &str) -> bool {
    let Some((path, why)) = back.untrusted.first() else {
        return false;
    };
    Event::PinUntrusted {
        files: back.untrusted.len(),
        path: path.clone(),
        why: why.clone(),
        fingerprint: fp.to_string(),
    }
    .emit();
    true
}

/// Pin the set signed for `fp`, as it is in the tree now (checked by prune
/// or just signed): a hard link of each member. Nothing is done when the
/// pin holds that set already.
pub(super) fn take(root: &Path, shape: Shape, fp: &Fingerprint) -> io::Result<()> {
    if valid(root, fp) {
        return Ok(());
    }
    let (id, members) = committed(root, fp, shape)
        .ok_or_else(|| io::Error::other("no set is signed for the launch"))?;
    let parent = pins(root);
    std::fs::create_dir_all(&parent)?;
    let staging = parent.join(format!("{fp}.in-{}", fsx::unique_name()));
    let made = (|| {
        for rel in &members {
            let to = staging.join(FILES).join(rel);
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p)?;
            }
            std::fs::hard_link(root.join(rel), &to)?;
        }
        let list = serde_json::to_vec(&List { id }).map_err(io::Error::other)?;
        std::fs::write(staging.join(LIST), list)?;
        let old = dir(root, fp);
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(&staging, &old)
    })();
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    made
}

/// The set pinned for `fp` as signed again: each member the engine
/// replaced or removed linked back, each other cache file of `files` (the
/// ones the engine added) removed. None when the pin no longer holds the
/// set signed for the launch.
fn hold(
    root: &Path,
    shape: Shape,
    fp: &Fingerprint,
    files: &[PathBuf],
) -> Option<(Held, Vec<PathBuf>)> {
    if !valid(root, fp) {
        return None;
    }
    let back = put_back(
        root,
        &dir(root, fp),
        &mut Signed::new(root, fp.as_str(), shape),
    );
    if distrusted(&back, fp.as_str()) {
        // taken again from the tree once the set there is found as signed
        let _ = std::fs::remove_dir_all(dir(root, fp));
    }
    let (mut members, changed) = (back.members, back.restored);
    members.sort();
    let set: HashSet<&PathBuf> = members.iter().collect();
    let missing = files
        .iter()
        .filter(|rel| !set.contains(rel))
        .filter(|rel| std::fs::remove_file(root.join(rel)).is_ok())
        .count();
    drop(set);
    let held = Held {
        files: members.len(),
        missing,
        changed,
        at: crate::clock::now_secs(),
    };
    Some((held, members))
}

/// Record the pinned boot `held` of `fp` for `status`.
fn record(root: &Path, fp: &Fingerprint, held: &Held) {
    let d = dir(root, fp);
    let tmp = d.join(format!(".keepwrap-{}.tmp", fsx::unique_name()));
    if let Ok(bytes) = serde_json::to_vec(held) {
        if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, d.join(LAST)).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// `status`: the last pinned boot of launch `fp`, while its set is pinned
/// (the pin holds the set signed for it in the tree).
pub fn last_pinned(root: &Path, fp: &str) -> Option<Held> {
    if !valid(root, fp) {
        return None;
    }
    let bytes = std::fs::read(dir(root, fp).join(LAST)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `forget`: launch `fp`'s copy of its pinned set goes with the set (its
/// hard links would keep the set's bytes on disk).
pub fn unpin(root: &Path, fp: &str) -> io::Result<()> {
    match std::fs::remove_dir_all(dir(root, fp)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether launch `fp` has a copy of a pinned set under `root`.
pub fn has_copy(root: &Path, fp: &str) -> bool {
    dir(root, fp).is_dir()
}

/// Whether this launch pins its set: `--pin`, and its engine's cache is
/// one pinning applies to (else one line says why not, and it goes on).
pub(super) fn pinning(args: &Settings, engine: &dyn Engine, launch: &Launch) -> bool {
    if !args.pin {
        return false;
    }
    match engine.pin_why_not(launch, args.cache_dir.as_deref()) {
        None => true,
        Some(why) => {
            Event::PinNotApplicable { why }.emit();
            false
        }
    }
}

/// Before the start, once the files kept are final (`kept`): the launch's
/// pin, taken from the set prune (or the store, the fleet) just checked.
pub(super) fn begin(
    root: &Path,
    shape: Shape,
    fp: &Fingerprint,
    kept: &[PathBuf],
    pinning: bool,
) -> State {
    if !pinning {
        return State::Off;
    }
    if kept.is_empty() {
        Event::PinFirst {
            fingerprint: fp.to_string(),
        }
        .emit();
        return State::First;
    }
    taken(root, shape, fp)
}

/// The state of a launch that pins the set signed for it now ([`take`]);
/// unpinned (said in one line) when it cannot.
fn taken(root: &Path, shape: Shape, fp: &Fingerprint) -> State {
    match take(root, shape, fp) {
        Ok(()) => State::Held {
            missing: 0,
            changed: 0,
        },
        Err(e) => {
            Event::CannotPin {
                error: e.to_string(),
            }
            .emit();
            State::Off
        }
    }
}

impl Committer {
    /// The sign of a launch that holds a pin, in place of the sign: the set
    /// put back as signed ([`hold`]), the stamps of its members recorded
    /// again (nothing written when the files are not that set), one line
    /// of what the engine did to it; at done, the set reused. None: the
    /// launch holds no pin (the sign runs).
    pub(super) fn sign_pinned(
        &mut self,
        kind: SignKind,
        files: &[PathBuf],
    ) -> Option<Vec<(PathBuf, Stamp)>> {
        let (missing, changed) = match self.pin {
            State::Held { missing, changed } => (missing, changed),
            State::Lost => return Some(Vec::new()),
            State::Off | State::First => return None,
        };
        let Ok(_lock) = self.commit_lock() else {
            return Some(Vec::new());
        };
        let id = committed_id(&self.root, self.fingerprint.as_str());
        let Some((held, members)) = hold(&self.root, self.shape, &self.fingerprint, files) else {
            Event::CannotPin {
                error: "the set pinned is no longer the one signed for this launch".into(),
            }
            .emit();
            self.pin = State::Lost;
            return Some(Vec::new());
        };
        let total = Held {
            missing: missing + held.missing,
            changed: changed + held.changed,
            ..held
        };
        self.pin = State::Held {
            missing: total.missing,
            changed: total.changed,
        };
        let report =
            cache::sign_with(&self.root, self.shape, &self.fingerprint, Settle::Restamp).ok();
        if report
            .as_ref()
            .is_some_and(|r| Some(&r.set_id) != id.as_ref())
        {
            // a file of the set written into: keepwrap's copy with it
            Event::NotSigningPinnedChanged {
                fingerprint: self.fingerprint.to_string(),
            }
            .emit();
            self.pin = State::Lost;
            return Some(Vec::new());
        }
        if !valid(&self.root, &self.fingerprint) {
            // the copy dropped as untrusted: taken again from the set,
            // found as signed
            self.pin = taken(&self.root, self.shape, &self.fingerprint);
            if let State::Held { .. } = self.pin {
                self.pin = State::Held {
                    missing: total.missing,
                    changed: total.changed,
                };
            }
        }
        let done = matches!(kind, SignKind::Done);
        if done || held.missing + held.changed > 0 {
            Event::Pinned {
                files: total.files,
                missing: total.missing,
                changed: total.changed,
                fingerprint: self.fingerprint.to_string(),
            }
            .emit();
            record(&self.root, &self.fingerprint, &total);
        }
        if done {
            self.reused_pinned(&members);
        }
        Some(report.map(as_read).unwrap_or_default())
    }

    /// At done, the pinned set `members` as it is now: reused.
    fn reused_pinned(&mut self, members: &[PathBuf]) {
        self.signed_at_done = members.to_vec();
        let n = members.len();
        Event::Reused {
            files: n,
            entries: self.entries(members),
            fingerprint: self.fingerprint.to_string(),
        }
        .emit();
        if let Some(fleet) = self.fleet.as_mut() {
            fleet.publish(&self.root, members);
        }
        if let Some(s) = &self.store {
            s.touch(&self.fingerprint);
            Stats::record(|st| st.reuses += 1);
            crate::root::stats::credit_boot(
                s.state_fd(),
                &self.fingerprint,
                true,
                n,
                self.launched,
            );
            Stats::flush(s.state_fd());
        }
    }

    /// After the first sign at done under `--pin`: pin the set signed.
    pub(super) fn pin_first(&mut self, signed: usize) {
        if self.pin != State::First || signed == 0 {
            return;
        }
        self.pin = taken(&self.root, self.shape, &self.fingerprint);
    }
}
