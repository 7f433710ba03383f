//! The fleet store: signed sets shared through an S3-compatible bucket
//! (`--fleet s3://BUCKET/PREFIX`), so that the first pod of a launch tunes
//! and every other pod boots warm without a shared file system.
//!
//! # Layout
//!
//! Under `<prefix>/keepwrap/v1/<profile>/<name>/` (`<name>`: the
//! fingerprint with the GPU model, [`name_for`]):
//!
//! - `blobs/<sha256>`: a cache file's bytes, immutable, content-addressed;
//! - `sets/<id>.json`: a [`Manifest`], immutable, `id` = the sha256 of its
//!   canonical bytes (what [`Manifest::canonical`] writes);
//! - `HEAD`: `{"format":1,"set":"<id>"}`, the one mutable object.
//! - `parts/<boot>/<rank>.json`: a multi-node launch's node's part of one
//!   boot (under the cluster fingerprint; see `publish_part`).
//!
//! # Publish (after the set is signed locally at done, on a helper thread)
//!
//! The files of one build (that of the file written last), every blob,
//! then the manifest, each `If-None-Match: *` (a 412 means the same bytes
//! are there already). Then HEAD: created with `If-None-Match: *`; when one
//! exists it is replaced (`If-Match` the ETag this boot's restore read)
//! when that restore found its set unusable or of another build, else left
//! alone (the first complete set wins). Blobs and manifest land before
//! HEAD, so no HEAD ever names an incomplete set.
//!
//! # Restore (before the engine starts, when the root has no set for it)
//!
//! The machine's GPU model (from the driver's `/proc` files: none, no
//! restore), HEAD, then the manifest (its hash is its id; its format, profile and
//! fingerprint are ours; every path is a cache file path, which carries the
//! FlashInfer version, the GPU architecture and the engine's own key), then
//! every blob (its size and sha256 as the manifest says; a JSON object, as
//! prune judges a cache file; one build, tuned on this machine's GPU
//! model). Of a multi-node set, this node's files are placed, or every
//! node's for a tree that must be the same set on every node
//! ([`Shape::same_on_every_node`]). Only when all passed are they written into
//! a staging directory beside the set (`<root>/.keepwrap/fleet-staging`),
//! linked into place (never over an existing file) and signed locally;
//! any failure removes what was linked and the launch boots cold. All the
//! network work runs on a helper thread, bounded by `--fleet-timeout`; a
//! stop signal ends the wait.

pub mod check;
mod refusal;
pub mod s3;
pub mod silicon;
mod state;

pub use state::{FleetState, STATE_FILE};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cache::{self, fsx, Shape};
use crate::digest::Fingerprint;
use crate::engine::fingerprint::ProfileName;
use crate::publish::{Failure, Job, Put, ReadOnly, Storage, Waited};
use s3::{Client, Endpoint, Location};

/// Version of the manifest and HEAD formats.
pub const FORMAT: u32 = 1;
/// Most files one set may list.
const MAX_FILES: usize = 4096;
/// Largest HEAD read (a HEAD is about 90 bytes).
const MAX_HEAD: u64 = 4 << 10;
/// Largest manifest read (a file's entry is a few hundred bytes).
const MAX_MANIFEST: u64 = MAX_FILES as u64 * 1024;
/// The largest stamp file read (a manifest of a few hundred bytes).
const MAX_STAMP: u64 = 1 << 16;
/// Most bytes one set's blobs may hold together: a restore holds them in
/// memory until every one verifies.
const MAX_SET: u64 = 1 << 30;
/// Where the objects of every launch live under the prefix.
pub const TOP: &str = "keepwrap/v1";

/// `--fleet-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Restore and publish.
    #[default]
    ReadWrite,
    /// Restore only: never publish.
    ReadOnly,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadWrite => "read-write",
            Mode::ReadOnly => "read-only",
        }
    }
}

/// `--fleet`, `--fleet-mode`, `--fleet-timeout`.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub url: Option<String>,
    pub mode: Mode,
    pub timeout: Duration,
    /// `--boot-id`: what the nodes of a multi-node launch share.
    pub boot_id: Option<String>,
}

/// A multi-node launch's place: this node's rank, the node count, and the
/// cluster fingerprint every node of the launch computes alike.
#[derive(Debug, Clone)]
pub struct Nodes {
    pub rank: u32,
    pub nnodes: u32,
    pub cluster: Fingerprint,
}

/// One file of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Relative to the cache root.
    pub path: String,
    pub sha256: String,
    pub size: u64,
    /// The node whose file this is (multi-node sets only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
}

/// `sets/<id>.json`: one complete set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub profile: String,
    pub fingerprint: String,
    /// Sorted by path.
    pub files: Vec<Entry>,
    /// The node count of a multi-node set (every file names its node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nnodes: Option<u32>,
    /// For a layout whose files carry no stamp of their own: each stamp
    /// file's text by its path (what the files beside it were tuned under).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stamps: BTreeMap<String, String>,
}

impl Manifest {
    /// The canonical bytes: compact JSON, fields in this order, files
    /// sorted by path.
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn id(&self) -> String {
        cache::sha256_hex(&self.canonical())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Head {
    format: u32,
    set: String,
}

/// Why a restore gave a cold boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No HEAD for this launch (404).
    Empty,
    /// A call failed: the key, the status.
    Failed(Failure),
    /// An object that does not verify: its key, and why.
    Bad { key: String, why: String },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Empty => write!(f, "no set for this launch in the bucket"),
            Miss::Failed(e) => write!(f, "{e}"),
            Miss::Bad { key, why } => write!(f, "{key}: {why}"),
        }
    }
}

/// The fleet of one launch.
pub struct Fleet {
    /// The bucket (read-only: behind [`ReadOnly`]).
    store: Arc<dyn Storage>,
    /// Where the launches are in the bucket.
    location: Location,
    timeout: Duration,
    profile: ProfileName,
    /// What this launch signs locally.
    fingerprint: Fingerprint,
    /// The shape of the cache tree: which paths are its files.
    shape: Shape,
    /// The launch's name in the bucket before the GPU model: the
    /// fingerprint, or the cluster fingerprint of a multi-node launch
    /// (alike on every node). See [`name_for`].
    name: Fingerprint,
    /// What the restore of this boot read of HEAD, for the publication.
    seen: Mutex<Option<Seen>>,
    /// A multi-node launch's place, and the boot its nodes share (hashed;
    /// None: never published).
    nodes: Option<(Nodes, Option<String>)>,
    /// The publication under way.
    running: Option<Job>,
    /// The cache root, whose `.keepwrap` holds the fleet's state file.
    root: PathBuf,
}

