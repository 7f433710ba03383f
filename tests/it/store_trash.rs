//! Prune with the store and the trash together: a whole set of another
//! launch moves into the store with its directory, a changed one goes to
//! the trash whole, and recovery and the trash leave each other alone.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use keepwrap::cache;
use keepwrap::store::Store;

const THIS: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn fp(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

fn launch(f: &str) -> keepwrap::digest::Fingerprint {
    keepwrap::digest::Fingerprint::parse(f).unwrap()
}

/// Directory `key` with `n` rank files, signed for launch `f` as one set.
fn signed_dir(root: &Path, key: &str, n: usize, f: &str) {
    let stage = tempfile::tempdir().unwrap();
    let dir = format!("0.7.2/sm121/{key}");
    fs::create_dir_all(stage.path().join(&dir)).unwrap();
    for r in 0..n {
        fs::write(
            stage.path().join(format!("{dir}/rank_tp{r}_pp0_dp0.json")),
            format!("{{\"_metadata\": {{}}, \"k{r}\": [1, 2]}}"),
        )
        .unwrap();
    }
    cache::sign(
        stage.path(),
        keepwrap::engine::SGLANG,
        &keepwrap::digest::Fingerprint::parse(f).unwrap(),
    )
    .unwrap();
    fs::create_dir_all(root.join("0.7.2/sm121")).unwrap();
    fs::rename(stage.path().join(&dir), root.join(&dir)).unwrap();
    // and the set's manifest
    let sets = root.join(".keepwrap/sets");
    fs::create_dir_all(&sets).unwrap();
    let m = format!("{f}.json");
    fs::rename(stage.path().join(".keepwrap/sets").join(&m), sets.join(&m)).unwrap();
}

fn prune(root: &Path, store: &Store) -> cache::PruneReport {
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::engine::SGLANG,
        &keepwrap::digest::Fingerprint::parse(THIS).unwrap(),
        &mut |fd, set| store.stash(fd, set),
    )
    .unwrap();
    store.sync();
    r
}

fn wait_empty(dir: &Path) {
    for _ in 0..400 {
        if fs::read_dir(dir).map_or(true, |d| d.count() == 0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("{} not emptied", dir.display());
}

#[test]
fn a_whole_set_moves_with_its_directory_and_comes_back() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    let r = prune(root, &store);
    assert_eq!((r.stored, r.removed), (4, 0));
    assert!(!root.join("0.7.2/sm121/00000000000000aa").exists());
    // Stored flat: the directory itself, with the set's manifest.
    let stored = root.join(format!(".keepwrap/store/{a}"));
    assert_eq!(fs::read_dir(&stored).unwrap().count(), 9);
    assert!(stored.join(".set.json").is_file());
    assert!(!root.join(format!(".keepwrap/sets/{a}.json")).exists());
    let back = store.restore(&launch(&a)).expect("restored");
    assert_eq!(back.paths.len(), 4);
    assert!(root
        .join("0.7.2/sm121/00000000000000aa/rank_tp3_pp0_dp0.json")
        .is_file());
    // The set's manifest back in place: the set is whole for its launch.
    assert!(root.join(format!(".keepwrap/sets/{a}.json")).is_file());
    assert_eq!(
        fs::read_dir(root.join(".keepwrap/store")).unwrap().count(),
        0
    );
}

#[test]
fn a_changed_set_goes_to_the_trash_whole_and_the_store_is_untouched() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (a, b) = (fp('a'), fp('b'));
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    assert_eq!(prune(root, &store).stored, 4);
    // b's set, one member changed after signing (same size).
    signed_dir(root, "00000000000000bb", 4, &b);
    let f = root.join("0.7.2/sm121/00000000000000bb/rank_tp2_pp0_dp0.json");
    let mut bytes = fs::read(&f).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = b'3';
    fs::write(&f, &bytes).unwrap();
    let r = prune(root, &store);
    assert_eq!((r.stored, r.removed), (0, 4));
    assert!(!root.join("0.7.2/sm121/00000000000000bb").exists());
    wait_empty(&root.join(".keepwrap/trash"));
    // a's entry is still whole, and recovery leaves the trash directory be.
    assert_eq!(store.entries().len(), 1);
    assert_eq!(store.recover(), 0);
    assert!(root.join(".keepwrap/trash").is_dir());
    assert!(store.restore(&launch(&a)).is_some());
}

