//! The metrics file (`--metrics-file PATH`): boots by outcome, the time to
//! done, what was kept, the fleet's restores and publications, in
//! Prometheus' text format for node-exporter's textfile collector or a
//! sidecar. The metrics come from the events at one place: the observer
//! [`start`] sets sees every event ([`crate::events::observe`]), and
//! [`text::Metrics::apply`] says which are outcomes. At each outcome the file
//! is replaced whole (a temporary file in its directory, fsync, rename).
//! The counters go on from what the file held at the start; a file that
//! does not parse is said in one line and replaced. A file that cannot be
//! written is said in one line, once, and changes nothing else.

pub mod text;

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::OFlag;

use crate::cache::fsx;
use crate::events::Event;
use text::Metrics;

/// The largest metrics file read back (it is about 2 KiB).
const MAX_FILE: u64 = 1 << 20;

/// The file and what it holds, once [`start`]ed.
struct Sink {
    path: PathBuf,
    metrics: Metrics,
    /// A write failed already (said once).
    failed: bool,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Keep the metrics in `path` from now on: read back what it holds (a file
/// that does not parse is said and replaced at the next outcome), and
/// observe every event.
pub fn start(path: &Path) {
    let metrics = match read(path) {
        Ok(m) => m,
        Err(error) => {
            Event::MetricsFileIgnored {
                file: path.to_path_buf(),
                error,
            }
            .emit();
            Metrics::default()
        }
    };
    if let Ok(mut sink) = SINK.lock() {
        *sink = Some(Sink {
            path: path.to_path_buf(),
            metrics,
            failed: false,
        });
    }
    crate::events::observe(observe);
}

/// What `path` holds: none yet (no such file, or a directory on its path
/// is a file: the write says so) is the metrics at zero.
fn read(path: &Path) -> Result<Metrics, String> {
    use std::io::Read;
    // Never blocked by a FIFO planted there: opened without waiting, and
    // read only if it is a file.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path);
    let file = match opened {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
        Ok(_) => return Err("not a regular file".to_string()),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) =>
        {
            return Ok(Metrics::default())
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("larger than {} KiB", MAX_FILE >> 10));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| "not UTF-8 text".to_string())?;
    Metrics::parse(text)
}

/// The observer: at an outcome, the file is written again.
fn observe(event: &Event) {
    if matches!(
        event,
        Event::MetricsNotWritten { .. } | Event::MetricsFileIgnored { .. }
    ) {
        return;
    }
    let failed = {
        let Ok(mut guard) = SINK.lock() else { return };
        let Some(sink) = guard.as_mut() else { return };
        if !sink.metrics.apply(event, unix_now()) {
            return;
        }
        match write(&sink.path, sink.metrics.render().as_bytes()) {
            Err(e) if !std::mem::replace(&mut sink.failed, true) => Some((sink.path.clone(), e)),
            _ => None,
        }
    };
    // Said once the lock is let go: the line is an event too.
    if let Some((file, e)) = failed {
        Event::MetricsNotWritten {
            file,
            error: e.to_string(),
        }
        .emit();
    }
}

/// Replace `path` by `bytes` whole ([`fsx::write_atomic_at`]: a fresh
/// hidden `.keepwrap-*.tmp` beside it, which the textfile collector never
/// reads as it reads only `*.prom`, fsync, rename), then sync the
/// directory so that the rename itself is durable.
fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "names no file"))?;
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = fsx::open_root(dir.unwrap_or(Path::new(".")))?;
    fsx::write_atomic_at(dir.as_fd(), &name, bytes, 0o644)?;
    let _ = fsx::fsync_dir(dir.as_fd());
    Ok(())
}

/// The time now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
