//! The fleet store (`--fleet s3://BUCKET/PREFIX`) against a real
//! S3-compatible server: moto's, on loopback, which `.ci/run` installs,
//! starts and names in `KEEPWRAP_TEST_S3` (its endpoint URL). Pods are
//! boots of the fake engine on separate roots. The broken buckets (down,
//! slow, 403, 500) are a listener of the test's own.
//!
//! A set is restored only onto the GPU model it was tuned on, which keepwrap
//! reads from the NVIDIA driver's `/proc/driver/nvidia/gpus`: the tests
//! that restore lay out a machine of their own there, through the test-only
//! seam of the `failpoints` build (`KEEPWRAP_FAILPOINT_NVIDIA_GPUS`), and
//! are compiled with that feature only.
#![cfg_attr(not(feature = "failpoints"), allow(dead_code, unused_imports))]

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// TP2, offline: tuning is done when the engine exits 0.
const TP2: &[&str] = &["--tp", "2", "--offline"];

/// moto's endpoint, or None (said, and a failure under CI).
pub(crate) fn moto() -> Option<String> {
    let ep = std::env::var("KEEPWRAP_TEST_S3").ok();
    has_need(
        ep.is_some(),
        "moto (KEEPWRAP_TEST_S3=http://127.0.0.1:PORT)",
    )
    .then(|| ep.unwrap())
}

/// One request to the server, unsigned (moto does not check signatures):
/// the status and the body.
fn raw(endpoint: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let (status, _, body) = raw_with(endpoint, method, path, "", body);
    (status, body)
}

/// [`raw`] with more header lines (`extra`, each ending in `\r\n`): the
/// status, the answer's head and its body.
fn raw_with(
    endpoint: &str,
    method: &str,
    path: &str,
    extra: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let hostport = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\n{extra}Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text[9..12].parse().unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = text[..at].to_string();
    let mut body = out[at..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    (status, head, body)
}

fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

/// A fresh bucket of moto's.
pub(crate) struct Bucket {
    endpoint: String,
    name: String,
}

impl Bucket {
    pub(crate) fn new(endpoint: &str) -> Bucket {
        let name = format!("kw-{:016x}", rand_u64());
        let (status, body) = raw(endpoint, "PUT", &format!("/{name}"), b"");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        Bucket {
            endpoint: endpoint.to_string(),
            name,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("s3://{}/pods", self.name)
    }

    pub(crate) fn get(&self, key: &str) -> (u16, Vec<u8>) {
        raw(&self.endpoint, "GET", &format!("/{}/{key}", self.name), b"")
    }

    pub(crate) fn put(&self, key: &str, body: &[u8]) {
        let (s, b) = raw(
            &self.endpoint,
            "PUT",
            &format!("/{}/{key}", self.name),
            body,
        );
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    }

    pub(crate) fn delete(&self, key: &str) {
        let (s, b) = raw(
            &self.endpoint,
            "DELETE",
            &format!("/{}/{key}", self.name),
            b"",
        );
        assert_eq!(s, 204, "{}", String::from_utf8_lossy(&b));
    }

    /// Every key in the bucket.
    pub(crate) fn keys(&self) -> Vec<String> {
        let (s, body) = raw(
            &self.endpoint,
            "GET",
            &format!("/{}?list-type=2", self.name),
            b"",
        );
        assert_eq!(s, 200);
        let text = String::from_utf8(body).unwrap();
        text.split("<Key>")
            .skip(1)
            .map(|k| k.split("</Key>").next().unwrap().to_string())
            .collect()
    }

    /// The one launch's directory key (`pods/keepwrap/v1/sglang/<fp>/`).
    pub(crate) fn launch_dir(&self) -> String {
        let head = self
            .keys()
            .into_iter()
            .find(|k| k.ends_with("/HEAD"))
            .expect("a HEAD");
        head.trim_end_matches("HEAD").to_string()
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    u64::from_le_bytes(b)
}

/// A pod: the fake engine under keepwrap on its own root, with the fleet.
pub(crate) fn pod(home: &Path, endpoint: &str, url: &str, extra: &[&str]) -> Command {
    pod_of(home, endpoint, url, extra, TP2)
}

/// A machine whose driver shows GPUs of `model` (the fake engine's is
/// `NVIDIA GB10`): the directory, under `home`, to name in
/// `KEEPWRAP_FAILPOINT_NVIDIA_GPUS`.
pub(crate) fn gpus(home: &Path, model: &str) -> std::path::PathBuf {
    let dir = home.join(format!("gpus-{:016x}", rand_u64()));
    for bus in ["0000:18:00.0", "0000:2a:00.0"] {
        std::fs::create_dir_all(dir.join(bus)).unwrap();
        std::fs::write(
            dir.join(bus).join("information"),
            format!("Model: \t\t {model}\nIRQ:   \t\t 17\nGPU UUID: \t GPU-0\n"),
        )
        .unwrap();
    }
    dir
}

/// [`pod`] with the engine's arguments, on a machine of the fake engine's
/// GPU model.
pub(crate) fn pod_of(
    home: &Path,
    endpoint: &str,
    url: &str,
    extra: &[&str],
    engine: &[&str],
) -> Command {
    let mut kw = vec!["--fleet", url];
    kw.extend_from_slice(extra);
    if !extra.contains(&"--fleet-timeout") {
        kw.extend(["--fleet-timeout", "10s"]);
    }
    let mut cmd = keepwrap_engine(home, &kw, engine);
    without_keepwrap_env(&mut cmd);
    cmd.env("KEEPWRAP_LOG_FORMAT", "json")
        .env("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", gpus(home, "NVIDIA GB10"));
    to_moto(&mut cmd, endpoint);
    cmd
}

/// `cmd` talks to moto at `endpoint`, with test credentials and nothing
/// of the caller's AWS settings.
pub(crate) fn to_moto<'c>(cmd: &'c mut Command, endpoint: &str) -> &'c mut Command {
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("AWS_SESSION_TOKEN")
}

#[test]
#[ignore = "needs moto"]
fn moto_honours_the_conditional_writes_the_fleet_relies_on() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let key = format!("/{}/k", b.name);
    let put = |cond: &str, body: &[u8]| {
        let (status, head, _) = raw_with(&ep, "PUT", &key, &format!("{cond}\r\n"), body);
        let etag = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("etag:"))
            .map(|l| l[5..].trim().to_string());
        (status, etag)
    };
    let (s1, etag) = put("If-None-Match: *", b"1");
    assert_eq!(s1, 200);
    assert_eq!(put("If-None-Match: *", b"2").0, 412, "an existing key");
    let etag = etag.unwrap();
    assert_eq!(put(&format!("If-Match: {etag}"), b"3").0, 200);
    assert_eq!(
        put(&format!("If-Match: {etag}"), b"4").0,
        412,
        "a stale ETag"
    );
    // 16 racing creators of one key, 5 rounds: one winner each.
    for round in 0..5 {
        let key = format!("/{}/race{round}", b.name);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let (ep, key, barrier) = (ep.clone(), key.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let body = format!("{i}");
                    barrier.wait();
                    let (status, _, _) =
                        raw_with(&ep, "PUT", &key, "If-None-Match: *\r\n", body.as_bytes());
                    (i, status)
                })
            })
            .collect();
        let results: Vec<(usize, u16)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let winners: Vec<usize> = results.iter().filter(|r| r.1 == 200).map(|r| r.0).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert!(
            results.iter().all(|r| r.1 == 200 || r.1 == 412),
            "{results:?}"
        );
        let (_, body) = raw(&ep, "GET", &key, b"");
        assert_eq!(String::from_utf8(body).unwrap(), winners[0].to_string());
    }
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_second_pod_on_another_root_boots_warm_with_the_first_pods_tactics() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let (h1, h2) = (home(), home());
    let p1 = boot(&mut pod(h1.path(), &ep, &b.url(), &[]));
    assert_eq!(p1.code, 0, "{}", p1.stderr);
    assert!(p1.has_event("fleet_empty"), "{}", p1.stderr);
    assert!(p1.tuned() > 0);
    assert!(
        p1.logged_with("fleet_published", json!({})),
        "{}",
        p1.stderr
    );
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    assert!(
        p2.logged_with("fleet_restored", json!({"files": 2})),
        "{}",
        p2.stderr
    );
    assert_eq!(p2.tuned(), 0, "pod 2 tunes 0 shapes: {}", p2.stderr);
    assert_eq!(p2.tactics(), p1.tactics(), "pod 1's tactics");
    assert!(
        p2.logged_with("reused", json!({"files": 2})),
        "{}",
        p2.stderr
    );
    // The restored files are signed locally: a third boot on pod 2's root
    // reuses them without the bucket.
    let mut again = pod(h2.path(), &ep, "s3://kw-no-such-bucket/x", &[]);
    let p3 = boot(&mut again);
    assert_eq!(p3.tuned(), 0, "{}", p3.stderr);
    assert!(
        !p3.has_event("fleet_restore_failed"),
        "the root had its set: the bucket is not asked"
    );
    // keepwrap status shows the fleet and the last restore.
    let st = output(
        keepwrap(&cache_root(h2.path()))
            .arg("status")
            .env("KEEPWRAP_FLEET", b.url()),
    );
    assert!(
        st.stdout.iter().any(|l| l.starts_with("fleet: s3://")),
        "{:?}",
        st.stdout
    );
    assert!(
        st.stdout
            .iter()
            .any(|l| l.contains("last restore: restored set")),
        "{:?}",
        st.stdout
    );
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn eight_racing_pods_publish_one_set_and_every_later_pod_restores_it_whole() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let homes: Vec<_> = (0..8).map(|_| home()).collect();
    let running: Vec<Running> = homes
        .iter()
        .map(|h| Running::spawn(&mut pod(h.path(), &ep, &b.url(), &[])))
        .collect();
    let pods: Vec<Finished> = running
        .into_iter()
        .map(|r| r.finish(Duration::from_secs(120)))
        .collect();
    for p in &pods {
        assert_eq!(p.code, 0, "{}", p.stderr);
    }
    let dir = b.launch_dir();
    let (s, head) = b.get(&format!("{dir}HEAD"));
    assert_eq!(s, 200);
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    let set = head["set"].as_str().unwrap().to_string();
    // The set HEAD names is complete: its manifest hashes to its id, and
    // every blob is there with its sha256.
    let (s, manifest) = b.get(&format!("{dir}sets/{set}.json"));
    assert_eq!(s, 200);
    assert_eq!(sha256(&manifest), set);
    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    for f in m["set"]["members"].as_array().unwrap() {
        let (s, blob) = b.get(&format!("{dir}blobs/{}", f["sha256"].as_str().unwrap()));
        assert_eq!(s, 200);
        assert_eq!(sha256(&blob), f["sha256"].as_str().unwrap());
    }
    // Every pod that published knows whether HEAD names its set; those that
    // restored (started after the winner) got it whole.
    let winners = pods
        .iter()
        .filter(|p| p.logged_with("fleet_published", json!({"set": set})))
        .count()
        + pods
            .iter()
            .filter(|p| p.logged_with("fleet_restored", json!({"set": set})))
            .count();
    assert!(winners >= 1);
    for p in pods.iter().filter(|p| p.has_event("fleet_restored")) {
        assert_eq!(p.tuned(), 0, "{}", p.stderr);
    }
    // Two later pods restore that set, whole: every file, 0 shapes tuned.
    for _ in 0..2 {
        let h = home();
        let later = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
        assert!(
            later.logged_with("fleet_restored", json!({"files": 2, "set": set})),
            "{}",
            later.stderr
        );
        assert_eq!(later.tuned(), 0);
        let root = cache_root(h.path());
        let mut got: Vec<String> = cache_files(&root)
            .iter()
            .map(|p| sha256(&std::fs::read(root.join(p)).unwrap()))
            .collect();
        let mut want: Vec<String> = m["set"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["sha256"].as_str().unwrap().to_string())
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "the set HEAD names, whole");
    }
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    keepwrap::digest::sha256_hex(bytes)
}

