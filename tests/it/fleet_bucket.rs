//! A bucket that is wrong says so at the start: a restore that meets
//! S3's `NoSuchBucket`, `AccessDenied`, a wrong region (`PermanentRedirect`
//! with `x-amz-bucket-region`, `AuthorizationHeaderMalformed`), a redirect
//! or an endpoint where nothing answers logs one warning with S3's code
//! (and the region S3 names), read-only mode included, and the engine
//! starts all the same; "no set yet" (`fleet_empty`) is only for a bucket
//! that answered and holds none. `keepwrap fleet check` tries the
//! credentials, the bucket and the permissions a mode needs, one line
//! each, and exits 1 on a problem.
//!
//! The buckets are `tests/fixtures/fleet/fake_s3.py` on loopback (every
//! request answered with one status and S3 error body, or one bucket in
//! memory), and moto's server for real S3 semantics (`KEEPWRAP_TEST_S3`).

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::json;

/// A fake S3 endpoint (`fake_s3.py ARGS`), stopped when dropped.
struct FakeS3 {
    child: Child,
    endpoint: String,
}

impl FakeS3 {
    fn start(args: &[&str]) -> FakeS3 {
        let mut child = Command::new("python3")
            .arg(repo().join("tests/fixtures/fleet/fake_s3.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 tests/fixtures/fleet/fake_s3.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the fake S3's port");
        FakeS3 {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for FakeS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port where nothing listens.
fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    ep
}

/// The AWS environment of a test: this endpoint, test keys, no IMDS, no
/// profile of the machine's.
fn aws_env<'a>(cmd: &'a mut Command, endpoint: &str, home: &Path) -> &'a mut Command {
    without_keepwrap_env(cmd)
        .env("KEEPWRAP_LOG_FORMAT", "json")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", home)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("AWS_SESSION_TOKEN")
}

/// A pod of the fake engine on its own root with the fleet `url` in
/// `mode`. On a machine of a GPU model (the `failpoints` build shows one)
/// the restore reads HEAD; on one that shows none, it asks the bucket
/// once whether it answers: a wrong bucket reads alike either way.
fn pod(home: &Path, endpoint: &str, url: &str, mode: &str) -> Finished {
    let kw = [
        "--fleet",
        url,
        "--fleet-mode",
        mode,
        "--fleet-timeout",
        "10s",
    ];
    let mut cmd = keepwrap_engine(home, &kw, &["--tp", "2", "--offline"]);
    let gpus = home.join("gpus/0000:18:00.0");
    std::fs::create_dir_all(&gpus).unwrap();
    std::fs::write(gpus.join("information"), "Model: \t\t NVIDIA GB10\n").unwrap();
    aws_env(&mut cmd, endpoint, home).env("KEEPWRAP_FAILPOINT_NVIDIA_GPUS", home.join("gpus"));
    boot(&mut cmd)
}

/// The warnings about the bucket a pod logged (not the GPU model's).
fn bucket_warnings(p: &Finished) -> Vec<serde_json::Value> {
    p.warnings()
        .into_iter()
        .filter(|w| w["code"] != "fleet_no_gpu_model")
        .collect()
}

#[test]
fn a_wrong_bucket_is_a_warning_with_s3s_code_at_the_start_and_the_engine_starts() {
    // (fake S3's answer, mode, S3's code, the region S3 names, what the
    // advice says)
    type Case<'a> = (&'a [&'a str], &'a str, &'a str, Option<&'a str>, &'a str);
    let cases: [Case; 5] = [
        (
            &["404", "NoSuchBucket"],
            "read-only",
            "NoSuchBucket",
            None,
            "there is no bucket 'kw-typo-bucket'",
        ),
        (
            &["403", "AccessDenied"],
            "read-only",
            "AccessDenied",
            None,
            "s3:GetObject",
        ),
        (
            &["301", "PermanentRedirect", "eu-west-1"],
            "read-write",
            "PermanentRedirect",
            Some("eu-west-1"),
            "set AWS_REGION=eu-west-1",
        ),
        (
            &["400", "AuthorizationHeaderMalformed", "ap-south-1"],
            "read-only",
            "AuthorizationHeaderMalformed",
            Some("ap-south-1"),
            "set AWS_REGION=ap-south-1",
        ),
        (
            &["307", "TemporaryRedirect"],
            "read-only",
            "TemporaryRedirect",
            None,
            "set AWS_REGION to the bucket's region",
        ),
    ];
    for (answer, mode, code, region, advice) in cases {
        let s3 = FakeS3::start(answer);
        let h = home();
        let p = pod(h.path(), &s3.endpoint, "s3://kw-typo-bucket/pods", mode);
        assert_eq!(p.code, 0, "{code}: {}", p.stderr);
        let e = p.event("fleet_bucket_refused");
        assert_eq!(e["level"], "WARN", "{e}");
        assert_eq!(e["s3_code"], code, "{e}");
        assert_eq!(e["status"], answer[0].parse::<u16>().unwrap(), "{e}");
        assert_eq!(e["region"], json!(region), "{e}");
        assert!(
            e["key"].as_str().unwrap().starts_with("pods/keepwrap/v1/"),
            "{e}"
        );
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(advice), "{code}: {message}");
        assert!(message.ends_with("; a cold boot"), "{message}");
        assert!(!p.has_event("fleet_empty"), "{code}: never an empty bucket");
        assert!(!p.has_event("fleet_restore_failed"), "{code}: said once");
        assert_eq!(p.events("start").len(), 1, "{code}: the engine started");
        assert!(p.tuned() > 0, "{code}: a cold boot");
    }
}

#[test]
fn an_endpoint_where_nothing_answers_is_a_warning_at_the_start() {
    let ep = closed_port();
    let h = home();
    let p = pod(h.path(), &ep, "s3://kw-bucket/pods", "read-only");
    assert_eq!(p.code, 0, "{}", p.stderr);
    let e = p.event("fleet_unreachable");
    assert_eq!(e["level"], "WARN", "{e}");
    assert_eq!(e["endpoint"], ep.as_str(), "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("Connection refused"),
        "{e}"
    );
    assert!(!p.has_event("fleet_empty"));
    assert_eq!(p.events("start").len(), 1, "the engine started");
}

#[test]
fn a_bucket_that_answers_and_holds_no_set_is_no_warning() {
    let s3 = FakeS3::start(&["404", "NoSuchKey"]);
    let h = home();
    let p = pod(h.path(), &s3.endpoint, "s3://kw-bucket/pods", "read-only");
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert_eq!(bucket_warnings(&p), Vec::<serde_json::Value>::new());
    // With a GPU model to compare, the restore read HEAD: no set yet.
    if !p.has_event("fleet_no_gpu_model") {
        let e = p.event("fleet_empty");
        assert_eq!(e["level"], "INFO", "{e}");
    }
    if cfg!(feature = "failpoints") {
        assert!(p.has_event("fleet_empty"), "{}", p.stderr);
    }
}

/// Line `i` of what `c` printed starts with `start` and holds `part`.
#[track_caller]
fn says(c: &Finished, i: usize, start: &str, part: &str) {
    let line = c.stdout.get(i).map_or("", String::as_str);
    assert!(
        line.starts_with(start) && line.contains(part),
        "line {i}: {:?}",
        c.stdout
    );
}

/// `keepwrap fleet --fleet URL check [extra]` against `endpoint`.
fn check(endpoint: &str, url: &str, extra: &[&str]) -> Finished {
    let h = home();
    let mut cmd = Command::new(BIN);
    aws_env(&mut cmd, endpoint, h.path())
        .args(["fleet", "--fleet", url, "--fleet-timeout", "10s", "check"])
        .args(extra);
    output(&mut cmd)
}

#[test]
fn fleet_check_says_what_is_wrong_with_a_bucket_and_exits_1() {
    // (fake S3's answer, the mode, the line of the failed check)
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["404", "NoSuchBucket"],
            "read-only",
            "FAIL  list: pods/keepwrap/v1/: HTTP 404 NoSuchBucket: there is no bucket 'kw-typo-bucket' at this endpoint",
        ),
        (
            &["301", "PermanentRedirect", "eu-west-1"],
            "read-write",
            "FAIL  list: pods/keepwrap/v1/: HTTP 301 PermanentRedirect (the bucket is in eu-west-1): the bucket 'kw-typo-bucket' is in eu-west-1, and the request was signed for us-east-1: set AWS_REGION=eu-west-1",
        ),
        (
            &["403", "AccessDenied"],
            "read-only",
            "FAIL  list: pods/keepwrap/v1/: HTTP 403 AccessDenied: these credentials may not do this",
        ),
    ];
    for (answer, mode, line) in cases {
        let s3 = FakeS3::start(answer);
        let c = check(
            &s3.endpoint,
            "s3://kw-typo-bucket/pods",
            &["--fleet-mode", mode],
        );
        assert_eq!(c.code, 1, "{line}: {:?} {}", c.stdout, c.stderr);
        assert_eq!(
            c.stdout[0],
            "ok    credentials: the AWS chain gives credentials to sign with"
        );
        says(&c, 1, line, "");
        assert!(
            c.stdout.last().unwrap().starts_with(&format!(
                "fleet check: s3://kw-typo-bucket/pods is not ready for {mode}: "
            )),
            "{:?}",
            c.stdout
        );
    }
    // No such bucket: nothing more to check. Access denied: the read is
    // checked all the same (another permission may be granted).
    let s3 = FakeS3::start(&["404", "NoSuchBucket"]);
    let c = check(&s3.endpoint, "s3://kw-typo-bucket/pods", &[]);
    assert_eq!(c.code, 1);
    assert_eq!(
        &c.stdout[2..],
        [
            "skip  get: not checked after the problem above",
            "skip  put-if-absent: not checked after the problem above",
            "skip  replace: not checked after the problem above",
            "skip  delete: not checked after the problem above",
            "fleet check: s3://kw-typo-bucket/pods is not ready for read-write: 1 of 6 checks failed, 4 not checked",
        ],
        "{:?}",
        c.stdout
    );
    // `fleet ls` says the same of that bucket.
    let h = home();
    let mut cmd = Command::new(BIN);
    aws_env(&mut cmd, &s3.endpoint, h.path()).args([
        "fleet",
        "--fleet",
        "s3://kw-typo-bucket",
        "ls",
    ]);
    let ls = output(&mut cmd);
    assert_eq!(ls.code, 1, "{:?}", ls.stdout);
    let e = ls.event("command_failed");
    assert!(
        e["message"].as_str().unwrap().contains(
            ": HTTP 404 NoSuchBucket: there is no bucket 'kw-typo-bucket' at this endpoint"
        ),
        "{e}"
    );
    let s3 = FakeS3::start(&["403", "AccessDenied"]);
    let c = check(
        &s3.endpoint,
        "s3://kw-b/pods",
        &["--fleet-mode", "read-only"],
    );
    says(
        &c,
        2,
        "FAIL  get: pods/keepwrap/v1/check/",
        ": HTTP 403 AccessDenied: ",
    );
    assert_eq!(c.stdout.len(), 4, "{:?}", c.stdout);
}

