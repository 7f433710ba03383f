//! Unit tests: every prune decision, sign, sets, and the no-follow rules.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tempfile::TempDir;

use super::judge::{self, Candidate, JsonErr, MemberWhy, Reason};
use super::sidecar::{self, Member, Sidecar};
use super::*;
use std::os::fd::AsFd;

const FP: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const OTHER: &str = "8c01d2e4aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIR: &str = "0.6.18/sm121/3f9c0a1b2c3d4e5f";
/// A rank file in another `<key16>/` directory.
const OTHER_RANK: &str = "0.6.18/sm121/fedcba9876543210/rank_tp0_pp0_dp0.json";

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// Run `f` with log lines captured.
fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    let logs = Logs::default();
    let sub = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    (r, text)
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
        set: id.clone(),
        committed: None,
        stat: None,
    };
    fs::write(root.join(sidecar_of(rel)), sidecar::to_bytes(&sc)).unwrap();
    let root_fd = fsx::open_root(root).unwrap();
    let sets = sidecar::open_sets(root_fd.as_fd(), true).unwrap();
    sidecar::write_manifest(
        sets.as_fd(),
        &sidecar::SetManifest {
            format: crate::SIDECAR_FORMAT,
            keepwrap: "test".into(),
            fingerprint: fp.into(),
            id,
            signed_at: 0,
            members,
        },
    )
    .unwrap();
}

/// Prune with the trash emptied before returning.
fn prune(root: &Path, fp: &str) -> std::io::Result<PruneReport> {
    prune_with(root, fp, false)
}

fn exists(root: &Path, rel: &str) -> bool {
    fs::symlink_metadata(root.join(rel)).is_ok()
}

fn prune_logged(root: &Path, fp: &str) -> (PruneReport, String) {
    let (r, logs) = capture(|| prune(root, fp));
    (r.unwrap(), logs)
}

// ---- the decisions -------------------------------------------------------

#[test]
fn signed_for_this_launch_is_kept() {
    let t = tree(2);
    let s = sign(t.path(), FP).unwrap();
    assert_eq!(s.signed.len(), 2);
    assert!(!s.unchanged);
    assert_eq!(s.failed, 0);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 2, "{logs}");
    assert_eq!(r.removed, 0);
    assert!(
        logs.contains(&format!("kept {}: signed for this launch", rank(0))),
        "{logs}"
    );
    assert!(
        logs.contains("prune: kept 2, removed 0 cache files and 0 leftovers"),
        "{logs}"
    );
    assert!(exists(t.path(), &rank(0)) && exists(t.path(), &sidecar_of(&rank(1))));
}

#[test]
fn no_sidecar_is_removed() {
    let t = tree(1);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 1));
    assert!(
        logs.contains(&format!("removed {}: no sidecar (unsigned)", rank(0))),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)));
}

#[test]
fn other_fingerprint_is_removed_with_its_sidecar() {
    let t = tree(1);
    sign(t.path(), OTHER).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!(
            "removed {}: signed for another launch (fingerprint 8c01d2e4...)",
            rank(0)
        )),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)) && !exists(t.path(), &sidecar_of(&rank(0))));
    // the sidecar beside a removed file is not counted as a leftover
    assert_eq!(r.leftovers, 0);
}

#[test]
fn bytes_changed_after_signing_are_removed() {
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    // same size, other bytes
    let b0 = body("r0").replace("r0", "x0");
    put(t.path(), &rank(0), &b0);
    // other size
    put(t.path(), &rank(1), &body("longer"));
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2));
    let line0 = format!("removed {}: changed after signing (sha256 ", rank(0));
    assert!(
        logs.contains(&line0) && logs.contains("... != signed "),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "removed {}: changed after signing (size ",
            rank(1)
        )),
        "{logs}"
    );
}

#[test]
fn invalid_json_is_removed() {
    let t = TempDir::new().unwrap();
    put(t.path(), &rank(0), "{\"a\": ");
    forge(t.path(), &rank(0), FP);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!(
            "removed {}: not valid JSON (EOF while parsing",
            rank(0)
        )),
        "{logs}"
    );
}

#[test]
fn not_an_object_is_removed() {
    let t = TempDir::new().unwrap();
    put(t.path(), &rank(0), "[1, 2]");
    forge(t.path(), &rank(0), FP);
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!(
            "removed {}: not a JSON object (an array)",
            rank(0)
        )),
        "{logs}"
    );
}

#[test]
fn garbage_sidecar_is_removed() {
    let t = tree(1);
    put(t.path(), &sidecar_of(&rank(0)), "1111\n");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!("removed {}: sidecar is not valid (", rank(0))),
        "{logs}"
    );
    assert!(!exists(t.path(), &sidecar_of(&rank(0))));
}

#[test]
fn future_sidecar_format_is_removed() {
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    let p = t.path().join(sidecar_of(&rank(0)));
    let s = fs::read_to_string(&p)
        .unwrap()
        .replacen("\"format\": 2", "\"format\": 3", 1);
    fs::write(&p, s).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains("sidecar format 3 is newer than this keepwrap's (2)"),
        "{logs}"
    );
}