/// Pod 1 publishes; `tamper` changes the bucket; pod 2 boots cold and its
/// line names `names`.
fn tampered(tamper: impl FnOnce(&Bucket, &str, &serde_json::Value), names: &str) {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let (h1, h2) = (home(), home());
    let p1 = boot(&mut pod(h1.path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let dir = b.launch_dir();
    let head: serde_json::Value = serde_json::from_slice(&b.get(&format!("{dir}HEAD")).1).unwrap();
    tamper(&b, &dir, &head);
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    let e = p2.event("fleet_restore_failed");
    let reason = e["reason"].as_str().unwrap();
    assert!(reason.contains(names), "{reason}");
    assert!(p2.tuned() > 0, "a cold boot");
    assert!(!p2.has_event("fleet_restored"));
    assert_eq!(
        sidecars(&cache_root(h2.path())).len(),
        2,
        "only what pod 2 tuned itself is signed"
    );
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_tampered_blob_gives_a_cold_boot_that_names_it() {
    tampered(
        |b, dir, head| {
            let set = head["set"].as_str().unwrap();
            let m: serde_json::Value =
                serde_json::from_slice(&b.get(&format!("{dir}sets/{set}.json")).1).unwrap();
            let blob = m["set"]["members"][1]["sha256"]
                .as_str()
                .unwrap()
                .to_string();
            b.put(&format!("{dir}blobs/{blob}"), b"{\"planted\": 1}");
        },
        "does not match its size and sha256",
    );
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_tampered_manifest_gives_a_cold_boot_that_names_it() {
    tampered(
        |b, dir, head| {
            let set = head["set"].as_str().unwrap();
            let key = format!("{dir}sets/{set}.json");
            let mut bytes = b.get(&key).1;
            let text = String::from_utf8(bytes.clone())
                .unwrap()
                .replace("rank_tp1", "rank_tp0");
            bytes = text.into_bytes();
            b.put(&key, &bytes);
        },
        "its sha256 is not its id",
    );
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_tampered_pointer_gives_a_cold_boot_that_names_it() {
    tampered(
        |b, dir, _| {
            b.put(
                &format!("{dir}HEAD"),
                format!("{{\"format\":2,\"set\":\"{}\"}}", "0".repeat(64)).as_bytes(),
            )
        },
        "named by HEAD but missing",
    );
    tampered(
        |b, dir, _| b.put(&format!("{dir}HEAD"), b"not json"),
        "HEAD: not a HEAD",
    );
}

#[test]
#[ignore = "needs moto"]
fn read_only_mode_restores_and_publishes_nothing() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h = home();
    let p = boot(&mut pod(
        h.path(),
        &ep,
        &b.url(),
        &["--fleet-mode", "read-only"],
    ));
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(
        p.logged_with("fleet_on", json!({"mode": "read-only"})),
        "{}",
        p.stderr
    );
    assert!(p.logged_with("signed", json!({"files": 2})));
    assert!(!p.has_event("fleet_published"));
    assert_eq!(b.keys(), Vec::<String>::new(), "nothing in the bucket");
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn gc_removes_unused_launches_and_never_one_in_use() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let h = home();
    let p = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
    assert!(p.has_event("fleet_published"), "{}", p.stderr);
    // An abandoned launch: a HEAD, set and blob written long ago cannot
    // be made on moto, so its objects are written now and gc is asked for
    // a window of 0s, after the in-use launch is written again.
    let old = "pods/keepwrap/v1/sglang/".to_string() + &"e".repeat(64);
    b.put(&format!("{old}/blobs/{}", "1".repeat(64)), b"{}");
    b.put(
        &format!("{old}/HEAD"),
        format!("{{\"format\":2,\"set\":\"{}\"}}", "2".repeat(64)).as_bytes(),
    );
    let gc = |older: &str, dry: bool| {
        let mut cmd = keepwrap(&cache_root(h.path()));
        cmd.args(["fleet", "--fleet", &b.url(), "gc", "--older-than", older])
            .env("AWS_ENDPOINT_URL", &ep)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        if dry {
            cmd.arg("--dry-run");
        }
        output(&mut cmd)
    };
    let before = b.keys();
    let g = gc("1h", false);
    assert_eq!(g.code, 0, "{}", g.stderr);
    assert_eq!(
        b.keys(),
        before,
        "everything was used within 1h: nothing removed"
    );
    std::thread::sleep(Duration::from_millis(2100));
    // Pod 2 restores (in use now); the abandoned one was not touched.
    let h2 = home();
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert!(p2.has_event("fleet_restored"), "{}", p2.stderr);
    let g = gc("2s", true);
    assert!(
        g.stdout.iter().any(|l| l.contains(&"e".repeat(64))),
        "{:?}",
        g.stdout
    );
    let g = gc("2s", false);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let keys = b.keys();
    assert!(!keys.iter().any(|k| k.starts_with(&old)), "{keys:?}");
    // The launch pod 2 just used: it re-published its HEAD-named set, so
    // it is fresh and whole.
    let p3 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
    assert!(p3.has_event("fleet_restored"), "{}", p3.stderr);
    let ls = output(
        keepwrap(&cache_root(h.path()))
            .args(["fleet", "--fleet", &b.url(), "ls"])
            .env("AWS_ENDPOINT_URL", &ep)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true"),
    );
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert!(
        ls.stdout
            .iter()
            .any(|l| *l == format!("1 launch in {}", b.url())),
        "{:?}",
        ls.stdout
    );
}

/// A listener that answers every request with `status` (or, with None,
/// reads and never answers).
fn broken_bucket(status: Option<u16>) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        let mut held = Vec::new();
        while Instant::now() < until {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    match status {
                        Some(code) => {
                            let body = format!("<Error><Code>Code{code}</Code></Error>");
                            let _ = write!(s, "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                        }
                        None => held.push(s),
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
            if status.is_none() && held.len() > 8 {
                break;
            }
        }
    });
    (ep, h)
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "reads HEAD only on a machine with a GPU model (the failpoints seam)"]
fn a_bucket_that_is_down_slow_or_refuses_costs_a_cold_boot_within_the_timeout() {
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    // (endpoint, the line, what it names, the timeout: the bucket that
    // answers gets room for a loaded machine; the one that never answers,
    // 2 s). A refusal of every request, or an endpoint where nothing
    // answers, is the bucket's (`fleet_bucket_refused`,
    // `fleet_unreachable`: tests/it/fleet_bucket.rs); a server error or
    // no answer in time, this restore's.
    let cases: Vec<(String, &str, (&str, &str), u64)> = vec![
        (down.clone(), "fleet_unreachable", ("endpoint", &down), 10),
        (
            broken_bucket(Some(403)).0,
            "fleet_bucket_refused",
            ("s3_code", "Code403"),
            10,
        ),
        (
            broken_bucket(Some(500)).0,
            "fleet_restore_failed",
            ("reason", "HEAD: HTTP 500 Code500"),
            10,
        ),
        (
            broken_bucket(None).0,
            "fleet_restore_failed",
            ("reason", "no answer within 2s"),
            2,
        ),
    ];
    for (ep, code, (field, names), timeout) in cases {
        let h = home();
        let started = Instant::now();
        let mut cmd = pod(
            h.path(),
            &ep,
            "s3://kw-broken/pods",
            &["--fleet-timeout", &format!("{timeout}s")],
        );
        let p = boot(&mut cmd);
        assert_eq!(p.code, 0, "{}", p.stderr);
        let e = p.event(code);
        let said = e[field].as_str().unwrap();
        assert!(said.contains(names), "{ep}: {e}");
        assert_eq!(e["level"], "WARN", "{e}");
        assert!(
            !p.has_event("fleet_empty"),
            "a failure never looks like an empty bucket"
        );
        assert!(p.tuned() > 0, "a cold boot");
        // The engine started within the timeout (plus its own run).
        assert!(
            started.elapsed() < Duration::from_secs(timeout + 30),
            "{:?}",
            started.elapsed()
        );
        let start = p.events("start");
        assert_eq!(start.len(), 1);
    }
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "reads HEAD only on a machine with a GPU model (the failpoints seam)"]
fn status_json_shows_the_fleet_its_last_restore_and_its_last_error() {
    let h = home();
    let (ep, _server) = broken_bucket(Some(403));
    let p = boot(&mut pod(
        h.path(),
        &ep,
        "s3://kw-broken/pods",
        &["--fleet-timeout", "2s"],
    ));
    assert_eq!(p.code, 0, "{}", p.stderr);
    let st = output(
        keepwrap(&cache_root(h.path()))
            .args(["status", "--json"])
            .env("KEEPWRAP_FLEET", "s3://AKIAKEY:s3cr3t@kw-broken/pods")
            .env("KEEPWRAP_FLEET_MODE", "read-only"),
    );
    assert_eq!(st.code, 0, "{}", st.stderr);
    let text = st.stdout.join("\n");
    assert!(
        !text.contains("s3cr3t") && !text.contains("AKIAKEY"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let f = &v["fleet"];
    assert_eq!(f["url"], "s3://kw-broken/pods", "{f}");
    assert_eq!(f["mode"], "read-only", "{f}");
    let restore = f["last_restore"]["outcome"].as_str().unwrap();
    assert!(restore.contains("HTTP 403"), "{f}");
    assert!(f["last_restore"]["at"].as_u64().unwrap() > 0, "{f}");
    assert!(
        f["last_publish"].is_object(),
        "the cold boot published: {f}"
    );
    assert_eq!(f["last_error"]["status"], 403, "{f}");
    assert!(
        f["last_error"]["key"]
            .as_str()
            .unwrap()
            .starts_with("pods/keepwrap/v1/sglang/"),
        "{f}"
    );
    // The text status says the same.
    let txt = output(
        keepwrap(&cache_root(h.path()))
            .arg("status")
            .env("KEEPWRAP_FLEET", "s3://AKIAKEY:s3cr3t@kw-broken/pods")
            .env("KEEPWRAP_FLEET_MODE", "read-only"),
    );
    assert!(
        txt.stdout
            .iter()
            .any(|l| l == "fleet: s3://kw-broken/pods (read-only)"),
        "{:?}",
        txt.stdout
    );
    assert!(
        txt.stdout
            .iter()
            .any(|l| l.starts_with("  last error: pods/keepwrap/v1/sglang/")
                && l.contains(": HTTP 403 ")),
        "{:?}",
        txt.stdout
    );
    // Without a fleet and with none used on the root, no fleet.
    let none = output(keepwrap(&cache_root(home().path())).args(["status", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&none.stdout.join("\n")).unwrap();
    assert!(v["fleet"].is_null(), "{v}");
}

/// A bucket that answers HEAD and the manifest with `head` and
/// `manifest`, and every blob with an endless body; the bytes of blob it
/// managed to send.
fn endless_blob_bucket(
    head: Vec<u8>,
    manifest: Vec<u8>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    let sent = std::sync::Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let Ok((mut s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = req.split(' ').nth(1).unwrap_or("").to_string();
            let small = |s: &mut std::net::TcpStream, body: &[u8]| {
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(body);
            };
            if path.ends_with("/HEAD") {
                small(&mut s, &head);
            } else if path.contains("/sets/") {
                small(&mut s, &manifest);
            } else if path.contains("/blobs/") {
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    1u64 << 40
                );
                let chunk = vec![b' '; 64 << 10];
                while s.write_all(&chunk).is_ok() {
                    counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            } else {
                let _ = write!(
                    s,
                    "HTTP/1.1 404 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        }
    });
    (ep, sent)
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_blob_longer_than_its_manifest_says_is_never_read_whole() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let p1 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let dir = b.launch_dir();
    let head = b.get(&format!("{dir}HEAD")).1;
    let set = serde_json::from_slice::<serde_json::Value>(&head).unwrap()["set"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest = b.get(&format!("{dir}sets/{set}.json")).1;
    let (fake, sent) = endless_blob_bucket(head, manifest);
    let h2 = home();
    let p2 = boot(&mut pod(h2.path(), &fake, &b.url(), &[]));
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    let e = p2.event("fleet_restore_failed");
    let reason = e["reason"].as_str().unwrap();
    assert!(reason.contains("/blobs/"), "{reason}");
    assert!(p2.tuned() > 0, "a cold boot");
    // Each blob of the set is a few hundred bytes: keepwrap reads no more
    // than that (what the server got out is that plus socket buffers),
    // never up to the 256 MiB object cap; nor does the cold boot's publish
    // read an endless answer to its PUT of a blob.
    let n = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(n < 32 << 20, "{n} bytes of one blob were read");
}

/// The two nodes of one launch (TP2 across `--nnodes 2`, one rank a node,
/// loopback rendezvous), each a pod on a fresh root of its own, started
/// together; `env` is set on both.
pub(crate) fn boot_nodes(ep: &str, url: &str, env: &[(&str, &str)]) -> Vec<Finished> {
    boot_nodes_with(ep, url, env, &[])
}

/// [`boot_nodes`], with `node1` set on node 1 alone.
fn boot_nodes_with(
    ep: &str,
    url: &str,
    env: &[(&str, &str)],
    node1: &[(&str, &str)],
) -> Vec<Finished> {
    let homes = [home(), home()];
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let running: Vec<Running> = homes
        .iter()
        .enumerate()
        .map(|(rank, h)| {
            let rank = rank.to_string();
            let engine = [
                "--tp",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                &rank,
                "--dist-init-addr",
                &addr,
                "--offline",
            ];
            let mut cmd = pod_of(h.path(), ep, url, &[], &engine);
            cmd.env_remove("SLURM_JOB_ID")
                .env_remove("SLURM_RESTART_COUNT");
            for (k, v) in env {
                cmd.env(k, v);
            }
            if rank == "1" {
                for (k, v) in node1 {
                    cmd.env(k, v);
                }
            }
            Running::spawn(&mut cmd)
        })
        .collect();
    running
        .into_iter()
        .map(|r| r.finish(Duration::from_secs(120)))
        .collect()
}

/// A multi-node launch through the bucket: each node publishes its part
/// under the boot id both share, the last one names the set; the two nodes
/// of a later launch each restore their own part of it and tune nothing.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_multi_node_launch_publishes_under_its_boot_id_and_both_nodes_boot_warm() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let first = boot_nodes(
        &ep,
        &b.url(),
        &[("SLURM_JOB_ID", "4242"), ("SLURM_RESTART_COUNT", "0")],
    );
    for (r, n) in first.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_empty"), "node {r}: {}", n.stderr);
        assert!(
            n.logged_with(
                "fleet_multi_node",
                json!({"node": r, "nnodes": 2, "source": "SLURM_JOB_ID, SLURM_STEP_ID and SLURM_RESTART_COUNT"})
            ),
            "node {r}: {}",
            n.stderr
        );
        assert!(n.tuned() > 0, "node {r} tunes cold");
    }
    let named = first
        .iter()
        .filter(|n| n.has_event("fleet_published"))
        .count();
    assert!(
        named >= 1,
        "the last node names the set: {}",
        first[1].stderr
    );
    let keys = b.keys();
    assert_eq!(
        keys.iter().filter(|k| k.contains("/parts/")).count(),
        2,
        "one part a node, under one boot: {keys:?}"
    );
    let tactics: std::collections::BTreeMap<u64, String> =
        first.iter().flat_map(|n| n.tactics()).collect();
    let second = boot_nodes(&ep, &b.url(), &[]);
    for (r, n) in second.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(
            n.logged_with("fleet_restored", json!({"files": 1})),
            "node {r} restores its own part: {}",
            n.stderr
        );
        assert_eq!(n.tuned(), 0, "node {r}: {}", n.stderr);
        assert!(n.has_event("fleet_no_boot_id"), "node {r}: {}", n.stderr);
    }
    let again: std::collections::BTreeMap<u64, String> =
        second.iter().flat_map(|n| n.tactics()).collect();
    assert_eq!(again, tactics, "the first launch's tactics, on every rank");
}

/// One node's part that does not verify costs every node its restore (all
/// or nothing across the nodes): node 0, whose own part is intact, boots
/// cold too.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_multi_node_set_is_restored_only_when_every_nodes_part_verifies() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let first = boot_nodes(&ep, &b.url(), &[("KEEPWRAP_BOOT_ID", "group-7-boot-1")]);
    assert!(
        first.iter().any(|n| n.has_event("fleet_published")),
        "{}",
        first[1].stderr
    );
    let dir = b.launch_dir();
    let (_, head) = b.get(&format!("{dir}HEAD"));
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    let (_, set) = b.get(&format!("{dir}sets/{}.json", head["set"].as_str().unwrap()));
    let set: serde_json::Value = serde_json::from_slice(&set).unwrap();
    assert_eq!(set["nnodes"], 2, "{set}");
    // each member's node, in the members' order
    let nodes = set["nodes"].as_array().unwrap();
    let node1 = set["set"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .zip(nodes)
        .find(|(_, n)| **n == 1)
        .unwrap()
        .0;
    let blob = format!("{dir}blobs/{}", node1["sha256"].as_str().unwrap());
    b.put(&blob, b"{\"planted\": 1}");
    let second = boot_nodes(&ep, &b.url(), &[]);
    for (r, n) in second.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(
            n.logged_starting("fleet_restore_failed", "reason", &blob),
            "node {r} names node 1's blob: {}",
            n.stderr
        );
        assert!(!n.has_event("fleet_restored"), "node {r}: {}", n.stderr);
        assert!(n.tuned() > 0, "node {r} boots cold");
    }
}

/// A multi-node launch with no boot id restores but publishes nothing, and
/// says so in one line.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_multi_node_launch_without_a_boot_id_publishes_nothing() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let nodes = boot_nodes(&ep, &b.url(), &[]);
    for (r, n) in nodes.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        let e = n.event("fleet_no_boot_id");
        assert_eq!(e["node"], r as u64, "{e}");
        assert!(n.has_event("fleet_empty"), "node {r}: {}", n.stderr);
        assert!(
            !n.has_event("fleet_part_published"),
            "node {r}: {}",
            n.stderr
        );
    }
    assert!(b.keys().is_empty(), "{:?}", b.keys());
}

#[test]
fn an_unusable_fleet_url_is_said_and_the_launch_goes_on() {
    let h = home();
    let mut cmd = keepwrap_engine(h.path(), &["--fleet", "gs://bucket/x"], TP2);
    let p = boot(&mut cmd);
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(p.has_event("fleet_unusable"), "{}", p.stderr);
    assert!(p.logged_with("signed", json!({"files": 2})));
}

/// `kill -9` at every point of a publication (after each blob, after the
/// manifest): no HEAD ever names an incomplete set; the next pod boots
/// cold and publishes a complete one.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn kill_9_in_the_middle_of_a_publish_leaves_no_pointer_to_an_incomplete_set() {
    let Some(ep) = moto() else { return };
    for n in 1..=3 {
        let b = Bucket::new(&ep);
        let h = home();
        let mut cmd = pod(h.path(), &ep, &b.url(), &[]);
        cmd.env("KEEPWRAP_FAILPOINT", format!("fleet:{n}"));
        let p = boot(&mut cmd);
        assert_eq!(p.code, 128 + 9, "killed at point {n}: {}", p.stderr);
        assert!(
            !b.keys().iter().any(|k| k.ends_with("/HEAD")),
            "point {n}: {:?}",
            b.keys()
        );
        let next = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
        assert!(next.has_event("fleet_empty"), "point {n}: {}", next.stderr);
        assert!(
            next.logged_with("fleet_published", json!({})),
            "point {n}: {}",
            next.stderr
        );
        let again = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
        assert!(
            again.has_event("fleet_restored"),
            "point {n}: {}",
            again.stderr
        );
        assert_eq!(again.tuned(), 0);
    }
}

/// A bucket with pod 1's set, and a pod on another root whose restore of
/// it was killed (`kill -9`) after its first file was linked into place.
#[cfg(feature = "failpoints")]
fn killed_in_a_restore(ep: &str) -> (Bucket, Finished, tempfile::TempDir) {
    let b = Bucket::new(ep);
    let p1 = boot(&mut pod(home().path(), ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let h = home();
    let mut cmd = pod(h.path(), ep, &b.url(), &[]);
    cmd.env("KEEPWRAP_FAILPOINT", "fleet-place:1");
    let p2 = boot(&mut cmd);
    assert_eq!(p2.code, 128 + 9, "{}", p2.stderr);
    assert!(!p2.has_event("fleet_restored"), "{}", p2.stderr);
    (b, p1, h)
}

/// `kill -9` after the first file of a restore was linked into place: the
/// next launch on that root trusts none of it (never a partial hit) and
/// restores the set whole.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn kill_9_in_the_middle_of_a_restore_leaves_nothing_trusted() {
    let Some(ep) = moto() else { return };
    let (b, p1, h) = killed_in_a_restore(&ep);
    let p3 = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
    assert_eq!(p3.code, 0, "{}", p3.stderr);
    assert!(
        !p3.logged_with("reused", json!({"files": 1})),
        "{}",
        p3.stderr
    );
    assert!(
        p3.logged_with("fleet_restored", json!({"files": 2})),
        "{}",
        p3.stderr
    );
    assert_eq!(p3.tuned(), 0, "{}", p3.stderr);
    assert_eq!(p3.tactics(), p1.tactics());
}

/// The staging directories in `<root>/.keepwrap`, by name.
#[cfg(feature = "failpoints")]
fn stagings(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join(".keepwrap"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("fleet-staging."))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `kill -9` of a keepwrap that is not PID 1 during a restore leaves its
/// staging directory beside the root; the next launch removes it (and any
/// other whose keepwrap is gone), and leaves the one of a live keepwrap.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn the_staging_a_killed_restore_left_is_removed_by_the_next_launch() {
    let Some(ep) = moto() else { return };
    let (b, _, h) = killed_in_a_restore(&ep);
    let root = cache_root(h.path());
    let left = stagings(&root);
    assert_eq!(left.len(), 1, "the killed restore's staging: {left:?}");
    // A live process that is not keepwrap, and a live keepwrap.
    let mut other = Guard::spawn(Command::new("sleep").arg("60"));
    let lh = home();
    let mut live_cmd = keepwrap_engine(lh.path(), &["--done", "quiet=200ms"], &["--tp", "2"]);
    live_cmd.env("KEEPWRAP_LOG_FORMAT", "json");
    let mut live = Running::spawn(&mut live_cmd);
    live.wait_event("launch", Duration::from_secs(20));
    let state = root.join(".keepwrap");
    let other_name = format!("fleet-staging.{}", other.pid());
    let live_name = format!("fleet-staging.{}", live.guard.pid());
    for n in [&other_name, &live_name, &"fleet-staging.x1".to_string()] {
        std::fs::create_dir(state.join(n)).unwrap();
        std::fs::write(state.join(n).join("0"), b"{}").unwrap();
    }
    let p3 = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
    assert_eq!(p3.code, 0, "{}", p3.stderr);
    assert!(
        p3.logged_with("fleet_restored", json!({"files": 2})),
        "{}",
        p3.stderr
    );
    assert_eq!(
        p3.events_named("fleet_stale_staging").len(),
        2,
        "{}",
        p3.stderr
    );
    let mut want = vec!["fleet-staging.x1".to_string(), live_name];
    want.sort();
    assert_eq!(
        stagings(&root),
        want,
        "only a live keepwrap's, and what is not keepwrap's, are left"
    );
    other.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = other.child.wait();
    live.guard.signal(nix::sys::signal::Signal::SIGTERM);
    let _ = live.finish(Duration::from_secs(30));
}

/// `kill -9` at every point of the local sign after a fleet restore (each
/// sidecar, the set manifest): the next launch on that root trusts nothing
/// in part and loses nothing good: it boots warm with the fleet's tactics.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn kill_9_during_the_sign_after_a_restore_trusts_nothing_in_part() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let p1 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    for n in 1..=3 {
        let h = home();
        let mut cmd = pod(h.path(), &ep, &b.url(), &[]);
        cmd.env("KEEPWRAP_FAILPOINT", format!("sign:{n}"));
        let p2 = boot(&mut cmd);
        assert_eq!(p2.code, 128 + 9, "point {n}: {}", p2.stderr);
        assert!(!p2.has_event("fleet_restored"), "point {n}: {}", p2.stderr);
        let p3 = boot(&mut pod(h.path(), &ep, &b.url(), &[]));
        assert_eq!(p3.code, 0, "point {n}: {}", p3.stderr);
        assert!(
            !p3.logged_with("reused", json!({"files": 1})),
            "point {n}: never a partial hit: {}",
            p3.stderr
        );
        assert!(
            p3.logged_with("fleet_restored", json!({"files": 2}))
                || p3.logged_with("reused", json!({"files": 2})),
            "point {n}: {}",
            p3.stderr
        );
        assert_eq!(p3.tuned(), 0, "point {n}: {}", p3.stderr);
        assert_eq!(p3.tactics(), p1.tactics(), "point {n}");
        assert!(stagings(&cache_root(h.path())).is_empty(), "point {n}");
    }
}

/// A `fleet` subcommand against the bucket of `url` at `ep` (`args`
/// after the URL).
pub(crate) fn fleet_command(h: &Path, ep: &str, url: &str, args: &[&str]) -> Command {
    let mut cmd = keepwrap(&cache_root(h));
    cmd.args(["fleet", "--fleet", url])
        .args(args)
        .env("AWS_ENDPOINT_URL", ep)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    cmd
}

/// What a [`fleet_command`] prints.
fn fleet_cmd(h: &Path, ep: &str, url: &str, args: &[&str]) -> Finished {
    output(&mut fleet_command(h, ep, url, args))
}

/// A fresh bucket, and the first pod of a launch (on root `h`), which
/// published its set there.
pub(crate) fn first_pod(ep: &str) -> (Bucket, tempfile::TempDir, Finished) {
    let b = Bucket::new(ep);
    let h = home();
    let p1 = boot(&mut pod(h.path(), ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    (b, h, p1)
}

/// `p` restored a set and booted warm with `from`'s tactics.
pub(crate) fn assert_warm_from(p: &Finished, from: &Finished) {
    assert!(p.has_event("fleet_restored"), "{}", p.stderr);
    assert_eq!(p.tuned(), 0, "{}", p.stderr);
    assert_eq!(p.tactics(), from.tactics(), "{}", p.stderr);
}

/// The set HEAD names in the launch directory `dir`.
pub(crate) fn head_set(b: &Bucket, dir: &str) -> String {
    let (s, head) = b.get(&format!("{dir}HEAD"));
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&head));
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    head["set"].as_str().unwrap().to_string()
}

/// The launch directories of the bucket that have a HEAD.
fn launch_dirs(b: &Bucket) -> Vec<String> {
    let mut dirs: Vec<String> = b
        .keys()
        .into_iter()
        .filter(|k| k.ends_with("/HEAD"))
        .map(|k| k.trim_end_matches("HEAD").to_string())
        .collect();
    dirs.sort();
    dirs
}

/// A pod of the fake engine that stamps its files with GPU model `gpu`
/// (sm90) and FlashInfer `fi`, on a machine whose driver shows `shows`.
#[cfg(feature = "failpoints")]
fn pod_on(home: &Path, ep: &str, url: &str, gpu: &str, fi: &str, shows: &str) -> Command {
    let mut cmd = pod(home, ep, url, &[]);
    cmd.env("FAKE_GPU", gpu)
        .env("FAKE_GPU_ARCH", "90")
        .env("FAKE_FLASHINFER_VERSION", fi)
        .env("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", gpus(home, shows));
    cmd
}

/// [`pod_on`] on a fresh root, booted.
#[cfg(feature = "failpoints")]
fn boot_on(b: &Bucket, gpu: &str, fi: &str, shows: &str) -> Finished {
    boot(&mut pod_on(
        home().path(),
        &b.endpoint,
        &b.url(),
        gpu,
        fi,
        shows,
    ))
}

/// Case 1 of issue 35: a set tuned on H200 is never restored on an H100
/// pod (both sm90; FlashInfer would reject its files): the H100 pods find
/// no set of their model, tune once, publish their own, and boot warm from
/// it. A machine that shows no GPU model restores nothing.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn a_set_tuned_on_another_gpu_model_of_the_same_architecture_is_never_restored() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let (h200, h100) = ("NVIDIA H200", "NVIDIA H100 80GB HBM3");
    let p1 = boot_on(&b, h200, "0.7.2", h200);
    assert!(
        p1.logged_with("fleet_published", json!({})),
        "{}",
        p1.stderr
    );
    let p2 = boot_on(&b, h100, "0.7.2", h100);
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    assert!(!p2.has_event("fleet_restored"), "{}", p2.stderr);
    assert!(p2.has_event("fleet_empty"), "{}", p2.stderr);
    assert!(p2.tuned() > 0, "{}", p2.stderr);
    assert!(
        p2.logged_with("fleet_published", json!({})),
        "{}",
        p2.stderr
    );
    assert_eq!(launch_dirs(&b).len(), 2, "one HEAD per GPU model");
    // The H100 pods boot warm from the H100 set; an H200 pod from its own.
    let p3 = boot_on(&b, h100, "0.7.2", h100);
    assert_warm_from(&p3, &p2);
    // The driver's spelling of the model differs from CUDA's in case and
    // spaces only: the same model.
    let p4 = boot_on(&b, h200, "0.7.2", "nvidia  h200");
    assert!(p4.has_event("fleet_restored"), "{}", p4.stderr);
    assert_eq!(p4.tactics(), p1.tactics());
    // No GPU model to compare: nothing restored, a cold boot that still
    // runs and signs.
    let h = home();
    let mut cmd = pod_on(h.path(), &ep, &b.url(), h100, "0.7.2", h100);
    cmd.env("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", h.path().join("no-driver"));
    let p5 = boot(&mut cmd);
    assert_eq!(p5.code, 0, "{}", p5.stderr);
    let e = p5.event("fleet_no_gpu_model");
    assert!(e["why"].as_str().unwrap().contains("no-driver"), "{e}");
    assert!(!p5.has_event("fleet_restored"), "{}", p5.stderr);
    assert!(p5.tuned() > 0);
    assert!(
        p5.logged_with("signed", json!({"files": 2})),
        "{}",
        p5.stderr
    );
}

/// Case 2 of issue 35: after a FlashInfer upgrade the first pod restores
/// the old build's set, tunes the new one and moves HEAD to it; every
/// later pod of the new build boots warm.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn after_a_flashinfer_upgrade_head_moves_to_the_new_build() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let gb10 = "NVIDIA GB10";
    let p1 = boot_on(&b, gb10, "0.7.2", gb10);
    assert!(
        p1.logged_with("fleet_published", json!({})),
        "{}",
        p1.stderr
    );
    let dir = b.launch_dir();
    let old = head_set(&b, &dir);
    let p2 = boot_on(&b, gb10, "0.7.3", gb10);
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    assert!(p2.tuned() > 0, "the new build tunes: {}", p2.stderr);
    assert!(
        p2.logged_with("fleet_published", json!({})),
        "{}",
        p2.stderr
    );
    let new = head_set(&b, &dir);
    assert_ne!(new, old, "HEAD moved forward");
    let (_, m) = b.get(&format!("{dir}sets/{new}.json"));
    let m: serde_json::Value = serde_json::from_slice(&m).unwrap();
    assert!(
        m["set"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["path"].as_str().unwrap().starts_with("0.7.3/sm90/")),
        "only the new build's files: {m}"
    );
    let p3 = boot_on(&b, gb10, "0.7.3", gb10);
    assert!(
        p3.logged_with("fleet_restored", json!({"files": 2, "set": new})),
        "{}",
        p3.stderr
    );
    assert_eq!(p3.tuned(), 0, "{}", p3.stderr);
    assert_eq!(p3.tactics(), p2.tactics());
}

