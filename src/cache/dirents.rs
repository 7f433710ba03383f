//! Reading a directory with `getdents64` on a descriptor keepwrap holds:
//! each entry's name, inode number and type, with no `DIR` stream (whose
//! `fdopendir` and rewind cost four system calls a directory) and no
//! second descriptor.

use std::io;
use std::os::fd::BorrowedFd;

use super::fsx::Kind;

/// One entry, as the kernel listed it.
pub struct Dirent<'a> {
    pub name: &'a [u8],
    /// `d_ino`: the inode number the name is bound to.
    pub ino: u64,
    /// From `d_type`; None when the file system does not say (`DT_UNKNOWN`).
    pub kind: Option<Kind>,
}

/// A buffer for [`for_each`] as large as the C library's: a directory of
/// thousands of entries in a few calls.
pub fn large_buf() -> Vec<u8> {
    vec![0; 32 * 1024]
}

/// Call `each` for every entry of the open directory `dir` (not `.` nor
/// `..`), from where its offset is (a descriptor just opened: the start),
/// in the kernel's order; `each` returns false to stop. `buf` takes the
/// records of one `getdents64` call at a time (4 KiB is plenty for a small
/// directory; [`large_buf`] for a large one).
pub fn for_each(
    dir: BorrowedFd<'_>,
    buf: &mut [u8],
    each: &mut dyn FnMut(&Dirent<'_>) -> bool,
) -> io::Result<()> {
    loop {
        let n = crate::sys::getdents64(dir, buf)?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at < n {
            let Some(rec) = record(&buf[at..n]) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a malformed directory entry",
                ));
            };
            at += rec.1;
            let d = rec.0;
            if d.name != b"." && d.name != b".." && !each(&d) {
                return Ok(());
            }
        }
    }
}

/// The `linux_dirent64` at the start of `b` (`d_ino` u64, `d_off` i64,
/// `d_reclen` u16, `d_type` u8, `d_name` NUL-terminated), and its length.
fn record(b: &[u8]) -> Option<(Dirent<'_>, usize)> {
    let ino = u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?);
    let reclen = usize::from(u16::from_ne_bytes(b.get(16..18)?.try_into().ok()?));
    let dtype = *b.get(18)?;
    let name = b.get(19..reclen)?;
    let name = &name[..name.iter().position(|&c| c == 0)?];
    let kind = match dtype {
        libc::DT_REG => Some(Kind::File),
        libc::DT_DIR => Some(Kind::Dir),
        libc::DT_LNK => Some(Kind::Symlink),
        libc::DT_FIFO => Some(Kind::Fifo),
        libc::DT_SOCK => Some(Kind::Socket),
        libc::DT_CHR | libc::DT_BLK => Some(Kind::Device),
        _ => None,
    };
    (reclen >= 19).then_some((Dirent { name, ino, kind }, reclen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A record as the kernel lays it out, with `reclen` and `name` as given.
    fn raw(ino: u64, reclen: u16, dtype: u8, name: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&ino.to_ne_bytes());
        b.extend_from_slice(&0i64.to_ne_bytes());
        b.extend_from_slice(&reclen.to_ne_bytes());
        b.push(dtype);
        b.extend_from_slice(name);
        b
    }

    #[test]
    fn a_malformed_record_is_refused_and_never_read_past_its_buffer() {
        // Too short for its header, a length shorter than the header or
        // longer than the buffer, a name without its NUL.
        for b in [
            Vec::new(),
            vec![0; 18],
            raw(1, 0, libc::DT_REG, b"a\0"),
            raw(1, 18, libc::DT_REG, b"a\0"),
            raw(1, 24, libc::DT_REG, b"a\0"),
            raw(1, 21, libc::DT_REG, b"ab"),
            raw(1, u16::MAX, libc::DT_REG, b"a\0"),
        ] {
            assert!(record(&b).is_none(), "{b:?}");
        }
        // A well-formed one: its name up to the NUL, whatever its bytes.
        let b = raw(7, 24, libc::DT_DIR, b"\xff\n\0\0\0");
        let (d, len) = record(&b).unwrap();
        assert_eq!(
            (d.name, d.ino, d.kind, len),
            (&b"\xff\n"[..], 7, Some(Kind::Dir), 24)
        );
        let b = raw(7, 19, 0, b"");
        assert!(
            record(&b).is_none(),
            "an empty name has no NUL in its record"
        );
        // Every byte string: no panic, and a record found lies within it.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..2000usize {
            let mut b = vec![0u8; len % 300];
            for c in &mut b {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = x as u8;
            }
            if b.len() >= 18 {
                // Lengths near the buffer's, where the bounds are.
                let r = (b.len() as u16).saturating_sub((x % 4) as u16);
                b[16..18].copy_from_slice(&r.to_ne_bytes());
            }
            if let Some((d, reclen)) = record(&b) {
                assert!((19..=b.len()).contains(&reclen));
                assert!(19 + d.name.len() < reclen);
            }
        }
    }

    #[test]
    fn lists_every_entry_with_its_inode_and_kind() {
        let t = tempfile::tempdir().unwrap();
        let mut want = Vec::new();
        for i in 0..2000 {
            // Enough long names for several calls of 32 KiB.
            let name = format!("rank_tp{i}_pp0_dp0_{}.json", "x".repeat(20));
            std::fs::write(t.path().join(&name), "{}").unwrap();
            let ino = std::os::unix::fs::MetadataExt::ino(
                &std::fs::metadata(t.path().join(&name)).unwrap(),
            );
            want.push((name.into_bytes(), ino, Some(Kind::File)));
        }
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let ino =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(t.path().join("sub")).unwrap());
        want.push((b"sub".to_vec(), ino, Some(Kind::Dir)));
        std::os::unix::fs::symlink("sub", t.path().join("link")).unwrap();
        let ino = std::os::unix::fs::MetadataExt::ino(
            &std::fs::symlink_metadata(t.path().join("link")).unwrap(),
        );
        want.push((b"link".to_vec(), ino, Some(Kind::Symlink)));
        let dir = std::fs::File::open(t.path()).unwrap();
        let mut got = Vec::new();
        let mut buf = large_buf();
        for_each(dir.as_fd(), &mut buf, &mut |d| {
            got.push((d.name.to_vec(), d.ino, d.kind));
            true
        })
        .unwrap();
        // d_type is optional: where the file system leaves it out, None.
        for g in &mut got {
            if g.2.is_none() {
                g.2 = want.iter().find(|w| w.0 == g.0).and_then(|w| w.2);
            }
        }
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want);
        // Stopped early: no more calls.
        let dir = std::fs::File::open(t.path()).unwrap();
        let mut n = 0;
        for_each(dir.as_fd(), &mut buf, &mut |_| {
            n += 1;
            n < 3
        })
        .unwrap();
        assert_eq!(n, 3);
    }
}