#[test]
fn a_directory_with_something_else_is_stored_file_by_file() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 2, &a);
    fs::write(root.join("0.7.2/sm121/00000000000000aa/README"), "mine").unwrap();
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    let r = prune(root, &store);
    assert_eq!(r.stored, 2);
    assert!(root.join("0.7.2/sm121/00000000000000aa/README").is_file());
    assert!(store.manifest(&a).is_some());
}

/// Prune whose stash first does `meddle` to the set's directory: what
/// another process could do between prune's check of the set and its move
/// into the store.
fn prune_meddled(root: &Path, store: &Store, meddle: impl Fn(&Path)) -> cache::PruneReport {
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::engine::SGLANG,
        &keepwrap::digest::Fingerprint::parse(THIS).unwrap(),
        &mut |fd, set| {
            meddle(&root.join(set.dir.as_deref().expect("a set of one directory")));
            store.stash(fd, set)
        },
    )
    .unwrap();
    store.sync();
    r
}

#[test]
fn a_member_replaced_after_the_check_is_not_stored() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    // As the engine saves: a new file renamed over the member, here with
    // the very bytes signed (only the file is another).
    let r = prune_meddled(root, &store, |dir| {
        let f = dir.join("rank_tp2_pp0_dp0.json");
        fs::write(dir.join(".autotuner_x.tmp"), fs::read(&f).unwrap()).unwrap();
        fs::rename(dir.join(".autotuner_x.tmp"), &f).unwrap();
    });
    assert_eq!((r.stored, r.removed), (0, 4));
    assert!(store.manifest(&a).is_none());
    assert!(store.entries().is_empty());
    assert!(!root
        .join("0.7.2/sm121/00000000000000aa/rank_tp2_pp0_dp0.json")
        .exists());
}

#[test]
fn a_file_planted_after_the_check_is_not_stored() {
    for planted in ["rank_tp9_pp0_dp0.json", "README", ".set.json"] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let a = fp('a');
        signed_dir(root, "00000000000000aa", 4, &a);
        let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
        let r = prune_meddled(root, &store, |dir| {
            fs::write(dir.join(planted), "{}").unwrap();
        });
        assert_eq!((r.stored, r.removed), (0, 4), "{planted}");
        assert!(store.entries().is_empty(), "{planted}");
        // Put back with the directory: what is not the engine's stays.
        if planted == "README" {
            assert!(root.join("0.7.2/sm121/00000000000000aa/README").is_file());
        }
    }
}

/// Rank 2's file in `dir` and its bytes with one digit changed (the same
/// size).
fn rank2_changed(dir: &Path) -> (PathBuf, Vec<u8>) {
    let f = dir.join("rank_tp2_pp0_dp0.json");
    let mut bytes = fs::read(&f).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = b'3';
    (f, bytes)
}

/// Whether stash saw the change or not, rank 2's changed file never
/// returns to the tree: the set of `a` is not restored, and no entry of it
/// is left.
fn never_comes_back(root: &Path, store: &Store, a: &str) {
    assert!(store.restore(&launch(a)).is_none());
    assert!(store.entries().is_empty());
    assert!(!root
        .join("0.7.2/sm121/00000000000000aa/rank_tp2_pp0_dp0.json")
        .exists());
}

#[test]
fn a_member_rewritten_in_place_after_the_check_never_comes_back() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    // The same inode, other bytes of the same size.
    prune_meddled(root, &store, |dir| {
        let (f, bytes) = rank2_changed(dir);
        fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
    });
    never_comes_back(root, &store, &a);
}

