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
    cache::sign(stage.path(), keepwrap::engine::SGLANG, &launch(f)).unwrap();
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
        keepwrap::engine::SGLANG,
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
        keepwrap::engine::SGLANG,
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
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
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
        let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
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
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    prune_meddled(root, &store, |dir| {
        for ext in ["json", "launch"] {
            let name = format!("rank_tp2_pp0_dp0.{ext}");
            let bytes = fs::read(other.path().join(format!("0.7.2/sm121/{KEY_A}/{name}"))).unwrap();
            fs::remove_file(dir.join(&name)).unwrap();
            fs::write(dir.join(&name), bytes).unwrap();
        }
    });
    assert!(store.restore(&launch(&a)).is_none());
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
        let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
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
        let back = store.restore(&launch(&a));
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
        let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
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
        let back = store.restore(&launch(&a));
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
        let store = Store::open(&root, keepwrap::engine::SGLANG).unwrap();
        assert_eq!(prune_as(&root, &store, THIS).stored, 4);
        assert_eq!(store.restore(&launch(&a)).expect("restored").paths.len(), 4);
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
            cache::sign(&root, keepwrap::engine::SGLANG, &launch(&a)).unwrap();
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

/// A hole, fixed. keepwrap killed (SIGKILL) between the rename that moves
/// a set's directory into the store as a flat entry and the rename of its
/// manifest into it (`KEEPWRAP_FAILPOINT=store:1`), while a file of the
/// user's (README) was planted in that directory between prune's listing
/// and the rename: the entry holds the set and README, and no manifest.
/// Recovery used to look only at staging and restoring directories; the
/// restore of its launch found a stranger in a flat entry ("README is not
/// the set's") and deleted the entry, README (not the engine's) and the
/// good set with it. Now recovery undoes the stash: the directory goes
/// back to its place whole, README in it, and the next launch of `a`
/// reuses its set there. Without the kill, stash's listing sees README and
/// puts the directory back whole
/// (`store_trash::a_file_planted_after_the_check_is_not_stored`). The
/// state the kill leaves is built here by hand.
#[test]
fn a_file_planted_before_a_kill_between_the_flat_renames_is_not_lost() {
    flat_entry_killed_between_its_renames(false);
}

/// The same, while the directory's place was taken meanwhile by one made
/// anew holding a file of its own: the members and README go back into
/// it one by one, its file stays, and nothing is left in the store.
#[test]
fn a_file_planted_before_a_kill_between_the_flat_renames_goes_back_into_a_directory_made_anew() {
    flat_entry_killed_between_its_renames(true);
}

fn flat_entry_killed_between_its_renames(anew: bool) {
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
    let bytes: Vec<Vec<u8>> = (0..4)
        .map(|r| fs::read(entry.join(format!("rank_tp{r}_pp0_dp0.json"))).unwrap())
        .collect();
    let place = root.join(format!("0.7.2/sm121/{KEY_A}"));
    if anew {
        fs::create_dir(&place).unwrap();
        fs::write(place.join("notes.txt"), "engine").unwrap();
    }
    // The next launch: recovery first, then prune for `a`.
    assert_eq!(store.recover(), 1);
    if anew {
        assert_eq!(
            fs::read_to_string(place.join("notes.txt")).unwrap(),
            "engine"
        );
    }
    assert!(!entry.exists(), "the entry is left in the store");
    assert_eq!(
        fs::read_to_string(root.join(format!("0.7.2/sm121/{KEY_A}/README"))).unwrap(),
        "mine"
    );
    assert!(store.restore(&launch(&a)).is_none());
    let r = prune_as(root, &store, &a);
    assert_eq!(r.kept.len(), 4, "{:?}", r.kept);
    for (n, b) in bytes.iter().enumerate() {
        assert_eq!(&fs::read(rank(root, KEY_A, n)).unwrap(), b);
    }
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
/// first and the directory goes back whole, README in it.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_file_planted_in_a_stashed_directory_survives_a_rollback() {
    planted_in_a_stashed_directory(false);
}

