//! What is not a regular file: symlinks, FIFOs, directories.

use super::*;
use serde_json::json;

#[test]
fn symlink_json_is_unlinked_not_followed() {
    let outside = TempDir::new().unwrap();
    let target = outside.path().join("victim.json");
    fs::write(&target, body("v")).unwrap();
    let t = tree(0);
    fs::create_dir_all(t.path().join(DIR)).unwrap();
    std::os::unix::fs::symlink(&target, t.path().join(rank(0))).unwrap();
    // sign skips it
    let (s, logs) = capture(|| sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap());
    assert!(s.signed.is_empty());
    assert!(
        logs.said("not_signed", &rank(0), "not a regular file (symlink)"),
        "{logs}"
    );
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(
        logs.said("removed", &rank(0), "not a regular file (symlink)"),
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
        logs.said("removed", &rank(0), "sidecar unreadable (a symlink)"),
        "{logs}"
    );
    assert!(!exists(t.path(), &sidecar_of(&rank(0))));
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious");

    // sign: the planted link is replaced, not written through
    put(t.path(), &rank(0), &body("r0"));
    std::os::unix::fs::symlink(&target, &sc).unwrap();
    let s = sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    assert_eq!(s.signed.len(), 1);
    assert!(fs::symlink_metadata(&sc).unwrap().file_type().is_file());
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
}

#[test]
fn fifo_json_does_not_hang() {
    let t = tree(1);
    let fifo = t.path().join(format!("{DIR}/rank_tp1_pp0_dp0.json"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (s, logs) = capture(|| sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap());
    // Rank 0 alone would be a partial hit next boot: its directory is not
    // signed.
    assert!(s.signed.is_empty(), "{logs}");
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 2), "{logs}");
    assert!(
        logs.said("removed", &rank(1), "not a regular file (FIFO)"),
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
    assert!(logs.says("sidecar unreadable (a FIFO)"), "{logs}");
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
        logs.has("left_directory", json!({"path": weird, "level": "WARN"})),
        "{logs}"
    );
    assert!(logs.has("pruned", json!({"left": 1})));
    // Not the engine's layout below it: never walked into.
    assert!(t
        .path()
        .join(format!("{weird}/rank_tp0_pp0_dp0.json"))
        .is_file());
}

#[test]
fn open_dir_path_follows_no_symlink_and_answers_as_the_walk_does() {
    let t = TempDir::new().unwrap();
    fs::create_dir_all(t.path().join("a/b/c")).unwrap();
    fs::write(t.path().join("a/f"), "").unwrap();
    std::os::unix::fs::symlink("a", t.path().join("l")).unwrap();
    std::os::unix::fs::symlink("b", t.path().join("a/s")).unwrap();
    std::os::unix::fs::symlink(t.path().join("a"), t.path().join("abs")).unwrap();
    let root = fs::File::open(t.path()).unwrap();
    let ino = |fd: &std::os::fd::OwnedFd| fsx::stat_fd(fd.as_fd()).unwrap().st_ino;
    let want = |rel: &str| fs::metadata(t.path().join(rel)).unwrap().ino();
    for (rel, opens) in [
        ("a/b/c", Some("a/b/c")),
        ("a/./b/", Some("a/b")),
        ("./a", Some("a")),
        ("", Some("")),
        ("l", None),
        ("l/b", None),
        ("a/s", None),
        ("a/s/c", None),
        ("abs/b", None),
        ("a/f", None),
        ("a/missing", None),
        ("a/../a", None),
        ("/tmp", None),
    ] {
        let got = fsx::open_dir_path(root.as_fd(), Path::new(rel));
        let walked = fsx::walk_dir_path(root.as_fd(), Path::new(rel), fsx::open_dir_at::<[u8]>);
        match (opens, &got, &walked) {
            (Some(at), Ok(a), Ok(b)) => {
                assert_eq!(ino(a), want(at), "{rel}");
                assert_eq!(ino(b), want(at), "{rel}");
            }
            // A symlink on the way: ELOOP from openat2, ENOTDIR or ELOOP
            // from the walk (O_DIRECTORY|O_NOFOLLOW); otherwise the same.
            (None, Err(a), Err(b)) => {
                let link = [Some(libc::ELOOP), Some(libc::ENOTDIR)];
                let same = a.raw_os_error() == b.raw_os_error()
                    || (link.contains(&a.raw_os_error()) && link.contains(&b.raw_os_error()));
                assert!(same, "{rel}: {a} vs the walk's {b}");
            }
            _ => panic!("{rel}: {got:?} vs the walk's {walked:?}"),
        }
    }
}
