//! What the fault, malformed-input and security suites share: a seeded
//! RNG, a look at the sidecar sets on disk, forged sidecars, and a tiny
//! "engine" in sh that writes rank files.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::{Rng as _, RngExt};
use proptest::test_runner::{RngAlgorithm, TestRng};
use sha2::{Digest, Sha256};

use crate::common::BIN;

/// A seeded random source for delays, variants and bytes: proptest's ChaCha
/// generator, so one printed seed replays a run.
pub struct Rng(TestRng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Rng(TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }
}

/// `KEEPWRAP_FAULT_SEED`, else the clock: printed by the caller so a
/// failure can be replayed.
pub fn seed() -> u64 {
    std::env::var("KEEPWRAP_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::common::hex(Sha256::digest(bytes))
}

/// Every file named `*.launch` below `root` (hidden and `runs/` included).
pub fn sidecar_paths(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "launch") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// A sidecar set as found on disk.
#[derive(Debug, Clone)]
pub struct SetOnDisk {
    pub id: String,
    pub fingerprint: String,
    pub members: Vec<String>,
    /// Every member present, its bytes matching, its sidecar recording
    /// them for its launch: the state prune would trust.
    pub whole: bool,
    pub why_not: String,
}

/// The set manifest of launch `fp` under `root`, if readable.
pub fn manifest(root: &Path, fp: &str) -> Option<serde_json::Value> {
    let bytes = std::fs::read(root.join(format!(".keepwrap/sets/{fp}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The sets the sidecars under `root` are in, by id: the set of a
/// sidecar's launch whose manifest lists its path (a sidecar no manifest
/// of its launch lists is in no set: keyed `none:<fingerprint>`, never
/// whole).
pub fn sets(root: &Path) -> BTreeMap<String, SetOnDisk> {
    let mut by_id: BTreeMap<String, SetOnDisk> = BTreeMap::new();
    let mut listed: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for p in sidecar_paths(root) {
        // Only regular files: a planted FIFO may still sit in keepwrap's
        // trash when the launch has ended (the trash is emptied after the
        // engine starts, and at the next launch), and reading one blocks.
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let fingerprint = v["fingerprint"].as_str().unwrap_or("").to_string();
        let lists = |m: &serde_json::Value| {
            m["members"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|x| x["path"] == v["path"]))
        };
        // A stored set's manifest is its entry's (a flat entry's moved in
        // with it).
        let stored = root.join(".keepwrap/store").join(&fingerprint);
        let m = manifest(root, &fingerprint).filter(lists).or_else(|| {
            let bytes = std::fs::read(stored.join(".set.json")).ok()?;
            let m: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            (p.starts_with(&stored) && lists(&m)).then_some(m)
        });
        let id = match m.as_ref().and_then(|m| m["id"].as_str()) {
            Some(id) => id.to_string(),
            None => format!("none:{fingerprint}"),
        };
        by_id.entry(id.clone()).or_insert_with(|| {
            let members = m
                .as_ref()
                .and_then(|m| m["members"].as_array())
                .cloned()
                .unwrap_or_default();
            let set = SetOnDisk {
                id: id.clone(),
                members: members
                    .iter()
                    .map(|m| m["path"].as_str().unwrap_or("").to_string())
                    .collect(),
                fingerprint,
                whole: false,
                why_not: if m.is_some() {
                    String::new()
                } else {
                    "no manifest of this set".into()
                },
            };
            listed.insert(id, members);
            set
        });
    }
    for set in by_id.values_mut() {
        if set.why_not.is_empty() {
            set.why_not = why_not_whole(root, set, &listed[&set.id]);
        }
        set.whole = set.why_not.is_empty();
    }
    by_id
}

/// Why the set is not one prune would trust: a member (as its manifest
/// lists it) missing, its sidecar of another launch or recording other
/// bytes, or its bytes changed.
fn why_not_whole(root: &Path, set: &SetOnDisk, members: &[serde_json::Value]) -> String {
    for m in members {
        let rel = m["path"].as_str().unwrap_or("");
        let file = root.join(rel);
        let Ok(bytes) = std::fs::read(&file) else {
            return format!("{rel}: missing");
        };
        let side = file.with_extension("launch");
        let Ok(sv) = std::fs::read(&side)
            .map_err(|_| ())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|_| ()))
        else {
            return format!("{rel}: no readable sidecar");
        };
        if sv["fingerprint"] != set.fingerprint.as_str() {
            return format!("{rel}: sidecar of another launch");
        }
        if sv["sha256"] != m["sha256"] || sv["size"] != m["size"] {
            return format!("{rel}: sidecar records other bytes");
        }
        if sv["sha256"] != sha256_hex(&bytes).as_str() || sv["size"] != bytes.len() as u64 {
            return format!("{rel}: bytes changed");
        }
    }
    String::new()
}

/// The whole sets, by id.
pub fn whole_sets(root: &Path) -> BTreeMap<String, SetOnDisk> {
    sets(root).into_iter().filter(|(_, s)| s.whole).collect()
}

/// The set id keepwrap computes (sidecar.rs), written again from its
/// documentation so a forged sidecar is self-consistent.
pub fn set_id(fingerprint: &str, members: &[(String, String, u64)]) -> String {
    let mut h = Sha256::new();
    h.update(b"keepwrap set v1\0");
    h.update(fingerprint.as_bytes());
    h.update(b"\0");
    for (path, sha, size) in members {
        h.update(path.as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\0");
        h.update(size.to_string().as_bytes());
        h.update(b"\n");
    }
    crate::common::hex(h.finalize())
}

/// The sha256, size and set id of the set of `bytes` at `rel` alone, for
/// `fingerprint`.
fn one_member_set(fingerprint: &str, rel: &str, bytes: &[u8]) -> (String, u64, String) {
    let sha = sha256_hex(bytes);
    let size = bytes.len() as u64;
    let id = set_id(fingerprint, &[(rel.to_string(), sha.clone(), size)]);
    (sha, size, id)
}

/// A well-formed sidecar signing `bytes` at `rel` for `fingerprint` (the
/// manifest of the set of it alone: [`forged_manifest`]).
pub fn forged_sidecar(fingerprint: &str, rel: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "format": 3,
        "keepwrap": "0.1.0",
        "fingerprint": fingerprint,
        "path": rel,
        "sha256": sha256_hex(bytes),
        "size": bytes.len(),
        "signed_at": 1,
        "signed_at_utc": "1970-01-01T00:00:01Z"
    })
}

/// The manifest of the one-member set of [`forged_sidecar`].
pub fn forged_manifest(fingerprint: &str, rel: &str, bytes: &[u8]) -> serde_json::Value {
    let (sha, size, id) = one_member_set(fingerprint, rel, bytes);
    serde_json::json!({
        "format": 2,
        "keepwrap": "0.1.0",
        "fingerprint": fingerprint,
        "id": id,
        "signed_at": 1,
        "members": [{"path": rel, "sha256": sha, "size": size}]
    })
}

/// Write `manifest` as the set manifest of its launch under `root`.
/// Write `bytes` at `rel` below `root`, its directories made.
pub fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// The sidecar's path beside the cache file `rel`.
pub fn sidecar_rel(rel: &str) -> String {
    format!("{}.launch", rel.strip_suffix(".json").unwrap())
}

pub fn put_manifest(root: &Path, manifest: &serde_json::Value) {
    let fp = manifest["fingerprint"].as_str().unwrap_or("x");
    let dir = root.join(".keepwrap/sets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{fp}.json")),
        serde_json::to_vec(manifest).unwrap(),
    )
    .unwrap();
}

