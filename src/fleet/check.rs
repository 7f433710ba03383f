//! Whether the bucket can be used as configured: the warning a restore
//! gives for a bucket that is wrong ([`broken_event`]), and `keepwrap
//! fleet check` ([`check`]), which tries the credentials, the bucket and
//! every permission the mode needs, for an init container or a CI step.

use crate::events::Event;
use crate::publish::{Broken, Failure, Put};

use super::s3::{Client, Cond};
use super::{Mode, MAX_HEAD, TOP};

/// The warning of a call that failed because the bucket cannot be used as
/// configured (S3's code and the region it names, an endpoint that does
/// not answer, no credentials); None for a failure of that call alone.
pub fn broken_event(f: &Failure) -> Option<Event> {
    Some(match f.broken.as_deref()? {
        Broken::Unreachable { endpoint } => Event::FleetUnreachable {
            endpoint: endpoint.clone(),
            key: f.key.clone(),
            error: f.what.clone(),
        },
        Broken::NoCredentials => Event::FleetNoCredentials {
            error: without_prefix(&f.what).to_string(),
        },
        Broken::Refused {
            code,
            region,
            advice,
        } => Event::FleetBucketRefused {
            key: f.key.clone(),
            status: f.status.unwrap_or(0),
            s3_code: code.clone(),
            region: region.clone(),
            advice: advice.clone(),
        },
    })
}

fn without_prefix(what: &str) -> &str {
    what.strip_prefix("no credentials: ").unwrap_or(what)
}

/// One line of `keepwrap fleet check`: what was checked, and what it
/// found (Err: a problem; None: not checked, after a problem it depends on).
pub struct Checked {
    pub what: &'static str,
    pub found: Option<Result<String, String>>,
}

/// A failure as a check line says it: S3's code with what to change, the
/// endpoint that does not answer, or the call's own failure.
pub fn described(f: &Failure) -> String {
    match f.broken.as_deref() {
        Some(Broken::Refused { advice, .. }) => format!("{f}: {advice}"),
        Some(Broken::Unreachable { endpoint }) => format!(
            "nothing answers at {endpoint} ({}): check AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL and the network",
            f.what
        ),
        Some(Broken::NoCredentials) => format!(
            "no credentials to sign with ({}): give them through the AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role)",
            without_prefix(&f.what)
        ),
        None => f.to_string(),
    }
}

/// Does a failure leave nothing else to check (no credentials, no such
/// bucket, another region, nothing answering)? A refusal of access (403)
/// does not: another permission may still be granted.
fn stops(f: &Failure) -> bool {
    f.broken.is_some() && f.status != Some(403)
}

/// The checks so far, and whether the next ones can still run.
struct Checks {
    out: Vec<Checked>,
    go: bool,
}

impl Checks {
    /// Run a check (unless a problem before stopped them): whether it
    /// passed.
    fn run(&mut self, what: &'static str, check: impl FnOnce() -> Result<String, Failure>) -> bool {
        let found = self.go.then(|| {
            check().map_err(|f| {
                self.go = !stops(&f);
                described(&f)
            })
        });
        let passed = matches!(found, Some(Ok(_)));
        self.out.push(Checked { what, found });
        passed
    }

    fn skip(&mut self, what: &'static str) {
        self.out.push(Checked { what, found: None });
    }
}

/// `keepwrap fleet check`: the credentials, a listing under the prefix, a
/// read of a missing key; in read-write mode also a probe object of its
/// own under `PREFIX/keepwrap/v1/check/`, created only when absent (a
/// second create must be refused), read back, replaced only while it is
/// the object read (a stale ETag must be refused) and deleted. The probe
/// is deleted whatever happened after it was created.
pub fn check(client: &Client, mode: Mode) -> Vec<Checked> {
    let mut c = Checks {
        out: Vec::new(),
        go: true,
    };
    c.run("credentials", || {
        client
            .credentials()
            .map(|()| "the AWS chain gives credentials to sign with".to_string())
    });
    let top = client.location.key(&format!("{TOP}/"));
    c.run("list", || {
        client.list_one(&top).map(|_| {
            format!(
                "s3://{}/{top} lists (endpoint {}, region {})",
                client.location.bucket,
                client.base(),
                client.region()
            )
        })
    });
    let probe = client.location.key(&format!(
        "{TOP}/check/{}",
        &crate::cache::sha256_hex(&nonce())[..16]
    ));
    c.run("get", || match client.get_at_most(&probe, MAX_HEAD)? {
        None => Ok("a missing key reads as missing (404 NoSuchKey)".to_string()),
        Some(_) => Ok("read".to_string()),
    });
    if mode == Mode::ReadWrite {
        let mut created = false;
        c.run("put-if-absent", || {
            let put = || client.put(&probe, &body(1), &Cond::Absent);
            if put()? != Put::Written {
                return Err(Failure::new(&probe, Some(412), "the probe key exists already"));
            }
            created = true;
            match put()? {
                Put::Refused => Ok(format!(
                    "created {probe}; a second create of it was refused (If-None-Match: *)"
                )),
                Put::Written => Err(Failure::new(
                    &probe,
                    None,
                    "a second create of one key was not refused: the bucket does not honour If-None-Match: *, which the fleet needs",
                )),
            }
        });
        if created {
            c.run("replace", || replace(client, &probe));
            let deleted = c.run("delete", || {
                client.delete(&probe).map(|()| format!("removed {probe}"))
            });
            // Never left behind, even when a problem before stopped it.
            if !deleted {
                let _ = client.delete(&probe);
            }
        } else {
            c.skip("replace");
            c.skip("delete");
        }
    }
    c.out
}

/// Read the probe back, replace it while it is the object read, and see a
/// replacement with that (now stale) ETag refused.
fn replace(client: &Client, probe: &str) -> Result<String, Failure> {
    let read = client
        .get_at_most(probe, MAX_HEAD)?
        .ok_or_else(|| Failure::new(probe, Some(404), "the probe just created reads as missing"))?;
    if read.bytes != body(1) {
        return Err(Failure::new(
            probe,
            None,
            "the probe reads back other bytes than written",
        ));
    }
    let stale = Cond::Matches(read.etag.clone());
    if client.put(probe, &body(3), &stale)? != Put::Written {
        return Err(Failure::new(
            probe,
            Some(412),
            "a replacement with the ETag just read was refused",
        ));
    }
    match client.put(probe, &body(4), &stale)? {
        Put::Refused => Ok(
            "read it back, replaced it with its ETag (If-Match), and a stale ETag was refused"
                .to_string(),
        ),
        Put::Written => Err(Failure::new(
            probe,
            None,
            "a replacement with a stale ETag was not refused: the bucket does not honour If-Match, which the fleet needs",
        )),
    }
}

/// The probe's bytes, version `n`.
fn body(n: u8) -> Vec<u8> {
    format!("{{\"keepwrap\":\"fleet check\",\"n\":{n}}}").into_bytes()
}

/// Bytes that differ from one run to the next (the probe's name).
fn nonce() -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{now}:{}", std::process::id()).into_bytes()
}