#[test]
fn a_member_deleted_and_written_anew_after_the_check_never_comes_back() {
    // On a file system that gives a freed inode number to the next file
    // (ext4 does), the new file has the old one's number: the listing
    // cannot tell them apart, the check of every byte before the set
    // leaves the store does.
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    prune_meddled(root, &store, |dir| {
        let (f, bytes) = rank2_changed(dir);
        fs::remove_file(&f).unwrap();
        fs::write(&f, &bytes).unwrap();
    });
    never_comes_back(root, &store, &a);
}

/// A set whose directory moved into the store but whose manifest had not
/// yet (keepwrap killed between the two renames): its entry's manifest is
/// its launch's set manifest, still among the set manifests.
fn killed_between_the_renames(root: &Path, store: &Store, a: &str) {
    assert_eq!(prune(root, store).stored, 4);
    let entry = root.join(format!(".keepwrap/store/{a}"));
    fs::rename(
        entry.join(".set.json"),
        root.join(format!(".keepwrap/sets/{a}.json")),
    )
    .unwrap();
}

#[test]
fn an_entry_whose_manifest_had_not_moved_in_is_restored_whole() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    killed_between_the_renames(root, &store, &a);
    let entries = store.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manifest.set.members.len(), 4);
    let back = store.restore(&launch(&a)).expect("restored");
    assert_eq!(back.paths.len(), 4);
    for r in 0..4 {
        assert!(root
            .join(format!(
                "0.7.2/sm121/00000000000000aa/rank_tp{r}_pp0_dp0.json"
            ))
            .is_file());
    }
    assert!(root.join(format!(".keepwrap/sets/{a}.json")).is_file());
    assert_eq!(
        fs::read_dir(root.join(".keepwrap/store")).unwrap().count(),
        0
    );
    // Whole again for its launch: the next prune of that launch keeps it.
    store.recover();
    let r = cache::prune_stashing(
        root,
        keepwrap::engine::SGLANG,
        &keepwrap::digest::Fingerprint::parse(&a).unwrap(),
        &mut |fd, set| store.stash(fd, set),
    )
    .unwrap();
    assert_eq!((r.kept.len(), r.removed), (4, 0));
}

#[test]
fn an_entry_whose_manifest_had_not_moved_in_survives_other_launches() {
    // Launches of other fingerprints, with sets of their own stashed and
    // restored meanwhile, lose nothing of it: the recovery of the first
    // undoes the stash (the directory back in the tree, its manifest still
    // among the set manifests), and its prune stores it again whole, its
    // manifest inside this time.
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    let b = fp('b');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    killed_between_the_renames(root, &store, &a);
    signed_dir(root, "00000000000000bb", 2, &b);
    for stored in [4 + 2, 2] {
        assert_eq!(prune(root, &store).stored, stored);
        assert!(root
            .join(format!(".keepwrap/store/{a}/.set.json"))
            .is_file());
        assert_eq!(
            store.restore(&launch(&b)).expect("b restored").paths.len(),
            2
        );
        store.recover();
    }
    assert_eq!(store.entries().len(), 1);
    let back = store.restore(&launch(&a)).expect("a restored");
    assert_eq!(back.paths.len(), 4);
}

#[test]
fn an_entry_whose_manifest_had_not_moved_in_is_checked_and_evicted_like_any() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let a = fp('a');
    signed_dir(root, "00000000000000aa", 4, &a);
    let store = Store::open(root, keepwrap::engine::SGLANG).unwrap();
    killed_between_the_renames(root, &store, &a);
    // A member edited in the store: not restored, and the entry goes.
    let f = root.join(format!(".keepwrap/store/{a}/rank_tp1_pp0_dp0.json"));
    let mut bytes = fs::read(&f).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = b'3';
    fs::write(&f, &bytes).unwrap();
    assert!(store.restore(&launch(&a)).is_none());
    assert!(store.entries().is_empty());
    // Another: evicted with its manifest.
    signed_dir(root, "00000000000000aa", 4, &a);
    killed_between_the_renames(root, &store, &a);
    let evicted = store.evict_where(0, "test", |_, _| true);
    assert_eq!(evicted.len(), 1);
    assert!(!root.join(format!(".keepwrap/store/{a}")).exists());
    assert!(!root.join(format!(".keepwrap/sets/{a}.json")).exists());
}