/// The same, while the directory made again at its place is not empty (a
/// file written in it): README, and the members, used to be deleted with
/// the staging tree. Now each goes back into that directory where its
/// name is free, and the file written there stays.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_file_planted_in_a_stashed_directory_survives_a_rollback_into_a_directory_written_anew() {
    planted_in_a_stashed_directory(true);
}

fn planted_in_a_stashed_directory(written: bool) {
    use crate::common::*;
    use std::time::Duration;
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    fs::create_dir(&ctl).unwrap();
    let cache = t.path().join("cache");
    let run = |write: usize, variant: bool, delay: bool| {
        let mut cmd = reads_at_start(&cache, &ctl, write, variant, &[]);
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
    if written {
        fs::write(d2.join("engine.txt"), "engine").unwrap();
    }
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
    if written {
        assert_eq!(fs::read(d2.join("engine.txt")).unwrap(), b"engine");
    }
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

/// A launch of `tests/helpers/reads_at_start.py` on `cache` writing
/// `write` rank files (8 a directory); `variant`: another fingerprint;
/// `env`: more of its environment (failpoints).
fn reads_launch(
    cache: &Path,
    ctl: &Path,
    write: usize,
    variant: bool,
    env: &[(&str, &str)],
) -> std::process::Command {
    let mut cmd = crate::common::reads_at_start(cache, ctl, write, variant, &[]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// A set of two directories (16 rank files) signed by a launch on `cache`,
/// alone in `0.7.2/sm121`, and a descriptor of that directory held open
/// (a process whose working directory it is: it writes there by relative
/// paths whatever the directory's name).
fn signed_sm(cache: &Path, ctl: &Path) -> fs::File {
    use crate::common::*;
    let b = boot(&mut reads_launch(cache, ctl, 16, false, &[]));
    assert!(
        b.stderr.contains("tuned and signed 16 cache files"),
        "{}",
        b.stderr
    );
    fs::File::open(cache.join("0.7.2/sm121")).unwrap()
}

/// `held`'s directory, wherever it is now.
fn through(held: &fs::File) -> std::path::PathBuf {
    use std::os::fd::AsRawFd;
    std::path::PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()))
}

/// Driven through the binary. A set of another launch alone in
/// `0.7.2/sm121` moves into the store with the directory itself (one
/// rename). Right after that rename (`KEEPWRAP_FAILPOINT_DELAY_MS` widens
/// the moment) a process working in that directory writes a directory of
/// its own there (`planted/notes.txt`); when `anew`, an engine also makes
/// `0.7.2/sm121/<key>/` again in the tree (`os.makedirs`). Stash's second
/// listing sees `planted` and rolls back: nothing of the planter's may be
/// lost, and the set's files are back in the tree (where prune removes
/// them, its stash having failed) or in the store.
fn planted_beside_a_moved_sm(anew: bool) {
    use crate::common::*;
    use std::time::Duration;
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    fs::create_dir(&ctl).unwrap();
    let cache = t.path().join("cache");
    let held = signed_sm(&cache, &ctl);
    let sm = cache.join("0.7.2/sm121");
    let r = Running::spawn(&mut reads_launch(
        &cache,
        &ctl,
        0,
        true,
        &[("KEEPWRAP_FAILPOINT_DELAY_MS", "400")],
    ));
    wait_for("0.7.2/sm121 stashed", Duration::from_secs(20), || {
        (!sm.exists()).then_some(())
    });
    fs::create_dir(through(&held).join("planted")).unwrap();
    fs::write(through(&held).join("planted/notes.txt"), "mine").unwrap();
    if anew {
        fs::create_dir_all(sm.join("00000000000000ff")).unwrap();
    }
    let b = r.finish(Duration::from_secs(60));
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(
        b.stderr.contains("an entry that is not the set's"),
        "{}",
        b.stderr
    );
    assert_eq!(
        fs::read(sm.join("planted/notes.txt")).ok(),
        Some(b"mine".to_vec()),
        "planted/notes.txt was lost\n{}",
        b.stderr
    );
    if anew {
        assert!(sm.join("00000000000000ff").is_dir(), "{}", b.stderr);
    }
}

/// [`planted_beside_a_moved_sm`]: `0.7.2/sm121` goes back whole.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_directory_planted_beside_the_set_after_its_sm_moved_survives_the_rollback() {
    planted_beside_a_moved_sm(false);
}

/// [`planted_beside_a_moved_sm`] with `0.7.2/sm121` made anew in the tree
/// before the rollback: its place is taken, the set's directories go back
/// one by one into the new one, and what else the moved one holds must
/// go back too (it used to be removed with the staging tree).
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs --features failpoints")]
fn a_directory_planted_beside_the_set_survives_a_rollback_into_an_sm_made_anew() {
    planted_beside_a_moved_sm(true);
}

/// keepwrap killed (SIGKILL) right after a stash moved `0.7.2/sm121`
/// whole into its staging tree, a directory of the user's (`planted`)
/// having been written into it between the listing and the rename (or
/// after the rename, by a process working in it). Recovery must put back
/// what the staged directory holds, not only the set's directories: it
/// used to make `0.7.2/sm121` anew, move the set's directories into it
/// one by one and remove the staging tree, `planted` in it. With `anew`,
/// an engine has made `0.7.2/sm121/<key>/` again before the recovery.
/// The state the kill leaves (`KEEPWRAP_FAILPOINT=store:1` with the
/// plant) is built here by hand.
fn planted_before_a_kill_in_a_staged_sm(anew: bool) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (a, store) = stored_set(root, &[KEY_A, KEY_B], 2);
    assert!(
        !root.join("0.7.2/sm121").exists(),
        "sm121 did not move whole"
    );
    let staging = root.join(format!(".keepwrap/store/{a}.in-killed"));
    fs::rename(root.join(format!(".keepwrap/store/{a}")), &staging).unwrap();
    fs::create_dir(staging.join("0.7.2/sm121/planted")).unwrap();
    fs::write(staging.join("0.7.2/sm121/planted/notes.txt"), "mine").unwrap();
    if anew {
        fs::create_dir_all(root.join("0.7.2/sm121/00000000000000ff")).unwrap();
    }
    assert_eq!(store.recover(), 1);
    for key in [KEY_A, KEY_B] {
        assert!(rank(root, key, 0).is_file() && rank(root, key, 1).is_file());
    }
    assert_eq!(
        fs::read(root.join("0.7.2/sm121/planted/notes.txt")).ok(),
        Some(b"mine".to_vec()),
        "planted/notes.txt was deleted"
    );
}

