//! The catalogue of everything keepwrap logs: one function per event, each
//! with its name, level, message and fields, a file per folder of the
//! crate. No log call lives outside this module (a test holds that), and
//! the troubleshooting reference has one row per event name, at the same
//! level (a test holds that too).
//!
//! An event is one `tracing` call whose first field is `event = "name"`
//! (unique across the catalogue, `snake_case`). The text form of the logs
//! shows its message (`keepwrap: tuned and signed 3 cache files`); the JSON
//! form carries every field. The fields keep one vocabulary:
//! - `path`: a cache file or directory, relative to the cache root; `root`:
//!   the cache root; `dir`: another directory; `file`: a state file;
//! - `fingerprint`: the launch's fingerprint (all 64 digits where known,
//!   else the 8 a message shows);
//! - counts by what they count: `files`, `entries`, `nodes`, `kept`, ...;
//! - `reason`: why keepwrap decided what it did; `error`: the system error;
//! - durations in seconds as numbers: `after_s`, `waited_s`, `grace_s`,
//!   ...;
//! - `pid`, `signal` (`SIGTERM`), `status` (the engine's exit, as shown).
//!
//! The target of each event is the folder it belongs to (`keepwrap::done`,
//! `keepwrap::cache`, ...), so `KEEPWRAP_LOG=warn,keepwrap::done=debug`
//! filters as the folders read.

pub mod cache;
pub mod cli;
pub mod done;
pub mod fleet;
pub mod keeper;
pub mod policy;
pub mod root;
pub mod share;
pub mod store;
pub mod supervisor;
pub mod unify;
pub mod vllm;

/// A path for a log line: bytes that are not UTF-8 as `\xNN` (control
/// characters are escaped by the line formatter).
pub struct Shown<'a>(pub &'a std::path::Path);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::os::unix::ffi::OsStrExt;
        for chunk in self.0.as_os_str().as_bytes().utf8_chunks() {
            f.write_str(chunk.valid())?;
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        Ok(())
    }
}

/// A duration in seconds, as a number for the JSON form.
fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// A reason that names the cache root itself as a directory another user
/// can write: said once by `root_untrusted`, so each file's line about it
/// is at debug level.
fn in_untrusted_root(reason: &str) -> bool {
    reason.starts_with("in a directory another user can write (.: ")
}

/// `cache file` or `cache files`, for a count of `n`.
fn cache_files(n: usize) -> &'static str {
    if n == 1 {
        "cache file"
    } else {
        "cache files"
    }
}

/// `n` and its noun, in the singular for one: `counted(1, "entry",
/// "entries")` is `1 entry`.
pub fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Items as a line shows them: `1, 2, 3`.
fn listed<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