#[test]
fn old_sidecar_format_is_removed() {
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    let p = t.path().join(sidecar_of(&rank(0)));
    let s = fs::read_to_string(&p)
        .unwrap()
        .replacen("\"format\": 2", "\"format\": 1", 1);
    fs::write(&p, s).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains("sidecar format 1 is older than this keepwrap's (2)"),
        "{logs}"
    );
}

#[test]
fn tampered_set_manifest_is_not_trusted() {
    // fingerprint right, but the manifest's id does not hash its members
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    let p = t.path().join(format!(".keepwrap/sets/{FP}.json"));
    let mut m: sidecar::SetManifest = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    m.members.pop();
    fs::write(&p, serde_json::to_vec(&m).unwrap()).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 2);
    assert!(
        logs.contains("set incomplete (set manifest not valid (id does not match its members))"),
        "{logs}"
    );
}

#[test]
fn a_set_without_its_manifest_is_not_trusted() {
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    fs::remove_file(t.path().join(format!(".keepwrap/sets/{FP}.json"))).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains("set incomplete (set manifest missing)"),
        "{logs}"
    );
}

#[test]
fn a_manifest_of_a_newer_set_breaks_the_older_one() {
    // The manifest is written last: a sign killed before it leaves the
    // sidecars of the new set beside the manifest of the old one.
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    let m = t.path().join(format!(".keepwrap/sets/{FP}.json"));
    let old = fs::read(&m).unwrap();
    put(t.path(), &rank(1), &body("new"));
    sign(t.path(), FP).unwrap();
    fs::write(&m, old).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains("set incomplete (set manifest names another set)"),
        "{logs}"
    );
}

#[test]
fn sidecar_size_does_not_depend_on_the_set() {
    let sizes: Vec<u64> = [1u32, 40]
        .iter()
        .map(|&n| {
            let t = tree(n);
            sign(t.path(), FP).unwrap();
            fs::metadata(t.path().join(sidecar_of(&rank(0))))
                .unwrap()
                .len()
        })
        .collect();
    assert_eq!(sizes[0], sizes[1]);
}

#[test]
fn sidecar_copied_beside_another_file_is_not_trusted() {
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    fs::copy(
        t.path().join(sidecar_of(&rank(0))),
        t.path().join(sidecar_of(&rank(1))),
    )
    .unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 0, "{logs}");
    assert!(logs.contains(&format!(
        "removed {}: sidecar is not valid (signed for another file",
        rank(1)
    )));
}

#[test]
fn leftovers_are_removed() {
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    put(t.path(), &format!("{DIR}/rank_tp9_pp0_dp0.launch"), "{}");
    put(t.path(), &format!("{DIR}/.autotuner_abc123.tmp"), "{");
    put(t.path(), &format!("{DIR}/.keepwrap-1-2-3.tmp"), "{");
    put(t.path(), &format!("{DIR}/notes.txt"), "mine");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed, r.leftovers), (1, 0, 3), "{logs}");
    assert!(logs.contains(&format!(
        "removed {DIR}/rank_tp9_pp0_dp0.launch: orphan sidecar (no cache file beside)"
    )));
    assert!(logs.contains(&format!(
        "removed {DIR}/.autotuner_abc123.tmp: FlashInfer temp file left by a crash"
    )));
    assert!(logs.contains(&format!(
        "removed {DIR}/.keepwrap-1-2-3.tmp: keepwrap temp file left by a crash"
    )));
    assert!(
        logs.contains("prune: kept 1, removed 0 cache files and 3 leftovers"),
        "{logs}"
    );
    assert!(exists(t.path(), &format!("{DIR}/notes.txt")));
}

#[test]
fn runs_and_hidden_dirs_are_untouched() {
    let t = TempDir::new().unwrap();
    let runs = format!("{DIR}/runs/rank_tp0_pp0_dp0.20261130_120000.ab.json");
    let hidden = ".keepwrap/store/x.json";
    let hidden2 = format!("{DIR}/.git/y.json");
    for p in [runs.as_str(), hidden, hidden2.as_str()] {
        put(t.path(), p, "garbage");
    }
    put(t.path(), ".keepwrap/.autotuner_1.tmp", "");
    let (r, _) = prune_logged(t.path(), FP);
    assert_eq!((r.removed, r.leftovers), (0, 0));
    for p in [
        runs.as_str(),
        hidden,
        hidden2.as_str(),
        ".keepwrap/.autotuner_1.tmp",
    ] {
        assert!(exists(t.path(), p), "{p}");
    }
    // sign does not sign them either
    assert!(sign(t.path(), FP).unwrap().signed.is_empty());
}

