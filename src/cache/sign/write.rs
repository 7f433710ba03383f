//! The sidecars of one sign written: the directories opened once each,
//! every sidecar written beside its cache file, what could not be written
//! counted and said.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::*;

/// Write `sidecars` atomically, one directory at a time (each fsynced
/// once); stop at the first error (`total`: members of the set, for the
/// error). Every sidecar is first written to a temp file beside it, then
/// one `syncfs` makes them all durable, then each is renamed into place:
/// one flush for the set, not one for each sidecar (about 4 ms each on a
/// virtual disk: 40 s for 10,000 files). A crash before a rename leaves a
/// temp file, which the next prune removes as a leftover.
pub(super) fn write_sidecars(root: &OwnedFd, sidecars: &[Sidecar], total: usize) -> io::Result<()> {
    let mut dirs = Vec::new();
    let mut i = 0;
    while i < sidecars.len() {
        let (parent, _) = split(&sidecars[i].path);
        let end = i + sidecars[i..]
            .iter()
            .take_while(|s| split(&s.path).0 == parent)
            .count();
        let dir = fsx::open_dir_path(root.as_fd(), Path::new(parent))
            .map_err(|e| incomplete(e, format!("cannot open directory {parent}"), 0, total));
        let dir = match dir {
            Ok(dir) => dir,
            Err(e) => return Err(unwritten(&dirs, e)),
        };
        let mut temps = Vec::with_capacity(end - i);
        for sc in &sidecars[i..end] {
            // One failed write leaves the set incomplete, so that the next
            // prune trusts none of it: writing the rest is pointless, and one
            // error says it all (a full disk would fail every one).
            match fsx::write_temp_at(dir.as_fd(), &sidecar::to_bytes(sc), 0o644, false) {
                Ok(tmp) => temps.push(tmp),
                Err(e) => {
                    let name = sidecar_cname(split(&sc.path).1);
                    let what = format!(
                        "cannot write sidecar {}",
                        Rel(parent_prefix(&sc.path), name.as_bytes())
                    );
                    dirs.push((dir, i, temps));
                    return Err(unwritten(&dirs, incomplete(e, what, 0, total)));
                }
            }
        }
        dirs.push((dir, i, temps));
        i = end;
    }
    if let Some((dir, _, _)) = dirs.first() {
        if let Err(e) = nix::unistd::syncfs(dir.as_fd()) {
            let e = io::Error::from(e);
            let e = incomplete(e, "cannot flush the sidecars".into(), 0, total);
            return Err(unwritten(&dirs, e));
        }
    }
    let mut written = 0;
    for (n, (dir, first, temps)) in dirs.iter().enumerate() {
        for (k, tmp) in temps.iter().enumerate() {
            let sc = &sidecars[first + k];
            let name = sidecar_cname(split(&sc.path).1);
            if let Err(e) = fsx::rename_at(dir.as_fd(), tmp.as_slice(), name.as_c_str()) {
                let what = format!(
                    "cannot write sidecar {}",
                    Rel(parent_prefix(&sc.path), name.as_bytes())
                );
                let e = incomplete(e, what, written, total);
                // What is not renamed yet goes.
                for tmp in &temps[k..] {
                    let _ = fsx::unlink_at(dir.as_fd(), tmp.as_slice());
                }
                return Err(unwritten(&dirs[n + 1..], e));
            }
            written += 1;
            crate::failpoint::hit("sign");
        }
        if let Err(e) = fsx::fsync_dir(dir.as_fd()) {
            let (parent, _) = split(&sidecars[*first].path);
            crate::events::Event::CannotFsyncDir {
                dir: parent.to_string(),
                error: e.to_string(),
            }
            .emit();
        }
    }
    Ok(())
}

/// The temp files of sidecars not renamed into place, removed; `e` back.
pub(super) fn unwritten(dirs: &[(OwnedFd, usize, Vec<Vec<u8>>)], e: io::Error) -> io::Error {
    for (dir, _, temps) in dirs {
        for tmp in temps {
            let _ = fsx::unlink_at(dir.as_fd(), tmp.as_slice());
        }
    }
    e
}

/// The error of a sign that stopped after `written` of `total` sidecars.
pub(super) fn incomplete(e: io::Error, what: String, written: usize, total: usize) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "{what}: {e} ({written} of {total} sidecars written: the set is incomplete and will not be trusted)"
        ),
    )
}

/// The sidecars to write for `manifest`'s members: a member whose sidecar
/// (as read by the walk) records other bytes, or none, gets a new one
/// (then `true`); one whose sidecar records its bytes but another stamp
/// than the one just read, or is of an older format, gets that sidecar
/// again with the stamp.
pub(super) fn to_write(
    manifest: &SetManifest,
    stamps: &[Option<Stamp>],
    knowns: Vec<Option<Sidecar>>,
    signed_at_utc: &str,
) -> (Vec<Sidecar>, bool) {
    let mut out = Vec::new();
    let mut fresh = false;
    for ((m, stamp), known) in manifest.members.iter().zip(stamps).zip(knowns) {
        match known {
            Some(sc) if sc.records(m) => {
                let restamp = stamp.is_some() && sc.stat != *stamp;
                if restamp || sc.format != SIDECAR_FORMAT {
                    out.push(Sidecar {
                        format: SIDECAR_FORMAT,
                        keepwrap: env!("CARGO_PKG_VERSION").to_string(),
                        stat: stamp.or(sc.stat),
                        ..sc
                    });
                }
            }
            _ => {
                fresh = true;
                out.push(Sidecar {
                    format: SIDECAR_FORMAT,
                    keepwrap: env!("CARGO_PKG_VERSION").to_string(),
                    fingerprint: manifest.fingerprint.clone(),
                    path: m.path.clone(),
                    sha256: m.sha256.clone(),
                    size: m.size,
                    signed_at: manifest.signed_at,
                    signed_at_utc: signed_at_utc.to_string(),
                    stat: *stamp,
                });
            }
        }
    }
    (out, fresh)
}

pub(super) fn sidecar_cname(cache_name: &str) -> CString {
    let mut v = Vec::with_capacity(cache_name.len() + 4);
    layout::sidecar_name(cache_name.as_bytes(), &mut v);
    CString::from_vec_with_nul(v).unwrap_or_default()
}

pub(super) fn parent_prefix(path: &str) -> &[u8] {
    let (_, name) = split(path);
    &path.as_bytes()[..path.len() - name.len()]
}
