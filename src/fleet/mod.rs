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
//! - `sets/<id>.json`: an `Envelope` (see `manifest`) of the fleet's fields
//!   (profile, node count, each member's node, stamps) around the set
//!   manifest every set has ([`cache::SetManifest`], for `<name>`),
//!   immutable, `id` = the sha256 of its canonical bytes;
//! - `HEAD`: `{"format":2,"set":"<id>"}`, the one mutable object.
//! - `parts/<boot>/<rank>.json`: a multi-node launch's node's part of one
//!   boot, an envelope of its files alone (under the cluster fingerprint;
//!   see `publish_part`).
//!
//! Format 1 (of earlier builds) had a set object of its own: a HEAD of
//! another format is read as no set (`fleet_other_format`), and the set
//! this launch publishes next replaces it: one cold boot a launch.
//!
//! # Publish (after the set is signed locally at done, on a helper thread)
//!
//! The files of one build (that of the file written last), each with the
//! sha256 its local sign recorded (a file still as it was hashed then is
//! not hashed again: [`cache::read_signed`]), every blob, then the set,
//! each `If-None-Match: *` (a 412 means the same bytes are there
//! already). Then HEAD: created with `If-None-Match: *`; when one
//! exists it is replaced (`If-Match` the ETag this boot's restore read)
//! when that restore found its set unusable or of another build, else left
//! alone (the first complete set wins). Blobs and manifest land before
//! HEAD, so no HEAD ever names an incomplete set.
//!
//! # Restore (before the engine starts, when the root has no set for it)
//!
//! The machine's GPU model (from the driver's `/proc` files: none, no
//! restore), HEAD (of this format), then the set (its hash is its id; its
//! format, profile and fingerprint are ours; its set manifest whole by its
//! own id; every path is a cache file path, which carries the
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
mod manifest;
mod publication;
mod refusal;
pub mod s3;
pub mod silicon;
mod state;

pub use state::{FleetState, STATE_FILE};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::{self, fsx, Shape};
use crate::digest::Fingerprint;
use crate::engine::fingerprint::ProfileName;
use crate::publish::{Failure, Job, ReadOnly, Storage, Waited};
pub use manifest::FORMAT;
use manifest::{check_nodes, read_head, Envelope, HeadIs, MAX_HEAD, MAX_MANIFEST};
use publication::{newest_build, publish, publish_part, rewrite_head, whole_dirs};
use s3::{Client, Endpoint, Location};

/// The largest stamp file read (a manifest of a few hundred bytes).
const MAX_STAMP: u64 = 1 << 16;
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

