//! `keepwrap forget [--dry-run] -- COMMAND`: a launch's signed set leaves
//! the cache tree and the store, so its next boot tunes fresh; a dry run
//! changes nothing; another launch's set stays; a launch of it that runs
//! is never cut.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::*;

/// TP2 with expert parallelism, offline: tuning is done when the engine
/// exits 0.
const EP2: &[&str] = &["--tp", "2", "--ep", "2", "--gate", "fixed", "--offline"];
/// Another launch: four ranks.
const EP4: &[&str] = &["--tp", "4", "--ep", "4", "--gate", "fixed", "--offline"];

/// `keepwrap forget [extra] -- <the fake engine's launch>`.
fn forget(home: &Path, extra: &[&str], engine: &[&str]) -> Finished {
    let mut kw = vec!["forget"];
    kw.extend_from_slice(extra);
    output(&mut keepwrap_engine(home, &kw, engine))
}

/// The launch's fingerprint, from a boot's `launch` line.
fn fingerprint(b: &Finished) -> String {
    b.event("launch")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every entry under `dir`: its path, kind, mode, inode links, and its
/// bytes (a file) or target (a symlink).
fn snapshot(dir: &Path) -> BTreeMap<String, (u32, u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let body = if m.is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_dir() {
                todo.push(p.clone());
                Vec::new()
            } else {
                std::fs::read(&p).unwrap()
            };
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            out.insert(rel, (m.mode(), m.nlink(), body));
        }
    }
    out
}

/// Panics naming every path that differs between two snapshots.
fn same(
    now: &BTreeMap<String, (u32, u64, Vec<u8>)>,
    before: &BTreeMap<String, (u32, u64, Vec<u8>)>,
) {
    let differ: Vec<&String> = now
        .keys()
        .chain(before.keys())
        .filter(|k| now.get(*k) != before.get(*k))
        .collect();
    assert!(differ.is_empty(), "changed: {differ:?}");
}

#[test]
fn a_forgotten_launch_tunes_fresh_at_its_next_boot() {
    let h = home();
    let root = cache_root(h.path());
    let b1 = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert!(b1.has_event("signed"), "{}", b1.stderr);
    let fp = fingerprint(&b1);
    let state = root.join(".keepwrap");
    assert!(state.join(format!("launches/{fp}.json")).exists());
    assert!(state.join(format!("sets/{fp}.json")).exists());

    let f = forget(h.path(), &[], EP2);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(f.stdout.len(), 1, "{:?}", f.stdout);
    let line = &f.stdout[0];
    let head = format!(
        "forgot launch {}...: removed 2 signed cache files (",
        &fp[..8]
    );
    assert!(line.starts_with(&head), "{line}");
    assert!(
        line.ends_with(" from the tree; its next boot tunes fresh"),
        "{line}"
    );
    assert!(cache_files(&root).is_empty());
    assert!(sidecars(&root).is_empty());
    assert!(!state.join(format!("launches/{fp}.json")).exists());
    assert!(!state.join(format!("sets/{fp}.json")).exists());

    let b2 = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert_eq!(b2.code, 0, "{}", b2.stderr);
    assert!(b2.tuned() > 0, "boot 2 tunes");
    assert!(b2.has_event("signed"), "{}", b2.stderr);
    assert!(!b2.has_event("reused"), "{}", b2.stderr);
}

#[test]
fn a_dry_run_says_what_would_go_and_changes_nothing() {
    let h = home();
    let root = cache_root(h.path());
    let b1 = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert!(b1.has_event("signed"), "{}", b1.stderr);
    let fp = fingerprint(&b1);
    let before = snapshot(&root);

    let f = forget(h.path(), &["--dry-run"], EP2);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let line = &f.stdout[0];
    assert!(
        line.starts_with(&format!(
            "would forget launch {}...: 2 signed cache files (",
            &fp[..8]
        )),
        "{line}"
    );
    assert!(line.ends_with("(dry run: nothing removed)"), "{line}");
    same(&snapshot(&root), &before);

    let b2 = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert!(b2.has_event("reused"), "{}", b2.stderr);
}