#[test]
fn a_directory_planted_before_a_kill_in_a_staged_sm_is_not_lost() {
    planted_before_a_kill_in_a_staged_sm(false);
}

#[test]
fn a_directory_planted_before_a_kill_in_a_staged_sm_made_anew_is_not_lost() {
    planted_before_a_kill_in_a_staged_sm(true);
}

/// Two sets of two other launches share `0.7.2/sm121` (two directories
/// each, so that neither is a flat set). The first stash sees
/// the other's directories there and moves its own one by one; the second
/// moves `0.7.2/sm121` whole. Each comes back whole with its launch, the
/// first into a `0.7.2/sm121` made anew.
#[test]
fn two_sets_sharing_their_sm_are_each_stored_and_restored_whole() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (a, b) = (fp('a'), fp('b'));
    signed_dirs(root, &[KEY_A, "00000000000000a2"], 2, &a, 1);
    signed_dirs(root, &[KEY_B, "00000000000000b2"], 2, &b, 2);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    assert_eq!(prune_as(root, &store, THIS).stored, 8);
    assert!(!root.join("0.7.2/sm121").exists());
    for (f, keys) in [
        (&a, [KEY_A, "00000000000000a2"]),
        (&b, [KEY_B, "00000000000000b2"]),
    ] {
        store.recover();
        prune_as(root, &store, f);
        assert!(store.restore(&launch(f)).is_some(), "{f} not restored");
        for key in keys {
            assert!(rank(root, key, 0).is_file() && rank(root, key, 1).is_file());
        }
    }
}