/// Case 3 of issue 35: a set a lifecycle rule expired under a live HEAD,
/// or a zero-byte HEAD, costs one cold boot: that pod replaces HEAD, and
/// the next boots warm.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn an_expired_set_or_a_broken_head_costs_one_cold_boot_and_head_moves_on() {
    let Some(ep) = moto() else { return };
    type Break = fn(&Bucket, &str, &str);
    let expire: Break = |b, dir, set| {
        for k in b.keys() {
            if k.starts_with(dir) && !k.ends_with("/HEAD") {
                let (s, _) = raw(&b.endpoint, "DELETE", &format!("/{}/{k}", b.name), b"");
                assert_eq!(s, 204, "{k}");
            }
        }
        assert_eq!(b.get(&format!("{dir}sets/{set}.json")).0, 404);
    };
    let empty: Break = |b, dir, _| b.put(&format!("{dir}HEAD"), b"");
    for (what, broken, names) in [
        ("expired", expire, "named by HEAD but missing"),
        ("zero-byte HEAD", empty, "not a HEAD"),
    ] {
        let b = Bucket::new(&ep);
        let p1 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
        assert!(p1.has_event("fleet_published"), "{what}: {}", p1.stderr);
        let dir = b.launch_dir();
        broken(&b, &dir, &head_set(&b, &dir));
        let p2 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
        assert!(
            p2.logged_starting("fleet_restore_failed", "reason", "")
                && p2.event("fleet_restore_failed")["reason"]
                    .as_str()
                    .unwrap()
                    .contains(names),
            "{what}: {}",
            p2.stderr
        );
        assert!(p2.tuned() > 0);
        assert!(
            p2.logged_with("fleet_published", json!({})),
            "{what}: the cold pod names its set: {}",
            p2.stderr
        );
        let p3 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
        assert!(p3.has_event("fleet_restored"), "{what}: {}", p3.stderr);
        assert_eq!(p3.tuned(), 0, "{what}: {}", p3.stderr);
        assert_eq!(p3.tactics(), p2.tactics(), "{what}");
    }
}

