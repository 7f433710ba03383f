//! Sign: once tuning is done, record every cache file present as one set
//! signed for this launch.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::fsx::{self, split, Kind};
use super::judge;
use super::layout::{self, DirView, Listing, Rel, Role};
use super::prune::{MAX_CACHE_FILE, MAX_SIDECAR};
use super::sidecar::{self, Member, SetManifest, Sidecar, Stamp};
use super::{FileId, Shape, SignReport};
use crate::digest::Fingerprint;
use crate::SIDECAR_FORMAT;

mod hashed;
mod write;

use hashed::*;
use write::*;

/// What sign does with files whose change time is too fresh to vouch for
/// them (see [`Stamp::settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Wait (at most [`SETTLE_WAIT_NS`]) and stamp them.
    Wait,
    /// Sign them without a stamp; the report says when they settle.
    Later,
    /// Only record the stamps of the members of the set already signed
    /// that have none (their change times settled since): each read and
    /// hashed again, and only a file whose bytes are still the ones signed
    /// gets one. Writes nothing when the files present are not exactly
    /// that set any more.
    Restamp,
}

pub fn sign(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    settle: Settle,
) -> io::Result<SignReport> {
    let Some((fd, root_fd)) = open_root(root)? else {
        return Ok(SignReport {
            unchanged: true,
            ..SignReport::default()
        });
    };

    // 1. What is there, read once.
    let mut survey = Survey {
        settle_at: i64::MIN,
        ..Survey::default()
    };
    layout::walk(fd, shape, &mut |dir: &DirView<'_>, listing: &Listing| {
        survey.dir(dir, listing, fingerprint)
    });
    let settle_at =
        (settle == Settle::Later && !survey.racy.is_empty()).then_some(survey.settle_at);
    if settle == Settle::Wait {
        survey.stamp_racy(&root_fd);
    }
    let (members, stamps, knowns, hashed) = survey.in_path_order();
    let id = sidecar::set_id(fingerprint, &members);
    let signed: Vec<PathBuf> = members.iter().map(|m| PathBuf::from(&m.path)).collect();
    if members.is_empty() {
        return Ok(report(signed, hashed, true, id, None));
    }

    // 2. What is recorded already: the manifest, and each member's sidecar.
    let sets = sidecar::open_sets(root_fd.as_fd(), false).ok();
    let committed =
        sidecar::read_manifest(sets.as_ref().map(|f| f.as_fd()), fingerprint, shape).ok();
    let unchanged = committed.is_some_and(|m| m.id == id);

    let now = SystemTime::now();
    let signed_at = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let signed_at_utc = humantime::format_rfc3339_seconds(now).to_string();
    let manifest = SetManifest {
        format: crate::SET_FORMAT,
        keepwrap: env!("CARGO_PKG_VERSION").to_string(),
        fingerprint: fingerprint.to_string(),
        id: id.clone(),
        signed_at,
        members,
    };
    let (writes, fresh) = to_write(&manifest, &stamps, knowns, &signed_at_utc);
    // A restamp records stamps of the set signed, member for member, or
    // nothing.
    if settle == Settle::Restamp && (!unchanged || fresh) {
        return Ok(report(signed, hashed, false, id, None));
    }
    // 3. The sidecars that do not record their member as it is now (new,
    // changed, restamped), then the manifest: until it lists this set, the
    // set committed before is the launch's, and a file it does not list is
    // not kept.
    write_sidecars(&root_fd, &writes, manifest.members.len())?;
    if !unchanged {
        write_set_manifest(&root_fd, &manifest)?;
    }
    Ok(report(signed, hashed, unchanged, id, settle_at))
}

/// What sign found, read once: the members, per member its identity when
/// hashed if settled (see `Stamp`) and its sidecar when it is one signed
/// for this launch, the members not settled yet and when the last of them
/// settles.
#[derive(Default)]
struct Survey {
    members: Vec<Member>,
    stamps: Vec<Option<Stamp>>,
    knowns: Vec<Option<Sidecar>>,
    /// Each member as it was when read.
    as_hashed: Vec<FileId>,
    racy: Vec<usize>,
    settle_at: i64,
    hashed: Hashed,
    buf: Vec<u8>,
    sbuf: Vec<u8>,
    cname: Vec<u8>,
}

