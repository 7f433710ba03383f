//! The files of one sign read and hashed once each (hard links of one
//! unified file share an identity), and whether a file's stamp may vouch
//! for it.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;

use super::*;

/// Files hashed in this sign, by identity: rank files unified into one
/// inode (hard links) are read and hashed once. With each, whether its
/// stamp may be recorded.
#[derive(Default)]
pub(super) struct Hashed(HashMap<(Stamp, u64), (String, bool)>);

/// What [`Hashed::hash`] checks and may vouch for.
#[derive(Clone, Copy)]
pub(super) struct Hashing {
    /// Only a JSON object is signed.
    pub(super) json: bool,
    /// A stamp may vouch for the file ([`fsx::changes_noticed`] of its
    /// directory).
    pub(super) stamps: bool,
    /// The shape whose check the bytes read must pass
    /// ([`Shape::check_file`]).
    pub(super) shape: Option<Shape>,
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
    pub(super) fn hash(
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
pub(super) fn stamp_racy(
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
