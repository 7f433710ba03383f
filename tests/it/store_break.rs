//! Attacks on stash and restore moving whole directories: what is planted
//! in a set's directory, in a stored entry or at a restore target, and a
//! restored file edited in place through a hard link from outside the
//! root. Each asserts the principles: never a partial hit, nothing planted
//! trusted, nothing good lost, nothing that is not the engine's touched.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use keepwrap::cache;
use keepwrap::store::Store;

const THIS: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const KEY_A: &str = "00000000000000aa";
const KEY_B: &str = "00000000000000bb";

fn fp(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

fn launch(f: &str) -> keepwrap::digest::Fingerprint {
    keepwrap::digest::Fingerprint::parse(f).unwrap()
}

/// Directories `keys` with `n` rank files each (`salt` in their bytes),
/// signed for launch `f` as one set, moved into `root` with its manifest.
fn signed_dirs(root: &Path, keys: &[&str], n: usize, f: &str, salt: u32) {
    let stage = tempfile::tempdir().unwrap();
    for key in keys {
        let dir = stage.path().join(format!("0.7.2/sm121/{key}"));
        fs::create_dir_all(&dir).unwrap();
        for r in 0..n {
            fs::write(
                dir.join(format!("rank_tp{r}_pp0_dp0.json")),
                format!("{{\"_metadata\": {{}}, \"k{r}\": [{salt}, 2]}}"),
            )
            .unwrap();
        }
    }
    cache::sign(stage.path(), keepwrap::cache::Shape::Sglang, &launch(f)).unwrap();
    fs::create_dir_all(root.join("0.7.2/sm121")).unwrap();
    for key in keys {
        let dir = format!("0.7.2/sm121/{key}");
        fs::rename(stage.path().join(&dir), root.join(&dir)).unwrap();
    }
    let sets = root.join(".keepwrap/sets");
    fs::create_dir_all(&sets).unwrap();
    let m = format!("{f}.json");
    fs::rename(stage.path().join(".keepwrap/sets").join(&m), sets.join(&m)).unwrap();
}

fn prune_as(root: &Path, store: &Store, f: &str) -> cache::PruneReport {
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::cache::Shape::Sglang,
        &launch(f),
        &mut |fd, set| store.stash(fd, set),
    )
    .unwrap();
    store.sync();
    r
}

/// Prune for launch THIS whose stash first does `meddle` to the set's
/// directory (between prune's listing and check and the move).
fn prune_meddled(root: &Path, store: &Store, meddle: impl Fn(&Path)) -> cache::PruneReport {
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::cache::Shape::Sglang,
        &launch(THIS),
        &mut |fd, set| {
            meddle(&root.join(set.dir.as_deref().expect("a set of one directory")));
            store.stash(fd, set)
        },
    )
    .unwrap();
    store.sync();
    r
}

/// The set of launch `a` in directories `keys` (`n` rank files each),
/// stored by a prune of launch THIS.
fn stored_set(root: &Path, keys: &[&str], n: usize) -> (String, Store) {
    let a = fp('a');
    signed_dirs(root, keys, n, &a, 1);
    let store = Store::open(root, keepwrap::cache::Shape::Sglang).unwrap();
    assert_eq!(prune_as(root, &store, THIS).stored, n * keys.len());
    (a, store)
}

fn ctime_of(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

fn rank(root: &Path, key: &str, r: usize) -> std::path::PathBuf {
    root.join(format!("0.7.2/sm121/{key}/rank_tp{r}_pp0_dp0.json"))
}

#[test]
fn a_symlink_or_a_directory_planted_after_the_check_is_not_stored_and_left_alone() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("precious");
    fs::write(&target, "{\"mine\": 1}").unwrap();
    // A link named like a rank file, a link over a sidecar, a directory.
    for how in ["link", "sidecar", "dir"] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let a = fp('a');
        signed_dirs(root, &[KEY_A], 4, &a, 1);
        let store = Store::open(root, keepwrap::cache::Shape::Sglang).unwrap();
        let r = prune_meddled(root, &store, |dir| match how {
            "link" => {
                std::os::unix::fs::symlink(&target, dir.join("rank_tp9_pp0_dp0.json")).unwrap()
            }
            "sidecar" => {
                std::os::unix::fs::symlink(&target, dir.join("x")).unwrap();
                fs::rename(dir.join("x"), dir.join("rank_tp1_pp0_dp0.launch")).unwrap();
            }
            _ => fs::create_dir(dir.join("sub")).unwrap(),
        });
        assert_eq!((r.stored, r.removed), (0, 4), "{how}");
        assert!(store.entries().is_empty(), "{how}");
        assert_eq!(fs::read(&target).unwrap(), b"{\"mine\": 1}", "{how}");
        let dir = root.join(format!("0.7.2/sm121/{KEY_A}"));
        match how {
            "link" => assert!(fs::symlink_metadata(dir.join("rank_tp9_pp0_dp0.json")).is_ok()),
            "dir" => assert!(dir.join("sub").is_dir()),
            _ => {}
        }
    }
}