/// Case 4 of issue 35: a pod that restored the set publishes it again
/// while `fleet gc` runs: its blob and manifest PUTs find them there, its
/// HEAD create lands after gc deleted HEAD. gc then keeps the launch (its
/// HEAD is back), and the next pod boots warm.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn gc_keeps_a_launch_whose_head_a_pod_wrote_again_while_it_ran() {
    let Some(ep) = moto() else { return };
    let (b, h, p1) = first_pod(&ep);
    let dir = b.launch_dir();
    let (_, head) = b.get(&format!("{dir}HEAD"));
    std::thread::sleep(Duration::from_millis(2100));
    let mut gc = fleet_command(h.path(), &ep, &b.url(), &["gc", "--older-than", "1s"]);
    // gc pauses after each HEAD it deleted: the pod's turn.
    gc.env("KEEPWRAP_FAILPOINT_DELAY_MS", "3000");
    let gc = Running::spawn(&mut gc);
    let until = Instant::now() + Duration::from_secs(20);
    while b.get(&format!("{dir}HEAD")).0 == 200 {
        assert!(Instant::now() < until, "gc never deleted HEAD");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The pod's publication: blobs and manifest are there (412), HEAD is
    // created again.
    let (s, _, _) = raw_with(
        &ep,
        "PUT",
        &format!("/{}/{dir}HEAD", b.name),
        "If-None-Match: *\r\n",
        &head,
    );
    assert_eq!(s, 200);
    let g = gc.finish(Duration::from_secs(60));
    assert_eq!(g.code, 0, "{}", g.stderr);
    assert!(
        g.stdout.iter().any(|l| l.starts_with("removed 0 launches")),
        "{:?}",
        g.stdout
    );
    let p3 = boot(&mut pod(home().path(), &ep, &b.url(), &[]));
    assert_warm_from(&p3, &p1);
}

