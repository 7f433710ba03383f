//! Survey: what each cache file under the root is, read from sidecars
//! without hashing the cache files (unless asked to), for `keepwrap status`.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::fsx::{self, Kind};
use super::judge::{self, Candidate};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::prune::{MAX_CACHE_FILE, MAX_SIDECAR};
use super::sidecar::Sidecar;
use super::Shape;

/// What one cache file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// A sidecar signs it, its size matches (and with `verify`, its bytes),
    /// and its set is whole.
    Signed { fingerprint: String, signed_at: u64 },
    /// No sidecar.
    Unsigned,
    /// Anything else, with why.
    Corrupt(String),
}

#[derive(Debug, Clone)]
pub struct FileInfo {
    /// Relative to the root.
    pub path: String,
    pub size: u64,
    pub state: FileState,
}

/// Every cache file under `root` (sorted by path). `verify` also hashes
/// each signed file's bytes.
///
/// The tree is listed first; the files are then read in up to four threads
/// (a status over thousands of files is system calls and small parses).
pub fn survey(root: &Path, shape: Shape, verify: bool) -> Vec<FileInfo> {
    let (Ok(walk_fd), Ok(root_fd)) = (fsx::open_root(root), fsx::open_root(root)) else {
        return Vec::new();
    };
    let mut jobs: Vec<Job> = Vec::new();
    layout::walk(
        walk_fd,
        shape,
        &mut |dir: &DirView<'_>, listing: &Listing| {
            let ents: Vec<(Vec<u8>, Kind)> = listing
                .ents
                .iter()
                .filter(|e| dir.role(listing.name(e)) == Role::Cache && e.kind != Kind::Dir)
                .map(|e| (listing.name(e).to_vec(), e.kind))
                .collect();
            if !ents.is_empty() {
                jobs.push(Job {
                    rel: dir.rel.to_vec(),
                    untrusted: dir.untrusted.map(|u| u.0.clone()),
                    ents,
                });
            }
        },
    );
    let root_fd = root_fd.as_fd();
    let parts = crate::signals::in_parts(&jobs, "keepwrap-survey", |part| {
        part.iter()
            .flat_map(|job| survey_dir(root_fd, job, verify))
            .collect::<Vec<(FileInfo, Option<Sidecar>)>>()
    });
    let (mut out, sidecars): (Vec<FileInfo>, Vec<Option<Sidecar>>) =
        parts.into_iter().flatten().unzip();
    // Sets: a signed file whose set is not whole is not trusted.
    let idx: Vec<usize> = (0..out.len()).filter(|&i| sidecars[i].is_some()).collect();
    let sets = super::sidecar::open_sets(root_fd, false).ok();
    let mut manifests = judge::Manifests::new();
    for &i in &idx {
        let fp = &sidecars[i].as_ref().expect("signed").fingerprint;
        if !manifests.contains_key(fp) {
            let m = super::sidecar::read_manifest(sets.as_ref().map(|f| f.as_fd()), fp, shape);
            manifests.insert(fp.clone(), m);
        }
    }
    let cands: Vec<Candidate<'_>> = idx
        .iter()
        .map(|&i| Candidate {
            path: out[i].path.as_str(),
            sidecar: sidecars[i].as_ref().expect("signed"),
        })
        .collect();
    let verdicts = judge::resolve_sets(&cands, &manifests);
    let broken: Vec<(usize, String)> = idx
        .iter()
        .zip(verdicts)
        .filter_map(|(&i, v)| v.map(|r| (i, r.to_string())))
        .collect();
    drop(cands);
    for (i, why) in broken {
        out[i].state = FileState::Corrupt(why);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The cache files of one directory, as listed by the walk.
struct Job {
    /// Relative to the root: empty for the root, else ending in `/`.
    rel: Vec<u8>,
    untrusted: Option<String>,
    ents: Vec<(Vec<u8>, Kind)>,
}

/// Survey the files of one directory, reopened (no symlink followed) from
/// the root.
fn survey_dir(root: BorrowedFd<'_>, job: &Job, verify: bool) -> Vec<(FileInfo, Option<Sidecar>)> {
    let rel = job.rel.strip_suffix(b"/").unwrap_or(&job.rel);
    let dir = fsx::open_dir_path(root, Path::new(OsStr::from_bytes(rel)));
    let mut sbuf = Vec::with_capacity(4096);
    let mut cbuf = Vec::new();
    let mut name_buf = Vec::with_capacity(64);
    job.ents
        .iter()
        .map(|(name, kind)| match &dir {
            Ok(fd) => survey_file(
                fd.as_fd(),
                &job.rel,
                job.untrusted.as_deref(),
                name,
                *kind,
                verify,
                (&mut sbuf, &mut cbuf, &mut name_buf),
            ),
            Err(e) => (
                FileInfo {
                    path: Rel(&job.rel, name).to_string(),
                    size: 0,
                    state: FileState::Corrupt(format!("cannot open its directory ({e})")),
                },
                None,
            ),
        })
        .collect()
}

/// What one cache file is, from its sidecar (and with `verify` its bytes).
fn survey_file(
    dfd: BorrowedFd<'_>,
    rel: &[u8],
    untrusted: Option<&str>,
    name: &[u8],
    kind: Kind,
    verify: bool,
    (sbuf, cbuf, name_buf): (&mut Vec<u8>, &mut Vec<u8>, &mut Vec<u8>),
) -> (FileInfo, Option<Sidecar>) {
    let path = Rel(rel, name).to_string();
    name_buf.clear();
    name_buf.extend_from_slice(name);
    let size = fsx::lstat_at(dfd, name_buf.as_slice())
        .map(|st| st.st_size.max(0) as u64)
        .unwrap_or(0);
    let mut sc_out = None;
    let state = if kind != Kind::File {
        FileState::Corrupt(format!("not a regular file ({})", kind.name()))
    } else if let Some(u) = untrusted {
        FileState::Corrupt(u.to_string())
    } else {
        layout::sidecar_name(name, name_buf);
        let sname = &name_buf[..name_buf.len() - 1];
        match fsx::read_at(dfd, sname, sbuf, MAX_SIDECAR) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileState::Unsigned,
            Err(e) => FileState::Corrupt(format!("sidecar unreadable ({e})")),
            Ok(_) => {
                let judged = judge::judge_sidecar_for(sbuf, None, |p| p == path);
                match judged {
                    Err(r) => FileState::Corrupt(r.to_string()),
                    Ok(sc) if sc.size != size => FileState::Corrupt(format!(
                        "changed after signing (size {size} != signed {})",
                        sc.size
                    )),
                    Ok(sc) => {
                        let bad = if verify {
                            name_buf.clear();
                            name_buf.extend_from_slice(name);
                            match fsx::read_at(dfd, name_buf.as_slice(), cbuf, MAX_CACHE_FILE) {
                                Ok(_) => judge::judge_bytes(&sc, cbuf).err(),
                                Err(e) => Some(judge::Reason::Unreadable(e.to_string())),
                            }
                        } else {
                            None
                        };
                        if let Some(r) = bad {
                            FileState::Corrupt(r.to_string())
                        } else {
                            let st = FileState::Signed {
                                fingerprint: sc.fingerprint.clone(),
                                signed_at: sc.signed_at,
                            };
                            sc_out = Some(sc);
                            st
                        }
                    }
                }
            }
        }
    };
    (FileInfo { path, size, state }, sc_out)
}
