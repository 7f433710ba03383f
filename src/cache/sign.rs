//! Sign: once tuning is done, record every cache file present as one set
//! signed for this launch.

use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{debug, info, warn};

use super::fsx::{self, Kind};
use super::judge;
use super::layout::{self, DirView, Listing, Rel, Role};
use super::prune::{MAX_CACHE_FILE, MAX_SIDECAR};
use super::sidecar::{self, Member, SetRecord, Sidecar};
use super::SignReport;
use crate::SIDECAR_FORMAT;

pub fn sign(root: &Path, fingerprint: &str) -> io::Result<SignReport> {
    let fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(SignReport {
                unchanged: true,
                ..SignReport::default()
            })
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("open cache root {}: {e}", root.display()),
            ))
        }
    };
    let root_fd = fd
        .try_clone()
        .map_err(|e| io::Error::new(e.kind(), format!("dup cache root {}: {e}", root.display())))?;

    // 1. What is there, read once. A directory holding a cache file that
    // cannot be signed contributes no member: its rank files are the ranks
    // of one engine, and trusting some of them is a partial hit next boot.
    let mut members: Vec<Member> = Vec::new();
    let mut buf = Vec::new();
    let mut cname = Vec::new();
    layout::walk(fd, &mut |dir: &DirView<'_>, listing: &Listing| {
        let first = members.len();
        let mut unsignable: Option<String> = None;
        for e in &listing.ents {
            let name = listing.name(e);
            if dir.role(name) != Role::Cache {
                continue;
            }
            let rel = Rel(dir.rel, name);
            match e.kind {
                Kind::File => {}
                Kind::Dir => {
                    debug!("not signed {rel}: a directory");
                    continue;
                }
                k => {
                    info!("not signed {rel}: not a regular file ({})", k.name());
                    unsignable.get_or_insert_with(|| rel.to_string());
                    continue;
                }
            }
            if let Some(u) = dir.untrusted {
                warn!("not signed {rel}: {}", u.0);
                continue;
            }
            let Some(path) = rel.to_string_exact() else {
                warn!("not signed {rel}: the path is not UTF-8");
                unsignable.get_or_insert_with(|| rel.to_string());
                continue;
            };
            cname.clear();
            cname.extend_from_slice(name);
            if let Err(e) = fsx::read_at(dir.fd, cname.as_slice(), &mut buf, MAX_CACHE_FILE) {
                warn!("not signed {rel}: cannot read it ({e})");
                unsignable.get_or_insert_with(|| rel.to_string());
                continue;
            }
            if let Err(e) = judge::json_object_entries(&buf) {
                info!("not signed {rel}: {}", e.into_reason());
                unsignable.get_or_insert_with(|| rel.to_string());
                continue;
            }
            members.push(Member {
                path,
                sha256: judge::sha256_hex(&buf),
                size: buf.len() as u64,
            });
        }
        if let Some(bad) = unsignable {
            let dropped = members.len() - first;
            if dropped > 0 {
                members.truncate(first);
                warn!(
                    "not signed the {dropped} other cache files of {}: {bad} cannot be signed, and trusting part of a directory's rank files would give a partial hit",
                    Rel(dir.rel, b"")
                );
            }
        }
    });
    members.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let id = sidecar::set_id(fingerprint, &members);
    let signed: Vec<PathBuf> = members.iter().map(|m| PathBuf::from(&m.path)).collect();

    // 2. The same set already recorded on every member: nothing to write.
    if recorded(&root_fd, fingerprint, &members, &id) {
        return Ok(SignReport {
            signed,
            unchanged: true,
            set_id: id,
            failed: 0,
        });
    }

    // 3. Write every sidecar, one directory at a time.
    let now = SystemTime::now();
    let signed_at = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let signed_at_utc = humantime::format_rfc3339_seconds(now).to_string();
    let set = SetRecord {
        id: id.clone(),
        members,
    };
    let mut written = 0;
    let mut i = 0;
    while i < set.members.len() {
        let (parent, _) = split(&set.members[i].path);
        let end = i + set.members[i..]
            .iter()
            .take_while(|m| split(&m.path).0 == parent)
            .count();
        let dir = fsx::open_dir_path(root_fd.as_fd(), Path::new(parent)).map_err(|e| {
            incomplete(
                e,
                format!("cannot open directory {parent}"),
                i,
                set.members.len(),
            )
        })?;
        for m in &set.members[i..end] {
            let sc = Sidecar {
                format: SIDECAR_FORMAT,
                keepwrap: env!("CARGO_PKG_VERSION").to_string(),
                fingerprint: fingerprint.to_string(),
                path: m.path.clone(),
                sha256: m.sha256.clone(),
                size: m.size,
                signed_at,
                signed_at_utc: signed_at_utc.clone(),
                set: set.clone(),
            };
            let bytes = sidecar::to_bytes(&sc);
            let name = sidecar_cname(split(&m.path).1);
            // One failed write leaves the set incomplete, so that the next
            // prune trusts none of it: writing the rest is pointless, and one
            // error says it all (a full disk would fail every one).
            fsx::write_atomic_at(dir.as_fd(), &name, &bytes, 0o644).map_err(|e| {
                incomplete(
                    e,
                    format!(
                        "cannot write sidecar {}",
                        Rel(parent_prefix(&m.path), name.as_bytes())
                    ),
                    written,
                    set.members.len(),
                )
            })?;
            written += 1;
            crate::store::test_pause();
        }
        if let Err(e) = fsx::fsync_dir(dir.as_fd()) {
            warn!("cannot fsync directory {parent}: {e}");
        }
        i = end;
    }
    Ok(SignReport {
        signed,
        unchanged: false,
        set_id: id,
        failed: 0,
    })
}

/// The error of a sign that stopped after `written` of `total` sidecars.
fn incomplete(e: io::Error, what: String, written: usize, total: usize) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "{what}: {e} ({written} of {total} sidecars written: the set is incomplete and will not be trusted)"
        ),
    )
}

/// Does every member's sidecar already record this set, for these bytes?
fn recorded(root: &std::os::fd::OwnedFd, fingerprint: &str, members: &[Member], id: &str) -> bool {
    let mut buf = Vec::new();
    members.iter().all(|m| {
        let (parent, name) = split(&m.path);
        let Ok(dir) = fsx::open_dir_path(root.as_fd(), Path::new(parent)) else {
            return false;
        };
        if fsx::read_at(
            dir.as_fd(),
            sidecar_cname(name).as_c_str(),
            &mut buf,
            MAX_SIDECAR,
        )
        .is_err()
        {
            return false;
        }
        match judge::judge_sidecar(&buf, fingerprint, |p| p == m.path) {
            Ok(sc) => sc.set.id == id && sc.sha256 == m.sha256 && sc.size == m.size,
            Err(_) => false,
        }
    })
}

fn sidecar_cname(cache_name: &str) -> CString {
    let mut v = Vec::with_capacity(cache_name.len() + 4);
    layout::sidecar_name(cache_name.as_bytes(), &mut v);
    CString::from_vec_with_nul(v).unwrap_or_default()
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

fn parent_prefix(path: &str) -> &[u8] {
    let (_, name) = split(path);
    &path.as_bytes()[..path.len() - name.len()]
}