#[test]
fn a_launch_never_booted_has_nothing_to_forget() {
    let h = home();
    let root = cache_root(h.path());
    let f = forget(h.path(), &[], EP2);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(f.stdout.len(), 1, "{:?}", f.stdout);
    assert!(
        f.stdout[0].starts_with("nothing to forget for launch ")
            && f.stdout[0].ends_with(&format!(
                "...: it has no signed set under {}",
                root.display()
            )),
        "{:?}",
        f.stdout
    );
    // On a root where another launch is signed, too, and it stays.
    let b = boot(&mut keepwrap_engine(h.path(), &[], EP4));
    assert!(b.has_event("signed"), "{}", b.stderr);
    let before = snapshot(&root);
    let f = forget(h.path(), &[], EP2);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with("nothing to forget"),
        "{:?}",
        f.stdout
    );
    same(&snapshot(&root), &before);
}

#[test]
fn another_launchs_set_stays_and_a_stored_set_is_forgotten_too() {
    let h = home();
    let root = cache_root(h.path());
    let a = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert!(a.has_event("signed"), "{}", a.stderr);
    let fa = fingerprint(&a);
    // B's boot moves A's set into the store.
    let b = boot(&mut keepwrap_engine(h.path(), &[], EP4));
    assert!(b.has_event("signed"), "{}", b.stderr);
    let store = root.join(".keepwrap/store");
    let stored_a = snapshot(&store.join(&fa));

    let f = forget(h.path(), &[], EP4);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].contains(": removed 4 signed cache files ("),
        "{:?}",
        f.stdout
    );
    same(&snapshot(&store.join(&fa)), &stored_a);
    assert!(cache_files(&root).is_empty(), "B's files went");

    // A's set, in the store, goes when A is forgotten.
    let f = forget(h.path(), &[], EP2);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].starts_with(&format!(
            "forgot launch {}...: removed 1 stored set (2 files, ",
            &fa[..8]
        )),
        "{:?}",
        f.stdout
    );
    assert!(!store.join(&fa).exists());
    assert!(f.has_event("evicted"), "{}", f.stderr);
    let again = boot(&mut keepwrap_engine(h.path(), &[], EP2));
    assert!(again.has_event("signed"), "{}", again.stderr);
    assert!(!again.has_event("restored"), "{}", again.stderr);
}

#[test]
fn a_launch_of_it_that_runs_is_never_cut() {
    let h = home();
    let root = cache_root(h.path());
    let port = free_port().to_string();
    let engine = ["--tp", "2", "--ep", "2", "--gate", "fixed", "--port", &port];
    let health = format!("health=http://127.0.0.1:{port}/health");
    let mut s = Running::spawn(&mut keepwrap_engine(
        h.path(),
        &["--done", &health],
        &engine,
    ));
    s.wait_event("signed", Duration::from_secs(30));
    // Its set, while the engine runs on (it may save its files again).
    let set = |root: &Path| {
        let state = root.join(".keepwrap");
        let count = |d: &str| std::fs::read_dir(state.join(d)).map_or(0, |d| d.count());
        (
            cache_files(root),
            sidecars(root),
            count("sets"),
            count("launches"),
        )
    };
    // The launch record is written just after the `signed` line.
    let before = wait_for("the launch record", Duration::from_secs(10), || {
        let s = set(&root);
        (s.3 == 1).then_some(s)
    });
    assert_eq!(
        (before.0.len(), before.1.len(), before.2, before.3),
        (2, 2, 1, 1)
    );
    for extra in [&[][..], &["--dry-run"][..]] {
        let f = forget(h.path(), extra, &engine);
        assert_eq!(f.code, 1, "{}", f.stderr);
        let what = f.event("command_failed")["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            what.contains(" runs on ") && what.ends_with("stop it first (nothing is forgotten)"),
            "{what}"
        );
        assert!(f.stdout.is_empty(), "{:?}", f.stdout);
    }
    assert_eq!(set(&root), before);
    s.guard.signal(nix::sys::signal::Signal::SIGTERM);
    let b = s.finish(Duration::from_secs(20));
    assert_eq!(b.code, 0, "{}", b.stderr);
    // Once it has ended, it is forgotten.
    let f = forget(h.path(), &[], &engine);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(f.stdout[0].starts_with("forgot launch "), "{:?}", f.stdout);
}
