//! The bytes of a launch's signed files, each with the sha256 its set
//! manifest lists, read for a publication: a file that is still the very
//! file hashed at signing (its sidecar's stamp, as prune trusts it) is not
//! hashed again.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::sidecar::{self, Member, Sidecar, Stamp};
use super::{fsx, layout, Shape, MAX_CACHE_FILE, MAX_SIDECAR};

/// A signed file as read: its member (path, sha256, size), its bytes, its
/// modification time `(s, ns)`, and whether the sha256 was computed from
/// these bytes (`hashed`) or taken from the set manifest on the stamp's
/// word.
#[derive(Debug, Clone)]
pub struct SignedFile {
    pub member: Member,
    pub bytes: Vec<u8>,
    pub mtime: (i64, i64),
    pub hashed: bool,
}

/// Read `paths` (relative to `root`), files of launch `fingerprint`'s
/// signed set. A file's sha256 is the one its set manifest lists when the
/// file is still the one hashed then: its sidecar records that member and
/// the file's identity (a stamp, recorded once its change time had
/// settled), and the file has that identity after its bytes were read, so
/// no write came between. Any other file (no stamp yet, not listed, no
/// manifest) is hashed. Err: the path that cannot be read, and why.
pub fn read_signed(
    root: &Path,
    shape: Shape,
    fingerprint: &str,
    paths: &[PathBuf],
) -> Result<Vec<SignedFile>, String> {
    let root_fd = fsx::open_root(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let sets = sidecar::open_sets(root_fd.as_fd(), false).ok();
    let listed = sidecar::read_manifest(sets.as_ref().map(|f| f.as_fd()), fingerprint, shape)
        .map(|m| m.members)
        .unwrap_or_default();
    let (mut sname, mut sbuf) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(paths.len());
    for rel in paths {
        let Some(path) = rel.to_str() else {
            return Err(format!("{}: not UTF-8", rel.display()));
        };
        let cannot = |e: std::io::Error| format!("{path}: {e}");
        let (dir, name) = match path.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", path),
        };
        let dfd = fsx::open_dir_path(root_fd.as_fd(), Path::new(dir)).map_err(cannot)?;
        let (mut file, st) = fsx::open_regular_at(dfd.as_fd(), name).map_err(cannot)?;
        let mut bytes = Vec::new();
        fsx::read_open(&mut file, &st, &mut bytes, MAX_CACHE_FILE).map_err(cannot)?;
        let after = fsx::stat_fd(file.as_fd()).map_err(cannot)?;
        let size = bytes.len() as u64;
        let member = listed
            .binary_search_by(|m| m.path.as_str().cmp(path))
            .ok()
            .map(|i| &listed[i])
            .filter(|m| m.size == size && after.st_size.max(0) as u64 == size)
            .filter(|m| {
                layout::sidecar_name(name.as_bytes(), &mut sname);
                let at = &sname[..sname.len() - 1];
                fsx::read_at(dfd.as_fd(), at, &mut sbuf, MAX_SIDECAR)
                    .ok()
                    .and_then(|_| serde_json::from_slice::<Sidecar>(&sbuf).ok())
                    .is_some_and(|sc| {
                        sc.fingerprint == fingerprint
                            && sc.path == path
                            && sc.records(m)
                            && sc.stat == Some(Stamp::of(&after))
                    })
            })
            .cloned();
        let hashed = member.is_none();
        let member = member.unwrap_or_else(|| Member {
            path: path.to_string(),
            sha256: super::sha256_hex(&bytes),
            size,
        });
        out.push(SignedFile {
            member,
            bytes,
            mtime: (after.st_mtime, after.st_mtime_nsec),
            hashed,
        });
    }
    Ok(out)
}
