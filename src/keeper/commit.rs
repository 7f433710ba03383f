//! The commit work of one launch, as the worker runs it: log lines and
//! landings in order, unify, hash and sign, the lock, the store's record
//! and statistics, the share's publication.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use crate::cache::{self, fsx, Settle, Shape};
use crate::digest::Fingerprint;
use crate::done::owner;
use crate::done::watch::{self, Stamp};
use crate::engine::fingerprint::ProfileName;
use crate::events::{Event, Outcome};
use crate::keeper::policy::Owner;
use crate::root::lock::{self, CacheLock, LockFor};
use crate::root::stats::Stats;
use crate::share::Share;
use crate::store::Store;
use crate::unify;

/// What the worker is asked to do.
pub(super) enum Job {
    /// One `keepwrap:` line of the policy.
    Log(Event),
    /// Log the tuning progress of the cache files that landed (each is
    /// parsed to count its entries).
    Landed {
        files: Vec<PathBuf>,
        after: Duration,
    },
    /// Unify and sign every cache file present (`files`: those the watch
    /// knows of; `landed`: those the engine saved since the start).
    Sign {
        kind: SignKind,
        files: Vec<PathBuf>,
        landed: std::collections::HashSet<PathBuf>,
    },
    /// Who serves the loopback address `addr`, which answered `url` with
    /// 200 at `at`; `name`: name another owner.
    Owner {
        addr: std::net::SocketAddr,
        name: bool,
        at: Instant,
        url: String,
    },
    /// The engine runs as seen; `touched`: it has written in the cache tree
    /// already.
    Seen {
        seen: Box<super::observe::Seen>,
        touched: bool,
    },
    /// The engine ended before keepwrap saw it.
    Unseen,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum SignKind {
    /// Tuning is done.
    Done,
    /// At a clean exit, with this many files that landed after done.
    Late(usize),
}

/// What the worker reports.
pub(super) enum Report {
    /// A sign finished: the cache files as it left them (those signed, as
    /// it read them); `done`: it was the sign at done.
    Signed {
        stamps: Vec<(PathBuf, Stamp)>,
        done: bool,
    },
    /// Who served a probe's 200.
    Owner {
        at: Instant,
        url: String,
        owner: Owner,
    },
    /// The engine was checked; `repruned`: the tree was pruned again for
    /// the fingerprint it runs with (what keepwrap moved there is not the
    /// engine's).
    Checked { repruned: bool },
}

/// The commit work, off the supervisor loop: unify, hash and sign, the
/// lock, the store's record and statistics, the share's publication.
pub(super) struct Committer {
    pub(super) root: PathBuf,
    /// The shape of the cache tree.
    pub(super) shape: Shape,
    pub(super) fingerprint: Fingerprint,
    /// When the launch started (the statistics credit a boot's tuning time).
    pub(super) launched: Instant,
    /// Cache files prune kept (signed for this launch), relative to root.
    pub(super) kept: Vec<PathBuf>,
    pub(super) unify: bool,
    pub(super) store: Option<Store>,
    pub(super) lock_timeout: Duration,
    pub(super) profile: ProfileName,
    pub(super) inputs: serde_json::Value,
    pub(super) share: Option<Share>,
    pub(super) fleet: Option<crate::fleet::Fleet>,
    /// When the members signed without a stamp settle ([`Committer::settle`]).
    pub(super) settle_at: Option<i64>,
    /// The files the sign at done signed, relative to root.
    pub(super) signed_at_done: Vec<PathBuf>,
    /// Whether a set may be signed for what the engine runs with.
    pub(super) seeing: super::check::Seeing,
    /// A launch whose fingerprint is taken again at done: what from.
    pub(super) redo: Option<super::check::Redo>,
    /// The engine saves every rank file it loaded again at every boot (an
    /// SGLang server or benchmark, [`crate::engine::Engine::saves_every_boot`]).
    pub(super) saves_every_boot: bool,
    /// The files of this launch that prune removes before every start
    /// ([`crate::engine::Engine::refuse_at_prune`]): never signed.
    pub(super) refuse: Option<crate::engine::Refuse>,
    /// `--start-cold`: the launch's set waits in the store until this boot
    /// signs its own at done, which replaces it.
    pub(super) cold: bool,
    /// `--pin`: whether the set signed is put back rather than signed again.
    pub(super) pin: super::pin::State,
}

impl Committer {
    pub(super) fn run(&mut self, job: Job) -> Option<Report> {
        match job {
            Job::Log(note) => {
                self.log(note);
                None
            }
            Job::Landed { files, after } => {
                crate::done::progress::landed(&self.root, &self.fingerprint, &files, after);
                None
            }
            Job::Sign {
                kind,
                files,
                landed,
            } => {
                if matches!(kind, SignKind::Done)
                    && (self.refused(&landed) || self.keeps_nothing(&files))
                {
                    return Some(Report::Signed {
                        stamps: Vec::new(),
                        done: true,
                    });
                }
                // The files signed are keepwrap's own writes as the sign
                // read them: a save of the engine after that lands. The
                // others, as unify left them.
                let mut stamps = self.sign(kind, &files);
                let signed: std::collections::HashSet<PathBuf> =
                    stamps.iter().map(|(rel, _)| rel.clone()).collect();
                stamps.extend(
                    files
                        .iter()
                        .filter(|rel| !signed.contains(*rel))
                        .filter_map(|rel| {
                            let meta = std::fs::symlink_metadata(self.root.join(rel)).ok()?;
                            Some((rel.clone(), watch::stamp(&meta)))
                        }),
                );
                Some(Report::Signed {
                    stamps,
                    done: matches!(kind, SignKind::Done),
                })
            }
            Job::Owner {
                addr,
                name,
                at,
                url,
            } => Some(Report::Owner {
                at,
                url,
                owner: owner::owner_of(addr, name),
            }),
            Job::Seen { seen, touched } => self.engine_seen(*seen, touched),
            Job::Unseen => {
                self.engine_unseen();
                None
            }
        }
    }