/// Why a restore gave a cold boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No HEAD for this launch (404).
    Empty,
    /// A call failed: the key, the status.
    Failed(Failure),
    /// An object that does not verify: its key, and why.
    Bad { key: String, why: String },
    /// HEAD is of another format (a keepwrap of another format wrote
    /// it): read as no set, and replaced by the next set published.
    Format { key: String, format: u64 },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Empty => write!(f, "no set for this launch in the bucket"),
            Miss::Failed(e) => write!(f, "{e}"),
            Miss::Bad { key, why } => write!(f, "{key}: {why}"),
            Miss::Format { key, format } => {
                write!(f, "{key}: of format {format}, not {FORMAT}: read as no set")
            }
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
/// be restored (missing, invalid, for another GPU) or is not in its one
/// form (a set object that is not its canonical bytes: the set this boot
/// publishes of the same files has another id), and the build of the set
/// restored. A publisher whose restore found HEAD's set unusable or in
/// another form, or of another build than its own, replaces HEAD, only if
/// HEAD is still the object it read.
#[derive(Debug, Clone, Default)]
struct Seen {
    etag: String,
    unusable: bool,
    build: Option<String>,
    /// The id of the set restored.
    restored: Option<String>,
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
                unusable: match &result {
                    Ok(r) => !r.3,
                    Err(miss) => matches!(miss, Miss::Bad { .. } | Miss::Format { .. }),
                },
                build: result.as_ref().ok().map(|r| r.2.clone()),
                restored: result.as_ref().ok().map(|r| r.0.clone()),
            };
            if let Ok(mut s) = self.seen.lock() {
                *s = Some(seen);
            }
        }
        let (id, files) = match result {
            Ok((id, files, _, _)) => (id, files),
            Err(miss) => {
                match &miss {
                    Miss::Empty => crate::events::Event::FleetEmpty { key: head_key }.emit(),
                    Miss::Format { key, format } => crate::events::Event::FleetOtherFormat {
                        key: key.clone(),
                        format: *format,
                        reads: FORMAT,
                    }
                    .emit(),
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
        // Each file's sha256 is the one the set manifest signed, when the
        // file is still the one hashed then: not hashed again.
        let files = match cache::read_signed(root, self.shape, &self.fingerprint, signed) {
            Ok(files) => files,
            // A signed file gone, or swapped for a symlink or a FIFO since
            // the sign (never followed nor waited on).
            Err(why) => {
                crate::events::Event::FleetPublishFailed {
                    error: format!("{why}: nothing is published"),
                }
                .emit();
                return;
            }
        };
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
        let seen = self.seen.lock().ok().and_then(|s| s.clone());
        let replace = seen
            .clone()
            .filter(|s| s.unusable || s.build.as_ref().is_some_and(|b| *b != build.id))
            .map(|s| s.etag);
        let part = match &self.nodes {
            None => None,
            // No boot id: said at the start; nothing is published. A warm
            // boot writes HEAD again all the same.
            Some((_, None)) => {
                let restored = seen
                    .filter(|s| s.build.as_ref() == Some(&build.id))
                    .and_then(|s| Some((s.restored?, s.etag)));
                if let Some((set, etag)) = restored {
                    self.head_again(self.key(&name, "HEAD"), set, etag);
                }
                return;
            }
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

    /// A warm boot that publishes nothing (a multi-node launch with no
    /// boot id): HEAD (`key`), while it is still the object its restore
    /// read (`etag`), naming the set restored (`set`), written again on a
    /// helper thread, so that its time says the launch is in use, which
    /// `fleet gc` reads.
    fn head_again(&mut self, key: String, set: String, etag: String) {
        let client = self.store.clone();
        let fleet_root = self.root.clone();
        let job = move || {
            let (what, failed) = match rewrite_head(&*client, &key, &set, &etag) {
                Ok(written) => {
                    crate::events::Event::FleetHeadRewritten {
                        set: set.clone(),
                        written,
                    }
                    .emit();
                    let what = if written {
                        format!("HEAD names set {set} again")
                    } else {
                        format!("HEAD names another set than {set}")
                    };
                    (what, None)
                }
                Err(e) => {
                    crate::events::Event::FleetPublishFailed {
                        error: e.to_string(),
                    }
                    .emit();
                    (format!("failed: {e}"), Some(e))
                }
            };
            state::update(&fleet_root, |s| s.published(&what, failed.as_ref()));
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

/// A set fetched and verified: its id, this node's files (each path with
/// its bytes), their build, and whether its object is in its one form
/// (its canonical bytes).
type Fetched = (String, Vec<(String, Vec<u8>)>, String, bool);

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
    let id = match read_head(&head) {
        HeadIs::Set(id) => id,
        HeadIs::Format(format) => {
            return Err(Miss::Format {
                key: head_key.clone(),
                format,
            })
        }
        HeadIs::Bad(why) => return Err(bad(head_key, why)),
    };
    let set_key = format!("{sets}{id}.json");
    let bytes = client
        .get(&set_key, MAX_MANIFEST)
        .map_err(Miss::Failed)?
        .ok_or_else(|| bad(&set_key, "named by HEAD but missing".into()))?
        .bytes;
    if cache::sha256_hex(&bytes) != id {
        return Err(bad(&set_key, "its sha256 is not its id".into()));
    }
    let m: Envelope = serde_json::from_slice(&bytes)
        .map_err(|e| bad(&set_key, format!("not a manifest ({e})")))?;
    m.check(profile, fingerprint, shape)
        .map_err(|why| bad(&set_key, why))?;
    let canonical = m.canonical() == bytes;
    check_nodes(&m, place_of.map(|p| p.1), shape).map_err(|why| bad(&set_key, why))?;
    // Every node's part is fetched and verified, this node's placed (every
    // node's, for a tree that must be the same set on every node): all or
    // nothing across the nodes, as every node decides alike.
    let mut out = Vec::with_capacity(m.set.members.len());
    let mut builds = BTreeSet::new();
    let mut stamp = |at: &str| m.stamps.get(at).map(|t| t.as_bytes().to_vec());
    let mut stamps = silicon::Stamps::new(&mut stamp);
    for (f, node) in m.files() {
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
        if node == place_of.map(|p| p.0) || shape.same_on_every_node() {
            out.push((f.path.clone(), got.bytes));
        }
    }
    let mut builds = builds.into_iter();
    match (builds.next(), builds.next()) {
        (Some(b), None) => Ok((id, out, b, canonical)),
        _ => Err(bad(
            &set_key,
            "its files were tuned under several FlashInfer builds".into(),
        )),
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
            .map(|h| read_head(&h.bytes));
        let set = match set {
            Some(HeadIs::Set(id)) => id,
            Some(HeadIs::Format(n)) => format!("(a HEAD of format {n}: read as no set)"),
            _ => "(not a valid HEAD)".to_string(),
        };
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
}
