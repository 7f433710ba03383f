//! Directories other users can write.

use super::*;
use serde_json::json;

#[test]
fn world_writable_dir_is_untrusted() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let d = t.path().join(DIR);
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!((r.kept.len(), r.removed), (0, 1));
    assert!(
        logs.has(
            "removed_untrusted",
            json!({
                "level": "WARN",
                "path": rank(0),
                "reason": format!("in a directory another user can write ({DIR}: world-writable without the sticky bit)")
            })
        ),
        "{logs}"
    );
}

#[test]
fn untrusted_parent_makes_children_untrusted_and_sticky_is_fine() {
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let top = t.path().join("0.6.18");
    fs::set_permissions(&top, fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(prune(t.path(), FP).unwrap().kept.len(), 1);
    fs::set_permissions(&top, fs::Permissions::from_mode(0o777)).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1, "{logs}");
    assert!(
        logs.says("(0.6.18: world-writable without the sticky bit)"),
        "{logs}"
    );
    // sign refuses too
    put(t.path(), &rank(0), &body("r0"));
    let (s, logs) = capture(|| sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap());
    assert!(s.signed.is_empty());
    assert!(
        logs.said(
            "not_signed",
            &rank(0),
            "in a directory another user can write"
        ),
        "{logs}"
    );
}

#[test]
fn dir_owned_by_another_user_is_untrusted() {
    if !nix::unistd::geteuid().is_root() {
        return; // needs chown
    }
    let t = tree(1);
    sign(t.path(), crate::engine::SGLANG, &fingerprint(FP)).unwrap();
    let d = t.path().join(DIR);
    std::os::unix::fs::chown(&d, Some(12345), None).unwrap();
    let (r, logs) = prune_logged(t.path(), FP);
    assert_eq!(r.removed, 1);
    assert!(logs.says("owned by another user"), "{logs}");
}
