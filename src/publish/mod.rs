//! Where sets are published for other machines: one small storage
//! interface ([`Storage`]: get, put-if-absent, list, delete, and one
//! compare-and-swap for the one object that moves) and its backends: a
//! directory every node mounts ([`Dir`]: `--share`) and an S3-compatible
//! bucket (`--fleet`, [`crate::fleet::s3::Client`]). Read-only is a wrapper
//! around any backend ([`ReadOnly`]), not a flag each backend checks.
//!
//! A key is a `/`-separated path of plain names. Every object but the one
//! a protocol moves forward (a launch's HEAD) is written once: content
//! addressed or named by what it holds, so a second writer's put finds it
//! there (`Put::Refused`) and a reader never sees a torn object.
//!
//! A publication runs on a [`Job`]: a thread whose end the launch awaits
//! up to a deadline, woken by the thread itself (no poll). A set taken
//! from other machines enters the cache root one way ([`place`]): staged,
//! linked into place and signed, all or nothing.

mod dir;
mod job;
mod place;

pub use dir::Dir;
pub use job::{Job, Waited};
pub use place::{checked_path, place, NotPlaced};

use std::fmt;

/// A failed call: the key, the HTTP status (None when there was no answer,
/// or for a directory) and what went wrong. Shown as `KEY: HTTP 403
/// AccessDenied`, or `KEY: WHAT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub key: String,
    pub status: Option<u16>,
    pub what: String,
    /// Set when the call failed for a reason every call shares (the
    /// storage cannot be used as configured), None for one call's failure.
    pub broken: Option<Box<Broken>>,
}

impl Failure {
    /// A failure of this one call.
    pub fn new(key: &str, status: Option<u16>, what: impl Into<String>) -> Failure {
        Failure {
            key: key.to_string(),
            status,
            what: what.into(),
            broken: None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{}: HTTP {s} {}", self.key, self.what)?,
            None => write!(f, "{}: {}", self.key, self.what)?,
        }
        match self.broken.as_deref() {
            Some(Broken::Refused {
                region: Some(r), ..
            }) => write!(f, " (the bucket is in {r})"),
            _ => Ok(()),
        }
    }
}

/// Why no call to a storage can succeed as it is configured: a wrong
/// bucket, region, endpoint or credentials. A restore says it as a
/// warning at the start; `keepwrap fleet check` as a failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// Nothing answered at the endpoint (connection refused, no such host,
    /// a TLS failure): its address.
    Unreachable { endpoint: String },
    /// No credentials to sign the request with.
    NoCredentials,
    /// The server refused for a reason that holds for every key: its code
    /// (S3's `<Code>`: `NoSuchBucket`, `AccessDenied`,
    /// `PermanentRedirect`; None when it gave none), the region it names
    /// for the bucket, and what to change.
    Refused {
        code: Option<String>,
        region: Option<String>,
        advice: String,
    },
}

/// How a conditional put ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    Written,
    /// The condition did not hold (the key exists, or is no longer the
    /// object read).
    Refused,
}

/// An object read: its bytes, and a tag that changes whenever the object
/// is replaced (what [`Storage::replace`] compares).
#[derive(Debug, Clone)]
pub struct Object {
    pub bytes: Vec<u8>,
    pub etag: String,
}

/// One object of a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    pub key: String,
    /// When it was last written (RFC 3339).
    pub modified: String,
    pub size: u64,
}

/// The storage a protocol publishes through.
pub trait Storage: Send + Sync {
    /// The object at `key`, of at most `limit` bytes (a longer one is a
    /// failure, never read whole): None when there is none.
    fn get(&self, key: &str, limit: u64) -> Result<Option<Object>, Failure>;
    /// Create `key` holding `bytes`, only when there is no such key:
    /// `Put::Refused` when there is one.
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Put, Failure>;
    /// Replace `key` with `bytes` only while it is still the object read
    /// with `etag` (compare-and-swap): `Put::Refused` otherwise, or when
    /// another writer is replacing it at the same time.
    fn replace(&self, key: &str, bytes: &[u8], etag: &str) -> Result<Put, Failure>;
    /// Every object whose key starts with `prefix`.
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, Failure>;
    /// Remove `key` (a missing key is no error).
    fn delete(&self, key: &str) -> Result<(), Failure>;
    /// Whether anything may be written (false behind [`ReadOnly`]).
    fn writable(&self) -> bool {
        true
    }
}

/// A backend that is only read: every write is refused before it reaches
/// the backend.
pub struct ReadOnly<S>(pub S);

impl<S> ReadOnly<S> {
    fn refused(key: &str) -> Failure {
        Failure::new(key, None, "read-only")
    }
}

impl<S: Storage> Storage for ReadOnly<S> {
    fn get(&self, key: &str, limit: u64) -> Result<Option<Object>, Failure> {
        self.0.get(key, limit)
    }
    fn put_if_absent(&self, key: &str, _: &[u8]) -> Result<Put, Failure> {
        Err(Self::refused(key))
    }
    fn replace(&self, key: &str, _: &[u8], _: &str) -> Result<Put, Failure> {
        Err(Self::refused(key))
    }
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, Failure> {
        self.0.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<(), Failure> {
        Err(Self::refused(key))
    }
    fn writable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