/// `keepwrap fingerprint -- ARGV` as keepwrap computes it in this
/// environment.
pub fn fingerprint_of(argv: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("fingerprint")
        .arg("--")
        .args(argv)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A tiny engine in sh: `sh writer.sh ROOT TAG NDIRS [MARKER]` writes four
/// rank files (each with its own entry, so unify has work) into
/// `ROOT/0.7.2/sm121/<key16>/` for d in 1..=NDIRS (the key:
/// [`writer_key`]), each only if absent (as an engine that hits everything
/// writes nothing new), then touches MARKER.
pub const WRITER: &str = r#"root=$1; tag=$2; n=$3; marker=$4
h=$(printf %s "$tag" | od -An -tx1 | tr -d ' \n'); h=$(printf '%s00000000' "$h" | cut -c1-8)
d=1
while [ $d -le $n ]; do
  dir="$root/0.7.2/sm121/$h$(printf '%08x' "$d")"
  mkdir -p "$dir"
  for r in 0 1 2 3; do
    f="$dir/rank_tp${r}_pp0_dp0.json"
    [ -e "$f" ] || printf '{\n  "_metadata": {"v": "1"},\n  "(%s, %s)": ["R", %s]\n}' "$d" "$r" "$r" > "$f"
  done
  d=$((d + 1))
done
[ -z "$marker" ] || : > "$marker"
"#;

/// The `<key16>` directory the writer writes for TAG and d: the hex of
/// TAG's first 4 bytes (zero-padded), then d in 8 hex digits.
pub fn writer_key(tag: &str, d: usize) -> String {
    let mut h = crate::common::hex(tag.as_bytes());
    h.push_str("00000000");
    h.truncate(8);
    format!("{h}{d:08x}")
}

/// Write the writer script into `dir`; returns its path.
pub fn install_writer(dir: &Path) -> PathBuf {
    let p = dir.join("writer.sh");
    std::fs::write(&p, WRITER).unwrap();
    p
}

/// `keepwrap --done exit -- sh writer.sh root TAG N [MARKER]` run in
/// `base` (relative paths, so the fingerprint is the same in every base),
/// with the cache root `base/root`.
pub fn writer_launch(base: &Path, tag: &str, n: usize, marker: Option<&str>) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(base)
        .env_remove("KEEPWRAP_LOG")
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env("KEEPWRAP_CACHE_DIR", base.join("root"))
        .args([
            "--keep",
            "always",
            "--done",
            "exit",
            "--",
            "sh",
            "writer.sh",
            "root",
            tag,
        ])
        .arg(n.to_string());
    if let Some(m) = marker {
        cmd.arg(m);
    }
    cmd
}

/// A scratch directory, on tmpfs when there is one (`/dev/shm`): keepwrap
/// fsyncs every sidecar, and the trials write thousands on a shared disk.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::Builder::new().prefix("keepwrap-").tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// `cp -a SRC/. DST/` (DST created).
pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(dst)
        .status()
        .unwrap();
    assert!(st.success());
}

/// No `panicked` and no Rust backtrace in keepwrap's stderr.
pub fn assert_no_panic(stderr: &str, what: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{what}: keepwrap panicked:\n{stderr}"
    );
}