/// `<prefix>/keepwrap/v1/<profile>/<fingerprint>/`, relative to the prefix.
fn launch_dir(profile: ProfileName, fingerprint: &Fingerprint) -> String {
    format!("{TOP}/{}/{fingerprint}", profile.as_str())
}

/// The launch's name in the bucket: its fingerprint with the GPU model
/// (as [`silicon::model`] spells it), so that pods of two models of one
/// architecture (H100 and H200, both sm90) never share a HEAD, a set the
/// engine of the other would reject.
fn name_for(name: &Fingerprint, gpu: &str) -> Fingerprint {
    Fingerprint::of(format!("{name}\0gpu:{gpu}").as_bytes())
}

/// What a restore read of HEAD: its ETag, whether what it named could not
/// be restored (missing, invalid, for another GPU), and the build of the
/// set restored. A publisher whose restore found HEAD's set unusable, or
/// of another build than its own, replaces HEAD, only if HEAD is still
/// the object it read.
#[derive(Debug, Clone, Default)]
struct Seen {
    etag: String,
    unusable: bool,
    build: Option<String>,
}

impl Fleet {
    /// The fleet of this launch, when `--fleet` is set and usable (else
    /// None, logged). `nodes`: the nodes of a multi-node launch, or why its
    /// node flags cannot be read. `var` reads keepwrap's environment.
    pub fn new(
        args: &Settings,
        profile: ProfileName,
        fingerprint: &Fingerprint,
        root: &Path,
        shape: Shape,
        nodes: Result<Option<Nodes>, String>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Option<Fleet> {
        let url = args.url.as_deref().filter(|u| !u.is_empty())?;
        let made = nodes.and_then(|n| Ok((n, Location::parse(url)?, Endpoint::from_env(&var)?)));
        let (nodes, location, endpoint) = match made {
            Ok(x) => x,
            Err(e) => {
                crate::events::Event::FleetUnusable {
                    url: s3::redact(url),
                    error: e.to_string(),
                }
                .emit();
                return None;
            }
        };
        crate::events::Event::FleetOn {
            url: s3::redact(url),
            mode: args.mode.as_str().to_string(),
            endpoint: endpoint
                .url
                .as_deref()
                .map_or_else(|| "AWS S3".to_string(), s3::redact),
        }
        .emit();
        let name = nodes
            .as_ref()
            .map_or_else(|| fingerprint.clone(), |n| n.cluster.clone());
        let nodes = nodes.map(|n| {
            let boot = boot_id(args.boot_id.as_deref(), &var);
            match &boot {
                Some((id, source)) => crate::events::Event::FleetMultiNode {
                    node: n.rank,
                    nnodes: n.nnodes,
                    boot: id.clone(),
                    source: source.to_string(),
                }
                .emit(),
                None => crate::events::Event::FleetNoBootId {
                    node: n.rank,
                    nnodes: n.nnodes,
                }
                .emit(),
            }
            (n, boot.map(|b| b.0))
        });
        Some(Fleet {
            store: match args.mode {
                Mode::ReadWrite => Arc::new(Client::new(location.clone(), endpoint, args.timeout)),
                Mode::ReadOnly => Arc::new(ReadOnly(Client::new(
                    location.clone(),
                    endpoint,
                    args.timeout,
                ))),
            },
            location,
            timeout: args.timeout,
            profile,
            fingerprint: fingerprint.clone(),
            shape,
            name,
            seen: Mutex::new(None),
            nodes,
            running: None,
            root: root.to_path_buf(),
        })
    }

    fn key(&self, name: &Fingerprint, rel: &str) -> String {
        self.location
            .key(&format!("{}/{rel}", launch_dir(self.profile, name)))
    }

    /// Before the start, when the root has no set for this launch: bring
    /// the fleet's set into the root and sign it (the files signed), or
    /// None (a cold boot, logged). Bounded by `--fleet-timeout`; a stop
    /// signal ends it (and keepwrap).
    pub fn restore(&self, root: &Path) -> Result<Option<Vec<PathBuf>>, crate::stops::Stopped> {
        let started = Instant::now();
        // A set is restored only onto the GPU model it was tuned on: a
        // machine that shows none (no NVIDIA driver, a container that
        // hides it, GPUs of several models) cannot check one, and boots
        // cold (and publishes nothing: see `publish`).
        let gpu = match silicon::machine_model(&crate::failpoint::nvidia_gpus_dir()) {
            Ok(g) => g,
            Err(why) => {
                crate::events::Event::FleetNoGpuModel { why: why.clone() }.emit();
                // The bucket is asked all the same whether it answers: a
                // bucket that is wrong says so at the start on any machine.
                let broken = self.probe(started)?;
                self.note(|s| s.restored(&format!("not restored: {why}"), broken.as_ref()));
                return Ok(None);
            }
        };
        let name = name_for(&self.name, &gpu);
        let (tx, rx) = mpsc::channel();
        let client = self.store.clone();
        let keys = (
            self.key(&name, "HEAD"),
            self.key(&name, "sets/"),
            self.key(&name, "blobs/"),
        );
        let head_key = keys.0.clone();
        let profile = self.profile;
        let place_of = self.nodes.as_ref().map(|(n, _)| (n.rank, n.nnodes));
        let shape = self.shape;
        let job = move || {
            let _ = tx.send(fetch(
                &*client,
                &keys,
                (profile, &name, &gpu),
                place_of,
                shape,
            ));
        };
        let got = match self.on_helper(started, rx, job)? {
            Helper::NoThread => return Ok(None),
            Helper::Done(r) => Some(r),
            Helper::TimedOut => None,
        };
        let (etag, result) = match got {
            None => (
                None,
                Err(Miss::Failed(Failure {
                    key: head_key.clone(),
                    status: None,
                    what: format!(
                        "no answer within {}",
                        humantime::format_duration(self.timeout)
                    ),
                    broken: None,
                })),
            ),
            Some(r) => r,
        };
        if let Some(etag) = etag {
            let seen = Seen {
                etag,
                unusable: matches!(result, Err(Miss::Bad { .. })),
                build: result.as_ref().ok().map(|r| r.2.clone()),
            };
            if let Ok(mut s) = self.seen.lock() {
                *s = Some(seen);
            }
        }
        let (id, files) = match result {
            Ok((id, files, _)) => (id, files),
            Err(miss) => {
                match &miss {
                    Miss::Empty => crate::events::Event::FleetEmpty { key: head_key }.emit(),
                    m => failure_of(m)
                        .and_then(check::broken_event)
                        .unwrap_or_else(|| crate::events::Event::FleetRestoreFailed {
                            reason: m.to_string(),
                        })
                        .emit(),
                }
                self.note(|s| s.restored(&miss.to_string(), failure_of(&miss)));
                return Ok(None);
            }
        };
        match crate::publish::place(root, self.shape, &self.fingerprint, &files) {
            Ok(signed) => {
                crate::events::Event::FleetRestored {
                    files: signed.len(),
                    set: id.clone(),
                    took: started.elapsed(),
                }
                .emit();
                self.note(|s| s.restored(&format!("restored set {id}"), None));
                Ok(Some(signed))
            }
            Err(e) => {
                crate::events::Event::FleetCannotPlace {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                self.note(|s| s.restored(&format!("not placed: {e}"), None));
                Ok(None)
            }
        }
    }

    /// `job` on the fleet's helper thread, which sends its result on the
    /// channel `rx` reads, awaited until `--fleet-timeout` after `started`
    /// (a stop signal ends the wait, and keepwrap).
    fn on_helper<T>(
        &self,
        started: Instant,
        rx: mpsc::Receiver<T>,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<Helper<T>, crate::stops::Stopped> {
        if let Err(e) = std::thread::Builder::new()
            .name("keepwrap-fleet".into())
            .spawn(job)
        {
            crate::events::Event::FleetNoThread {
                error: e.to_string(),
            }
            .emit();
            return Ok(Helper::NoThread);
        }
        let deadline = crate::clock::after(started, self.timeout);
        loop {
            crate::stops::check()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Helper::TimedOut);
            }
            match rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(r) => return Ok(Helper::Done(r)),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(Helper::TimedOut),
            }
        }
    }

