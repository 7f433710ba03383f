//! State files under `.keepwrap/`.

use super::*;
use serde_json::json;

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
    let root = fsx::open_root(t.path()).unwrap();
    assert!(fsx::open_state_dir_at(root.as_fd(), crate::STATE_DIR, Some(0o755)).is_err());
    assert_eq!(fs::read_dir(t.path().join("elsewhere")).unwrap().count(), 0);
}

#[test]
fn kept_lines_are_debug_and_the_summary_counts_them() {
    let t = TempDir::new().unwrap();
    for i in 0..20u32 {
        put(
            t.path(),
            &format!("{DIR}/rank_tp{i}_pp0_dp0.json"),
            &body(&format!("r{i}")),
        );
    }
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.kept.len(), 20);
    let kept = |level: &str| {
        logs.0
            .iter()
            .filter(|e| e["code"] == "kept" && e["level"] == level)
            .count()
    };
    assert_eq!((kept("INFO"), kept("DEBUG")), (0, 20), "{logs}");
    assert!(
        logs.has("pruned", json!({"kept": 20, "removed": 0, "reasons": {}})),
        "{logs}"
    );
}

#[test]
fn an_edit_that_keeps_size_and_modification_time_is_caught_by_the_change_time() {
    let t = tree(2);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
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
        logs.said("removed", &rank(0), "changed after signing (sha256 "),
        "{logs}"
    );
}
