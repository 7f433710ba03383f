//! The S3 client of the fleet store: a few object calls (get, conditional
//! put, list, delete) over a blocking HTTP client on the fleet's helper
//! thread. The SigV4 signing and the AWS credential chain are reqsign's
//! (Apache OpenDAL's): environment keys and session token, profile files,
//! web identity (IRSA), container credentials (ECS, EKS Pod Identity),
//! IMDSv2. Its futures run on `pollster`'s one-thread executor; the HTTP
//! client is `ureq` over rustls with Graviola's pure-Rust cryptography, so
//! the static aarch64 build stays linked by rust-lld alone.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqsign_aws_v4::{Credential, DefaultCredentialProvider, RequestSigner};
use reqsign_core::{Context, FileRead, HttpSend, OsEnv, Signer};

use super::refusal;
use crate::publish::{Broken, Storage};
pub use crate::publish::{Failure, Listed, Object, Put};

/// Largest object the fleet reads (a cache file is at most a few MiB).
pub const MAX_OBJECT: u64 = 256 << 20;
/// Largest answer read to a PUT or DELETE (an error document at most).
const MAX_ANSWER: u64 = 1 << 20;

/// Where the fleet's objects live: `s3://BUCKET/PREFIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub bucket: String,
    /// Without a leading or trailing `/`; may be empty.
    pub prefix: String,
}

impl Location {
    /// `s3://bucket[/prefix]`. A URL that carries credentials (user info,
    /// a query such as a presigned one, a fragment) is refused without
    /// being echoed: credentials come only from the AWS chain.
    pub fn parse(url: &str) -> Result<Location, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("--fleet '{}' is not an s3://BUCKET/PREFIX URL", redact(url)))?;
        if carries_credentials(rest) {
            return Err(format!(
                "--fleet {} carries user info or a query, which may hold credentials: \
                 give them through the AWS chain (AWS_ACCESS_KEY_ID, a profile, a role), never in the URL",
                redact(url)
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return Err(format!(
                "'{bucket}' is not a bucket name (3 to 63 lowercase letters, digits, '-' or '.')"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
            return Err(format!(
                "the prefix '{prefix}' has an empty, '.' or '..' segment"
            ));
        }
        Ok(Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The key of `rel` under the prefix.
    pub fn key(&self, rel: &str) -> String {
        if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        }
    }
}

/// Does the part of a URL after `scheme://` carry user info, a query or a
/// fragment? Any `@` counts, wherever it is: an AWS secret key is base64,
/// so its `/` can come before the `@` that ends it, and neither a bucket, a
/// prefix nor an endpoint ever needs one.
fn carries_credentials(rest: &str) -> bool {
    rest.contains(['@', '?', '#'])
}

/// A URL as lines, state files and commands show it: without user info
/// (`user:secret@`), query or fragment (`s3://KEY:SECRET@b/p?X-Amz-...`
/// -> `s3://b/p`).
/// Everything up to the last `@` goes, as the user info it may be (a
/// secret holding `/` included).
pub fn redact(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or("");
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.rsplit_once('@').map_or(url, |(_, h)| h).to_string();
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    format!("{scheme}://{rest}")
}

/// Where requests go, from the environment as the AWS tools read it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `scheme://host[:port]`, or None for AWS itself (virtual-host style).
    pub url: Option<String>,
    pub region: String,
}

impl Endpoint {
    /// `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`; `AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`, else us-east-1. An `http://` endpoint only
    /// when one is given (it is, by naming it); `AWS_ALLOW_HTTP=false`
    /// refuses it.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Endpoint, String> {
        let nonempty = |k: &str| var(k).filter(|v| !v.is_empty());
        let url = nonempty("AWS_ENDPOINT_URL_S3").or_else(|| nonempty("AWS_ENDPOINT_URL"));
        let region = nonempty("AWS_REGION")
            .or_else(|| nonempty("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        if let Some(u) = &url {
            if carries_credentials(u.split_once("://").map_or(u.as_str(), |(_, r)| r)) {
                return Err(format!(
                    "the endpoint {} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) carries user info or a query, \
                     which may hold credentials: give them through the AWS chain, never in the URL",
                    redact(u)
                ));
            }
            let allow_http = !matches!(
                nonempty("AWS_ALLOW_HTTP")
                    .as_deref()
                    .map(str::to_ascii_lowercase)
                    .as_deref(),
                Some("false" | "0")
            );
            let plain = u.starts_with("http://");
            if !(u.starts_with("https://") || plain) {
                return Err(format!(
                    "the endpoint '{}' is not an http:// or https:// URL",
                    redact(u)
                ));
            }
            if plain && !allow_http {
                return Err(format!(
                    "the endpoint '{}' is plain HTTP and AWS_ALLOW_HTTP is false",
                    redact(u)
                ));
            }
        }
        Ok(Endpoint {
            url: url.map(|u| u.trim_end_matches('/').to_string()),
            region,
        })
    }
}

/// A conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// `If-None-Match: *`: only when the key does not exist.
    Absent,
    /// `If-Match: ETAG`: only when the object is still that one.
    Matches(String),
}

#[derive(Debug)]
struct Http(ureq::Agent);

impl HttpSend for Http {
    async fn http_send(
        &self,
        req: http::Request<Bytes>,
    ) -> reqsign_core::Result<http::Response<Bytes>> {
        let (parts, body) = req.into_parts();
        let resp = self
            .0
            .run(http::Request::from_parts(parts, body.to_vec()))
            .map_err(|e| reqsign_core::Error::unexpected(e.to_string()))?;
        let (parts, mut body) = resp.into_parts();
        let bytes = body
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| reqsign_core::Error::unexpected(e.to_string()))?;
        Ok(http::Response::from_parts(parts, Bytes::from(bytes)))
    }
}