    /// One GET under the prefix, where no launch's object is: a bucket
    /// that is wrong (it does not exist, refuses these credentials, is in
    /// another region, or nothing answers) is said as at a restore. What
    /// it said, then.
    fn probe(&self, started: Instant) -> Result<Option<Failure>, crate::stops::Stopped> {
        let (tx, rx) = mpsc::channel();
        let client = self.store.clone();
        let key = self.location.key(&format!("{TOP}/"));
        let job = move || {
            let _ = tx.send(client.get(&key, MAX_HEAD));
        };
        let Helper::Done(Err(f)) = self.on_helper(started, rx, job)? else {
            return Ok(None);
        };
        Ok(check::broken_event(&f).map(|e| {
            e.emit();
            f
        }))
    }

    /// After the set is signed locally at done: publish it, on a helper
    /// thread (read-only mode publishes nothing).
    pub fn publish(&mut self, root: &Path, signed: &[PathBuf]) {
        if !self.store.writable() || signed.is_empty() {
            return;
        }
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let mut files = Vec::new();
        for rel in signed {
            let Some(path) = rel.to_str() else { return };
            let mut buf = Vec::new();
            let Ok(st) = fsx::read_at(
                nix::fcntl::AT_FDCWD,
                &root.join(rel),
                &mut buf,
                cache::MAX_CACHE_FILE,
            ) else {
                return;
            };
            files.push((path.to_string(), buf, (st.st_mtime, st.st_mtime_nsec)));
        }
        let mut stamp = |at: &str| {
            let mut buf = Vec::new();
            fsx::read_at(nix::fcntl::AT_FDCWD, &root.join(at), &mut buf, MAX_STAMP)
                .ok()
                .map(|_| buf)
        };
        let (files, build, stamps) =
            match newest_build(files, self.shape, &mut stamp).and_then(whole_dirs) {
                Ok(x) => x,
                Err(why) => {
                    crate::events::Event::FleetPublishFailed {
                        error: format!(
                            "{why}: a set is published only for the GPU model it was tuned on"
                        ),
                    }
                    .emit();
                    return;
                }
            };
        // Published only from a machine of the one GPU model the files
        // were tuned on: a machine of several models (or none it can read)
        // may hold rank files of each, and a set of some ranks only is a
        // partial hit on every pod that restores it.
        let machine = silicon::machine_model(&crate::failpoint::nvidia_gpus_dir());
        let refused = match &machine {
            Ok(m) if *m == build.gpu => None,
            Ok(m) => Some(format!(
                "its files were tuned on GPU model '{}'; this machine shows '{m}'",
                build.gpu
            )),
            Err(why) => Some(format!(
                "{why}: a set is published only from a machine of the GPU model it was tuned on"
            )),
        };
        if let Some(error) = refused {
            crate::events::Event::FleetPublishFailed { error }.emit();
            return;
        }
        let name = name_for(&self.name, &build.gpu);
        // HEAD is replaced (only if it is still what the restore read) when
        // the restore found its set unusable, or of another build than
        // the one published now (a FlashInfer upgrade, a driver's): HEAD
        // moves forward.
        let replace = self
            .seen
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .filter(|s| s.unusable || s.build.as_ref().is_some_and(|b| *b != build.id))
            .map(|s| s.etag);
        let part = match &self.nodes {
            None => None,
            // No boot id: said at the start; nothing is published.
            Some((_, None)) => return,
            Some((n, Some(boot))) => Some((n.rank, n.nnodes, boot.clone())),
        };
        let client = self.store.clone();
        let dir = self.key(&name, "");
        let profile = self.profile;
        let (fleet_root, shape) = (self.root.clone(), self.shape);
        let job = move || {
            let launch = (dir.as_str(), profile, &name);
            let replace = replace.as_deref();
            let out = match part {
                None => publish(&*client, launch, files, stamps, replace),
                Some((rank, nnodes, boot)) => {
                    let node = (rank, nnodes);
                    let files = (files, stamps);
                    match publish_part(&*client, launch, node, &boot, files, shape, replace) {
                        Ok(Err(waiting)) => {
                            crate::events::Event::FleetPartPublished {
                                node: rank,
                                nnodes,
                                boot: boot.clone(),
                                waiting,
                            }
                            .emit();
                            let what = format!(
                                "node {rank}'s part of boot {boot} uploaded; {waiting} of {nnodes} nodes not yet"
                            );
                            state::update(&fleet_root, |s| s.published(&what, None));
                            return;
                        }
                        Ok(Ok(x)) => Ok(x),
                        Err(e) => Err(e),
                    }
                }
            };
            let note = match &out {
                Ok((id, won)) => {
                    if *won {
                        crate::events::Event::FleetPublished { set: id.clone() }.emit()
                    } else {
                        crate::events::Event::FleetPublishedOther { set: id.clone() }.emit()
                    }
                    (
                        if *won {
                            format!("published set {id}")
                        } else {
                            format!("set {id} uploaded; HEAD names another set")
                        },
                        None,
                    )
                }
                Err(e) => {
                    crate::events::Event::FleetPublishFailed {
                        error: e.to_string(),
                    }
                    .emit();
                    (format!("failed: {e}"), Some(e.clone()))
                }
            };
            state::update(&fleet_root, |s| s.published(&note.0, note.1.as_ref()));
        };
        match Job::spawn("keepwrap-fleet-publish", job) {
            Ok(h) => self.running = Some(h),
            Err(e) => crate::events::Event::FleetNoThread {
                error: e.to_string(),
            }
            .emit(),
        }
    }

