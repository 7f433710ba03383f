use std::time::{Duration, Instant};

use super::*;

#[test]
fn a_directory_creates_a_key_once_and_replaces_it_only_while_it_is_the_object_read() {
    let t = tempfile::tempdir().unwrap();
    let d = Dir::new(t.path());
    assert!(d.get("a/b/HEAD", 10).unwrap().is_none());
    assert_eq!(d.put_if_absent("a/b/HEAD", b"one").unwrap(), Put::Written);
    assert_eq!(d.put_if_absent("a/b/HEAD", b"two").unwrap(), Put::Refused);
    let one = d.get("a/b/HEAD", 10).unwrap().unwrap();
    assert_eq!(one.bytes, b"one");
    assert!(d.get("a/b/HEAD", 2).is_err(), "longer than the limit");
    assert_eq!(
        d.replace("a/b/HEAD", b"two", &one.etag).unwrap(),
        Put::Written
    );
    assert_eq!(
        d.replace("a/b/HEAD", b"three", &one.etag).unwrap(),
        Put::Refused,
        "no longer the object read"
    );
    let two = d.get("a/b/HEAD", 10).unwrap().unwrap();
    assert_eq!(two.bytes, b"two");
    assert_ne!(two.etag, one.etag);
    // A writer that died holding the lock: refused, then the stale lock goes.
    let lock = t.path().join("a/b/.HEAD.lock");
    std::fs::write(&lock, b"").unwrap();
    assert_eq!(
        d.replace("a/b/HEAD", b"x", &two.etag).unwrap(),
        Put::Refused
    );
    assert!(lock.exists(), "a fresh lock stays");
    for bad in ["", "a//b", "../x", "a/.hidden", "/abs"] {
        assert!(d.put_if_absent(bad, b"x").is_err(), "{bad:?}");
    }
}

#[test]
fn a_directory_lists_by_prefix_without_temp_names_and_deletes_empty_directories() {
    let t = tempfile::tempdir().unwrap();
    let d = Dir::new(t.path());
    for k in [
        "k/v1/p/f/HEAD",
        "k/v1/p/f/blobs/aa",
        "k/v1/p/g/HEAD",
        "other",
    ] {
        d.put_if_absent(k, k.as_bytes()).unwrap();
    }
    std::fs::write(t.path().join("k/v1/p/f/.keepwrap-1.tmp"), b"").unwrap();
    let keys = |p: &str| -> Vec<String> { d.list(p).unwrap().into_iter().map(|l| l.key).collect() };
    assert_eq!(
        keys("k/v1/"),
        ["k/v1/p/f/HEAD", "k/v1/p/f/blobs/aa", "k/v1/p/g/HEAD"]
    );
    assert_eq!(keys("k/v1/p/f/"), ["k/v1/p/f/HEAD", "k/v1/p/f/blobs/aa"]);
    assert_eq!(keys("k/v1/p/g"), ["k/v1/p/g/HEAD"]);
    assert!(keys("nothing/").is_empty());
    let l = &d.list("k/v1/p/g/").unwrap()[0];
    assert_eq!(l.size, 13);
    assert!(humantime::parse_rfc3339_weak(l.modified.trim_end_matches('Z')).is_ok());
    d.delete("k/v1/p/g/HEAD").unwrap();
    d.delete("k/v1/p/g/HEAD").unwrap();
    assert!(!t.path().join("k/v1/p/g").exists(), "left empty: removed");
    assert!(t.path().join("k/v1/p/f").exists());
}

#[test]
fn read_only_refuses_every_write_before_the_backend() {
    let t = tempfile::tempdir().unwrap();
    Dir::new(t.path()).put_if_absent("a", b"1").unwrap();
    let r = ReadOnly(Dir::new(t.path()));
    assert!(!r.writable());
    assert_eq!(r.get("a", 9).unwrap().unwrap().bytes, b"1");
    assert_eq!(r.list("").unwrap().len(), 1);
    assert!(r.put_if_absent("b", b"2").is_err());
    assert!(r.replace("a", b"2", "x").is_err());
    assert!(r.delete("a").is_err());
    assert!(t.path().join("a").exists() && !t.path().join("b").exists());
}

#[test]
fn a_job_wakes_its_wait_when_it_ends_and_says_a_timeout_or_a_stop() {
    let job = Job::spawn("t", || std::thread::sleep(Duration::from_millis(30))).unwrap();
    let far = Instant::now() + Duration::from_secs(30);
    assert_eq!(job.wait(far, || false), Waited::Done);
    assert_eq!(job.wait(far, || true), Waited::Done, "ended: never stopped");
    job.join();
    let slow = Job::spawn("t", || std::thread::sleep(Duration::from_secs(2))).unwrap();
    let soon = Instant::now() + Duration::from_millis(20);
    assert_eq!(slow.wait(soon, || false), Waited::TimedOut);
    assert_eq!(slow.wait(far, || true), Waited::Stopped);
}