/// Case 5 of issue 35: two `srun` steps of one SLURM job are two boots.
/// Step 1's node 1 publishes nothing (read-only), so its boot has node 0's
/// part only; step 2's nodes name their own union, never step 1's node 0
/// with step 2's node 1.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn two_srun_steps_of_one_job_never_mix_their_nodes_files() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let job = |step: &'static str| [("SLURM_JOB_ID", "4343"), ("SLURM_STEP_ID", step)];
    let step1 = boot_nodes_with(
        &ep,
        &b.url(),
        &job("0"),
        &[("KEEPWRAP_FLEET_MODE", "read-only")],
    );
    assert!(
        step1[0].has_event("fleet_part_published"),
        "{}",
        step1[0].stderr
    );
    assert!(
        !b.keys().iter().any(|k| k.ends_with("/HEAD")),
        "{:?}",
        b.keys()
    );
    let step2 = boot_nodes(&ep, &b.url(), &job("1"));
    for (r, n) in step2.iter().enumerate() {
        assert_eq!(n.code, 0, "node {r}: {}", n.stderr);
        assert!(n.tuned() > 0, "node {r}");
    }
    assert!(
        step2.iter().any(|n| n.has_event("fleet_published")),
        "{}\n{}",
        step2[0].stderr,
        step2[1].stderr
    );
    let tactics: std::collections::BTreeMap<u64, String> =
        step2.iter().flat_map(|n| n.tactics()).collect();
    let later = boot_nodes(&ep, &b.url(), &[]);
    for (r, n) in later.iter().enumerate() {
        assert!(n.has_event("fleet_restored"), "node {r}: {}", n.stderr);
        assert_eq!(n.tuned(), 0, "node {r}: {}", n.stderr);
    }
    let again: std::collections::BTreeMap<u64, String> =
        later.iter().flat_map(|n| n.tactics()).collect();
    assert_eq!(again, tactics, "step 2's tactics on every rank");
}