    /// Before keepwrap exits: let the publication finish, at most
    /// `--fleet-timeout`. When keepwrap is being stopped (a stop signal
    /// was forwarded to the engine, or came since), a publication still
    /// running is abandoned at once: a stop is a stop, and the grace
    /// period of `docker stop` or Kubernetes is the engine's. HEAD is
    /// written last, so an abandoned publication names nothing.
    pub fn finish(&mut self) {
        let Some(job) = self.running.take() else {
            return;
        };
        let deadline = crate::clock::after(Instant::now(), self.timeout);
        match job.wait(deadline, crate::stops::stopping) {
            Waited::Done => job.join(),
            Waited::Stopped => crate::events::Event::FleetPublishStopped {}.emit(),
            Waited::TimedOut => crate::events::Event::FleetPublishAbandoned {
                timeout: self.timeout,
            }
            .emit(),
        }
    }

    fn note(&self, f: impl FnOnce(&mut FleetState)) {
        state::update(&self.root, f);
    }
}

/// How a wait for the helper thread ended.
enum Helper<T> {
    Done(T),
    /// The thread could not start (said).
    NoThread,
    /// No answer within the timeout.
    TimedOut,
}

fn failure_of(m: &Miss) -> Option<&Failure> {
    match m {
        Miss::Failed(f) => Some(f),
        _ => None,
    }
}

/// A set's files: each path with its bytes.
type Files = Vec<(String, Vec<u8>)>;

/// A set fetched and verified: its id, this node's files, their build.
type Fetched = (String, Files, String);

/// The network half of a restore: HEAD's ETag (None when it could not be
/// read), and HEAD, the manifest, every blob, each verified: the set's
/// id, its files with their bytes, and their build.
fn fetch(
    client: &dyn Storage,
    keys: &(String, String, String),
    launch: (ProfileName, &Fingerprint, &str),
    place_of: Option<(u32, u32)>,
    shape: Shape,
) -> (Option<String>, Result<Fetched, Miss>) {
    let head = match client.get(&keys.0, MAX_HEAD) {
        Ok(Some(h)) => h,
        Ok(None) => return (None, Err(Miss::Empty)),
        Err(e) => return (None, Err(Miss::Failed(e))),
    };
    let etag = head.etag.clone();
    (
        Some(etag),
        fetch_set(client, keys, head.bytes, launch, place_of, shape),
    )
}

/// [`fetch`] after HEAD was read (its bytes).
fn fetch_set(
    client: &dyn Storage,
    (head_key, sets, blobs): &(String, String, String),
    head: Vec<u8>,
    (profile, fingerprint, gpu): (ProfileName, &Fingerprint, &str),
    place_of: Option<(u32, u32)>,
    shape: Shape,
) -> Result<Fetched, Miss> {
    let bad = |key: &str, why: String| Miss::Bad {
        key: key.to_string(),
        why,
    };
    let head: Head =
        serde_json::from_slice(&head).map_err(|e| bad(head_key, format!("not a HEAD ({e})")))?;
    if head.format != FORMAT || !cache::is_sha256_hex(&head.set) {
        return Err(bad(head_key, "not a HEAD of format 1 naming a set".into()));
    }
    let set_key = format!("{sets}{}.json", head.set);
    let bytes = client
        .get(&set_key, MAX_MANIFEST)
        .map_err(Miss::Failed)?
        .ok_or_else(|| bad(&set_key, "named by HEAD but missing".into()))?
        .bytes;
    if cache::sha256_hex(&bytes) != head.set {
        return Err(bad(&set_key, "its sha256 is not its id".into()));
    }
    let m: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| bad(&set_key, format!("not a manifest ({e})")))?;
    if m.format != FORMAT || m.profile != profile.as_str() || *fingerprint != m.fingerprint {
        return Err(bad(&set_key, "a set of another launch or format".into()));
    }
    check_files(&m.files, shape).map_err(|why| bad(&set_key, why))?;
    check_nodes(&m, place_of.map(|p| p.1), shape).map_err(|why| bad(&set_key, why))?;
    // Every node's part is fetched and verified, this node's placed (every
    // node's, for a tree that must be the same set on every node): all or
    // nothing across the nodes, as every node decides alike.
    let mut out = Vec::with_capacity(m.files.len());
    let mut builds = BTreeSet::new();
    let mut stamp = |at: &str| m.stamps.get(at).map(|t| t.as_bytes().to_vec());
    let mut stamps = silicon::Stamps::new(&mut stamp);
    for f in &m.files {
        let key = format!("{blobs}{}", f.sha256);
        // Read no more than the manifest says: a blob that is longer is
        // refused at its size, never read whole.
        let got = client
            .get(&key, f.size)
            .map_err(Miss::Failed)?
            .ok_or_else(|| bad(&key, format!("blob of {} missing", f.path)))?;
        if got.bytes.len() as u64 != f.size || cache::sha256_hex(&got.bytes) != f.sha256 {
            return Err(bad(
                &key,
                format!("blob of {} does not match its size and sha256", f.path),
            ));
        }
        if cache::json_object_entries(&got.bytes).is_err() {
            return Err(bad(
                &key,
                format!("blob of {} is not a cache file (not a JSON object)", f.path),
            ));
        }
        // A set the engine would reject is never restored: every file is
        // of one build, tuned on this machine's GPU model.
        let build = silicon::build_in(shape, &f.path, &got.bytes, &mut stamps)
            .map_err(|why| bad(&key, why))?;
        if build.gpu != gpu {
            return Err(bad(
                &key,
                format!(
                    "{} was tuned on GPU model '{}'; this machine shows '{gpu}'",
                    f.path, build.gpu
                ),
            ));
        }
        builds.insert(build.id);
        if f.node == place_of.map(|p| p.0) || shape.same_on_every_node() {
            out.push((f.path.clone(), got.bytes));
        }
    }
    let mut builds = builds.into_iter();
    match (builds.next(), builds.next()) {
        (Some(b), None) => Ok((head.set, out, b)),
        _ => Err(bad(
            &set_key,
            "its files were tuned under several FlashInfer builds".into(),
        )),
    }
}