impl Survey {
    /// The members of one directory. A directory holding a cache file
    /// that cannot be signed contributes no member: its rank files are the
    /// ranks of one engine, and trusting some of them is a partial hit next
    /// boot.
    fn dir(&mut self, dir: &DirView<'_>, listing: &Listing, fingerprint: &Fingerprint) {
        let first = self.members.len();
        let mut unsignable: Option<String> = None;
        // Where a writable map can change a file without a new change time,
        // no stamp vouches for one (asked at the first cache file).
        let stamps = std::cell::OnceCell::new();
        for e in &listing.ents {
            let name = listing.name(e);
            if dir.role(name) != Role::Cache {
                continue;
            }
            let rel = Rel(dir.rel, name);
            match e.kind {
                Kind::File => {}
                Kind::Dir => {
                    crate::events::Event::NotSignedDirectory {
                        path: rel.to_string(),
                        reason: "a directory",
                    }
                    .emit();
                    continue;
                }
                k => {
                    crate::events::Event::NotSigned {
                        path: rel.to_string(),
                        reason: format!("not a regular file ({})", k.name()),
                    }
                    .emit();
                    unsignable.get_or_insert_with(|| rel.to_string());
                    continue;
                }
            }
            if let Some(u) = dir.untrusted {
                crate::events::Event::NotSignedUnsafe {
                    path: rel.to_string(),
                    reason: u.0.to_string(),
                }
                .emit();
                continue;
            }
            let Some(path) = rel.to_string_exact() else {
                crate::events::Event::NotSignedUnsafe {
                    path: rel.to_string(),
                    reason: "the path is not UTF-8".to_string(),
                }
                .emit();
                unsignable.get_or_insert_with(|| rel.to_string());
                continue;
            };
            self.cname.clear();
            self.cname.extend_from_slice(name);
            // Signed for this launch before, and still the very file self.hashed
            // then (its stamp): its bytes are the ones recorded.
            let known = listing
                .find(sidecar_cname(&path[path.len() - name.len()..]).as_bytes())
                .filter(|e| e.kind == Kind::File)
                .and_then(|_| {
                    let sname = sidecar_cname(&path[path.len() - name.len()..]);
                    fsx::read_at(dir.fd, sname.as_c_str(), &mut self.sbuf, MAX_SIDECAR).ok()?;
                    judge::judge_sidecar(&self.sbuf, fingerprint, |p| p == path).ok()
                });
            let now = sidecar::now_ns();
            let (sha256, size, stamp, as_hashed) = match self.hashed.hash(
                dir.fd,
                self.cname.as_slice(),
                &mut self.buf,
                Hashing {
                    json: true,
                    stamps: *stamps.get_or_init(|| fsx::changes_noticed(dir.fd)),
                    shape: Some(dir.shape),
                },
                known.as_ref(),
            ) {
                Ok(h) => h,
                Err(Unsignable::Io(e)) => {
                    crate::events::Event::NotSignedUnsafe {
                        path: rel.to_string(),
                        reason: format!("cannot read it ({e})"),
                    }
                    .emit();
                    unsignable.get_or_insert_with(|| rel.to_string());
                    continue;
                }
                Err(Unsignable::Json(e)) => {
                    crate::events::Event::NotSigned {
                        path: rel.to_string(),
                        reason: e.into_reason().to_string(),
                    }
                    .emit();
                    unsignable.get_or_insert_with(|| rel.to_string());
                    continue;
                }
                Err(Unsignable::Content(reason)) => {
                    crate::events::Event::NotSigned {
                        path: rel.to_string(),
                        reason,
                    }
                    .emit();
                    unsignable.get_or_insert_with(|| rel.to_string());
                    continue;
                }
            };
            if let Some(stamp) = stamp.filter(|s| !s.settled(now)) {
                self.racy.push(self.members.len());
                self.settle_at = self.settle_at.max(stamp.settled_at());
            }
            self.stamps.push(stamp.filter(|s| s.settled(now)));
            self.knowns.push(known);
            self.as_hashed.push(as_hashed);
            self.members.push(Member { path, sha256, size });
        }
        if let Some(bad) = unsignable {
            let dropped = self.members.len() - first;
            if dropped > 0 {
                self.members.truncate(first);
                self.stamps.truncate(first);
                self.knowns.truncate(first);
                self.as_hashed.truncate(first);
                self.racy.retain(|&i| i < first);
                crate::events::Event::DirNotSigned {
                    files: dropped,
                    dir: Rel(dir.rel, b"").to_string(),
                    unsignable: bad.to_string(),
                }
                .emit();
            }
        }
    }

