//! Packaging: the static build's file operations, and the Docker snippet,
//! README and Kubernetes examples agreeing on the settings they suggest.

mod common;

use std::fs;
use std::io;
use std::os::fd::AsFd;

use keepwrap::cache::fsx;

#[test]
fn rename_noreplace_moves_and_never_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let d = fs::File::open(dir.path()).unwrap();
    fs::write(dir.path().join("a"), b"A").unwrap();
    fs::write(dir.path().join("b"), b"B").unwrap();

    // An existing target is refused, and both files stay as they were.
    let e = fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"b").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"A");
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"B");

    // A free target is taken.
    fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"c").unwrap();
    assert!(!dir.path().join("a").exists());
    assert_eq!(fs::read(dir.path().join("c")).unwrap(), b"A");

    // A missing source is NotFound.
    let e = fsx::rename_noreplace(d.as_fd(), c"a", d.as_fd(), c"d").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
}