#[test]
fn is_cache_file_rules() {
    assert!(is_cache_file(Path::new(&rank(0))));
    for ok in [
        "0.7.2/sm121/0123456789abcdef/rank_tp0_pp0_dp0_gpuGPU-1234.json",
        "0.6.1.post2/sm90/0123456789abcdef/rank_tp3_pp0_dp1.json",
        "0.7.0rc1+cu130/sm100/ffffffffffffffff/rank_x.json",
        "unknown/sm89/0123456789abcdef/rank_tp0_pp0_dp0.json",
    ] {
        assert!(is_cache_file(Path::new(ok)), "{ok}");
    }
    // Not the engine's shape: any other depth, directory or file name.
    for not in [
        "x.json",
        "rank_tp0_pp0_dp0.json",
        "config.json",
        "a/b/c/d/rank_tp0_pp0_dp0_gpuGPU-1234.json",
        "0.7.2/sm121/0123456789abcdef/config.json",
        "0.7.2/sm121/0123456789abcdef/x/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789ABCDEF/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789abcde/rank_tp0_pp0_dp0.json",
        "0.7.2/smx/0123456789abcdef/rank_tp0_pp0_dp0.json",
        "1_Pooling/sm121/0123456789abcdef/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/rank_tp0_pp0_dp0.json",
        "0.7.2/sm121/0123456789abcdef/rank_.json",
        "0.7.2/sm121/0123456789abcdef/runs/rank_tp0_pp0_dp0.json",
    ] {
        assert!(!is_cache_file(Path::new(not)), "{not}");
    }
    assert!(!is_cache_file(Path::new("a/runs/x.json")));
    assert!(!is_cache_file(Path::new(".keepwrap/x.json")));
    assert!(!is_cache_file(Path::new("a/.autotuner_x.tmp")));
    assert!(!is_cache_file(Path::new("a/x.launch")));
    assert!(!is_cache_file(Path::new("../x.json")));
    assert!(!is_cache_file(Path::new("/abs/x.json")));
    assert!(!is_cache_file(Path::new(".json")));
    assert!(!is_cache_file(Path::new("")));
}

// ---- not regular files, symlinks -------------------------------------------

#[test]
fn symlink_json_is_unlinked_not_followed() {
    let outside = TempDir::new().unwrap();
    let target = outside.path().join("victim.json");
    fs::write(&target, body("v")).unwrap();
    let t = tree(0);
    fs::create_dir_all(t.path().join(DIR)).unwrap();
    std::os::unix::fs::symlink(&target, t.path().join(rank(0))).unwrap();
    // sign skips it
    let (s, logs) = capture(|| sign(t.path(), FP).unwrap());
    assert!(s.signed.is_empty());
    assert!(
        logs.contains(&format!(
            "not signed {}: not a regular file (symlink)",
            rank(0)
        )),
        "{logs}"
    );
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!(
            "removed {}: not a regular file (symlink)",
            rank(0)
        )),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)));
    assert_eq!(fs::read_to_string(&target).unwrap(), body("v"));
}

#[test]
fn symlinked_sidecar_is_replaced_by_sign_and_distrusted_by_prune() {
    let outside = TempDir::new().unwrap();
    let target = outside.path().join("victim");
    fs::write(&target, "precious").unwrap();
    let t = tree(1);
    let sc = t.path().join(sidecar_of(&rank(0)));
    std::os::unix::fs::symlink(&target, &sc).unwrap();

    // prune: a symlinked sidecar is unreadable; the link itself goes
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.contains(&format!(
            "removed {}: sidecar unreadable (a symlink)",
            rank(0)
        )),
        "{logs}"
    );
    assert!(!exists(t.path(), &sidecar_of(&rank(0))));
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious");

    // sign: the planted link is replaced, not written through
    put(t.path(), &rank(0), &body("r0"));
    std::os::unix::fs::symlink(&target, &sc).unwrap();
    let s = sign(t.path(), FP).unwrap();
    assert_eq!((s.signed.len(), s.failed), (1, 0));
    assert!(fs::symlink_metadata(&sc).unwrap().file_type().is_file());
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
}

#[test]
fn fifo_json_does_not_hang() {
    let t = tree(1);
    let fifo = t.path().join(format!("{DIR}/rank_tp1_pp0_dp0.json"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (s, logs) = capture(|| sign(t.path(), FP).unwrap());
    // Rank 0 alone would be a partial hit next boot: its directory is not
    // signed.
    assert!(s.signed.is_empty(), "{logs}");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains(&format!("removed {}: not a regular file (FIFO)", rank(1))),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(1)));
}

#[test]
fn fifo_sidecar_does_not_hang() {
    let t = tree(1);
    let fifo = t.path().join(sidecar_of(&rank(0)));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(logs.contains("sidecar unreadable (a FIFO)"), "{logs}");
}

#[test]
fn directory_named_json_is_left_with_a_warning() {
    let t = tree(0);
    let weird = format!("{DIR}/rank_tp9_pp0_dp0.json");
    fs::create_dir_all(t.path().join(&weird)).unwrap();
    put(t.path(), &format!("{weird}/rank_tp0_pp0_dp0.json"), "{}");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.left, r.removed), (1, 0), "{logs}");
    assert!(
        logs.contains(&format!("WARN left {weird}: a directory named *.json")),
        "{logs}"
    );
    assert!(logs.contains("left 1 that could not be removed"));
    // Not the engine's layout below it: never walked into.
    assert!(t
        .path()
        .join(format!("{weird}/rank_tp0_pp0_dp0.json"))
        .is_file());
}