    /// Files changed (or unified) just now: their change time is not
    /// settled yet, so a change in the same clock tick could keep it. Wait
    /// (at most SETTLE_WAIT) until it is, then hash them again to record
    /// their stamp.
    fn stamp_racy(&mut self, root_fd: &OwnedFd) {
        stamp_racy(
            root_fd,
            &self.members,
            &mut self.stamps,
            &self.racy,
            &mut self.hashed,
            &mut self.buf,
        );
    }

    /// The members, their stamps, known sidecars and identities as read,
    /// sorted by path.
    #[allow(clippy::type_complexity)]
    fn in_path_order(
        mut self,
    ) -> (
        Vec<Member>,
        Vec<Option<Stamp>>,
        Vec<Option<Sidecar>>,
        Vec<FileId>,
    ) {
        let members = &self.members;
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_unstable_by(|&a, &b| members[a].path.cmp(&members[b].path));
        let sorted: Vec<Member> = order.iter().map(|&i| members[i].clone()).collect();
        let stamps: Vec<Option<Stamp>> = order.iter().map(|&i| self.stamps[i]).collect();
        let knowns: Vec<Option<Sidecar>> = order.iter().map(|&i| self.knowns[i].take()).collect();
        let as_hashed: Vec<FileId> = order.iter().map(|&i| self.as_hashed[i]).collect();
        (sorted, stamps, knowns, as_hashed)
    }
}

/// Open the cache root twice (the walk consumes one); None: there is none.
fn open_root(root: &Path) -> io::Result<Option<(OwnedFd, OwnedFd)>> {
    let fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
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
    Ok(Some((fd, root_fd)))
}

fn report(
    signed: Vec<PathBuf>,
    hashed: Vec<FileId>,
    unchanged: bool,
    set_id: String,
    settle_at: Option<i64>,
) -> SignReport {
    SignReport {
        signed,
        unchanged,
        set_id,
        settle_at,
        hashed,
    }
}

/// Write the set manifest: from now on the set is trusted.
fn write_set_manifest(root_fd: &OwnedFd, manifest: &SetManifest) -> io::Result<()> {
    let sets = sidecar::open_sets(root_fd.as_fd(), true)
        .and_then(|sets| sidecar::write_manifest(sets.as_fd(), manifest).map(|()| sets))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot write the set manifest {}/{}/{}: {e} (the set is incomplete and will not be trusted)",
                    crate::STATE_DIR,
                    sidecar::SETS_DIR,
                    sidecar::manifest_name(&manifest.fingerprint)
                ),
            )
        })?;
    drop(sets);
    crate::failpoint::hit("sign");
    Ok(())
}

/// Longest wait at sign for the change times of files written just now to
/// settle (on a file system with sub-second times: 100 ms).
const SETTLE_WAIT_NS: i64 = 150_000_000;

/// Why a file cannot be signed.
enum Unsignable {
    Io(io::Error),
    Json(judge::JsonErr),
    /// Not what the engine writes under its name ([`Shape::check_file`]).
    Content(String),
}
