//! The markers' files: a launch's own ([`Marker`], left by
//! [`Runs::register`]), read back with whether their launch lives (the
//! byte-range locks), the spare file, and the tidying of ended ones.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{fcntl, openat, FcntlArg, FdFlag, OFlag};
use nix::sys::stat::Mode;

use crate::cache::fsx::{self, Kind};

use super::seen::{parse, token, Identity, Life, Seen, State};
use super::RUNNING_DIR;

/// A marker is a line of about 160 bytes: anything larger is not one.
const MAX_MARKER: u64 = 4096;
/// Byte 0: the launch (keepwrap or its engine) is alive.
pub(super) const ALIVE_BYTE: i64 = 0;
/// Byte 1: keepwrap itself is alive.
const KEEPWRAP_BYTE: i64 = 1;
/// A registration that never finished (`.<name>.tmp`) is removed after this.
const TMP_STALE: Duration = Duration::from_secs(60);

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn range(kind: libc::c_short, byte: i64) -> libc::flock {
    crate::sys::flock_range(kind, byte, 1)
}

/// Take the lock of one byte through this open file description.
pub(super) fn lock_byte(fd: BorrowedFd<'_>, byte: i64) -> io::Result<()> {
    let fl = range(libc::F_WRLCK as libc::c_short, byte);
    fcntl(fd, FcntlArg::F_OFD_SETLK(&fl))
        .map(|_| ())
        .map_err(io::Error::from)
}

/// Is one byte locked by another open file description?
fn byte_locked(fd: BorrowedFd<'_>, byte: i64) -> bool {
    let mut fl = range(libc::F_WRLCK as libc::c_short, byte);
    match fcntl(fd, FcntlArg::F_OFD_GETLK(&mut fl)) {
        Ok(_) => fl.l_type != libc::F_UNLCK as libc::c_short,
        // Cannot tell: the cautious answer.
        Err(_) => true,
    }
}

/// The markers directory of one cache root.
pub struct Runs {
    dir: OwnedFd,
}

impl Runs {
    /// Open (creating) `running` below the state directory `state`
    /// (`<root>/.keepwrap`), never through a symlink.
    pub fn open_in(state: BorrowedFd<'_>) -> io::Result<Runs> {
        let dir = fsx::open_state_dir_at(state, RUNNING_DIR, Some(0o755))?;
        Ok(Runs { dir })
    }

    /// Every readable marker, with whether its launch is alive.
    pub fn scan(&self) -> Vec<Seen> {
        scan_dir(self.dir.as_fd(), None).0
    }

    /// [`Runs::scan`], then remove the ended markers no live launch needs
    /// (see [`tidy`]). Under the cache lock.
    pub fn scan_and_tidy(&self) -> Vec<Seen> {
        let (seen, strays, foreign) = scan_dir(self.dir.as_fd(), None);
        for (name, uid) in foreign {
            crate::events::Event::ForeignMarker {
                marker: format!("{}/{RUNNING_DIR}/{name}", crate::STATE_DIR).to_string(),
                uid,
            }
            .emit();
        }
        tidy(self.dir.as_fd(), &seen, &strays, None);
        seen
    }