/// A set's nodes: none for a single-node launch; for one of `want` nodes,
/// that many, each file naming one, each node with at least one file
/// (but for a tree that is the same set on every node, where a file that
/// several nodes hold names the lowest of them only).
fn check_nodes(m: &Manifest, want: Option<u32>, shape: Shape) -> Result<(), String> {
    let n = match (m.nnodes, want) {
        (None, None) if m.files.iter().all(|f| f.node.is_none()) => return Ok(()),
        (Some(n), Some(w)) if n == w && (n as usize) <= MAX_FILES => n,
        (got, want) => {
            return Err(format!(
                "a set of {} nodes, for a launch of {}",
                got.unwrap_or(1),
                want.unwrap_or(1)
            ))
        }
    };
    let mut seen = vec![false; n as usize];
    for f in &m.files {
        match f.node {
            Some(r) if r < n => seen[r as usize] = true,
            _ => return Err(format!("'{}' names no node of {n}", f.path)),
        }
    }
    match seen.iter().position(|s| !s) {
        Some(r) if !shape.same_on_every_node() => Err(format!("node {r} of {n} has no part in it")),
        _ => Ok(()),
    }
}

/// The boot id of a multi-node launch, hashed, and where it came from:
/// `--boot-id` (`KEEPWRAP_BOOT_ID`), else SLURM's job id with its restart
/// count (and cluster name). None: the nodes share no boot keepwrap can
/// name (LeaderWorkerSet's variables name a group, not one boot of it).
fn boot_id(
    explicit: Option<&str>,
    var: impl Fn(&str) -> Option<String>,
) -> Option<(String, &'static str)> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    let (value, source) = match explicit.filter(|v| !v.is_empty()) {
        Some(v) => (format!("explicit:{v}"), "--boot-id"),
        None => {
            let job = set("SLURM_JOB_ID")?;
            let cluster = set("SLURM_CLUSTER_NAME").unwrap_or_default();
            let restart = set("SLURM_RESTART_COUNT").unwrap_or_else(|| "0".into());
            // Two `srun` steps of one job are two boots.
            let step = set("SLURM_STEP_ID").unwrap_or_default();
            (
                format!("slurm:{cluster}:{job}:{step}:{restart}"),
                "SLURM_JOB_ID, SLURM_STEP_ID and SLURM_RESTART_COUNT",
            )
        }
    };
    Some((
        cache::sha256_hex(value.as_bytes())[..32].to_string(),
        source,
    ))
}

/// A manifest's files: at least one, at most [`MAX_FILES`], sorted and
/// unique paths, each a cache file path, sizes within the cache file limit.
fn check_files(files: &[Entry], shape: Shape) -> Result<(), String> {
    if files.is_empty() || files.len() > MAX_FILES {
        return Err(format!("{} files", files.len()));
    }
    if files.windows(2).any(|w| w[0].path >= w[1].path) {
        return Err("its paths are not sorted and unique".into());
    }
    let total: u64 = files.iter().map(|f| f.size).fold(0, u64::saturating_add);
    if total > MAX_SET {
        return Err(format!("its files hold {total} bytes (at most {MAX_SET})"));
    }
    for f in files {
        if crate::publish::checked_path(&f.path, shape).is_none() {
            return Err(format!("'{}' is not a cache file path", f.path));
        }
        if !cache::is_sha256_hex(&f.sha256) || f.size > cache::MAX_CACHE_FILE {
            return Err(format!("'{}' has no sha256 or is too large", f.path));
        }
    }
    Ok(())
}

/// A launch in the bucket: its directory key (ending in `/`), profile and
/// name.
type LaunchAt<'a> = (&'a str, ProfileName, &'a Fingerprint);

/// Blobs, manifest, then HEAD (created only when there is none, or
/// replaced when it is still the object `replace` names). The set's id,
/// and whether HEAD names it.
fn publish(
    client: &dyn Storage,
    launch: LaunchAt,
    files: Files,
    stamps: BTreeMap<String, String>,
    replace: Option<&str>,
) -> Result<(String, bool), Failure> {
    let entries = entries_of(&files, None);
    upload_blobs(client, launch.0, &files, &entries)?;
    name_set(client, launch, (entries, stamps), None, replace)
}

/// The signed files of one build: that of the file written last (the
/// engine's own tuning of this boot, after any file a restore placed), and
/// that build. A file whose `_metadata` names no GPU model cannot be
/// published: no pod could match it to its machine.
fn newest_build(
    files: Vec<(String, Vec<u8>, (i64, i64))>,
    shape: Shape,
    stamp: &mut dyn FnMut(&str) -> Option<Vec<u8>>,
) -> Result<Built, String> {
    let mut built = Vec::with_capacity(files.len());
    let mut stamps = silicon::Stamps::new(stamp);
    let mut unstamped = Vec::new();
    for (path, bytes, mtime) in files {
        let b = match silicon::build_in(shape, &path, &bytes, &mut stamps) {
            Ok(b) => b,
            // A file whose stamp file is gone (a set restored from the
            // bucket, its environment never written again here) is of no
            // build that can be told: left out, as a file of another build.
            Err(_) if shape.stamp_of(&path).is_some() => {
                unstamped.push(path);
                continue;
            }
            Err(why) => return Err(why),
        };
        built.push((mtime, b, path, bytes));
    }
    let newest = built
        .iter()
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|x| x.1.clone())
        .ok_or_else(|| "no files".to_string())?;
    let (chosen, dropped): (Vec<_>, Vec<_>) = built.into_iter().partition(|x| x.1 == newest);
    let files: Files = chosen.into_iter().map(|x| (x.2, x.3)).collect();
    let dropped = dropped.into_iter().map(|x| x.2).chain(unstamped).collect();
    // the stamps of the files chosen only
    let used: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| shape.stamp_of(p))
        .collect();
    let mut stamps = stamps.texts();
    stamps.retain(|at, _| used.contains(at));
    Ok((files, newest, dropped, stamps))
}

/// The files of one build, that build, the files left out, and the stamps
/// of the files kept.
type Built = (Files, silicon::Build, Vec<String>, BTreeMap<String, String>);