/// Case 6 of issue 35: a URL or an endpoint that carries credentials is
/// refused without being echoed, in lines, the state file, `status`,
/// `config` and `fleet ls`.
#[test]
fn a_fleet_url_or_endpoint_with_credentials_is_refused_and_never_echoed() {
    let secret = "s3cr3tVALUE";
    let cases = [
        (format!("s3://AKIAKEY:{secret}@kw-b/p"), None),
        (format!("s3://kw-b/p?X-Amz-Signature={secret}"), None),
        (
            "s3://kw-b/p".to_string(),
            Some(format!("http://user:{secret}@127.0.0.1:9")),
        ),
    ];
    for (url, endpoint) in cases {
        let h = home();
        let mut cmd = keepwrap_engine(h.path(), &["--fleet", &url], TP2);
        without_keepwrap_env(&mut cmd);
        cmd.env("KEEPWRAP_LOG_FORMAT", "json");
        if let Some(e) = &endpoint {
            cmd.env("AWS_ENDPOINT_URL", e);
        }
        let p = boot(&mut cmd);
        assert_eq!(p.code, 0, "{}", p.stderr);
        assert!(p.has_event("fleet_unusable"), "{url}: {}", p.stderr);
        assert!(!p.has_event("fleet_on"), "{url}: {}", p.stderr);
        assert!(!p.stderr.contains(secret), "{url}: {}", p.stderr);
        assert!(p.logged_with("signed", json!({"files": 2})));
        let root = cache_root(h.path());
        let state = std::fs::read_to_string(root.join(".keepwrap/fleet.json")).unwrap_or_default();
        assert!(!state.contains(secret), "{state}");
        let mut shown = Vec::new();
        for args in [
            &["status"][..],
            &["status", "--json"],
            &["config", "--json"],
        ] {
            let mut c = keepwrap(&root);
            c.args(args).env("KEEPWRAP_FLEET", &url);
            if let Some(e) = &endpoint {
                c.env("AWS_ENDPOINT_URL", e);
            }
            shown.push(output(&mut c));
        }
        shown.push(fleet_cmd(
            h.path(),
            endpoint.as_deref().unwrap_or("http://127.0.0.1:9"),
            &url,
            &["ls"],
        ));
        for o in &shown {
            let all = format!("{}\n{}", o.stdout.join("\n"), o.stderr);
            assert!(!all.contains(secret), "{url}: {all}");
        }
        assert!(
            shown[2].stdout.join("\n").contains("s3://kw-b/p"),
            "config shows the URL without them: {:?}",
            shown[2].stdout
        );
        assert_eq!(shown[3].code, 1, "fleet ls refuses it: {}", shown[3].stderr);
    }
}