#[test]
fn a_member_and_its_sidecar_rewritten_as_a_consistent_pair_never_come_back() {
    // The pair of another signing of the same launch (other bytes, a sidecar
    // that vouches for them), written anew after prune's check: whether the
    // listing tells the inodes apart or not (a freed number may be given
    // again), the set of `a` does not return with it.
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dirs(root, &[KEY_A], 4, &a, 1);
    let other = tempfile::tempdir().unwrap();
    signed_dirs(other.path(), &[KEY_A], 4, &a, 7);
    let store = Store::open(root, keepwrap::cache::Shape::Sglang).unwrap();
    prune_meddled(root, &store, |dir| {
        for ext in ["json", "launch"] {
            let name = format!("rank_tp2_pp0_dp0.{ext}");
            let bytes = fs::read(other.path().join(format!("0.7.2/sm121/{KEY_A}/{name}"))).unwrap();
            fs::remove_file(dir.join(&name)).unwrap();
            fs::write(dir.join(&name), bytes).unwrap();
        }
    });
    assert!(store.restore(&a).is_none());
    assert!(store.entries().is_empty());
    assert!(!rank(root, KEY_A, 2).exists());
}

#[test]
fn a_rank_file_planted_in_a_stored_entry_never_comes_back() {
    // In a tree entry (its directories restored whole when they hold just
    // the set) and in a flat one: a rank file with a sidecar copied from a
    // member, planted in the store.
    for keys in [&[KEY_A, KEY_B][..], &[KEY_A][..]] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let a = fp('a');
        signed_dirs(root, keys, 2, &a, 1);
        let store = Store::open(root, keepwrap::cache::Shape::Sglang).unwrap();
        assert_eq!(prune_as(root, &store, THIS).stored, 2 * keys.len());
        let entry = root.join(format!(".keepwrap/store/{a}"));
        let dir = if keys.len() > 1 {
            entry.join(format!("0.7.2/sm121/{KEY_A}"))
        } else {
            entry.clone()
        };
        assert!(dir.join("rank_tp0_pp0_dp0.json").is_file(), "{keys:?}");
        for ext in ["json", "launch"] {
            fs::copy(
                dir.join(format!("rank_tp0_pp0_dp0.{ext}")),
                dir.join(format!("rank_tp9_pp0_dp0.{ext}")),
            )
            .unwrap();
        }
        let back = store.restore(&a);
        assert!(!rank(root, KEY_A, 9).exists(), "{keys:?}");
        if keys.len() > 1 {
            // The set comes back (its directory file by file), the planted
            // file does not.
            assert_eq!(back.expect("restored").paths.len(), 4);
            assert!(rank(root, KEY_A, 1).is_file() && rank(root, KEY_B, 1).is_file());
        } else {
            assert!(back.is_none());
        }
    }
}

#[test]
fn a_restore_target_that_is_taken_is_never_replaced_nor_followed() {
    let outside = tempfile::tempdir().unwrap();
    for taken in ["empty", "readme", "symlink"] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let a = fp('a');
        signed_dirs(root, &[KEY_A, KEY_B], 2, &a, 1);
        let ctime = ctime_of(&rank(root, KEY_A, 1));
        let store = Store::open(root, keepwrap::cache::Shape::Sglang).unwrap();
        assert_eq!(prune_as(root, &store, THIS).stored, 4);
        let at = root.join(format!("0.7.2/sm121/{KEY_A}"));
        // (The stash moved 0.7.2/sm121 whole: only the set was there.)
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        match taken {
            "empty" => fs::create_dir(&at).unwrap(),
            "readme" => {
                fs::create_dir(&at).unwrap();
                fs::write(at.join("README"), "mine").unwrap();
            }
            _ => std::os::unix::fs::symlink(outside.path(), &at).unwrap(),
        }
        let back = store.restore(&a);
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0, "{taken}");
        match taken {
            "symlink" => {
                // Not restored, not lost: the set stays in the store.
                assert!(back.is_none());
                assert!(fs::symlink_metadata(&at).unwrap().file_type().is_symlink());
                assert!(store.verify_entry(&a).is_ok());
            }
            _ => {
                assert_eq!(back.expect("restored").paths.len(), 4, "{taken}");
                assert!(rank(root, KEY_A, 1).is_file() && rank(root, KEY_B, 1).is_file());
                if taken == "readme" {
                    assert_eq!(fs::read(at.join("README")).unwrap(), b"mine");
                } else {
                    // Moved back whole: its files keep their change times.
                    let now = ctime_of(&rank(root, KEY_A, 1));
                    assert_eq!(now, ctime);
                }
            }
        }
    }
}