/// The files of the build chosen, refused when a directory of it also
/// holds rank files of another build (another GPU model's, say): the rank
/// files of one directory are one set, published whole or not at all.
fn whole_dirs(
    (chosen, build, dropped, stamps): Built,
) -> Result<(Files, silicon::Build, BTreeMap<String, String>), String> {
    let dir = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let dirs: BTreeSet<String> = chosen.iter().map(|(p, _)| dir(p)).collect();
    if let Some(other) = dropped.iter().find(|p| dirs.contains(&dir(p))) {
        return Err(format!(
            "{} is of another build than the other rank files of its directory",
            other
        ));
    }
    Ok((chosen, build, stamps))
}

/// A set's entries, sorted by path, each path once.
fn entries_of(files: &Files, node: Option<u32>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = files
        .iter()
        .map(|(path, bytes)| Entry {
            path: path.clone(),
            sha256: cache::sha256_hex(bytes),
            size: bytes.len() as u64,
            node,
        })
        .collect();
    entries.sort();
    entries.dedup_by(|a, b| a.path == b.path);
    entries
}

/// Every blob, each created only when absent (content addressing): the
/// bytes of each entry, whose sha256 it holds already.
fn upload_blobs(
    client: &dyn Storage,
    dir: &str,
    files: &Files,
    entries: &[Entry],
) -> Result<(), Failure> {
    let bytes_of: std::collections::BTreeMap<&str, &[u8]> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let mut done = BTreeSet::new();
    for e in entries {
        let Some(bytes) = bytes_of.get(e.path.as_str()) else {
            continue;
        };
        if done.insert(e.sha256.as_str()) {
            client.put_if_absent(&format!("{dir}blobs/{}", e.sha256), bytes)?;
        }
        crate::failpoint::hit("fleet");
    }
    Ok(())
}

/// The manifest of these entries, then HEAD (created only when there is
/// none, or replaced when it is still the object `replace` names). The
/// set's id, and whether HEAD names it.
fn name_set(
    client: &dyn Storage,
    (dir, profile, name): LaunchAt,
    (files, stamps): (Vec<Entry>, BTreeMap<String, String>),
    nnodes: Option<u32>,
    replace: Option<&str>,
) -> Result<(String, bool), Failure> {
    let m = Manifest {
        format: FORMAT,
        profile: profile.as_str().to_string(),
        fingerprint: name.to_string(),
        files,
        nnodes,
        stamps,
    };
    let id = m.id();
    client.put_if_absent(&format!("{dir}sets/{id}.json"), &m.canonical())?;
    crate::failpoint::hit("fleet");
    let head = serde_json::to_vec(&Head {
        format: FORMAT,
        set: id.clone(),
    })
    .unwrap_or_default();
    let head_key = format!("{dir}HEAD");
    let replaced = |etag: &str| -> Result<bool, Failure> {
        Ok(client.replace(&head_key, &head, etag)? == Put::Written)
    };
    let won = match client.put_if_absent(&head_key, &head)? {
        Put::Written => true,
        // HEAD named a set this boot's restore could not use, or one of
        // another build, and is still that object: it moves forward.
        Put::Refused
            if replace
                .filter(|e| !e.is_empty())
                .is_some_and(|e| replaced(e).unwrap_or(false)) =>
        {
            true
        }
        Put::Refused => match client.get(&format!("{dir}HEAD"), s3::MAX_OBJECT)? {
            // HEAD names this set already: written again (the same bytes,
            // only if it is still that object), so that its time says when
            // the launch was last used, which `fleet gc` reads.
            Some(o) if o.bytes == head => {
                client.replace(&format!("{dir}HEAD"), &head, &o.etag)?;
                true
            }
            _ => false,
        },
    };
    Ok((id, won))
}

/// A multi-node launch's node: its blobs, then its part
/// (`parts/<boot>/<rank>.json`, created only when absent: the first part
/// of a node in a boot stays), then every node's part of the boot. When
/// all are there, their union is the set, named as one node's would be:
/// Ok(the set's id, whether HEAD names it). Else Err(how many nodes have
/// no part yet): a later node names the set.
fn publish_part(
    client: &dyn Storage,
    launch: LaunchAt,
    (rank, nnodes): (u32, u32),
    boot: &str,
    (files, stamps): (Files, BTreeMap<String, String>),
    shape: Shape,
    replace: Option<&str>,
) -> Result<Result<(String, bool), usize>, Failure> {
    let (dir, profile, name) = launch;
    let part = Manifest {
        format: FORMAT,
        profile: profile.as_str().to_string(),
        fingerprint: name.to_string(),
        files: entries_of(&files, Some(rank)),
        nnodes: Some(nnodes),
        stamps,
    };
    upload_blobs(client, dir, &files, &part.files)?;
    let parts = format!("{dir}parts/{boot}/");
    let mine = format!("{parts}{rank}.json");
    if client.put_if_absent(&mine, &part.canonical())? == Put::Refused {
        // The slot was taken: by these very bytes (this node published
        // again), or by another boot that had the same id. A node whose
        // slot holds other bytes never names the boot's set: the union
        // would hold another boot's files for this node.
        let there = client.get(&mine, MAX_MANIFEST)?;
        if there.is_none_or(|o| o.bytes != part.canonical()) {
            return Err(Failure {
                key: mine,
                status: Some(412),
                what: "this node's part slot of the boot holds another part (another boot with the same boot id?): the boot's set is not named".into(),
                broken: None,
            });
        }
    }
    crate::failpoint::hit("fleet");
    let (mut all, mut stamps, mut missing) = (Vec::new(), BTreeMap::new(), 0);
    for r in 0..nnodes {
        let key = format!("{parts}{r}.json");
        let Some(o) = client.get(&key, MAX_MANIFEST)? else {
            missing += 1;
            continue;
        };
        let bad = |what: String| Failure {
            key: key.clone(),
            status: None,
            what,
            broken: None,
        };
        let p: Manifest =
            serde_json::from_slice(&o.bytes).map_err(|e| bad(format!("not a part ({e})")))?;
        if p.format != FORMAT
            || p.profile != profile.as_str()
            || *name != p.fingerprint
            || p.nnodes != Some(nnodes)
            || p.files.iter().any(|f| f.node != Some(r))
        {
            return Err(bad(format!("not node {r}'s part of this launch")));
        }
        check_files(&p.files, shape).map_err(bad)?;
        all.extend(p.files);
        // the lowest node's stamp where two differ (the parts are read in
        // node order)
        for (at, text) in p.stamps {
            stamps.entry(at).or_insert(text);
        }
    }
    if missing > 0 {
        return Ok(Err(missing));
    }
    if shape.same_on_every_node() {
        // One set on every node: a path several nodes publish is the
        // lowest node's.
        all.sort_by(|a, b| (&a.path, a.node).cmp(&(&b.path, b.node)));
        all.dedup_by(|later, first| later.path == first.path);
    } else {
        all.sort();
    }
    check_files(&all, shape).map_err(|what| Failure {
        key: parts.clone(),
        status: None,
        what: format!("the union of the parts: {what}"),
        broken: None,
    })?;
    if !shape.same_on_every_node() {
        shapes_agree(client, dir, &all)?;
    }
    name_set(client, launch, (all, stamps), Some(nnodes), replace).map(Ok)
}

