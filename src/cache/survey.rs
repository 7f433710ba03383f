//! Survey: what each cache file under the root is, read from sidecars
//! without hashing the cache files (unless asked to), for `keepwrap status`.

use std::path::Path;

use super::fsx::{self, Kind};
use super::judge::{self, Candidate};
use super::layout::{self, DirView, Listing, Rel, Role};
use super::prune::{MAX_CACHE_FILE, MAX_SIDECAR};
use super::sidecar::{Head, Sidecar};

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
pub fn survey(root: &Path, verify: bool) -> Vec<FileInfo> {
    let Ok(fd) = fsx::open_root(root) else {
        return Vec::new();
    };
    let mut out: Vec<FileInfo> = Vec::new();
    let mut sidecars: Vec<Option<Sidecar>> = Vec::new();
    let mut sbuf = Vec::with_capacity(4096);
    let mut cbuf = Vec::new();
    let mut name_buf = Vec::with_capacity(64);
    layout::walk(fd, &mut |dir: &DirView<'_>, listing: &Listing| {
        for e in &listing.ents {
            let name = listing.name(e);
            if layout::role(name) != Role::Cache || e.kind == Kind::Dir {
                continue;
            }
            let path = Rel(dir.rel, name).to_string();
            name_buf.clear();
            name_buf.extend_from_slice(name);
            let size = fsx::lstat_at(dir.fd, name_buf.as_slice())
                .map(|st| st.st_size.max(0) as u64)
                .unwrap_or(0);
            let mut sc_out = None;
            let state = if e.kind != Kind::File {
                FileState::Corrupt(format!("not a regular file ({})", e.kind.name()))
            } else if let Some(u) = dir.untrusted {
                FileState::Corrupt(u.0.clone())
            } else {
                layout::sidecar_name(name, &mut name_buf);
                let sname = &name_buf[..name_buf.len() - 1];
                match fsx::read_at(dir.fd, sname, &mut sbuf, MAX_SIDECAR) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileState::Unsigned,
                    Err(e) => FileState::Corrupt(format!("sidecar unreadable ({e})")),
                    Ok(_) => {
                        // Without --verify: one parse, no set-id hash (a
                        // report, not a trust decision; prune judges fully).
                        let judged = if verify {
                            let fp = serde_json::from_slice::<Head<'_>>(&sbuf)
                                .ok()
                                .and_then(|h| h.fingerprint.map(|f| f.into_owned()))
                                .unwrap_or_default();
                            judge::judge_sidecar(&sbuf, &fp, |p| p == path)
                        } else {
                            light(&sbuf, &path)
                        };
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
                                    match fsx::read_at(
                                        dir.fd,
                                        name_buf.as_slice(),
                                        &mut cbuf,
                                        MAX_CACHE_FILE,
                                    ) {
                                        Ok(_) => judge::judge_bytes(&sc, &cbuf).err(),
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
            out.push(FileInfo { path, size, state });
            sidecars.push(sc_out);
        }
    });
    // Sets: a signed file whose set is not whole is not trusted.
    let idx: Vec<usize> = (0..out.len()).filter(|&i| sidecars[i].is_some()).collect();
    let cands: Vec<Candidate<'_>> = idx
        .iter()
        .map(|&i| Candidate {
            path: out[i].path.as_str(),
            sidecar: sidecars[i].as_ref().expect("signed"),
        })
        .collect();
    let verdicts = judge::resolve_sets(&cands);
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

/// Parse a sidecar for the report: well formed, a known format, for this
/// path; no set-id check, hashes not kept (they are not looked at).
fn light(bytes: &[u8], path: &str) -> Result<Sidecar, judge::Reason> {
    use serde::de::IgnoredAny;
    use serde::Deserialize;
    use std::borrow::Cow;
    #[derive(Deserialize)]
    struct M<'a> {
        #[serde(borrow)]
        path: Cow<'a, str>,
        #[allow(dead_code)]
        sha256: IgnoredAny,
        size: u64,
    }
    #[derive(Deserialize)]
    struct S<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow)]
        members: Vec<M<'a>>,
    }
    #[derive(Deserialize)]
    struct L<'a> {
        format: u32,
        #[serde(borrow)]
        fingerprint: Cow<'a, str>,
        #[serde(borrow)]
        path: Cow<'a, str>,
        size: u64,
        signed_at: u64,
        #[serde(borrow)]
        set: S<'a>,
    }
    let l: L<'_> =
        serde_json::from_slice(bytes).map_err(|e| judge::Reason::SidecarGarbage(e.to_string()))?;
    if l.format > crate::SIDECAR_FORMAT {
        return Err(judge::Reason::SidecarFuture(u64::from(l.format)));
    }
    if l.path != path {
        return Err(judge::Reason::SidecarGarbage(format!(
            "signed for another file, {}",
            l.path
        )));
    }
    Ok(Sidecar {
        format: l.format,
        keepwrap: String::new(),
        fingerprint: l.fingerprint.into_owned(),
        path: String::new(),
        sha256: String::new(),
        size: l.size,
        signed_at: l.signed_at,
        signed_at_utc: String::new(),
        set: super::SetRecord {
            id: l.set.id.into_owned(),
            members: l
                .set
                .members
                .into_iter()
                .map(|m| super::Member {
                    path: m.path.into_owned(),
                    sha256: String::new(),
                    size: m.size,
                })
                .collect(),
        },
    })
}