    /// Leave this launch's marker, in `state`, locked for its lifetime.
    /// It appears under its final name already locked.
    pub fn register(self, id: &Identity, state: State) -> io::Result<Marker> {
        let started = now_nanos();
        let name = format!("{}-{started}", std::process::id());
        let tmp = format!(".{name}.tmp");
        let open = |flags: OFlag| {
            openat(
                self.dir.as_fd(),
                tmp.as_str(),
                flags | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
            .map(File::from)
            .map_err(io::Error::from)
        };
        let lock = |shared: &File| -> io::Result<File> {
            lock_byte(shared.as_fd(), ALIVE_BYTE)?;
            let own = open(OFlag::empty())?;
            lock_byte(own.as_fd(), KEEPWRAP_BYTE)?;
            Ok(own)
        };
        // The file of an ended launch when there is one (no inode created),
        // else a new one.
        let reused = claim_spare(self.dir.as_fd(), &tmp)
            .and_then(|(f, size)| lock(&f).ok().map(|own| (f, own, size)))
            .or_else(|| {
                let _ = fsx::unlink_at(self.dir.as_fd(), tmp.as_str());
                None
            });
        let (shared, own, size) = match reused {
            Some((f, own, size)) => (f, Some(own), size),
            None => (open(OFlag::O_CREAT | OFlag::O_EXCL)?, None, 0),
        };
        let result = (|| {
            let own = match own {
                Some(own) => own,
                None => lock(&shared)?,
            };
            // Over the spare's old line, which is cut only when longer (a
            // truncation costs ten writes): the file is renamed into view
            // only once it holds exactly this line.
            fsx::overwrite(&shared, &line(state, id, started), size)?;
            fsx::rename_at(self.dir.as_fd(), tmp.as_str(), name.as_str())?;
            Ok(own)
        })();
        match result {
            Ok(own) => Ok(Marker {
                dir: self.dir,
                name,
                shared,
                _own: own,
                started,
                id: id.clone(),
                state: std::cell::Cell::new(state),
                last_scan: std::cell::RefCell::new(None),
                beside: Vec::new(),
            }),
            Err(e) => {
                let _ = fsx::unlink_at(self.dir.as_fd(), tmp.as_str());
                Err(e)
            }
        }
    }
}

/// The name an ended launch's marker file is left under, unlocked, for the
/// next launch to take instead of creating a file (at most one; scans never
/// read it as a marker, whatever it holds, and unlike the other dot files
/// it is not removed when old: a launch that cannot use it removes it).
const SPARE: &std::ffi::CStr = c".spare";

/// Take the spare marker file under the private name `tmp`: the open file
/// and its size, if it is a regular file of this user with one link; else
/// it is removed and None.
fn claim_spare(dir: BorrowedFd<'_>, tmp: &str) -> Option<(File, u64)> {
    fsx::rename_at(dir, SPARE, tmp).ok()?;
    let usable = fsx::open_spare_at(dir, tmp, false)
        .ok()
        .filter(|(_, size)| *size <= MAX_MARKER);
    if usable.is_none() {
        let _ = fsx::unlink_at(dir, tmp);
    }
    usable
}

pub(super) fn line(state: State, id: &Identity, started: u128) -> Vec<u8> {
    let mut line = state.word().to_vec();
    let host = token(&crate::root::lock::hostname());
    line.extend_from_slice(
        format!(
            " {} {started} {} {} {host}\n",
            id.fingerprint, id.peer_key, id.rank
        )
        .as_bytes(),
    );
    line
}

/// A marker another user owns: its name and owner.
type Foreign = (String, u32);

/// The markers of the directory (a marker another user owns is not one:
/// any user can add a file to a shared root's sticky directory, and a
/// planted live marker would stop the prune), the names of unfinished
/// registrations, and the markers of other users with their owner. The
/// marker named `mine` (the caller's own) is not read.
fn scan_dir(dir: BorrowedFd<'_>, mine: Option<&str>) -> (Vec<Seen>, Vec<Vec<u8>>, Vec<Foreign>) {
    let Ok(entries) = fsx::list_dir(dir) else {
        return (Vec::new(), Vec::new(), Vec::new());
    };
    let mut out = Vec::new();
    let mut strays = Vec::new();
    let mut foreign = Vec::new();
    let euid = nix::unistd::geteuid().as_raw();
    let mut buf = Vec::new();
    for (name, kind) in entries {
        if name.starts_with(b".") {
            // The spare is kept whatever its age (see `claim_spare`).
            if kind == Kind::File && name.as_slice() != SPARE.to_bytes() {
                strays.push(name);
            }
            continue;
        }
        if kind != Kind::File {
            continue;
        }
        let Ok(name) = String::from_utf8(name) else {
            continue;
        };
        if Some(name.as_str()) == mine {
            continue;
        }
        match read_marker(dir, &name, &mut buf, euid) {
            Ok(seen) => out.push(seen),
            Err(Some(uid)) => foreign.push((name, uid)),
            Err(None) => {}
        }
    }
    (out, strays, foreign)
}

/// The marker `name`; Err(Some(uid)) when another user owns it, Err(None)
/// when it is not one.
fn read_marker(
    dir: BorrowedFd<'_>,
    name: &str,
    buf: &mut Vec<u8>,
    euid: u32,
) -> Result<Seen, Option<u32>> {
    let (file, st) = fsx::open_regular_at(dir, name).map_err(|_| None)?;
    if st.st_uid != euid && st.st_uid != 0 {
        return Err(Some(st.st_uid));
    }
    read_open_marker(&file, &st, name, buf).ok_or(None)
}

fn read_open_marker(
    file: &File,
    st: &nix::sys::stat::FileStat,
    name: &str,
    buf: &mut Vec<u8>,
) -> Option<Seen> {
    if st.st_size < 0 || st.st_size as u64 > MAX_MARKER {
        return None;
    }
    buf.clear();
    buf.resize(st.st_size as usize, 0);
    let n = file.read_at(buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let (id, started, state, host) = parse(name, text)?;
    let life = if !byte_locked(file.as_fd(), ALIVE_BYTE) {
        Life::Ended
    } else if byte_locked(file.as_fd(), KEEPWRAP_BYTE) {
        Life::Alive
    } else {
        Life::Orphaned
    };
    Some(Seen {
        name: name.to_string(),
        pid: name.split('-').next()?.parse().ok()?,
        id,
        started,
        state,
        life,
        host,
    })
}

/// Remove every ended marker that no live launch needs: one is needed while
/// a live launch started before it did (that launch must not sign: this
/// one ran alongside). `me` is left to the caller. Registrations that never
/// finished are removed after a minute.
fn tidy(dir: BorrowedFd<'_>, seen: &[Seen], strays: &[Vec<u8>], me: Option<&str>) {
    let live_starts: Vec<u128> = seen
        .iter()
        .filter(|s| s.live() && Some(s.name.as_str()) != me)
        .map(|s| s.started)
        .collect();
    for s in seen {
        if s.live() || Some(s.name.as_str()) == me {
            continue;
        }
        if !live_starts.iter().any(|&t| t <= s.started) {
            let _ = fsx::unlink_at(dir, s.name.as_str());
        }
    }
    let now = SystemTime::now();
    for name in strays {
        let old = fsx::lstat_at(dir, name.as_slice()).is_ok_and(|st| {
            let mtime = UNIX_EPOCH + Duration::from_secs(st.st_mtime.max(0) as u64);
            now.duration_since(mtime).is_ok_and(|age| age > TMP_STALE)
        });
        if old {
            let _ = fsx::unlink_at(dir, name.as_slice());
        }
    }
}

/// This launch's marker; its locks are released when keepwrap exits (and,
/// for byte 0, when the engine's last process holding it ends).
pub struct Marker {
    dir: OwnedFd,
    pub(super) name: String,
    /// Holds byte 0; passed on to the engine.
    shared: File,
    /// Holds byte 1; keepwrap's alone.
    _own: File,
    started: u128,
    id: Identity,
    state: std::cell::Cell<State>,
    /// The last scan [`Marker::others`] made, for the drop to reuse while
    /// it is fresh ([`SCAN_REUSE`]).
    last_scan: std::cell::RefCell<Option<Scan>>,
    /// Launches that were done tuning and alive when this one started, of
    /// another fingerprint or orphaned ([`super::Verdict::Beside`]): their
    /// engines ran beside this one's, so they forbid signing even once
    /// they have ended.
    beside: Vec<Seen>,
}

/// A scan of the markers' directory: when, the markers (this launch's own
/// left out) and the unfinished registrations.
struct Scan {
    at: std::time::Instant,
    seen: Vec<Seen>,
    strays: Vec<Vec<u8>>,
}

/// How long the drop trusts a scan [`Marker::others`] made instead of
/// listing the directory again (at exit the commit runs between the two).
/// A scan that recent is as safe a basis as a new one: every launch live
/// then that started before this one counts as needing this launch's
/// marker (at worst an `ended` copy is left that the next launch tidies
/// away), and a launch that registers after it took its start time after
/// this one's (registrations take the cache lock), so it needs neither
/// this marker nor the ended ones the scan saw.
const SCAN_REUSE: Duration = Duration::from_millis(100);

impl Marker {
    /// Say what this launch is doing now (one write of the first word).
    pub fn set_state(&self, state: State) {
        self.state.set(state);
        if let Err(e) = self.shared.write_all_at(state.word(), 0) {
            crate::events::Event::CannotUpdateMarker {
                marker: format!("{}/{RUNNING_DIR}/{}", crate::STATE_DIR, self.name).to_string(),
                error: e.to_string(),
            }
            .emit();
        }
    }

    /// Tuning is done: launches waiting for this one may start.
    pub fn mark_done(&self) {
        if self.state.get() == State::Tuning {
            self.set_state(State::Done);
        }
    }

    pub fn state(&self) -> State {
        self.state.get()
    }

    /// This launch started beside `launches` (done tuning, alive, of
    /// another fingerprint or orphaned): they forbid signing for the whole
    /// run ([`Marker::others`]).
    pub fn ran_beside(&mut self, launches: Vec<Seen>) {
        self.beside = launches;
    }

    /// Launches that forbid signing now: every other launch alive, or that
    /// started after this one (it ran alongside, and its engine may have
    /// written some of the rank files), and those this one started beside
    /// ([`Marker::ran_beside`]), ended or not: an engine done tuning writes
    /// no more as a rule, but one that saves late or starts again would
    /// write into this launch's files, and nothing tells its writes apart.
    pub fn others(&self) -> Vec<Seen> {
        let (seen, strays, _) = scan_dir(self.dir.as_fd(), Some(&self.name));
        let mut others: Vec<Seen> = seen
            .iter()
            .filter(|s| s.live() || s.started >= self.started)
            .cloned()
            .collect();
        for b in &self.beside {
            if !others.iter().any(|o| o.name == b.name) {
                // Its marker is gone or says ended: it ended since.
                others.push(Seen {
                    life: Life::Ended,
                    ..b.clone()
                });
            }
        }
        *self.last_scan.borrow_mut() = Some(Scan {
            at: std::time::Instant::now(),
            seen,
            strays,
        });
        others
    }

    /// Let the next exec inherit the descriptor holding byte 0 (`true`), or
    /// stop doing so. Call around spawning the engine: the lock then lives
    /// as long as any process of the engine that holds it, even past a
    /// `kill -9` of keepwrap.
    pub fn pass_to_child(&self, on: bool) {
        let flags = if on {
            FdFlag::empty()
        } else {
            FdFlag::FD_CLOEXEC
        };
        if let Err(e) = fcntl(self.shared.as_fd(), FcntlArg::F_SETFD(flags)) {
            crate::events::Event::CannotPassMarker {
                error: e.to_string(),
            }
            .emit();
        }
    }
}

impl Marker {
    /// Leave this launch's marker file as the spare for the next launch,
    /// unless there is one already. It keeps its line (no scan reads the
    /// spare, and the launch that takes it writes its own line before the
    /// file is seen again). Its locks go when this process and the engine's
    /// last holder exit; a launch that takes it while they still hold it
    /// finds it locked and makes a new one.
    fn leave_spare(&self) -> bool {
        let Ok(name) = std::ffi::CString::new(self.name.as_str()) else {
            return false;
        };
        crate::sys::renameat2_noreplace(self.dir.as_fd(), &name, self.dir.as_fd(), SPARE).is_ok()
    }
}

impl Drop for Marker {
    /// Leave the root: remove the marker, or, when a launch that started
    /// before this one is alive, replace it by an unlocked copy saying
    /// `ended` (a straggler of the engine still holding the old file keeps
    /// its lock on a file nobody reads).
    fn drop(&mut self) {
        let dir = self.dir.as_fd();
        let (seen, strays) = match self.last_scan.take() {
            Some(s) if s.at.elapsed() < SCAN_REUSE => (s.seen, s.strays),
            _ => {
                let (seen, strays, _) = scan_dir(dir, Some(&self.name));
                (seen, strays)
            }
        };
        let needed = seen.iter().any(|s| s.live() && s.started <= self.started);
        if needed {
            let name = match std::ffi::CString::new(self.name.as_str()) {
                Ok(n) => n,
                Err(_) => return,
            };
            let bytes = line(State::Ended, &self.id, self.started);
            let _ = fsx::write_atomic_at_with(dir, &name, &bytes, 0o644, false);
        } else if !self.leave_spare() {
            let _ = fsx::unlink_at(dir, self.name.as_str());
        }
        tidy(dir, &seen, &strays, Some(&self.name));
    }
}