/// Every shape that several nodes' files hold has one tactic in all of
/// them (the tactics of one boot are all-reduced across the ranks): else
/// the union would put the nodes of later launches on different tactics
/// for one shape, which the engine's gate cannot see. Each blob is
/// fetched and verified as a restore does.
fn shapes_agree(client: &dyn Storage, dir: &str, all: &[Entry]) -> Result<(), Failure> {
    let mut tactic_of: std::collections::BTreeMap<String, (u32, serde_json::Value)> =
        std::collections::BTreeMap::new();
    for f in all {
        let key = format!("{dir}blobs/{}", f.sha256);
        let bad = |what: String| Failure {
            key: key.clone(),
            status: None,
            what,
            broken: None,
        };
        let got = client
            .get(&key, f.size)?
            .ok_or_else(|| bad(format!("blob of {} missing", f.path)))?;
        if cache::sha256_hex(&got.bytes) != f.sha256 {
            return Err(bad(format!("blob of {} does not match its sha256", f.path)));
        }
        let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&got.bytes)
            .map_err(|_| bad(format!("blob of {} is not a JSON object", f.path)))?;
        let node = f.node.unwrap_or(0);
        for (shape, value) in obj {
            if shape.starts_with('_') {
                continue;
            }
            // [runner, tactic, measurements...]: the tactic decides.
            let tactic = match &value {
                serde_json::Value::Array(v) if v.len() >= 2 => v[..2].to_vec().into(),
                v => v.clone(),
            };
            match tactic_of.get(&shape) {
                Some((n, t)) if *n != node && *t != tactic => {
                    return Err(bad(format!(
                        "nodes {n} and {node} hold different tactics for one shape: the parts are not of one boot; the boot's set is not named"
                    )))
                }
                Some(_) => {}
                None => {
                    tactic_of.insert(shape, (node, tactic));
                }
            }
        }
    }
    Ok(())
}

/// `keepwrap fleet ls`: every launch in the bucket, with its HEAD's set
/// and time.
pub fn list(bucket: &Client) -> Result<Vec<(String, String, String)>, Failure> {
    let top = bucket.location.key(&format!("{TOP}/"));
    let client: &dyn Storage = bucket;
    let mut out = Vec::new();
    for o in client.list(&top)? {
        let Some(rest) = o.key.strip_prefix(&top) else {
            continue;
        };
        let Some(launch) = rest.strip_suffix("/HEAD") else {
            continue;
        };
        // What the bucket holds is shown only once it is what keepwrap
        // writes (the caller escapes it all the same).
        let set = client
            .get(&o.key, MAX_HEAD)
            .ok()
            .flatten()
            .and_then(|h| serde_json::from_slice::<Head>(&h.bytes).ok())
            .filter(|h| h.format == FORMAT && cache::is_sha256_hex(&h.set))
            .map_or_else(|| "(not a valid HEAD)".to_string(), |h| h.set);
        out.push((launch.to_string(), set, o.modified));
    }
    Ok(out)
}

/// `keepwrap fleet gc --older-than D`: remove the launches none of whose
/// objects was written within D, in two phases. First each such launch's
/// HEAD (so no reader is sent to a set that is going); then, from a
/// listing made after that, the rest of each launch whose HEAD is still
/// absent and none of whose objects was written since gc began (a pod that
/// restored the set and publishes it again meanwhile creates HEAD: the
/// launch is kept). The launches removed.
pub fn gc(bucket: &Client, older_than: Duration, dry_run: bool) -> Result<Vec<String>, Failure> {
    let top = bucket.location.key(&format!("{TOP}/"));
    let client: &dyn Storage = bucket;
    let began = std::time::SystemTime::now();
    let written_at = |modified: &str| {
        humantime::parse_rfc3339_weak(
            modified
                .trim_end_matches('Z')
                .split('.')
                .next()
                .unwrap_or(""),
        )
        .ok()
    };
    // Within D, or at an unreadable time: kept.
    let fresh = |modified: &str| {
        written_at(modified)
            .and_then(|t| began.duration_since(t).ok())
            .is_none_or(|age| age < older_than)
    };
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut launches: BTreeSet<String> = BTreeSet::new();
    for o in client.list(&top)? {
        let Some(rest) = o.key.strip_prefix(&top) else {
            continue;
        };
        let parts: Vec<&str> = rest.splitn(3, '/').collect();
        if parts.len() < 3 {
            continue;
        }
        let launch = format!("{}/{}", parts[0], parts[1]);
        // Anything written within D keeps its launch (a set published
        // just now whose HEAD is not there yet, too).
        if fresh(&o.modified) {
            live.insert(launch.clone());
        }
        launches.insert(launch);
    }
    let stale: Vec<String> = launches.difference(&live).cloned().collect();
    if dry_run {
        return Ok(stale);
    }
    // Each HEAD goes only when a listing of its launch made just before
    // still shows nothing written within D: a warm boot that rewrote it
    // since the first listing keeps its launch.
    let mut headless = Vec::new();
    for launch in stale {
        let now = client.list(&format!("{top}{launch}/"))?;
        if now.iter().any(|o| fresh(&o.modified)) {
            continue;
        }
        client.delete(&format!("{top}{launch}/HEAD"))?;
        crate::failpoint::hit("fleet-gc");
        headless.push(launch);
    }
    // Written since gc began (the listing's times have whole seconds).
    let since_began = |modified: &str| {
        written_at(modified).is_none_or(|t| {
            t.checked_add(Duration::from_secs(1))
                .is_none_or(|t| t >= began)
        })
    };
    let mut removed = Vec::new();
    for launch in headless {
        let prefix = format!("{top}{launch}/");
        let now = client.list(&prefix)?;
        let head = format!("{prefix}HEAD");
        if now
            .iter()
            .any(|o| o.key == head || fresh(&o.modified) || since_began(&o.modified))
        {
            continue;
        }
        for o in &now {
            client.delete(&o.key)?;
        }
        removed.push(launch);
    }
    Ok(removed)
}