/// A bucket server that answers every GET with 404 (an empty bucket) and
/// holds every other request (a PUT) unanswered: a black-holed upload.
fn black_hole_for_uploads() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            if buf[..n].starts_with(b"GET ") {
                let _ = write!(
                    s,
                    "HTTP/1.1 404 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            } else {
                held.push(s);
            }
        }
    });
    ep
}

/// Case 7 of issue 35: `docker stop` while the publication hangs on a
/// black-holed bucket: keepwrap exits with the engine's status within
/// the stop's grace period, not after `--fleet-timeout`. (A set is
/// published only from a machine of its GPU model: the failpoints seam
/// shows one.)
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "publishes only on a machine with a GPU model (the failpoints seam)"]
fn a_stop_signal_abandons_a_publication_that_hangs() {
    let ep = black_hole_for_uploads();
    let h = home();
    let mut cmd = keepwrap_engine(
        h.path(),
        &[
            "--fleet",
            "s3://kw-slow/pods",
            "--fleet-timeout",
            "40s",
            "--done",
            "quiet=200ms",
        ],
        &["--tp", "2"],
    );
    without_keepwrap_env(&mut cmd);
    cmd.env("KEEPWRAP_LOG_FORMAT", "json")
        .env(
            "KEEPWRAP_FAILPOINT_NVIDIA_GPUS",
            gpus(h.path(), "NVIDIA GB10"),
        )
        .env("AWS_ENDPOINT_URL", &ep)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    let mut p = Running::spawn(&mut cmd);
    p.wait_event("signed", Duration::from_secs(60));
    // The publication has begun and hangs on the first blob.
    std::thread::sleep(Duration::from_millis(500));
    let stopped = Instant::now();
    p.guard.signal(nix::sys::signal::Signal::SIGTERM);
    let f = p.finish(Duration::from_secs(60));
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(8), "{took:?}: {}", f.stderr);
    assert_ne!(f.code, 137, "{}", f.stderr);
    assert!(f.has_event("fleet_publish_stopped"), "{}", f.stderr);
    assert!(!f.has_event("fleet_publish_abandoned"), "{}", f.stderr);
}

