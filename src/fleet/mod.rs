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
//! sha256 its local sign recorded ([`cache::read_signed`]; each file is
//! hashed once, to see its bytes are the ones signed), every blob, then
//! the set,
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
//!
//! A file each: `manifest.rs` (the set's envelope and HEAD), `restore.rs`
//! (the restore, and the helper thread every call runs on),
//! `publication.rs` (the publication), `gc.rs` (`fleet ls`, `fleet gc`),
//! `check.rs` (`fleet check`), `refusal.rs` (what S3's refusals mean),
//! `s3.rs` (the client), `silicon.rs` (the GPU model and build a set was
//! tuned under), `state.rs` (`.keepwrap/fleet.json`).

pub mod check;
mod gc;
mod manifest;
mod publication;
mod refusal;
mod restore;
pub mod s3;
pub mod silicon;
mod state;

pub use gc::{gc, list};

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
        // file is still the one hashed then (checked once, as it uploads).
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