#[derive(Debug)]
struct Files;

impl FileRead for Files {
    async fn file_read(&self, path: &str) -> reqsign_core::Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| reqsign_core::Error::unexpected(e.to_string()))
    }
}

/// The client of one bucket.
pub struct Client {
    agent: ureq::Agent,
    signer: Signer<Credential>,
    endpoint: Endpoint,
    pub location: Location,
}

impl Client {
    /// Each call gives up after `timeout` (connect, send and read).
    pub fn new(location: Location, endpoint: Endpoint, timeout: Duration) -> Client {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls_graviola::default_provider()))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .build()
            .into();
        let ctx = Context::new()
            .with_file_read(Files)
            .with_http_send(Http(agent.clone()))
            .with_env(OsEnv);
        let signer = Signer::new(
            ctx,
            DefaultCredentialProvider::new(),
            RequestSigner::new("s3", &endpoint.region),
        );
        Client {
            agent,
            signer,
            endpoint,
            location,
        }
    }

    fn url(&self, key: &str, query: &str) -> String {
        let path = encode_path(key);
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        match &self.endpoint.url {
            Some(ep) => format!("{ep}/{}/{path}{q}", self.location.bucket),
            None => format!(
                "https://{}.s3.{}.amazonaws.com/{path}{q}",
                self.location.bucket, self.endpoint.region
            ),
        }
    }

    /// Send one signed request; the status, the headers and the body (at
    /// most [`MAX_OBJECT`] bytes).
    fn call(
        &self,
        method: &str,
        key: &str,
        query: &str,
        body: &[u8],
        headers: &[(&str, String)],
    ) -> Result<(u16, http::HeaderMap, Vec<u8>), Failure> {
        self.call_at_most(method, key, query, body, headers, MAX_OBJECT)
    }

    /// [`Client::call`], reading at most `limit` bytes of the answer (a
    /// longer one is a failure, never read whole into memory).
    fn call_at_most(
        &self,
        method: &str,
        key: &str,
        query: &str,
        body: &[u8],
        headers: &[(&str, String)],
        limit: u64,
    ) -> Result<(u16, http::HeaderMap, Vec<u8>), Failure> {
        let fail = |status: Option<u16>, what: String| Failure::new(key, status, what);
        let mut b = http::Request::builder()
            .method(method)
            .uri(self.url(key, query))
            .header("x-amz-content-sha256", crate::digest::sha256_hex(body));
        for (k, v) in headers {
            b = b.header(*k, v);
        }
        let (mut parts, ()) = b
            .body(())
            .map_err(|e| fail(None, format!("bad request: {e}")))?
            .into_parts();
        self.sign(&mut parts, key)?;
        let resp = self
            .agent
            .run(http::Request::from_parts(parts, body.to_vec()))
            .map_err(|e| Failure {
                broken: self.unreachable(&e),
                ..fail(None, one_line(&e.to_string()))
            })?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .with_config()
            .limit(limit.min(MAX_OBJECT))
            .read_to_vec()
            .map_err(|e| {
                fail(
                    Some(status),
                    format!("reading the answer: {}", one_line(&e.to_string())),
                )
            })?;
        Ok((status, headers, bytes))
    }

    /// Sign a request with the credentials of the AWS chain.
    fn sign(&self, parts: &mut http::request::Parts, key: &str) -> Result<(), Failure> {
        pollster::block_on(self.signer.sign(parts, None)).map_err(|e| Failure {
            broken: Some(Box::new(Broken::NoCredentials)),
            ..Failure::new(
                key,
                None,
                format!("no credentials: {}", one_line(&e.to_string())),
            )
        })
    }

    /// Whether the credentials of the AWS chain sign a request (nothing is
    /// sent; a provider may be asked for them: IMDS, STS, a container's).
    pub fn credentials(&self) -> Result<(), Failure> {
        let (mut parts, ()) = http::Request::builder()
            .method("GET")
            .uri(self.url("", ""))
            .header("x-amz-content-sha256", crate::digest::sha256_hex(b""))
            .body(())
            .map_err(|e| Failure::new("", None, format!("bad request: {e}")))?
            .into_parts();
        self.sign(&mut parts, "")
    }

    /// A transport error that means nothing answers at the endpoint (not
    /// one that gave up waiting for an answer).
    fn unreachable(&self, e: &ureq::Error) -> Option<Box<Broken>> {
        let timed_out = match e {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::TimedOut,
            _ => false,
        };
        (!timed_out).then(|| {
            Box::new(Broken::Unreachable {
                endpoint: self.base(),
            })
        })
    }

    /// Where requests go: the endpoint, or the bucket's AWS host.
    pub fn base(&self) -> String {
        match &self.endpoint.url {
            Some(ep) => redact(ep),
            None => format!(
                "https://{}.s3.{}.amazonaws.com",
                self.location.bucket, self.endpoint.region
            ),
        }
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.endpoint.region
    }

    fn refused(&self, key: &str, status: u16, headers: &http::HeaderMap, body: &[u8]) -> Failure {
        let sent = refusal::Sent {
            bucket: &self.location.bucket,
            region: &self.endpoint.region,
        };
        refusal::failure(key, status, headers, body, &sent)
    }

    /// GET: None on 404.
    pub fn get(&self, key: &str) -> Result<Option<Object>, Failure> {
        self.get_at_most(key, MAX_OBJECT)
    }

    /// GET of an object of at most `limit` bytes (a longer answer is a
    /// failure, read no further than the limit): None on 404.
    pub fn get_at_most(&self, key: &str, limit: u64) -> Result<Option<Object>, Failure> {
        let (status, headers, bytes) = self.call_at_most("GET", key, "", &[], &[], limit)?;
        match status {
            200 => Ok(Some(Object {
                bytes,
                etag: etag_of(&headers),
            })),
            s if refusal::missing_key(s, &bytes) => Ok(None),
            s => Err(self.refused(key, s, &headers, &bytes)),
        }
    }

    /// PUT with a condition.
    pub fn put(&self, key: &str, body: &[u8], cond: &Cond) -> Result<Put, Failure> {
        let h = match cond {
            Cond::Absent => ("if-none-match", "*".to_string()),
            Cond::Matches(e) => ("if-match", e.clone()),
        };
        let (status, headers, bytes) = self.call_at_most("PUT", key, "", body, &[h], MAX_ANSWER)?;
        match status {
            200 | 201 | 204 => Ok(Put::Written),
            412 => Ok(Put::Refused),
            // A concurrent conditional write to the same key (S3 answers
            // 409 ConditionalRequestConflict): another writer is winning.
            409 => Ok(Put::Refused),
            s => Err(self.refused(key, s, &headers, &bytes)),
        }
    }

    /// DELETE (a missing key is no error).
    pub fn delete(&self, key: &str) -> Result<(), Failure> {
        let (status, headers, bytes) =
            self.call_at_most("DELETE", key, "", &[], &[], MAX_ANSWER)?;
        match status {
            200 | 204 => Ok(()),
            s if refusal::missing_key(s, &bytes) => Ok(()),
            s => Err(self.refused(key, s, &headers, &bytes)),
        }
    }

    /// Every object under `prefix` (ListObjectsV2, page by page).
    pub fn list(&self, prefix: &str) -> Result<Vec<Listed>, Failure> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(prefix, token.as_deref(), "")?;
            out.extend(page.objects);
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// Whether the bucket lists `prefix` (one page of at most one key):
    /// the objects it showed.
    pub fn list_one(&self, prefix: &str) -> Result<Vec<Listed>, Failure> {
        self.list_page(prefix, None, "&max-keys=1")
            .map(|p| p.objects)
    }

    fn list_page(&self, prefix: &str, token: Option<&str>, more: &str) -> Result<Page, Failure> {
        let mut q = format!("list-type=2{more}&prefix={}", encode_query(prefix));
        if let Some(t) = token {
            q.push_str(&format!("&continuation-token={}", encode_query(t)));
        }
        let (status, headers, bytes) = self.call("GET", "", &q, &[], &[])?;
        if status != 200 {
            return Err(self.refused(prefix, status, &headers, &bytes));
        }
        parse_listing(&bytes).map_err(|what| Failure::new(prefix, Some(status), what))
    }
}