// ---- sets ----------------------------------------------------------------

#[test]
fn set_with_a_member_missing_is_removed_whole() {
    let t = tree(3);
    sign(t.path(), FP).unwrap();
    fs::remove_file(t.path().join(rank(1))).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains(&format!(
            "removed {}: set incomplete ({}: missing)",
            rank(0),
            rank(1)
        )),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "removed {}: set incomplete ({}: missing)",
            rank(2),
            rank(1)
        )),
        "{logs}"
    );
    assert!(!exists(t.path(), &rank(0)) && !exists(t.path(), &rank(2)));
    // and its orphan sidecar goes as a leftover
    assert_eq!(r.leftovers, 1);
}

#[test]
fn set_with_a_member_changed_is_removed_whole() {
    let t = tree(3);
    sign(t.path(), FP).unwrap();
    put(t.path(), &rank(2), &body("changed"));
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 3), "{logs}");
    assert!(
        logs.contains(&format!("removed {}: changed after signing", rank(2))),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "removed {}: set incomplete ({}: not trusted)",
            rank(0),
            rank(2)
        )),
        "{logs}"
    );
}

#[test]
fn set_across_directories_is_one_set() {
    let t = tree(2);
    let draft = "0.6.18/sm121/aaaaaaaaaaaaaaaa/rank_tp0_pp0_dp0.json";
    put(t.path(), draft, &body("d"));
    let s = sign(t.path(), FP).unwrap();
    assert_eq!(s.signed.len(), 3);
    fs::remove_file(t.path().join(draft)).unwrap();
    let (r, _) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2));
}

/// Save the sidecars of a tree.
fn sidecars(root: &Path, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| fs::read(root.join(sidecar_of(&rank(i)))).unwrap())
        .collect()
}

/// Where the set manifest of launch FP is.
fn manifest_path(root: &Path) -> std::path::PathBuf {
    root.join(".keepwrap/sets").join(format!("{FP}.json"))
}

#[test]
fn crash_mid_resign_trusts_nothing() {
    // Signed {r0, r1, r2}; the engine rewrites r0; the re-sign crashes after
    // writing some of the new sidecars, before the manifest. Whichever
    // ones: r0 no longer has the bytes the committed set records, so
    // nothing is trusted.
    for written in [vec![0], vec![1], vec![0, 1], vec![1, 2]] {
        let t = tree(3);
        sign(t.path(), FP).unwrap();
        let old = sidecars(t.path(), 3);
        let old_manifest = fs::read(manifest_path(t.path())).unwrap();
        put(t.path(), &rank(0), &body("retuned"));
        assert!(!sign(t.path(), FP).unwrap().unchanged);
        for i in 0..3u32 {
            if !written.contains(&i) {
                fs::write(t.path().join(sidecar_of(&rank(i))), &old[i as usize]).unwrap();
            }
        }
        fs::write(manifest_path(t.path()), &old_manifest).unwrap();
        let (r, logs) = prune_logged(t.path(), FP);
        assert_eq!(
            (r.kept.len(), r.removed),
            (0, 3),
            "written {written:?}: {logs}"
        );
    }
}

#[test]
fn crash_mid_sign_of_a_grown_set_keeps_the_set_committed_before() {
    // Signed {r0, r1}; the engine adds r2; the re-sign crashes after
    // writing some of the new sidecars, before the manifest. r0 and r1
    // still hold the bytes the committed set records: it is kept whole,
    // whichever set their sidecars name; r2 is in no committed set.
    for written in [vec![2], vec![0], vec![0, 1], vec![0, 2]] {
        let t = tree(2);
        sign(t.path(), FP).unwrap();
        let old = sidecars(t.path(), 2);
        let old_manifest = fs::read(manifest_path(t.path())).unwrap();
        put(t.path(), &rank(2), &body("r2"));
        sign(t.path(), FP).unwrap();
        for i in 0..2u32 {
            if !written.contains(&i) {
                fs::write(t.path().join(sidecar_of(&rank(i))), &old[i as usize]).unwrap();
            }
        }
        if !written.contains(&2) {
            fs::remove_file(t.path().join(sidecar_of(&rank(2)))).unwrap();
        }
        fs::write(manifest_path(t.path()), &old_manifest).unwrap();
        let (r, logs) = prune_logged(t.path(), FP);
        assert_eq!(
            (r.kept.len(), r.removed),
            (2, 1),
            "written {written:?}: {logs}"
        );
        assert!(
            !r.kept.contains(&std::path::PathBuf::from(rank(2))),
            "{logs}"
        );
    }
}