#[test]
fn fleet_check_of_an_endpoint_where_nothing_answers_or_without_credentials_exits_1() {
    let ep = closed_port();
    let c = check(&ep, "s3://kw-b/pods", &["--fleet-mode", "read-only"]);
    assert_eq!(c.code, 1, "{:?}", c.stdout);
    says(&c, 1, &format!("FAIL  list: nothing answers at {ep} ("), "");
    assert_eq!(
        c.stdout[2],
        "skip  get: not checked after the problem above"
    );
    // No credentials anywhere in the chain: nothing is sent.
    let s3 = FakeS3::start(&["store"]);
    let h = home();
    let mut cmd = Command::new(BIN);
    aws_env(&mut cmd, &s3.endpoint, h.path())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_ROLE_ARN")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .args(["fleet", "--fleet", "s3://kw-b/pods", "check"]);
    let c = output(&mut cmd);
    assert_eq!(c.code, 1, "{:?}", c.stdout);
    says(
        &c,
        0,
        "FAIL  credentials: no credentials to sign with (",
        "",
    );
    assert_eq!(
        c.stdout[1],
        "skip  list: not checked after the problem above"
    );
}

#[test]
fn fleet_check_says_a_write_the_read_write_mode_needs_is_refused_or_unconditional() {
    // A read-only role left in read-write mode.
    let s3 = FakeS3::start(&["store", "read-only"]);
    let c = check(&s3.endpoint, "s3://kw-b/pods", &[]);
    assert_eq!(c.code, 1, "{:?}", c.stdout);
    says(
        &c,
        3,
        "FAIL  put-if-absent: pods/keepwrap/v1/check/",
        ": HTTP 403 AccessDenied: ",
    );
    assert_eq!(
        &c.stdout[4..],
        [
            "skip  replace: not checked after the problem above",
            "skip  delete: not checked after the problem above",
            "fleet check: s3://kw-b/pods is not ready for read-write: 1 of 6 checks failed, 2 not checked",
        ]
    );
    let c = check(
        &s3.endpoint,
        "s3://kw-b/pods",
        &["--fleet-mode", "read-only"],
    );
    assert_eq!(c.code, 0, "read-only needs no write: {:?}", c.stdout);
    // A server that ignores conditional writes: replicas would overwrite
    // each other's HEAD.
    let s3 = FakeS3::start(&["store", "unconditional"]);
    let c = check(&s3.endpoint, "s3://kw-b/pods", &[]);
    assert_eq!(c.code, 1, "{:?}", c.stdout);
    says(&c, 3, "FAIL  ", ": a second create of one key was not refused: the bucket does not honour If-None-Match: *, which the fleet needs");
    says(&c, 4, "FAIL  replace: ", "does not honour If-Match");
    says(&c, 5, "ok    delete: removed ", "");
    assert_eq!(
        keys(&s3.endpoint, "kw-b"),
        Vec::<String>::new(),
        "the probe is gone"
    );
}