/// The bucket as storage: keys are the objects' own keys (the location's
/// prefix included); a put-if-absent is `If-None-Match: *`, a replace
/// `If-Match: ETAG`.
impl Storage for Client {
    fn get(&self, key: &str, limit: u64) -> Result<Option<Object>, Failure> {
        self.get_at_most(key, limit)
    }
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Put, Failure> {
        self.put(key, bytes, &Cond::Absent)
    }
    fn replace(&self, key: &str, bytes: &[u8], etag: &str) -> Result<Put, Failure> {
        self.put(key, bytes, &Cond::Matches(etag.to_string()))
    }
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, Failure> {
        Client::list(self, prefix)
    }
    fn delete(&self, key: &str) -> Result<(), Failure> {
        Client::delete(self, key)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn etag_of(headers: &http::HeaderMap) -> String {
    headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Percent-encode a key for the path (`/` kept).
fn encode_path(key: &str) -> String {
    encode(key, true)
}

fn encode_query(v: &str) -> String {
    encode(v, false)
}

fn encode(v: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Page {
    objects: Vec<Listed>,
    next: Option<String>,
}

/// A ListObjectsV2 answer: each `<Contents>`'s key, time and size, and the
/// continuation token when truncated.
fn parse_listing(body: &[u8]) -> Result<Page, String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut objects = Vec::new();
    let mut next = None;
    let mut truncated = false;
    let mut path: Vec<String> = Vec::new();
    let mut cur: Option<Listed> = None;
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf) {
            Err(e) => return Err(format!("a listing that is not XML ({e})")),
            Ok(Event::Eof) => break,
            Ok(Event::Start(e)) => {
                let qname = e.name();
                let name: &str = qname.as_ref();
                if name == "Contents" {
                    cur = Some(Listed {
                        key: String::new(),
                        modified: String::new(),
                        size: 0,
                    });
                }
                path.push(name.to_string());
                text.clear();
            }
            Ok(Event::Text(t)) => text.push_str(t.as_ref()),
            Ok(Event::GeneralRef(r)) => {
                let raw = format!("&{};", AsRef::<str>::as_ref(&r));
                let un = quick_xml::escape::unescape(&raw)
                    .map_err(|e| format!("a listing with a bad reference ({e})"))?;
                text.push_str(&un);
            }
            Ok(Event::End(_)) => {
                let name = path.pop().unwrap_or_default();
                let t = std::mem::take(&mut text);
                match (name.as_str(), cur.as_mut()) {
                    ("Contents", _) => objects.extend(cur.take()),
                    ("Key", Some(c)) => c.key = t,
                    ("LastModified", Some(c)) => c.modified = t,
                    ("Size", Some(c)) => c.size = t.trim().parse().unwrap_or(0),
                    ("IsTruncated", None) => truncated = t.trim() == "true",
                    ("NextContinuationToken", None) => next = Some(t),
                    _ => {}
                }
            }
            Ok(_) => {}
        }
        buf.clear();
    }
    Ok(Page {
        objects,
        next: next.filter(|_| truncated),
    })
}

/// A test's environment: these variables, no other.
#[cfg(test)]
pub(crate) fn env(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let l = Location::parse("s3://my-bucket/a/b/").unwrap();
        assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("my-bucket", "a/b"));
        assert_eq!(l.key("x"), "a/b/x");
        assert_eq!(Location::parse("s3://bkt").unwrap().key("x"), "x");
        assert!(Location::parse("gs://bkt").is_err());
        assert!(Location::parse("s3://B").is_err());
        assert!(Location::parse("s3://bkt/a/../b").is_err());
        for url in [
            "s3://AKIAKEY:s3cr3t@bkt/p",
            "s3://s3cr3t@bkt",
            "s3://bkt/p?X-Amz-Signature=s3cr3t",
            "s3://bkt/p#s3cr3t",
        ] {
            let e = Location::parse(url).unwrap_err();
            assert!(!e.contains("s3cr3t") && e.contains("--fleet"), "{e}");
        }
        let e =
            Endpoint::from_env(env(&[("AWS_ENDPOINT_URL", "http://u:s3cr3t@h:9000")])).unwrap_err();
        assert!(
            !e.contains("s3cr3t") && e.contains("AWS_ENDPOINT_URL"),
            "{e}"
        );
        assert_eq!(redact("s3://AKIA:s3cr3t@b-1/p?q=1"), "s3://b-1/p");
        assert_eq!(redact("http://u:p@h:1"), "http://h:1");
        assert_eq!(redact("b-1"), "b-1");
        // a secret key holding a '/' before its '@'
        assert_eq!(redact("s3://AKIA:wJal/K7MD@kw-b/p"), "s3://kw-b/p");
        assert_eq!(redact("S3://AKIA:wJal/K7MD@kw-b/p"), "S3://kw-b/p");
        assert_eq!(redact("http://u:pa/ss@h:9"), "http://h:9");
        assert!(carries_credentials("AKIA:wJal/K7MD@kw-b/p"));
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::from_env(env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
        ]))
        .unwrap();
        assert_eq!(e.url.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(e.region, "eu-west-1");
        let e = Endpoint::from_env(env(&[
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_S3", "https://b"),
        ]))
        .unwrap();
        assert_eq!(e.url.as_deref(), Some("https://b"));
        assert!(Endpoint::from_env(env(&[
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ALLOW_HTTP", "false")
        ]))
        .is_err());
        assert!(Endpoint::from_env(env(&[("AWS_ENDPOINT_URL", "ftp://a")])).is_err());
        assert_eq!(Endpoint::from_env(env(&[])).unwrap().url, None);
    }

    #[test]
    fn listings() {
        let xml = br#"<?xml version="1.0"?><ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>p/a&amp;b</Key><LastModified>2026-12-02T06:00:00.000Z</LastModified><Size>12</Size></Contents><Contents><Key>p/c</Key><Size>3</Size></Contents><NextContinuationToken>tok</NextContinuationToken></ListBucketResult>"#;
        let p = parse_listing(xml).unwrap();
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.objects[0].key, "p/a&b");
        assert_eq!(p.objects[0].size, 12);
        assert_eq!(p.next.as_deref(), Some("tok"));
        assert!(
            parse_listing(b"<a><b></a>").is_err()
                || parse_listing(b"<a><b></a>").unwrap().objects.is_empty()
        );
    }

    #[test]
    fn paths_are_encoded() {
        assert_eq!(encode_path("a b/c+d"), "a%20b/c%2Bd");
    }
}