#[test]
fn a_manifest_vouches_only_for_sidecars_that_name_it() {
    // Signed {r0, r1}; a manifest of another root (or an old backup) for
    // the same launch lists r0 alone, with its very bytes: r0's sidecar
    // names the set {r0, r1}, so the manifest proves nothing for it, and
    // nothing is trusted (never the part r0 of r0 + r1).
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    let bytes = fs::read(t.path().join(rank(0))).unwrap();
    let members = vec![Member {
        path: rank(0),
        sha256: crate::digest::sha256_hex(&bytes),
        size: bytes.len() as u64,
    }];
    let planted = sidecar::SetManifest {
        format: crate::SIDECAR_FORMAT,
        keepwrap: "0.1.0".into(),
        fingerprint: FP.into(),
        id: sidecar::set_id(FP, &members),
        signed_at: 1,
        members,
    };
    fs::write(
        manifest_path(t.path()),
        serde_json::to_vec(&planted).unwrap(),
    )
    .unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains(&format!(
            "removed {}: set incomplete (set manifest names another set)",
            rank(0)
        )),
        "{logs}"
    );
}

#[test]
fn resolve_sets_cascades_through_other_sets() {
    // Launch A's set {x, y} whole; launch B's set {y, w, z} lists y but y
    // carries A's, and z is missing: B is incomplete, so y goes, so A is
    // incomplete too.
    const B: &str = OTHER;
    let manifest = |fp: &str, members: &[&str]| {
        let members: Vec<Member> = members
            .iter()
            .map(|p| Member {
                path: p.to_string(),
                sha256: "a".repeat(64),
                size: 1,
            })
            .collect();
        sidecar::SetManifest {
            format: crate::SIDECAR_FORMAT,
            keepwrap: "t".into(),
            fingerprint: fp.into(),
            id: sidecar::set_id(fp, &members),
            signed_at: 0,
            members,
        }
    };
    let a = manifest(FP, &["d/x.json", "d/y.json"]);
    let b = manifest(B, &["d/w.json", "d/y.json", "d/z.json"]);
    let mk = |path: &str, m: &sidecar::SetManifest| Sidecar {
        format: crate::SIDECAR_FORMAT,
        keepwrap: "t".into(),
        fingerprint: m.fingerprint.clone(),
        path: path.into(),
        sha256: "a".repeat(64),
        size: 1,
        signed_at: 0,
        signed_at_utc: String::new(),
        set: m.id.clone(),
        committed: None,
        stat: None,
    };
    let x = mk("d/x.json", &a);
    let y = mk("d/y.json", &a);
    let w = mk("d/w.json", &b);
    let cands = [
        Candidate {
            path: "d/x.json",
            sidecar: &x,
        },
        Candidate {
            path: "d/y.json",
            sidecar: &y,
        },
        Candidate {
            path: "d/w.json",
            sidecar: &w,
        },
    ];
    let mut manifests = judge::Manifests::new();
    manifests.insert(FP.into(), Ok(a.clone()));
    manifests.insert(B.into(), Ok(b));
    let out = judge::resolve_sets(&cands, &manifests);
    assert!(
        out[0].is_some() && out[1].is_some() && out[2].is_some(),
        "{out:?}"
    );
    // only x, y: kept
    let out = judge::resolve_sets(&cands[..2], &manifests);
    assert_eq!(out, vec![None, None]);
    // y alone: x missing
    let out = judge::resolve_sets(&cands[1..2], &manifests);
    assert_eq!(
        out[0],
        Some(Reason::SetIncomplete {
            member: "d/x.json".into(),
            why: MemberWhy::NotTrusted
        })
    );
    // no manifest for A: nothing of A kept
    manifests.remove(FP);
    let out = judge::resolve_sets(&cands[..2], &manifests);
    assert_eq!(out[0], Some(Reason::SetManifest("missing".into())));
}

// ---- sign ----------------------------------------------------------------

#[test]
fn sign_twice_without_change_writes_nothing() {
    let t = tree(3);
    let first = sign(t.path(), FP).unwrap();
    assert!(!first.unchanged);
    let ino = |i: u32| {
        fs::symlink_metadata(t.path().join(sidecar_of(&rank(i))))
            .unwrap()
            .ino()
    };
    let before: Vec<u64> = (0..3).map(ino).collect();
    let second = sign(t.path(), FP).unwrap();
    assert!(second.unchanged);
    assert_eq!(second.set_id, first.set_id);
    assert_eq!(second.signed, first.signed);
    assert_eq!((0..3).map(ino).collect::<Vec<_>>(), before);
    // a change re-signs every member
    put(t.path(), &rank(1), &body("new"));
    let third = sign(t.path(), FP).unwrap();
    assert!(!third.unchanged);
    assert!((0..3).all(|i| ino(i) != before[i as usize]));
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 3);
}

#[test]
fn sign_for_another_launch_rewrites() {
    let t = tree(1);
    sign(t.path(), OTHER).unwrap();
    let s = sign(t.path(), FP).unwrap();
    assert!(!s.unchanged);
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
}