/// `0.7.2/sm121`, holding only a set of another launch, replaced by a
/// symlink to a directory outside the root holding the very same
/// directories (after prune's check, before the stash): nothing outside
/// the root is moved into the store, deleted or followed.
#[test]
fn an_sm_swapped_for_a_symlink_before_the_stash_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let outside = tempfile::tempdir().unwrap();
    let a = fp('a');
    signed_dirs(root, &[KEY_A, KEY_B], 2, &a, 1);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    let away = outside.path().join("sm121");
    let mut swapped = false;
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::engine::SGLANG,
        &launch(THIS),
        &mut |fd, set| {
            if !swapped {
                swapped = true;
                fs::rename(root.join("0.7.2/sm121"), &away).unwrap();
                std::os::unix::fs::symlink(&away, root.join("0.7.2/sm121")).unwrap();
            }
            store.stash(fd, set)
        },
    )
    .unwrap();
    store.sync();
    assert_eq!(r.stored, 0, "a set stored through a symlink");
    assert!(store.entries().is_empty());
    for key in [KEY_A, KEY_B] {
        for r in 0..2 {
            assert!(
                away.join(format!("{key}/rank_tp{r}_pp0_dp0.json"))
                    .is_file(),
                "{key}/{r} outside the root was touched"
            );
        }
    }
    assert!(fs::symlink_metadata(root.join("0.7.2/sm121"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// The lines of remove: two incomplete sets, one of this launch and one
/// of another, each of 24 files with one missing (deleted with its
/// sidecar). No file of either fails on its own: every one goes with its
/// set, with `set incomplete (<missing member>: missing)` as the reason.
/// At the default level the prune's one line counts them by reason; at
/// debug level the user sees each set removed and why (a `removed` line
/// naming a file of it and the member that failed it; the other launch's
/// says "not trusted" of it, not "missing"), whichever set the walk finds
/// first.
#[test]
fn each_incomplete_set_removed_is_counted_by_the_summary_and_named_at_debug_level() {
    use crate::common::*;
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    fs::create_dir(&ctl).unwrap();
    let cache = t.path().join("cache");
    let b = boot(&mut reads_launch(&cache, &ctl, 24, false, &[]));
    assert!(
        b.stderr.contains("tuned and signed 24 cache files"),
        "{}",
        b.stderr
    );
    let other = fp('b');
    let keys = ["00000000000000b1", "00000000000000b2", "00000000000000b3"];
    signed_dirs(&cache, &keys, 8, &other, 1);
    for f in ["rank_tp3_pp0_dp0.json", "rank_tp3_pp0_dp0.launch"] {
        fs::remove_file(cache.join("0.7.2/sm121/0000000000000002").join(f)).unwrap();
        fs::remove_file(cache.join("0.7.2/sm121/00000000000000b2").join(f)).unwrap();
    }
    let b = boot(&mut reads_launch(
        &cache,
        &ctl,
        0,
        false,
        &[("KEEPWRAP_LOG", "debug")],
    ));
    assert_eq!(b.code, 0, "{}", b.stderr);
    let removed = events_named(&b.stderr, "removed");
    let said = |key: &str| {
        removed.iter().any(|e| {
            let line = e.to_string();
            line.contains(&format!("removed 0.7.2/sm121/{key}"))
                && line.contains(&format!(
                    "set incomplete (0.7.2/sm121/{key}2/rank_tp3_pp0_dp0.json: "
                ))
        })
    };
    assert!(said("000000000000000"), "this launch's set\n{}", b.stderr);
    assert!(
        said("00000000000000b"),
        "the other launch's set\n{}",
        b.stderr
    );
    assert!(
        b.logged_with(
            "pruned",
            serde_json::json!({"removed": 46, "reasons": {"set_incomplete": 23, "other_launch": 23}})
        ),
        "no count by reason\n{}",
        b.stderr
    );
}

/// A file of the user's in `0.7.2/` (beside `sm121`, which holds only the
/// set's directories) or in `0.7.2/sm121/` itself: stash moves
/// `0.7.2/sm121` whole only in the first case; in both the user's file is
/// where it was, untouched, after the stash and after the restore.
#[test]
fn a_file_of_the_users_in_the_version_or_the_sm_directory_is_left_alone() {
    for at in ["0.7.2/notes.txt", "0.7.2/sm121/notes.txt"] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let a = fp('a');
        signed_dirs(root, &[KEY_A, KEY_B], 2, &a, 1);
        fs::write(root.join(at), "mine").unwrap();
        let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
        assert_eq!(prune_as(root, &store, THIS).stored, 4, "{at}");
        assert_eq!(fs::read(root.join(at)).unwrap(), b"mine", "{at}");
        assert_eq!(
            root.join("0.7.2/sm121").exists(),
            at.contains("sm121"),
            "{at}"
        );
        store.recover();
        assert!(store.restore(&launch(&a)).is_some(), "{at}");
        assert_eq!(fs::read(root.join(at)).unwrap(), b"mine", "{at}");
        for key in [KEY_A, KEY_B] {
            assert!(rank(root, key, 0).is_file() && rank(root, key, 1).is_file());
        }
    }
}

/// `0.7.2/sm121` with a mode of its own (group-writable and setgid, as a
/// cache shared by a group is), holding only a set of another launch:
/// after the set is stored and restored, the directory has its mode still
/// (it stayed in place while its directories moved one by one; moved
/// whole, it is made anew at restore: it used to get keepwrap's mode
/// 0755, and a group that shares the cache could no longer write into it).
#[test]
fn the_mode_of_a_moved_sm_directory_survives_a_stash_and_a_restore() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dirs(root, &[KEY_A, KEY_B], 2, &a, 1);
    let sm = root.join("0.7.2/sm121");
    fs::set_permissions(&sm, fs::Permissions::from_mode(0o2770)).unwrap();
    let mode = fs::metadata(&sm).unwrap().permissions().mode() & 0o7777;
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    assert_eq!(prune_as(root, &store, THIS).stored, 4);
    store.recover();
    assert!(store.restore(&launch(&a)).is_some());
    assert_eq!(
        fs::metadata(&sm).unwrap().permissions().mode() & 0o7777,
        mode,
        "the mode of 0.7.2/sm121 changed"
    );
}

/// A hole, fixed. A set stored as a tree (its directory also held a
/// file of the user's: the set moved file by file, the launch's set
/// manifest stays in `.keepwrap/sets` and a copy is the entry's
/// `.set.json`) whose `.set.json` is deleted by hand looked to recovery
/// like a flat stash killed between its two renames (an entry without
/// `.set.json`, the launch's manifest among the set manifests, its
/// members in one directory). Recovery moved what the entry holds
/// (`0.7.2/`) into the set's directory: the set ended up at
/// `0.7.2/sm121/<key16>/0.7.2/sm121/<key16>/`, in the user's directory,
/// where no engine reads it and prune never judges it. Only an entry
/// holding its first member right inside it is such a flat entry; a tree
/// stays in the store.
#[test]
fn a_tree_entry_whose_manifest_is_deleted_is_not_moved_into_the_tree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dirs(root, &[KEY_A], 2, &a, 1);
    let place = root.join(format!("0.7.2/sm121/{KEY_A}"));
    fs::write(place.join("notes.txt"), "mine").unwrap();
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    assert_eq!(prune_as(root, &store, THIS).stored, 2);
    let entry = root.join(format!(".keepwrap/store/{a}"));
    assert!(entry.join(format!("0.7.2/sm121/{KEY_A}")).is_dir());
    assert!(root.join(format!(".keepwrap/sets/{a}.json")).exists());
    fs::remove_file(entry.join(".set.json")).unwrap();
    assert_eq!(store.recover(), 0);
    let mut left: Vec<String> = fs::read_dir(&place)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["notes.txt"], "moved into the user's directory");
    assert!(entry.join(format!("0.7.2/sm121/{KEY_A}")).is_dir());
}