    /// Log a decision of the policy. A line about the files that landed
    /// after done first says what became of the set signed at done, as the
    /// files are now: it is the launch's verdict, and must be true.
    pub(super) fn log(&self, mut event: Event) {
        if let Some((files, outcome)) = event.late_mut() {
            *outcome = self.judge_late(files);
            if files.is_empty() {
                return;
            }
        }
        event.emit();
    }

    /// Drop the late files the engine saved again as signed at done, and
    /// judge the set signed at done: a member changed or gone breaks it.
    fn judge_late(&self, late: &mut Vec<PathBuf>) -> Outcome {
        let done: std::collections::HashSet<&PathBuf> = self.signed_at_done.iter().collect();
        let n = late.len();
        // A member the engine removed after done lands nowhere: looked for.
        let landed: std::collections::HashSet<&PathBuf> = late.iter().collect();
        let mut changed: Vec<PathBuf> = self
            .signed_at_done
            .iter()
            .filter(|rel| !landed.contains(rel))
            .filter(|rel| std::fs::symlink_metadata(self.root.join(rel)).is_err())
            .cloned()
            .collect();
        drop(landed);
        late.retain(|rel| {
            if !done.contains(rel) {
                return true;
            }
            let path = self.root.join(rel);
            if cache::landed(&path, Some(&self.fingerprint)).is_ok_and(|l| l.as_signed) {
                return false;
            }
            changed.push(rel.clone());
            true
        });
        if late.is_empty() {
            Event::LateAsSigned { files: n }.emit();
        }
        if done.is_empty() {
            Outcome::NothingSigned
        } else if !changed.is_empty() && self.stored_whole() {
            Outcome::Stored {
                signed: self.signed_at_done.len(),
            }
        } else if !changed.is_empty() {
            Outcome::Broken { changed }
        } else {
            Outcome::Holds {
                signed: self.signed_at_done.len(),
            }
        }
    }

    /// The set signed at done is the one in the store for this launch
    /// (another launch's prune stored it while this one ran).
    fn stored_whole(&self) -> bool {
        let Some(m) = self
            .store
            .as_ref()
            .and_then(|s| s.manifest(&self.fingerprint))
        else {
            return false;
        };
        let mut stored: Vec<&Path> = m.set.members.iter().map(|m| Path::new(&m.path)).collect();
        let mut done: Vec<&Path> = self.signed_at_done.iter().map(PathBuf::as_path).collect();
        stored.sort();
        done.sort();
        stored == done
    }