#[test]
fn sign_skips_what_is_not_a_json_object() {
    let t = tree(1);
    put(t.path(), &format!("{DIR}/rank_bad.json"), "nope");
    put(t.path(), &format!("{DIR}/rank_list.json"), "[]");
    put(t.path(), OTHER_RANK, &body("o"));
    let (s, logs) = capture(|| sign(t.path(), FP).unwrap());
    // Nothing of a directory holding a file that cannot be signed (a
    // partial hit next boot otherwise); other directories are signed.
    assert_eq!(s.signed, vec![PathBuf::from(OTHER_RANK)], "{logs}");
    assert!(
        logs.contains(&format!("not signed the 1 other cache files of {DIR}/: ")),
        "{logs}"
    );
    assert!(
        logs.contains(&format!("not signed {DIR}/rank_bad.json: not valid JSON (")),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "not signed {DIR}/rank_list.json: not a JSON object (an array)"
        )),
        "{logs}"
    );
}

#[test]
fn sidecar_content() {
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(t.path().join(sidecar_of(&rank(1)))).unwrap()).unwrap();
    let bytes = fs::read(t.path().join(rank(1))).unwrap();
    assert_eq!(v["format"], 2);
    assert_eq!(v["fingerprint"], FP);
    assert_eq!(v["path"], rank(1));
    assert_eq!(v["sha256"], crate::digest::sha256_hex(&bytes));
    assert_eq!(v["size"].as_u64(), Some(bytes.len() as u64));
    assert_eq!(v["keepwrap"], env!("CARGO_PKG_VERSION"));
    assert!(v["signed_at"].as_u64().unwrap() > 1_700_000_000);
    assert!(v["signed_at_utc"].as_str().unwrap().ends_with('Z'));
    let m: serde_json::Value = serde_json::from_slice(
        &fs::read(t.path().join(format!(".keepwrap/sets/{FP}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(v["set"], m["id"]);
    assert_eq!(m["members"].as_array().unwrap().len(), 2);
    assert_eq!(m["members"][0]["path"], rank(0));
    // the file's identity when hashed, its change time settled
    let meta = fs::metadata(t.path().join(rank(1))).unwrap();
    assert_eq!(v["stat"]["ino"].as_u64(), Some(meta.ino()));
    assert_eq!(
        v["stat"]["ctime_ns"].as_i64(),
        Some(meta.ctime() * 1_000_000_000 + meta.ctime_nsec())
    );
    // no temp files left
    let names: Vec<_> = fs::read_dir(t.path().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
}

#[test]
fn missing_root_is_empty() {
    let t = TempDir::new().unwrap();
    let root = t.path().join("nope");
    let r = prune(&root, FP).unwrap();
    assert!(r.kept.is_empty() && r.removed == 0);
    let s = sign(&root, FP).unwrap();
    assert!(s.signed.is_empty());
}

// ---- trust -----------------------------------------------------------------

#[test]
fn world_writable_dir_is_untrusted() {
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    let d = t.path().join(DIR);
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 1));
    assert!(
        logs.contains(&format!(
            "WARN removed {}: in a directory another user can write ({DIR}: world-writable without the sticky bit)",
            rank(0)
        )),
        "{logs}"
    );
}

#[test]
fn untrusted_parent_makes_children_untrusted_and_sticky_is_fine() {
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    let top = t.path().join("0.6.18");
    fs::set_permissions(&top, fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
    fs::set_permissions(&top, fs::Permissions::from_mode(0o777)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1, "{logs}");
    assert!(
        logs.contains("(0.6.18: world-writable without the sticky bit)"),
        "{logs}"
    );
    // sign refuses too
    put(t.path(), &rank(0), &body("r0"));
    let (s, logs) = capture(|| sign(t.path(), FP).unwrap());
    assert!(s.signed.is_empty());
    assert!(
        logs.contains(&format!(
            "not signed {}: in a directory another user can write",
            rank(0)
        )),
        "{logs}"
    );
}

#[test]
fn dir_owned_by_another_user_is_untrusted() {
    if !nix::unistd::geteuid().is_root() {
        return; // needs chown
    }
    let t = tree(1);
    sign(t.path(), FP).unwrap();
    let d = t.path().join(DIR);
    std::os::unix::fs::chown(&d, Some(12345), None).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(logs.contains("owned by another user"), "{logs}");
}

// ---- pure pieces ------------------------------------------------------------

#[test]
fn json_object_entries_counts_and_classifies() {
    assert_eq!(judge::json_object_entries(body("x").as_bytes()), Ok(2));
    assert_eq!(judge::json_object_entries(b"{}"), Ok(0));
    assert_eq!(
        judge::json_object_entries(b"{\"_records\": {}, \"a\": 1}"),
        Ok(1)
    );
    assert_eq!(
        judge::json_object_entries(b" [1]"),
        Err(JsonErr::NotObject("an array"))
    );
    assert_eq!(
        judge::json_object_entries(b"null"),
        Err(JsonErr::NotObject("null"))
    );
    assert_eq!(
        judge::json_object_entries(b"3"),
        Err(JsonErr::NotObject("a number"))
    );
    assert!(matches!(
        judge::json_object_entries(b"{} {}"),
        Err(JsonErr::Invalid(_))
    ));
    assert!(matches!(
        judge::json_object_entries(b""),
        Err(JsonErr::Invalid(_))
    ));
    assert!(matches!(
        judge::json_object_entries(b"{\"a\": NaNa}"),
        Err(JsonErr::Invalid(_))
    ));
    // FlashInfer's loader reads _metadata and _records as dicts
    assert_eq!(
        judge::json_object_entries(b"{\"_metadata\": 5, \"a\": [1]}"),
        Err(JsonErr::BadMeta("_metadata", "a number"))
    );
    assert_eq!(
        judge::json_object_entries(b"{\"a\": [1], \"_records\": [1]}"),
        Err(JsonErr::BadMeta("_records", "an array"))
    );
    assert_eq!(
        judge::json_object_entries(b"{\"a\": [1], \"_generation\": {}}"),
        Err(JsonErr::BadMeta("_generation", "an object"))
    );
    assert_eq!(
        judge::json_object_entries(b"{\"_metadata\": {\"x\": 1.5e300}, \"_generation\": \"ab\"}"),
        Ok(0)
    );
    // Deeper than serde_json's limit (128): Python's loader raises
    // RecursionError on far less than this.
    let deep = [b"{\"k\": ".as_slice(), &[b'['; 5000], &[b']'; 5000], b"}"].concat();
    assert!(matches!(
        judge::json_object_entries(&deep),
        Err(JsonErr::Invalid(e)) if e.contains("recursion limit")
    ));
    let ok = [b"{\"k\": ".as_slice(), &[b'['; 100], &[b']'; 100], b"}"].concat();
    assert_eq!(judge::json_object_entries(&ok), Ok(1));
    // Python's json.dump writes these
    assert_eq!(
        judge::json_object_entries(b"{\"a\": [NaN, Infinity, -Infinity], \"NaN\": \"Infinity\"}"),
        Ok(2)
    );
}

#[test]
fn entry_count_reads_a_file() {
    let t = tree(1);
    assert_eq!(entry_count(&t.path().join(rank(0))), Ok(2));
    assert!(entry_count(&t.path().join("missing.json")).is_err());
    let link = t.path().join("link.json");
    std::os::unix::fs::symlink(t.path().join(rank(0)), &link).unwrap();
    assert_eq!(
        entry_count(&link),
        Err("unreadable (a symlink)".to_string())
    );
}

#[test]
fn judge_sidecar_order_of_checks() {
    let other = format!("{{\"format\": 2, \"fingerprint\": \"{OTHER}\"}}");
    assert_eq!(
        judge::judge_sidecar(other.as_bytes(), FP, |_| true)
            .unwrap_err()
            .to_string(),
        "signed for another launch (fingerprint 8c01d2e4...)"
    );
    // a future format is judged before anything else in it
    assert_eq!(
        judge::judge_sidecar(b"{\"format\": 7, \"whatever\": []}", FP, |_| true).unwrap_err(),
        Reason::SidecarFuture(7)
    );
    assert!(matches!(
        judge::judge_sidecar(b"{\"format\": 2}", FP, |_| true).unwrap_err(),
        Reason::SidecarGarbage(_)
    ));
}

// ---- trash ---------------------------------------------------------------------

#[test]
fn a_directory_that_goes_whole_goes_to_the_trash_then_away() {
    let t = tree(3);
    sign(t.path(), OTHER).unwrap();
    put(t.path(), &format!("{DIR}/.autotuner_x.tmp"), "");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.removed, r.leftovers), (3, 1), "{logs}");
    assert!(logs.contains(&format!(
        "removed {}: signed for another launch (fingerprint 8c01d2e4...)",
        rank(2)
    )));
    assert!(!t.path().join(DIR).exists());
    assert!(t.path().join("0.6.18/sm121").is_dir());
    let trash = t.path().join(".keepwrap/trash");
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0);
    assert_eq!(fs::symlink_metadata(&trash).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn background_trash_is_emptied() {
    let t = tree(2);
    let r = super::prune(t.path(), FP).unwrap();
    assert_eq!(r.removed, 2);
    assert!(!t.path().join(DIR).exists());
    // the background thread and this call may race: both tolerate it
    empty_trash(t.path()).unwrap();
    let trash = t.path().join(".keepwrap/trash");
    for _ in 0..200 {
        if fs::read_dir(&trash).unwrap().count() == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("trash not emptied");
}

#[test]
fn a_directory_with_other_things_is_pruned_file_by_file() {
    let t = tree(2);
    put(t.path(), &format!("{DIR}/README"), "mine");
    let (r, _) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 2);
    assert!(exists(t.path(), &format!("{DIR}/README")));
    assert!(!exists(t.path(), &rank(0)));
}

#[test]
fn planted_state_dir_symlink_is_not_used_as_trash() {
    let outside = TempDir::new().unwrap();
    let t = tree(1);
    std::os::unix::fs::symlink(outside.path(), t.path().join(".keepwrap")).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1, "{logs}");
    assert!(logs.contains("cannot use .keepwrap/trash"), "{logs}");
    assert!(!exists(t.path(), &rank(0)));
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(fs::symlink_metadata(t.path().join(".keepwrap"))
        .unwrap()
        .file_type()
        .is_symlink());
}

// ---- state files under .keepwrap/ -------------------------------------------

#[test]
fn state_files_are_read_only_when_regular_and_small() {
    use std::os::fd::AsFd;
    let t = TempDir::new().unwrap();
    let dir = fsx::open_root(t.path()).unwrap();
    let read = |name: &str, max: u64| fsx::read_state_file(dir.as_fd(), name, max);
    assert!(read("missing.json", 10).unwrap().is_none());
    fs::write(t.path().join("ok.json"), b"{}").unwrap();
    assert_eq!(read("ok.json", 10).unwrap().unwrap(), b"{}");
    fs::write(t.path().join("big.json"), vec![b' '; 11]).unwrap();
    assert!(read("big.json", 10)
        .unwrap_err()
        .to_string()
        .contains("more than 10"));
    std::os::unix::fs::symlink("/dev/zero", t.path().join("zero.json")).unwrap();
    assert_eq!(
        read("zero.json", 10).unwrap_err().to_string(),
        "a symlink, not a regular file"
    );
    nix::unistd::mkfifo(
        &t.path().join("fifo.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    assert_eq!(
        read("fifo.json", 10).unwrap_err().to_string(),
        "a FIFO, not a regular file"
    );
    assert_eq!(
        fsx::open_state_file_rw(dir.as_fd(), "fifo.json", false)
            .unwrap_err()
            .to_string(),
        "a FIFO, not a regular file"
    );
    assert_eq!(
        fsx::open_state_file_rw(dir.as_fd(), "zero.json", false)
            .unwrap_err()
            .to_string(),
        "a symlink, not a regular file"
    );
    assert!(fsx::open_state_file_rw(dir.as_fd(), "lock", false).is_ok());
    assert!(fsx::open_state_file_rw(dir.as_fd(), "lock", true).is_err());
}

#[test]
fn state_directories_are_never_a_symlink_nor_writable_by_another_user() {
    use std::os::fd::AsFd;
    let t = TempDir::new().unwrap();
    let root = fsx::open_root(t.path()).unwrap();
    fs::create_dir(t.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink("elsewhere", t.path().join("linked")).unwrap();
    assert_eq!(
        fsx::open_state_dir_at(root.as_fd(), "linked", Some(0o755))
            .unwrap_err()
            .to_string(),
        "linked is a symlink, which keepwrap does not follow"
    );
    fs::create_dir(t.path().join("open")).unwrap();
    fs::set_permissions(t.path().join("open"), fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        fsx::open_state_dir_at(root.as_fd(), "open", None)
            .unwrap_err()
            .to_string(),
        "open is a directory another user can write (world-writable without the sticky bit)"
    );
    assert!(fsx::open_state_dir_at(root.as_fd(), "new", None).is_err());
    assert!(fsx::open_state_dir_at(root.as_fd(), "new", Some(0o700)).is_ok());
    assert_eq!(
        fs::metadata(t.path().join("new")).unwrap().mode() & 0o777,
        0o700
    );
    // Through a symlinked .keepwrap nothing is created.
    std::os::unix::fs::symlink("elsewhere", t.path().join(crate::STATE_DIR)).unwrap();
    assert!(fsx::state_dir(t.path(), "running").is_err());
    assert_eq!(fs::read_dir(t.path().join("elsewhere")).unwrap().count(), 0);
}

#[test]
fn kept_lines_past_sixteen_are_debug_with_one_summary() {
    let t = TempDir::new().unwrap();
    for i in 0..20u32 {
        put(
            t.path(),
            &format!("{DIR}/rank_tp{i}_pp0_dp0.json"),
            &body(&format!("r{i}")),
        );
    }
    sign(t.path(), FP).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 20);
    let kept = |level: &str| {
        logs.lines()
            .filter(|l| l.contains(level) && l.contains(": signed for this launch"))
            .count()
    };
    assert_eq!((kept("INFO"), kept("DEBUG")), (16, 4), "{logs}");
    assert!(
        logs.contains("kept 4 more cache files (KEEPWRAP_LOG=debug lists each)"),
        "{logs}"
    );
    assert!(logs.contains("prune: kept 20, removed 0"), "{logs}");
}

#[test]
fn an_edit_that_keeps_size_and_modification_time_is_caught_by_the_change_time() {
    let t = tree(2);
    sign(t.path(), FP).unwrap();
    let p = t.path().join(rank(0));
    let meta = fs::metadata(&p).unwrap();
    let sc: Sidecar =
        serde_json::from_slice(&fs::read(t.path().join(sidecar_of(&rank(0)))).unwrap()).unwrap();
    assert!(sc.stat.is_some(), "stamped at signing");
    // Same length, same inode, the modification time put back.
    let edited = fs::read_to_string(&p).unwrap().replace("r0", "x0");
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .write_all(edited.as_bytes())
        .unwrap();
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(meta.modified().unwrap()).unwrap();
    drop(f);
    let now = fs::metadata(&p).unwrap();
    assert_eq!(
        (now.ino(), now.len(), now.mtime(), now.mtime_nsec()),
        (meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec())
    );
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.contains(&format!(
            "removed {}: changed after signing (sha256 ",
            rank(0)
        )),
        "{logs}"
    );
}
