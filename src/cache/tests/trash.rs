//! The trash.

use super::*;
use serde_json::json;

#[test]
fn a_directory_that_goes_whole_goes_to_the_trash_then_away() {
    let t = tree(3);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(OTHER)).unwrap();
    put(t.path(), &format!("{DIR}/.autotuner_x.tmp"), "");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.removed, r.leftovers), (3, 1), "{logs}");
    assert!(logs.said(
        "removed",
        &rank(2),
        "signed for another launch (fingerprint 8c01d2e4...)"
    ));
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
    assert!(logs.has("trash_unusable", json!({})), "{logs}");
    assert!(!exists(t.path(), &rank(0)));
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(fs::symlink_metadata(t.path().join(".keepwrap"))
        .unwrap()
        .file_type()
        .is_symlink());
}