    /// The files of `files` (relative to the root) that are there.
    fn present<'f>(&self, files: &'f [PathBuf]) -> Vec<&'f PathBuf> {
        files
            .iter()
            .filter(|p| std::fs::symlink_metadata(self.root.join(p)).is_ok())
            .collect()
    }

    /// Whether every cache file the engine wrote is one the next start
    /// removes (said in one line): then nothing is signed.
    fn keeps_nothing(&self, files: &[PathBuf]) -> bool {
        let Some(refuse) = &self.refuse else {
            return false;
        };
        let present = self.present(files);
        let whys: Vec<Option<String>> = present
            .iter()
            .map(|p| refuse(&p.to_string_lossy()))
            .collect();
        match whys.first() {
            Some(Some(why)) if whys.iter().all(Option::is_some) => {
                Event::KeepsNothing {
                    files: present.len(),
                    why: why.clone(),
                }
                .emit();
                true
            }
            _ => false,
        }
    }

    /// Unify, then sign every cache file present as one set, and say how
    /// this boot went. The files signed, each as the sign read it.
    fn sign(&mut self, kind: SignKind, files: &[PathBuf]) -> Vec<(PathBuf, Stamp)> {
        if !self.may_sign() {
            return Vec::new();
        }
        if let Some(stamps) = self.sign_pinned(kind, files) {
            return stamps;
        }
        if self.unify {
            unify::unify_tree(&self.root, files.iter().map(PathBuf::as_path), self.shape);
        }
        let Ok(_lock) = self.commit_lock() else {
            return Vec::new();
        };
        // Files unify just wrote are signed at once, their stamps recorded
        // once their change times settle (settle, after the report).
        let signed = cache::sign_with(&self.root, self.shape, &self.fingerprint, Settle::Later);
        let report = match signed {
            Ok(r) => r,
            Err(e) => {
                Event::CannotSign {
                    root: self.root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                return Vec::new();
            }
        };
        self.settle_at = report.settle_at;
        self.publish(&report);
        if let (SignKind::Done, Some(fleet)) = (kind, self.fleet.as_mut()) {
            fleet.publish(&self.root, &report.signed);
        }
        let n = report.signed.len();
        if let SignKind::Late(late) = kind {
            Event::SignedAgain {
                files: n,
                late,
                fingerprint: self.fingerprint.to_string(),
            }
            .emit();
            if let Some(s) = &self.store {
                if n > 0 && !report.unchanged {
                    s.record_signed(
                        &self.fingerprint,
                        self.profile.as_str(),
                        self.inputs.clone(),
                        n,
                    );
                }
            }
            return as_read(report);
        }
        self.signed_at_done.clone_from(&report.signed);
        let reused = n > 0 && report.unchanged && same_files(&report.signed, &self.kept);
        if n == 0 {
            let present = self.present(files).len();
            if present > 0 {
                Event::NothingSigned { present }.emit();
            } else {
                Event::NothingToKeep {}.emit();
            }
        } else if reused {
            Event::Reused {
                files: n,
                entries: self.entries(&report.signed),
                fingerprint: self.fingerprint.to_string(),
            }
            .emit();
        } else {
            Event::Signed {
                files: n,
                entries: self.entries(&report.signed),
                fingerprint: self.fingerprint.to_string(),
            }
            .emit();
        }
        if let Some(s) = &self.store {
            if n > 0 && self.cold {
                if let Some(files) = s.delete_replaced(&self.fingerprint) {
                    Event::StartColdReplaced {
                        files,
                        fingerprint: self.fingerprint.to_string(),
                    }
                    .emit();
                }
            }
            if n > 0 {
                if report.unchanged && s.record(&self.fingerprint).is_some() {
                    s.touch(&self.fingerprint);
                } else {
                    s.record_signed(
                        &self.fingerprint,
                        self.profile.as_str(),
                        self.inputs.clone(),
                        n,
                    );
                }
            }
            Stats::record(|st| {
                if reused {
                    st.reuses += 1;
                } else if n > 0 {
                    st.tunes += 1;
                }
            });
            crate::root::stats::credit_boot(
                s.state_fd(),
                &self.fingerprint,
                reused,
                n,
                self.launched,
            );
            Stats::flush(s.state_fd());
        }
        self.pin_first(n);
        as_read(report)
    }

    /// The entries (tuned shapes) of the signed files, those keepwrap can
    /// count.
    pub(super) fn entries(&self, signed: &[PathBuf]) -> Option<usize> {
        // Each file read again: only for a metrics file (a sign reads only
        // what changed, and a reuse nothing).
        crate::events::observed().then(|| {
            signed
                .iter()
                .filter_map(|rel| cache::entry_count(&self.root.join(rel)).ok())
                .sum()
        })
    }

    /// Whether the engine refused the set kept for it: an engine that saves
    /// every rank file at every boot saved none of some kept files again
    /// by done. Then the set is not signed again, and its files are
    /// removed (said in one line): the next boot tunes once on this
    /// machine and keeps its own, instead of loading, refusing and tuning
    /// at every boot.
    fn refused(&mut self, landed: &std::collections::HashSet<PathBuf>) -> bool {
        if !self.saves_every_boot {
            return false;
        }
        let refused: Vec<&PathBuf> = self.kept.iter().filter(|k| !landed.contains(*k)).collect();
        let Some(first) = refused.first() else {
            return false;
        };
        Event::KeptRefused {
            refused: refused.len(),
            kept: self.kept.len(),
            example: first.to_path_buf(),
            fingerprint: self.fingerprint.to_string(),
        }
        .emit();
        if let Ok(root) = fsx::open_root(&self.root) {
            for rel in &self.kept {
                let _ = remove_member(root.as_fd(), rel);
            }
        }
        self.kept.clear();
        true
    }

    /// Multi-node: publish the signed rank files into the share.
    fn publish(&mut self, report: &cache::SignReport) {
        if !report.signed.is_empty() {
            if let Some(share) = self.share.as_mut() {
                share.publish(&self.root, &report.signed);
            }
        }
    }

    /// The lock for a commit: Ok(None) without a store; Err when it timed
    /// out (logged: nothing is signed). Other holders keep it for
    /// milliseconds, so the wait is short.
    pub(super) fn commit_lock(&self) -> Result<Option<CacheLock>, ()> {
        match &self.store {
            None => Ok(None),
            Some(s) => lock::take(
                s.state_fd(),
                self.lock_timeout.min(COMMIT_LOCK_WAIT),
                &self.fingerprint,
                LockFor::Commit,
            )
            // No stop watch once the engine runs.
            .ok()
            .flatten()
            .map(Some)
            .ok_or(()),
        }
    }

    /// Record the stamps of the members the last sign could not stamp, once
    /// their change times have settled (a wait of at most about 100 ms), so
    /// that the next launch trusts them without reading them.
    pub(super) fn settle(&mut self) {
        let Some(at) = self.settle_at.take() else {
            return;
        };
        let wait = at.saturating_sub(cache::now_ns());
        if wait > 1_000_000_000 {
            return;
        }
        if wait > 0 {
            std::thread::sleep(Duration::from_nanos(wait as u64));
        }
        let Ok(_lock) = self.commit_lock() else {
            return;
        };
        // Best effort: without the stamps the next launch reads and hashes
        // those files instead.
        let _ = cache::sign_with(&self.root, self.shape, &self.fingerprint, Settle::Restamp);
    }

    /// Before keepwrap exits: write the statistics this launch gathered
    /// (once, under the lock), and let the share's publication finish.
    pub(super) fn finish(&mut self) {
        self.settle();
        if let (Some(s), true) = (&self.store, Stats::pending()) {
            if let Ok(_lock) = self.commit_lock() {
                Stats::flush(s.state_fd());
            }
        }
        if let Some(share) = self.share.as_mut() {
            share.finish();
        }
        if let Some(fleet) = self.fleet.as_mut() {
            fleet.finish();
        }
    }
}

/// Remove the cache file `rel` of the tree `root`, never through a symlink.
fn remove_member(root: std::os::fd::BorrowedFd<'_>, rel: &Path) -> std::io::Result<()> {
    let name = rel
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => fsx::unlink_at(fsx::open_dir_path(root, parent)?.as_fd(), name),
        None => fsx::unlink_at(root, name),
    }
}

/// Longest wait for the lock at commit, whatever `--lock-timeout` says.
const COMMIT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The files a sign signed, each with its stamp as the sign read it.
pub(super) fn as_read(report: cache::SignReport) -> Vec<(PathBuf, Stamp)> {
    report
        .signed
        .into_iter()
        .zip(report.hashed)
        .map(|(rel, h)| (rel, (h.ino, h.size, h.mtime.0, h.mtime.1)))
        .collect()
}

fn same_files(a: &[PathBuf], b: &[PathBuf]) -> bool {
    let mut a: Vec<&Path> = a.iter().map(PathBuf::as_path).collect();
    let mut b: Vec<&Path> = b.iter().map(PathBuf::as_path).collect();
    a.sort();
    b.sort();
    a == b
}