/// The key of the HEAD of a launch (`fingerprint`, a one-node launch of
/// `profile`) in `bucket` for this machine's GPU model, as its pods name it:
/// what `keepwrap forget --fleet` withdraws. Err: why this machine shows no
/// GPU model.
pub fn head_key(
    bucket: &Client,
    profile: ProfileName,
    fingerprint: &Fingerprint,
) -> Result<String, String> {
    let gpu = silicon::machine_model(&crate::failpoint::nvidia_gpus_dir())?;
    let name = name_for(fingerprint, &gpu);
    Ok(bucket
        .location
        .key(&format!("{}/HEAD", launch_dir(profile, &name))))
}

/// A client for `keepwrap fleet`.
pub fn client_of(url: &str, timeout: Duration) -> Result<Client, String> {
    let location = Location::parse(url)?;
    let endpoint = Endpoint::from_env(|k| std::env::var(k).ok())?;
    Ok(Client::new(location, endpoint, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> Entry {
        Entry {
            path: path.into(),
            sha256: "a".repeat(64),
            size: 2,
            node: None,
        }
    }

    #[test]
    fn manifest_ids_are_the_hash_of_the_canonical_bytes() {
        let m = Manifest {
            format: 1,
            profile: "sglang".into(),
            fingerprint: "f".repeat(64),
            files: vec![entry("0.5.23/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json")],
            nnodes: None,
            stamps: BTreeMap::new(),
        };
        let bytes = m.canonical();
        assert!(bytes.starts_with(br#"{"format":1,"profile":"sglang","#));
        // a set of files that stamp themselves says nothing of stamps
        assert!(!String::from_utf8_lossy(&bytes).contains("stamps"));
        assert_eq!(m.id(), cache::sha256_hex(&bytes));
        let back: Manifest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.canonical(), bytes);
    }

    #[test]
    fn a_boot_id_is_the_explicit_one_else_slurms_job_and_restart_count() {
        use super::s3::env;
        assert_eq!(boot_id(None, env(&[])), None, "LWS alone names no boot");
        assert_eq!(boot_id(Some(""), env(&[("LWS_GROUP_SIZE", "2")])), None);
        let job = boot_id(None, env(&[("SLURM_JOB_ID", "7")])).unwrap();
        let job0 = boot_id(
            None,
            env(&[("SLURM_JOB_ID", "7"), ("SLURM_RESTART_COUNT", "0")]),
        )
        .unwrap();
        let requeued = boot_id(
            None,
            env(&[("SLURM_JOB_ID", "7"), ("SLURM_RESTART_COUNT", "1")]),
        )
        .unwrap();
        assert_eq!(job, job0, "no restart count is restart 0");
        let step1 = boot_id(None, env(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "1")])).unwrap();
        assert_ne!(job.0, step1.0, "another srun step is another boot");
        assert_ne!(job.0, requeued.0, "a requeued job is another boot");
        assert_eq!(job.0.len(), 32);
        let explicit = boot_id(Some("b1"), env(&[("SLURM_JOB_ID", "7")])).unwrap();
        assert_eq!(explicit.1, "--boot-id");
        assert_ne!(explicit.0, job.0);
    }

    #[test]
    fn a_multi_node_set_names_every_node_and_only_a_launch_of_as_many_takes_it() {
        use crate::engine::{flashinfer::STORE, SGLANG};
        let at = |path: &str, node: Option<u32>| Entry {
            node,
            ..entry(path)
        };
        let p = "0.5.23/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json";
        let q = "0.5.23/sm90/0123456789abcdef/rank_tp1_pp0_dp0.json";
        let set = |files: Vec<Entry>, nnodes: Option<u32>| Manifest {
            format: 1,
            profile: "sglang".into(),
            fingerprint: "f".repeat(64),
            files,
            nnodes,
            stamps: BTreeMap::new(),
        };
        let two = set(vec![at(p, Some(0)), at(q, Some(1))], Some(2));
        assert!(check_nodes(&two, Some(2), SGLANG).is_ok());
        assert!(
            check_nodes(&two, None, SGLANG).is_err(),
            "a single-node launch"
        );
        assert!(check_nodes(&two, Some(3), SGLANG).is_err(), "three nodes");
        let missing = set(vec![at(p, Some(0)), at(q, Some(0))], Some(2));
        assert!(check_nodes(&missing, Some(2), SGLANG)
            .unwrap_err()
            .contains("node 1"));
        // a tree that is one set on every node: a file several nodes hold
        // names the lowest, so a node may name none
        assert!(check_nodes(&missing, Some(2), STORE).is_ok());
        assert!(check_nodes(&two, Some(3), STORE).is_err(), "three nodes");
        let huge = set(vec![at(p, Some(0))], Some(u32::MAX));
        assert!(check_nodes(&huge, Some(u32::MAX), SGLANG).is_err());
        let stray = set(vec![at(p, Some(0))], None);
        assert!(
            check_nodes(&stray, None, SGLANG).is_err(),
            "a node in a single-node set"
        );
        // A single-node set's bytes are those of the format before nodes.
        let one = set(vec![at(p, None)], None);
        assert!(!String::from_utf8(one.canonical()).unwrap().contains("node"));
    }

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "../x.json",
            "/abs.json",
            "a/../../b.json",
            ".keepwrap/x.json",
            "plain.txt",
        ] {
            assert!(
                check_files(&[entry(p)], crate::engine::SGLANG).is_err(),
                "{p}"
            );
        }
        assert!(check_files(&[], crate::engine::SGLANG).is_err());
    }

    #[test]
    fn a_set_too_large_to_hold_or_naming_a_path_twice_is_refused() {
        let p = "0.5.23/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json";
        let q = "0.5.23/sm90/0123456789abcdef/rank_tp1_pp0_dp0.json";
        assert!(check_files(&[entry(p), entry(q)], crate::engine::SGLANG).is_ok());
        assert!(
            check_files(&[entry(p), entry(p)], crate::engine::SGLANG).is_err(),
            "twice"
        );
        assert!(
            check_files(&[entry(q), entry(p)], crate::engine::SGLANG).is_err(),
            "unsorted"
        );
        let big = |path: &str| Entry {
            size: cache::MAX_CACHE_FILE,
            ..entry(path)
        };
        let many: Vec<Entry> = (0..5)
            .map(|i| {
                big(&format!(
                    "0.5.23/sm90/0123456789abcdef/rank_tp{i}_pp0_dp0.json"
                ))
            })
            .collect();
        let e = check_files(&many, crate::engine::SGLANG).unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