#[test]
fn a_restored_file_edited_in_place_through_an_outside_hard_link_is_caught_by_its_change_time() {
    // Same size, its modification time put back: only the change time says
    // it changed. The sign signs its new bytes; with no sign, the next
    // prune of its launch does not keep the set.
    for sign in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir(&root).unwrap();
        let a = fp('a');
        signed_dirs(&root, &[KEY_A, KEY_B], 2, &a, 1);
        let link = t.path().join("outside-link");
        fs::hard_link(rank(&root, KEY_A, 1), &link).unwrap();
        let store = Store::open(&root, keepwrap::cache::Shape::Sglang).unwrap();
        assert_eq!(prune_as(&root, &store, THIS).stored, 4);
        assert_eq!(store.restore(&a).expect("restored").paths.len(), 4);
        let f = rank(&root, KEY_A, 1);
        let mtime = fs::metadata(&f).unwrap().modified().unwrap();
        let mut bytes = fs::read(&link).unwrap();
        let at = bytes.len() - 3;
        bytes[at] = b'9';
        let mut w = fs::OpenOptions::new().write(true).open(&link).unwrap();
        w.write_all(&bytes).unwrap();
        w.set_modified(mtime).unwrap();
        drop(w);
        assert_eq!(fs::metadata(&f).unwrap().modified().unwrap(), mtime);
        assert_eq!(fs::read(&f).unwrap(), bytes);
        if sign {
            cache::sign(&root, keepwrap::cache::Shape::Sglang, &launch(&a)).unwrap();
            let sc: serde_json::Value =
                serde_json::from_slice(&fs::read(f.with_extension("launch")).unwrap()).unwrap();
            use sha2::Digest;
            assert_eq!(
                sc["sha256"],
                crate::common::hex(sha2::Sha256::digest(&bytes))
            );
        } else {
            let r = prune_as(&root, &store, &a);
            assert!(r.kept.is_empty(), "{:?}", r.kept);
            assert!(!f.exists());
        }
    }
}

/// A known hole. keepwrap killed (SIGKILL) between the rename that moves a
/// set's directory into the store as a flat entry and the rename of its
/// manifest into it (`KEEPWRAP_FAILPOINT=store:1`), while a file of the
/// user's (README) was planted in that directory between prune's listing
/// and the rename: the entry holds the set and README, and no manifest.
/// Recovery does not look at `store/<fp>` (only at staging and restoring
/// directories), so README stays in the store; the restore of its launch
/// finds a stranger in a flat entry ("README is not the set's"), and
/// deletes the entry: README (not the engine's) is deleted, and the good
/// set with it. Without the kill, stash's listing sees README and puts the
/// directory back whole (`store_trash::a_file_planted_after_the_check_is_not_stored`).
/// The state the kill leaves is built here by hand.
#[test]
#[ignore = "known hole: a flat entry left by a kill with a planted file loses that file and the set at restore"]
fn known_hole_a_file_planted_before_a_kill_between_the_flat_renames_is_not_lost() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (a, store) = stored_set(root, &[KEY_A], 4);
    let entry = root.join(format!(".keepwrap/store/{a}"));
    fs::rename(
        entry.join(".set.json"),
        root.join(format!(".keepwrap/sets/{a}.json")),
    )
    .unwrap();
    fs::write(entry.join("README"), "mine").unwrap();
    // The next launch of `a`.
    store.recover();
    let back = store.restore(&a);
    let readme = [
        entry.join("README"),
        root.join(format!("0.7.2/sm121/{KEY_A}/README")),
    ];
    assert!(
        readme.iter().any(|p| p.is_file()),
        "README was deleted (restored: {})",
        back.is_some()
    );
    assert!(
        back.is_some() || store.verify_entry(&a).is_ok(),
        "the set of a was lost"
    );
}