/// Case 8 of issue 35: bytes from the bucket reach a terminal escaped:
/// `fleet ls` shows a HEAD that is not keepwrap's as such and a key's
/// control characters escaped, and `status` escapes the stored error that
/// quotes a HEAD field.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn bucket_bytes_reach_the_terminal_escaped() {
    let Some(ep) = moto() else { return };
    let (b, h, _) = first_pod(&ep);
    let dir = b.launch_dir();
    // A valid JSON HEAD whose unknown field (an OSC 52 clipboard write, a
    // cleared screen, a forged line) serde's error quotes.
    b.put(
        &format!("{dir}HEAD"),
        br#"{"format":2,"set":"x","\u001b]52;c;ZWNobyBwd25lZA==\u0007\u001b[2J\nkeepwrap: forged":1}"#,
    );
    b.put(
        "pods/keepwrap/v1/sglang%1B%5B2J/HEAD",
        br#"{"format":2,"set":"\u001b[2J"}"#,
    );
    let ls = fleet_cmd(h.path(), &ep, &b.url(), &["ls"]);
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    let text = ls.stdout.join("\n");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(text.contains("(not a valid HEAD)"), "{text}");
    assert!(text.contains("sglang\\x1b[2J"), "{text}");
    let h2 = home();
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert!(p2.has_event("fleet_restore_failed"), "{}", p2.stderr);
    let st = output(
        keepwrap(&cache_root(h2.path()))
            .arg("status")
            .env("KEEPWRAP_FLEET", b.url()),
    );
    let text = st.stdout.join("\n");
    assert!(text.contains("last restore: "), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(
        !st.stdout.iter().any(|l| l.starts_with("keepwrap: forged")),
        "{text}"
    );
    let gc = fleet_cmd(
        h.path(),
        &ep,
        &b.url(),
        &["gc", "--older-than", "1h", "--dry-run"],
    );
    assert!(!gc.stdout.join("\n").contains('\x1b'), "{:?}", gc.stdout);
}

#[cfg(feature = "failpoints")]
#[test]
#[ignore = "needs moto"]
fn forget_with_the_fleet_withdraws_the_launchs_head_and_the_next_pod_boots_cold() {
    let Some(ep) = moto() else { return };
    let b = Bucket::new(&ep);
    let (h1, h2) = (home(), home());
    let p1 = boot(&mut pod(h1.path(), &ep, &b.url(), &[]));
    assert!(p1.has_event("fleet_published"), "{}", p1.stderr);
    let heads = || {
        b.keys()
            .into_iter()
            .filter(|k| k.ends_with("/HEAD"))
            .count()
    };
    assert_eq!(heads(), 1);

    let dry = output(&mut pod(h1.path(), &ep, &b.url(), &["forget", "--dry-run"]));
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout[0].ends_with(&format!(
            "; would withdraw its HEAD from the fleet {} (dry run: nothing removed)",
            b.url()
        )),
        "{:?}",
        dry.stdout
    );
    assert_eq!(heads(), 1, "a dry run withdraws nothing");

    let f = output(&mut pod(h1.path(), &ep, &b.url(), &["forget"]));
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout[0].ends_with(&format!("; withdrew its HEAD from the fleet {}", b.url())),
        "{:?}",
        f.stdout
    );
    assert_eq!(heads(), 0);
    let p2 = boot(&mut pod(h2.path(), &ep, &b.url(), &[]));
    assert!(p2.has_event("fleet_empty"), "{}", p2.stderr);
    assert!(p2.tuned() > 0, "a cold boot");
}
