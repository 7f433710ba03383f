//! Unit tests: every prune decision, sign, sets, and the no-follow rules.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tempfile::TempDir;

use super::json::{self, JsonErr};
use super::judge::{self, Candidate, MemberWhy, Reason};
use super::sidecar::{self, Member, Sidecar};
use super::*;
use std::os::fd::AsFd;

const FP: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const OTHER: &str = "8c01d2e4aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIR: &str = "0.6.18/sm121/3f9c0a1b2c3d4e5f";
/// A rank file in another `<key16>/` directory.
const OTHER_RANK: &str = "0.6.18/sm121/fedcba9876543210/rank_tp0_pp0_dp0.json";

/// Run `f` with its log events captured, as `--log-format json` writes
/// them.
fn capture<R>(f: impl FnOnce() -> R) -> (R, Logged) {
    let logs = crate::logging::Logs::default();
    let sub = crate::logging::json_subscriber(logs.clone());
    let r = tracing::subscriber::with_default(sub, f);
    let text = logs.text();
    let events = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (r, Logged(events))
}

/// The events a run logged.
struct Logged(Vec<serde_json::Value>);

impl Logged {
    /// An event whose name starts with `name` (`removed` also finds
    /// `removed_untrusted` and `removed_leftover`) about `path`, with a
    /// reason that starts with `reason`.
    fn said(&self, name: &str, path: &str, reason: &str) -> bool {
        self.0.iter().any(|e| {
            e["code"].as_str().is_some_and(|n| n.starts_with(name))
                && e["path"] == path
                && e["reason"].as_str().is_some_and(|r| r.starts_with(reason))
        })
    }

    /// An event named `name` with every field of `fields` at that value.
    fn has(&self, name: &str, fields: serde_json::Value) -> bool {
        self.0.iter().any(|e| {
            e["code"] == name && fields.as_object().unwrap().iter().all(|(k, v)| &e[k] == v)
        })
    }

    /// An event whose reason or error holds `part`.
    fn says(&self, part: &str) -> bool {
        self.0.iter().any(|e| {
            ["reason", "error"]
                .iter()
                .any(|k| e[*k].as_str().is_some_and(|v| v.contains(part)))
        })
    }
}

impl std::fmt::Display for Logged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for e in &self.0 {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

fn rank(i: u32) -> String {
    format!("{DIR}/rank_tp{i}_pp0_dp0.json")
}

fn body(tag: &str) -> String {
    format!(
        "{{\n  \"_metadata\": {{\"flashinfer_version\": \"0.6.18\", \"gpu\": \"NVIDIA GB10\"}},\n  \"('op', 'R', ((8, 7168),), ())\": [\"R\", [8, 34]],\n  \"('op', 'R', ((16, 7168),), ())\": [\"R\", \"{tag}\"],\n  \"_generation\": \"00\"\n}}"
    )
}

fn put(root: &Path, rel: &str, bytes: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, bytes).unwrap();
}

/// A tree with `n` rank files.
fn tree(n: u32) -> TempDir {
    let t = TempDir::new().unwrap();
    for i in 0..n {
        put(t.path(), &rank(i), &body(&format!("r{i}")));
    }
    t
}

fn sidecar_of(rel: &str) -> String {
    rel.strip_suffix(".json").unwrap().to_string() + ".launch"
}

/// A one-member set for whatever bytes are there (sign would refuse some
/// of them): its sidecar and manifest.
fn forge(root: &Path, rel: &str, fp: &str) {
    let bytes = fs::read(root.join(rel)).unwrap();
    let m = Member {
        path: rel.into(),
        sha256: crate::digest::sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    let members = vec![m.clone()];
    let id = sidecar::set_id(fp, &members);
    let sc = Sidecar {
        format: crate::SIDECAR_FORMAT,
        keepwrap: "test".into(),
        fingerprint: fp.into(),
        path: rel.into(),
        sha256: m.sha256,
        size: m.size,
        signed_at: 0,
        signed_at_utc: "1970-01-01T00:00:00Z".into(),
        stat: None,
    };
    fs::write(root.join(sidecar_of(rel)), sidecar::to_bytes(&sc)).unwrap();
    let root_fd = fsx::open_root(root).unwrap();
    let sets = sidecar::open_sets(root_fd.as_fd(), true).unwrap();
    sidecar::write_manifest(
        sets.as_fd(),
        &sidecar::SetManifest {
            format: crate::SET_FORMAT,
            keepwrap: "test".into(),
            fingerprint: fp.into(),
            id,
            signed_at: 0,
            members,
        },
    )
    .unwrap();
}

/// A test's fingerprint as the cache takes it.
fn fingerprint(fp: &str) -> crate::digest::Fingerprint {
    crate::digest::Fingerprint::parse(fp).expect("64 lowercase hex digits")
}

/// Prune with the trash emptied before returning.
fn prune(root: &Path, fp: &str) -> std::io::Result<PruneReport> {
    super::prune::prune(
        root,
        crate::engine::SGLANG,
        &fingerprint(fp),
        Empty::Now,
        None,
        None,
    )
    .map(|(r, _)| r)
}

fn exists(root: &Path, rel: &str) -> bool {
    fs::symlink_metadata(root.join(rel)).is_ok()
}

fn prune_logged(root: &Path, fp: &str) -> (PruneReport, Logged) {
    let (r, logs) = capture(|| prune(root, fp));
    (r.unwrap(), logs)
}

mod decisions;
mod files;
mod pure;
mod sets;
mod sign;
mod state;
mod trash;
mod trust;
