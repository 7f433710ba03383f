//! Sign: once tuning is done, record every cache file present as one set
//! signed for this launch.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
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

/// Files hashed in this sign, by identity: rank files unified into one
/// inode (hard links) are read and hashed once. With each, whether its
/// stamp may be recorded.
#[derive(Default)]
struct Hashed(HashMap<(Stamp, u64), (String, bool)>);

/// What [`Hashed::hash`] checks and may vouch for.
#[derive(Clone, Copy)]
struct Hashing {
    /// Only a JSON object is signed.
    json: bool,
    /// A stamp may vouch for the file ([`fsx::changes_noticed`] of its
    /// directory).
    stamps: bool,
    /// The shape whose check the bytes read must pass
    /// ([`Shape::check_file`]).
    shape: Option<Shape>,
}

impl Hashed {
    /// The sha256 and size of the regular file `name` in `dir`, with its
    /// stamp when one may vouch for these bytes and the file as it was when
    /// read (from the descriptor read); only if it is a JSON
    /// object with `how.json`. Not read when `known`, its sidecar, records
    /// its stamp: the bytes are the ones it signs.
    ///
    /// A stamp vouches for the bytes only if no change since can keep it.
    /// A write through a shared writable map into a page already written
    /// (until the kernel writes it back) gives no new change time, so the
    /// file is read under a read lease: refused while any process holds the
    /// file open for writing, a writable map included, and holding back
    /// any open for writing while it is held. When it is refused, the file
    /// is signed by its bytes with no stamp (the next prune reads it); once
    /// it is given back, any writer must open the file again, and its first
    /// write through a new map, or any `write`, sets a new change time
    /// where the file system notices ([`fsx::changes_noticed`]).
    fn hash(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        buf: &mut Vec<u8>,
        how: Hashing,
        known: Option<&Sidecar>,
    ) -> Result<(String, u64, Option<Stamp>, FileId), Unsignable> {
        let (mut file, st) = fsx::open_regular_at(dir, name).map_err(Unsignable::Io)?;
        let stamp = Stamp::of(&st);
        let as_hashed = FileId::of(&st);
        let size = st.st_size.max(0) as u64;
        if let Some(sc) = known.filter(|sc| how.stamps && sc.stat == Some(stamp) && sc.size == size)
        {
            return Ok((sc.sha256.clone(), size, Some(stamp), as_hashed));
        }
        if let Some((sha, clean)) = self.0.get(&(stamp, size)) {
            return Ok((sha.clone(), size, clean.then_some(stamp), as_hashed));
        }
        // Where there are no leases (network file systems: their server
        // gives each write it receives a new change time), as before. A
        // lease left by an error below goes with the file.
        let lease = fsx::read_lease(file.as_fd());
        let clean = how.stamps && lease.is_ok();
        fsx::read_open(&mut file, &st, buf, MAX_CACHE_FILE).map_err(Unsignable::Io)?;
        if lease.is_ok_and(|held| held) {
            fsx::end_read_lease(file.as_fd());
        }
        if how.json {
            judge::json_object_entries(buf).map_err(Unsignable::Json)?;
        }
        if let Some(shape) = how.shape {
            shape.check_file(name, buf).map_err(Unsignable::Content)?;
        }
        let sha = crate::digest::sha256_hex(buf);
        if buf.len() as u64 == size {
            self.0.insert((stamp, size), (sha.clone(), clean));
        }
        Ok((sha, buf.len() as u64, clean.then_some(stamp), as_hashed))
    }
}

/// Stamp the files whose change time was not settled when they were read:
/// wait until it is (at most [`SETTLE_WAIT_NS`]), read them again, and
/// record the stamp of those whose bytes are still the ones signed.
fn stamp_racy(
    root: &OwnedFd,
    members: &[Member],
    stamps: &mut [Option<Stamp>],
    racy: &[usize],
    hashed: &mut Hashed,
    buf: &mut Vec<u8>,
) {
    if racy.is_empty() {
        return;
    }
    let mut latest = i64::MIN;
    let mut open: Option<(&str, OwnedFd)> = None;
    for &i in racy {
        let (parent, name) = split(&members[i].path);
        if open.as_ref().is_none_or(|(p, _)| *p != parent) {
            match fsx::open_dir_path(root.as_fd(), Path::new(parent)) {
                Ok(d) => open = Some((parent, d)),
                Err(_) => continue,
            }
        }
        let Some((_, d)) = &open else { continue };
        if let Ok(st) = fsx::lstat_at(d.as_fd(), name) {
            latest = latest.max(Stamp::of(&st).settled_at());
        }
    }
    let wait = latest.saturating_sub(sidecar::now_ns());
    if wait > SETTLE_WAIT_NS {
        crate::events::Event::NotStamping {
            files: racy.len(),
            settle_ns: wait,
        }
        .emit();
        return;
    }
    if wait > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(wait as u64));
    }
    // A fresh cache: identities read now.
    *hashed = Hashed::default();
    let mut open: Option<(&str, OwnedFd)> = None;
    for &i in racy {
        let m = &members[i];
        let (parent, name) = split(&m.path);
        if open.as_ref().is_none_or(|(p, _)| *p != parent) {
            match fsx::open_dir_path(root.as_fd(), Path::new(parent)) {
                Ok(d) => open = Some((parent, d)),
                Err(_) => continue,
            }
        }
        let Some((_, d)) = &open else { continue };
        let now = sidecar::now_ns();
        // Bytes equal to those judged a JSON object above are one.
        let how = Hashing {
            json: false,
            stamps: true,
            shape: None,
        };
        if let Ok((sha, size, Some(stamp), _)) =
            hashed.hash(d.as_fd(), name.as_bytes(), buf, how, None)
        {
            if sha == m.sha256 && size == m.size && stamp.settled(now) {
                stamps[i] = Some(stamp);
            }
        }
    }
}

/// Write `sidecars` atomically, one directory at a time (each fsynced
/// once); stop at the first error (`total`: members of the set, for the
/// error). Every sidecar is first written to a temp file beside it, then
/// one `syncfs` makes them all durable, then each is renamed into place:
/// one flush for the set, not one for each sidecar (about 4 ms each on a
/// virtual disk: 40 s for 10,000 files). A crash before a rename leaves a
/// temp file, which the next prune removes as a leftover.
fn write_sidecars(root: &OwnedFd, sidecars: &[Sidecar], total: usize) -> io::Result<()> {
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
fn unwritten(dirs: &[(OwnedFd, usize, Vec<Vec<u8>>)], e: io::Error) -> io::Error {
    for (dir, _, temps) in dirs {
        for tmp in temps {
            let _ = fsx::unlink_at(dir.as_fd(), tmp.as_slice());
        }
    }
    e
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

/// The sidecars to write for `manifest`'s members: a member whose sidecar
/// (as read by the walk) records other bytes, or none, gets a new one
/// (then `true`); one whose sidecar records its bytes but another stamp
/// than the one just read, or is of an older format, gets that sidecar
/// again with the stamp.
fn to_write(
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

fn sidecar_cname(cache_name: &str) -> CString {
    let mut v = Vec::with_capacity(cache_name.len() + 4);
    layout::sidecar_name(cache_name.as_bytes(), &mut v);
    CString::from_vec_with_nul(v).unwrap_or_default()
}

fn parent_prefix(path: &str) -> &[u8] {
    let (_, name) = split(path);
    &path.as_bytes()[..path.len() - name.len()]
}