/// Driven through the binary (a hole, fixed). A set of two directories of
/// another launch is stashed as a tree, each directory with one rename
/// (`KEEPWRAP_FAILPOINT_DELAY_MS` widens the moment after each). After the
/// first rename a file of the user's (README) is planted in the second
/// directory (listed by prune already); after the second, an empty
/// directory is made again at the second one's place (as `os.makedirs` of
/// a running engine would). The listing of the staged directory sees
/// README and stash rolls back. The second directory used to find its
/// place taken, its members went back file by file, and the staging tree
/// was removed with README in it. Now the empty directory is removed
/// first and the directory goes back whole, README in it. (Still open:
/// a place taken by a directory that is not empty; README is then deleted
/// with the staging tree.)
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_file_planted_in_a_stashed_directory_survives_a_rollback() {
    use crate::common::*;
    use std::time::Duration;
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    fs::create_dir(&ctl).unwrap();
    let cache = t.path().join("cache");
    let run = |write: usize, variant: bool, delay: bool| {
        fs::write(ctl.join("write"), write.to_string()).unwrap();
        let mut cmd = keepwrap(&cache);
        cmd.env("READS_CTL", &ctl)
            .arg("--")
            .arg("python3")
            .arg(helper("reads_at_start.py"));
        if variant {
            cmd.arg("b");
        }
        if delay {
            cmd.env("KEEPWRAP_FAILPOINT_DELAY_MS", "150");
        }
        cmd
    };
    let b = boot(&mut run(16, false, false));
    assert!(
        b.stderr.contains("tuned and signed 16 cache files"),
        "{}",
        b.stderr
    );
    let (d1, d2) = (
        cache.join("0.7.2/sm121/0000000000000001"),
        cache.join("0.7.2/sm121/0000000000000002"),
    );
    assert!(d1.is_dir() && d2.is_dir());
    // A file of the user's beside them, so that the directories move one
    // by one (not 0.7.2/sm121 whole, with one rename).
    fs::write(cache.join("0.7.2/sm121/notes.txt"), "mine").unwrap();
    let r = Running::spawn(&mut run(0, true, true));
    wait_for(
        "the first directory stashed",
        Duration::from_secs(20),
        || (!d1.exists()).then_some(()),
    );
    fs::write(d2.join("README"), "mine").unwrap();
    wait_for(
        "the second directory stashed",
        Duration::from_secs(20),
        || (!d2.exists()).then_some(()),
    );
    fs::create_dir(&d2).unwrap();
    let b = r.finish(Duration::from_secs(60));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(b.stderr.contains("README is not the set's"), "{}", b.stderr);
    // Back in place with its directory, untouched.
    assert_eq!(
        fs::read(d2.join("README")).unwrap(),
        b"mine",
        "{}",
        b.stderr
    );
}

/// A hole, fixed. keepwrap killed (SIGKILL) after a stash moved a
/// directory of a tree set into its staging directory with one rename,
/// while a file of the user's (README) had been planted in that directory
/// between prune's listing and the rename. Recovery rolled the staging
/// directory back by its manifest, member by member (creating the
/// directory anew), then removed the staging tree: README, which rode in
/// with the directory, was deleted. Now a directory whose place is free
/// goes back whole. The state the kill leaves (`KEEPWRAP_FAILPOINT=store:2`
/// with the plant) is built here by hand.
#[test]
fn a_file_planted_before_a_kill_in_a_staged_directory_is_not_lost() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (a, store) = stored_set(root, &[KEY_A, KEY_B], 2);
    let staging = root.join(format!(".keepwrap/store/{a}.in-killed"));
    fs::rename(root.join(format!(".keepwrap/store/{a}")), &staging).unwrap();
    fs::write(staging.join(format!("0.7.2/sm121/{KEY_A}/README")), "mine").unwrap();
    assert_eq!(store.recover(), 1);
    // The set is back in the tree, whole.
    for key in [KEY_A, KEY_B] {
        assert!(rank(root, key, 0).is_file() && rank(root, key, 1).is_file());
    }
    assert_eq!(
        fs::read(root.join(format!("0.7.2/sm121/{KEY_A}/README"))).ok(),
        Some(b"mine".to_vec()),
        "README was deleted"
    );
}