/// One unsigned request to an S3 endpoint on loopback (neither the fake
/// nor moto checks signatures): the status and the body.
fn raw(endpoint: &str, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let hostport = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nAuthorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    (status, body)
}

/// Every key in `bucket`.
fn keys(endpoint: &str, bucket: &str) -> Vec<String> {
    let (status, body) = raw(endpoint, "GET", &format!("/{bucket}?list-type=2"));
    assert_eq!(status, 200, "{body}");
    body.split("<Key>")
        .skip(1)
        .map(|k| k.split("</Key>").next().unwrap().to_string())
        .collect()
}

#[test]
fn fleet_check_of_a_bucket_that_does_all_the_mode_needs_exits_0_and_leaves_nothing() {
    let s3 = FakeS3::start(&["store"]);
    let c = check(&s3.endpoint, "s3://kw-b/pods", &[]);
    assert_eq!(c.code, 0, "{:?} {}", c.stdout, c.stderr);
    let tags: Vec<&str> = c
        .stdout
        .iter()
        .map(|l| &l[..l.find(':').unwrap()])
        .collect();
    assert_eq!(
        tags,
        [
            "ok    credentials",
            "ok    list",
            "ok    get",
            "ok    put-if-absent",
            "ok    replace",
            "ok    delete",
            "fleet check",
        ]
    );
    assert_eq!(
        c.stdout.last().unwrap(),
        "fleet check: s3://kw-b/pods is ready for read-write (6 checks passed)"
    );
    assert_eq!(
        keys(&s3.endpoint, "kw-b"),
        Vec::<String>::new(),
        "the probe is gone"
    );
    // Read-only needs list and get, and writes nothing.
    let c = check(
        &s3.endpoint,
        "s3://kw-b/pods",
        &["--fleet-mode", "read-only"],
    );
    assert_eq!(c.code, 0, "{:?}", c.stdout);
    assert_eq!(
        c.stdout.last().unwrap(),
        "fleet check: s3://kw-b/pods is ready for read-only (3 checks passed)"
    );
}

#[test]
#[ignore = "needs moto's S3 server (KEEPWRAP_TEST_S3)"]
fn fleet_check_against_moto_passes_for_both_modes_and_names_a_missing_bucket() {
    let Some(ep) = crate::fleet::moto() else {
        return;
    };
    let bucket = format!("kw-check-{}", std::process::id());
    let (status, body) = raw(&ep, "PUT", &format!("/{bucket}"));
    assert_eq!(status, 200, "{body}");
    for mode in ["read-write", "read-only"] {
        let c = check(&ep, &format!("s3://{bucket}/pods"), &["--fleet-mode", mode]);
        assert_eq!(c.code, 0, "{mode}: {:?} {}", c.stdout, c.stderr);
        assert!(
            c.stdout.iter().all(|l| !l.starts_with("FAIL")),
            "{:?}",
            c.stdout
        );
    }
    assert_eq!(
        keys(&ep, &bucket),
        Vec::<String>::new(),
        "the probe is gone"
    );
    let c = check(&ep, "s3://kw-no-such-bucket-here/pods", &[]);
    assert_eq!(c.code, 1, "{:?}", c.stdout);
    says(&c, 1, "FAIL  list: ", ": HTTP 404 NoSuchBucket: ");
}
