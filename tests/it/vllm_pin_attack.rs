//! Attacks on `--pin` for a one-rank vLLM launch's managed store (the fake
//! vLLM 0.33.0, one rank): keepwrap's copy of the pinned set planted or
//! replaced, a symlink in the copy or in the tree, an engine that writes
//! into a pinned file, `forget` and `status` of a pinned launch.

use crate::common;
use serde_json::json;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::vllm_store::{entries, serve_kw, store_root};

/// `root/.keepwrap/pinned/<fp>`, the one pin under `root`.
fn pin_dir(root: &Path) -> PathBuf {
    let mut found = pins(root);
    assert_eq!(found.len(), 1, "{found:?}");
    root.join(".keepwrap/pinned").join(found.remove(0))
}

/// The names in `root/.keepwrap/pinned`, sorted.
fn pins(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join(".keepwrap/pinned"))
        .map(|l| {
            l.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A first boot under `--pin`: its set signed (and pinned), as in the tree.
fn pinned_first(home: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let first = serve_kw(home, &["--pin"], &[], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.has_event("pin_first"), "{}", first.stderr);
    let set = entries(&store_root(home));
    assert!(
        first.logged_with("signed", json!({"files": set.len()})),
        "{}",
        first.stderr
    );
    set
}

/// `entry` (an entry's bytes) with another tactic.
fn other_tactic(entry: &[u8], tactic: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(entry).unwrap();
    v["tactic"] = json!([tactic, 0]);
    serde_json::to_vec_pretty(&v).unwrap()
}

/// A boot under `--pin` that found its set as signed: it tuned nothing,
/// reused it whole and left it byte for byte.
fn assert_reused_as_signed(f: &common::Finished, root: &Path, set: &BTreeMap<PathBuf, Vec<u8>>) {
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(f.tuned(), 0, "{:#?}\n{}", f.stdout, f.stderr);
    assert!(
        f.logged_with("reused", json!({"files": set.len()})),
        "{}",
        f.stderr
    );
    assert!(!f.has_event("removed"), "{}", f.stderr);
    assert_eq!(&entries(root), set);
}

/// A pinned launch whose copy of a member `plant` changes (given the
/// pin's `files` directory, the member's path in it and its bytes), then
/// its next boot under `--pin`: the set as signed, the boot, and the path
/// its `pin_untrusted` line named.
fn boot_after_planting(
    home: &Path,
    plant: impl FnOnce(&Path, &Path, &[u8]) -> PathBuf,
) -> (BTreeMap<PathBuf, Vec<u8>>, common::Finished, String) {
    let root = store_root(home);
    let set = pinned_first(home);
    let (path, bytes) = set.iter().next().unwrap();
    let rel = path.strip_prefix(&root).unwrap();
    let planted = plant(&pin_dir(&root).join("files"), rel, bytes);
    let next = serve_kw(home, &["--pin"], &[], &[]);
    let line = next.event("pin_untrusted");
    assert_eq!(line["path"], json!(planted), "{}", next.stderr);
    let named = planted.to_str().unwrap().to_string();
    (set, next, named)
}

/// keepwrap's copy of a pinned file holds other bytes than the file signed
/// (the set's id left as it was): it is never put back over the good file
/// of the tree, a line names it, and the set signed is reused whole.
#[test]
fn a_pinned_copy_with_other_bytes_is_never_put_back_and_the_set_signed_is_reused() {
    let home = common::home();
    let root = store_root(home.path());
    let (set, next, _) = boot_after_planting(home.path(), |files, rel, bytes| {
        std::fs::remove_file(files.join(rel)).unwrap();
        std::fs::write(files.join(rel), other_tactic(bytes, "planted")).unwrap();
        rel.to_path_buf()
    });
    assert!(!next.has_event("pin_put_back"), "{}", next.stderr);
    assert_reused_as_signed(&next, &root, &set);
    // the copy is taken again from the set as checked: a member the engine
    // replaces is put back with the bytes signed
    let busy = serve_kw(home.path(), &["--pin"], &[], &[("FAKE_VLLM_RETUNE", "24")]);
    assert!(
        busy.logged_with("pinned", json!({"changed": 24})),
        "{}",
        busy.stderr
    );
    assert_eq!(entries(&root), set);
}

/// A symlink in keepwrap's copy, under a member's name, pointing at other
/// bytes: never followed nor put back in the tree.
#[test]
fn a_symlink_in_the_pinned_copy_is_never_put_back() {
    let home = common::home();
    let root = store_root(home.path());
    let elsewhere = home.path().join("elsewhere.json");
    let (set, next, rel) = boot_after_planting(home.path(), |files, rel, bytes| {
        std::fs::write(&elsewhere, other_tactic(bytes, "planted")).unwrap();
        std::fs::remove_file(files.join(rel)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, files.join(rel)).unwrap();
        rel.to_path_buf()
    });
    let in_tree = std::fs::symlink_metadata(root.join(rel)).unwrap();
    assert!(!in_tree.is_symlink());
    assert_reused_as_signed(&next, &root, &set);
}

/// A file planted in keepwrap's copy under a name the set does not have
/// (a valid entry of a shape the engine meets): it never reaches the
/// tree, so the engine never serves it and nothing counts it.
#[test]
fn a_file_planted_in_the_pinned_copy_outside_the_set_never_reaches_the_tree() {
    let home = common::home();
    let root = store_root(home.path());
    let (set, next, planted) = boot_after_planting(home.path(), |files, rel, bytes| {
        let planted = rel.with_file_name("0123456789abcdef01234567.json");
        std::fs::write(files.join(&planted), other_tactic(bytes, "planted")).unwrap();
        planted
    });
    assert!(
        next.logged_with("pinned", json!({"files": set.len()})),
        "{}",
        next.stderr
    );
    assert!(!root.join(planted).exists());
    assert_reused_as_signed(&next, &root, &set);
}

/// The tree's `entries` directory made a symlink to a directory outside
/// the root while keepwrap was away: putting the pinned set back never
/// writes through it.
#[test]
fn putting_a_pinned_set_back_never_writes_through_a_symlink_in_the_tree() {
    let home = common::home();
    let root = store_root(home.path());
    let set = pinned_first(home.path());
    let entries_dir = set.keys().next().unwrap().parent().unwrap().to_path_buf();
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::rename(&entries_dir, home.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, &entries_dir).unwrap();
    let next = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert_eq!(next.code, 0, "{}", next.stderr);
    let written: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert!(
        written.is_empty(),
        "keepwrap wrote outside the root: {:?}\n{}",
        written.iter().map(|e| e.path()).collect::<Vec<_>>(),
        next.stderr
    );
    // prune then removes the symlink (and says so): the boot tunes afresh
    assert!(next.has_event("removed_symlink"), "{}", next.stderr);
    assert!(
        next.logged_with("signed", json!({"files": set.len()})),
        "{}",
        next.stderr
    );
    assert_eq!(entries(&root).len(), set.len());
}

/// The engine writes into a file of the pinned set (the file itself, not a
/// new one renamed over it): keepwrap's copy is that file, so the set
/// cannot be put back. The boot says so at done instead of claiming the
/// set as signed and reusing it; the next start drops the whole set and
/// says why, and the written bytes are never served.
#[test]
fn a_pinned_file_the_engine_writes_into_is_said_at_done_and_drops_the_whole_set() {
    let home = common::home();
    let root = store_root(home.path());
    let set = pinned_first(home.path());
    let written = serve_kw(
        home.path(),
        &["--pin"],
        &[],
        &[("FAKE_VLLM_WRITE_INTO", "1")],
    );
    assert_eq!(written.code, 0, "{}", written.stderr);
    assert!(
        written.has_event("not_signing_pinned_changed"),
        "{}",
        written.stderr
    );
    assert!(!written.has_event("pinned"), "{}", written.stderr);
    assert!(!written.has_event("reused"), "{}", written.stderr);
    let changed: Vec<PathBuf> = entries(&root)
        .into_iter()
        .filter(|(p, b)| set.get(p) != Some(b))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    let rel = changed[0].strip_prefix(&root).unwrap().to_str().unwrap();

    let next = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(
        next.events_named("removed")
            .iter()
            .any(|e| e["message"].as_str().unwrap().contains(rel)),
        "{}",
        next.stderr
    );
    assert!(
        next.logged_with("pruned", json!({"kept": 0})),
        "{}",
        next.stderr
    );
    assert_eq!(next.hit(), 0, "{:#?}", next.stdout);
    assert_eq!(next.tuned() as usize, set.len(), "{:#?}", next.stdout);
    assert!(next.has_event("signed"), "{}", next.stderr);
}

/// `keepwrap status --json -- vllm serve ...` of the launch [`serve_kw`]
/// runs.
fn status(home: &Path) -> serde_json::Value {
    maintenance(home, &["status", "--json", "--"], &[])
}

/// `keepwrap ARGS vllm serve ...` (a maintenance command on the launch
/// [`serve_kw`] runs, `extra` after its arguments) and its JSON, if any.
fn maintenance(home: &Path, args: &[&str], extra: &[&str]) -> serde_json::Value {
    let path = crate::vllm_store::installed(home);
    let out = common::vllm::hermetic(home)
        .args(args)
        .args(["vllm", "serve", "/models/fake-moe", "--tune-ms", "2"])
        .args(extra)
        .env("PYTHONPATH", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// `keepwrap forget` of a pinned launch: its copy goes with its set (the
/// hard links would keep the set's bytes on disk), and `status` no longer
/// says it is pinned.
#[test]
fn forgetting_a_pinned_launch_removes_its_copy_and_status_says_nothing_pinned() {
    let home = common::home();
    let root = store_root(home.path());
    let set = pinned_first(home.path());
    let again = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert_reused_as_signed(&again, &root, &set);
    assert_eq!(status(home.path())["pinned"]["files"], json!(set.len()));
    maintenance(home.path(), &["forget", "--"], &[]);
    assert!(entries(&root).is_empty());
    assert_eq!(pins(&root), Vec::<String>::new());
    let s = status(home.path());
    assert!(s.get("pinned").is_none(), "{s:#}");
}

/// `keepwrap forget --dry-run` of a pinned launch names its copy among what
/// would go, and removes nothing; `forget` then says it removed it.
#[test]
fn forget_says_the_pinned_copy_goes_and_a_dry_run_keeps_it() {
    let home = common::home();
    let root = store_root(home.path());
    pinned_first(home.path());
    let again = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(again.has_event("pinned"), "{}", again.stderr);
    let forget = |dry: bool| {
        let path = crate::vllm_store::installed(home.path());
        let mut cmd = common::vllm::hermetic(home.path());
        cmd.arg("forget");
        if dry {
            cmd.arg("--dry-run");
        }
        cmd.args(["--", "vllm", "serve", "/models/fake-moe", "--tune-ms", "2"])
            .env("PYTHONPATH", &path);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pinned = pins(&root);
    assert_eq!(pinned.len(), 1);
    let dry = forget(true);
    assert!(
        dry.starts_with("would forget launch ")
            && dry.contains("keepwrap's pinned copy of the set"),
        "{dry}"
    );
    assert_eq!(pins(&root), pinned, "a dry run removed the copy");
    let done = forget(false);
    assert!(
        done.starts_with("forgot launch ") && done.contains("keepwrap's pinned copy of the set"),
        "{done}"
    );
    assert_eq!(pins(&root), Vec::<String>::new());
}

/// What a SIGKILL of keepwrap while it put a pinned set back leaves in the
/// tree (a temp hard link beside a member; an entry the engine added that
/// keepwrap had not removed yet, valid and named by its key): removed
/// before the engine starts, never served, and the set reused whole.
#[test]
fn what_a_killed_put_back_leaves_in_the_tree_is_removed_before_the_start() {
    let home = common::home();
    let root = store_root(home.path());
    let set = pinned_first(home.path());
    let (path, bytes) = set.iter().next().unwrap();
    let tmp = path.with_file_name(".keepwrap-0123456789.tmp");
    let copy = pin_dir(&root)
        .join("files")
        .join(path.strip_prefix(&root).unwrap());
    std::fs::hard_link(copy, &tmp).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    v["key"] = json!("a shape the set lacks");
    let stem = &common::hex(sha2::Sha256::digest(b"a shape the set lacks"))[..24];
    let added = path.with_file_name(format!("{stem}.json"));
    std::fs::write(&added, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let next = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(!tmp.exists() && !added.exists(), "{}", next.stderr);
    assert_reused_as_signed(&next, &root, &set);
}

/// Launch A pinned, then launch B on the same root: A's set goes to the
/// store, and A's copy goes too (its hard links would keep the bytes of
/// A's set on disk once the store evicts it, and `status` would call it
/// pinned); A, back, is restored byte for byte and pinned again.
#[test]
fn another_launchs_boot_drops_the_copy_of_a_set_it_stores() {
    let home = common::home();
    let root = store_root(home.path());
    let a = pinned_first(home.path());
    let b = serve_kw(home.path(), &["--pin"], &["--max-model-len", "4096"], &[]);
    assert!(b.has_event("signed"), "{}", b.stderr);
    let b_fp = b.event("signed")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        pins(&root),
        vec![b_fp],
        "A's copy outlived its set in the tree"
    );
    let back = serve_kw(home.path(), &["--pin"], &[], &[]);
    assert!(back.has_event("restored"), "{}", back.stderr);
    assert_reused_as_signed(&back, &root, &a);
    let busy = serve_kw(home.path(), &["--pin"], &[], &[("FAKE_VLLM_RETUNE", "2")]);
    assert!(
        busy.logged_with("pinned", json!({"changed": 2})),
        "{}",
        busy.stderr
    );
    assert_eq!(entries(&root), a);
}

/// `--pin --start-cold`: the cold boot tunes afresh (the pinned set put
/// aside, not put back over the engine's writes), its set is signed and
/// pinned, and the next pinned boot is given that set.
#[test]
fn pin_with_start_cold_tunes_afresh_and_pins_the_new_set() {
    let home = common::home();
    let root = store_root(home.path());
    let old = pinned_first(home.path());
    let cold = serve_kw(home.path(), &["--pin", "--start-cold"], &[], &[]);
    assert_eq!(cold.code, 0, "{}", cold.stderr);
    assert_eq!(cold.tuned() as usize, old.len(), "{:#?}", cold.stdout);
    assert!(
        cold.logged_with("signed", json!({"files": old.len()})),
        "{}",
        cold.stderr
    );
    assert!(!cold.has_event("pinned"), "{}", cold.stderr);
    let new = entries(&root);
    assert_ne!(new, old, "the cold boot's own tactics");
    let busy = serve_kw(home.path(), &["--pin"], &[], &[("FAKE_VLLM_RETUNE", "1")]);
    assert!(
        busy.logged_with("pinned", json!({"changed": 1})),
        "{}",
        busy.stderr
    );
    assert_eq!(entries(&root), new);
}

/// A pinned boot whose engine writes into a file of the set publishes
/// nothing: a second pod, with no file system in common, boots with the
/// set as first signed, never with the bytes written into it.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_pinned_set_written_into_is_never_published_to_a_second_pod() {
    use crate::vllm_store::{fleet_pod, relative};
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = crate::fleet::Bucket::new(&ep);
    let url = bucket.url();
    let (h1, h2) = (common::home(), common::home());
    let until = ["fleet_published", "fleet_publish_failed"];
    let first = fleet_pod(h1.path(), &ep, &url, &["--pin"], &[], &until);
    assert!(first.has_event("fleet_published"), "{}", first.stderr);
    let set = relative(store_root(h1.path()));
    let written = fleet_pod(
        h1.path(),
        &ep,
        &url,
        &["--pin"],
        &[("FAKE_VLLM_WRITE_INTO", "1")],
        &[],
    );
    assert!(!written.has_event("fleet_published"), "{}", written.stderr);
    let second = fleet_pod(h2.path(), &ep, &url, &["--pin"], &[], &[]);
    assert!(second.has_event("fleet_restored"), "{}", second.stderr);
    assert_eq!(second.tuned(), 0, "{:#?}", second.stdout);
    assert_eq!(relative(store_root(h2.path())), set);
}
