//! Which launches are using a cache root right now, so that two engines on
//! one root never remove, load or sign each other's files. The lock
//! serialises keepwrap's own work; the engines, though, run side by side and
//! write the same rank-file paths. So every launch that starts an engine
//! leaves a marker, `.keepwrap/running/<pid>-<start>`, one line:
//!
//! ```text
//! tuning   <fingerprint> <start, ns since the epoch> <peer key> <rank> <host>
//! ```
//!
//! The first word is the launch's state, rewritten in place: `tuning` (its
//! engine may still be tuning), `done` (tuning is done), `handsoff` (it keeps
//! nothing: it never says when it is done) or `ended`. The peer key and rank
//! tell the nodes (or data-parallel ranks) of one multi-node launch apart from
//! replicas of one launch: peers have the same key and different ranks.
//!
//! Two byte-range locks (open file description locks, `F_OFD_SETLK`, which
//! NFS and local file systems both honour) say who is alive:
//! - byte 0 is held through a descriptor the engine inherits, so it is held
//!   as long as keepwrap *or* any process of the engine holding it lives (an
//!   engine orphaned by a `kill -9` of keepwrap keeps it);
//! - byte 1 is held by keepwrap alone (close-on-exec).
//!
//! A marker whose byte 0 is free belongs to a launch that is gone; byte 0
//! held and byte 1 free is an orphaned engine. At a normal exit keepwrap
//! removes its marker, or, when a launch that started before it is still
//! alive (that launch must learn that this one ran alongside), replaces it by
//! an unlocked copy saying `ended`. Ended markers nobody needs any more are
//! removed by the next launch, so the directory holds about one file per
//! live launch.
//!
//! Every marker is opened without following symlinks and without blocking
//! (a FIFO or a link to `/dev/zero` planted there is skipped), checked to be
//! a regular file and read with a size cap; the directories are opened one
//! component at a time, never through a symlinked `.keepwrap`.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{fcntl, openat, FcntlArg, FdFlag, OFlag};
use nix::sys::stat::Mode;

use crate::cache::fsx::{self, Kind};
use crate::digest::short;
use crate::launch::fingerprint::{self, Launch};

/// The directory of the markers, below `.keepwrap/`.
pub const RUNNING_DIR: &str = "running";
/// A marker is a line of about 160 bytes: anything larger is not one.
const MAX_MARKER: u64 = 4096;
/// Byte 0: the launch (keepwrap or its engine) is alive.
const ALIVE_BYTE: i64 = 0;
/// Byte 1: keepwrap itself is alive.
const KEEPWRAP_BYTE: i64 = 1;
/// A registration that never finished (`.<name>.tmp`) is removed after this.
const TMP_STALE: Duration = Duration::from_secs(60);

/// The flags that tell the nodes or data-parallel ranks of one launch apart.
pub const RANK_FLAGS: [&str; 4] = [
    "--node-rank",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--dp-rank",
];

/// [`RANK_FLAGS`] and vLLM's short aliases of the first three, for a vLLM
/// launch.
pub const VLLM_RANK_FLAGS: [&str; 7] = [
    "--node-rank",
    "--data-parallel-rank",
    "--data-parallel-start-rank",
    "--dp-rank",
    "-r",
    "-dpn",
    "-dpr",
];

/// What a launch on the root is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its engine may still be tuning.
    Tuning,
    /// Tuning is done (its set was signed, or could not be).
    Done,
    /// It keeps nothing, and never says when its engine is done.
    HandsOff,
    /// It has ended (kept only to tell later launches that it ran).
    Ended,
}

impl State {
    /// The first word of the marker: all of one length, so that a state
    /// change is one small write at offset 0.
    fn word(self) -> &'static [u8; 8] {
        match self {
            State::Tuning => b"tuning  ",
            State::Done => b"done    ",
            State::HandsOff => b"handsoff",
            State::Ended => b"ended   ",
        }
    }

    fn parse(word: &str) -> State {
        match word {
            "done" => State::Done,
            "handsoff" => State::HandsOff,
            "ended" => State::Ended,
            // Anything else (a torn read) is the cautious reading.
            _ => State::Tuning,
        }
    }
}

/// Who a launch is, as other launches on the root compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub fingerprint: String,
    /// The cluster fingerprint without the node and data-parallel ranks.
    pub peer_key: String,
    /// The values of [`RANK_FLAGS`] (`-` when none is given).
    pub rank: String,
}

impl Identity {
    /// The identity of `launch` (made from `argv` and `env` with `opts`).
    pub fn of(
        launch: &Launch,
        opts: &fingerprint::Options,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        node_local: &[String],
    ) -> Identity {
        let flags: &[&'static str] = if launch.vllm().is_some() {
            &VLLM_RANK_FLAGS
        } else {
            &RANK_FLAGS
        };
        let ranks = rank_values(argv, flags);
        // `--node-rank` is left out of the cluster fingerprint already; the
        // data-parallel ranks only when present (rarely: a second pass).
        let peer_key = if ranks.iter().any(|(f, _)| *f != "--node-rank") {
            let mut opts = opts.clone();
            opts.ignored_args
                .extend(flags.iter().map(|f| f.to_string()));
            Launch::new(&opts, argv, env).cluster_fingerprint(node_local)
        } else {
            launch.cluster_fingerprint(node_local)
        };
        let rank = if ranks.is_empty() {
            "-".to_string()
        } else {
            ranks
                .iter()
                .map(|(f, v)| format!("{}={}", f.trim_start_matches('-'), token(v)))
                .collect::<Vec<_>>()
                .join(",")
        };
        Identity {
            fingerprint: launch.fingerprint().to_string(),
            peer_key: peer_key.into(),
            rank,
        }
    }

    /// Another node or data-parallel rank of the same multi-node launch.
    pub fn is_peer_of(&self, other: &Identity) -> bool {
        self.peer_key == other.peer_key && self.rank != other.rank
    }
}

/// `(flag, value)` of each rank flag in `argv` (the last one wins), up to a
/// bare `--`.
fn rank_values(argv: &[OsString], flags: &[&'static str]) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let tok = argv[i].to_string_lossy();
        if tok == "--" {
            break;
        }
        for &flag in flags {
            let value = if tok == flag {
                i += 1;
                argv.get(i).map(|v| v.to_string_lossy().into_owned())
            } else {
                tok.strip_prefix(flag)
                    .and_then(|r| r.strip_prefix('='))
                    .map(str::to_string)
            };
            if let Some(v) = value {
                out.retain(|(f, _)| *f != flag);
                out.push((flag, v));
                break;
            }
        }
        i += 1;
    }
    out.sort();
    out
}

/// A value as one whitespace-free token of the marker line.
fn token(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,.-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Is the launch that wrote a marker alive?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Ended,
    /// keepwrap is alive.
    Alive,
    /// keepwrap is gone, a process of its engine still holds the marker.
    Orphaned,
}

/// A launch seen on the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub name: String,
    pub pid: u32,
    pub id: Identity,
    /// Nanoseconds since the epoch.
    pub started: u128,
    pub state: State,
    pub life: Life,
    /// The host (pod) it runs on, as it said (`?` when unknown).
    pub host: String,
}

impl Seen {
    pub fn live(&self) -> bool {
        self.life != Life::Ended
    }

    /// `launch 8c01d2e4... (pid 42 on host pod-a)`
    pub fn who(&self) -> String {
        format!(
            "launch {} (pid {} on host {})",
            short(&self.id.fingerprint),
            self.pid,
            self.host
        )
    }

    /// `2026-12-01T07:00:00Z`
    pub fn since(&self) -> String {
        let t = UNIX_EPOCH + Duration::from_nanos(self.started.min(u64::MAX as u128) as u64);
        humantime::format_rfc3339_seconds(t).to_string()
    }
}

impl crate::events::keeper::OtherLaunch for Seen {
    fn fingerprint(&self) -> &str {
        &self.id.fingerprint
    }
    fn pid(&self) -> u32 {
        self.pid
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match (self.life, self.state) {
            (Life::Ended, _) | (_, State::Ended) => "ended".to_string(),
            (Life::Orphaned, _) => format!(
                "its keepwrap is gone, its engine still runs; started {}",
                self.since()
            ),
            (Life::Alive, State::Tuning) => format!("tuning since {}", self.since()),
            (Life::Alive, State::Done) => format!("running, started {}", self.since()),
            (Life::Alive, State::HandsOff) => {
                format!(
                    "running without keeping the cache, started {}",
                    self.since()
                )
            }
        };
        write!(
            f,
            "launch {} (pid {} on host {}, {what})",
            short(&self.id.fingerprint),
            self.pid,
            self.host
        )
    }
}

/// Why a launch goes on without keeping the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Another node or data-parallel rank of this multi-node launch.
    Peer,
    /// An engine whose keepwrap was killed.
    Orphan,
    /// A launch that keeps nothing itself.
    HandsOff,
    /// A launch of another fingerprint, done tuning, still running.
    OtherLaunch,
}

/// What a launch about to start does about the launches on its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Nobody is in the way: prune, start, sign as usual.
    Go,
    /// A launch is still tuning: wait for it.
    Wait(&'a Seen),
    /// Go on without keeping the cache (no prune, no sign).
    HandsOff(Why, &'a Seen),
}

/// Decide, from the launches seen on the root, whether `me` may start now.
/// Peers of a multi-node launch are never waited for (they need each other
/// to finish tuning); neither are orphaned or hands-off engines, which never
/// say when they are done.
pub fn verdict<'a>(me: &Identity, seen: &'a [Seen]) -> Verdict<'a> {
    let live: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.live() && s.state != State::Ended)
        .collect();
    if let Some(s) = live.iter().find(|s| me.is_peer_of(&s.id)) {
        return Verdict::HandsOff(Why::Peer, s);
    }
    if let Some(s) = live.iter().find(|s| s.life == Life::Orphaned) {
        return Verdict::HandsOff(Why::Orphan, s);
    }
    if let Some(s) = live.iter().find(|s| s.state == State::HandsOff) {
        return Verdict::HandsOff(Why::HandsOff, s);
    }
    if let Some(s) = live.iter().find(|s| s.state == State::Tuning) {
        return Verdict::Wait(s);
    }
    if let Some(s) = live.iter().find(|s| s.id.fingerprint != me.fingerprint) {
        return Verdict::HandsOff(Why::OtherLaunch, s);
    }
    Verdict::Go
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn range(kind: libc::c_short, byte: i64) -> libc::flock {
    crate::sys::flock_range(kind, byte, 1)
}

/// Take the lock of one byte through this open file description.
fn lock_byte(fd: BorrowedFd<'_>, byte: i64) -> io::Result<()> {
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

/// A marker of an older keepwrap (`<fingerprint> <start>`), locked whole
/// with `flock` while it lives.
fn flock_held(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(_) => false,
    }
}

/// `(identity, start, state, host, legacy)` of a marker's text.
fn parse(name: &str, text: &str) -> Option<(Identity, u128, State, String, bool)> {
    let pid_ok = name
        .split_once('-')
        .is_some_and(|(p, s)| p.parse::<u32>().is_ok() && s.parse::<u128>().is_ok());
    if !pid_ok {
        return None;
    }
    let f: Vec<&str> = text.split_whitespace().collect();
    // Only what keepwrap writes: hex digests and plain tokens (a planted
    // marker never puts control characters into a log line).
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let plain = |s: &str| token(s) == s;
    match f.as_slice() {
        [state, fp, started, peer, rank, host]
            if hex(fp) && hex(peer) && plain(rank) && plain(host) =>
        {
            Some((
                Identity {
                    fingerprint: fp.to_string(),
                    peer_key: peer.to_string(),
                    rank: rank.to_string(),
                },
                started.parse().ok()?,
                State::parse(state),
                host.to_string(),
                false,
            ))
        }
        [fp, started] if hex(fp) => Some((
            Identity {
                fingerprint: fp.to_string(),
                peer_key: String::new(),
                rank: "-".to_string(),
            },
            started.parse().ok()?,
            State::HandsOff,
            "?".to_string(),
            true,
        )),
        _ => None,
    }
}

/// The markers directory of one cache root.
pub struct Runs {
    dir: OwnedFd,
}

impl Runs {
    /// Open (creating) `<root>/.keepwrap/running`, never through a symlink.
    pub fn open(root: &Path) -> io::Result<Runs> {
        let dir = fsx::state_dir(root, RUNNING_DIR)?;
        Ok(Runs { dir })
    }

    /// Every readable marker, with whether its launch is alive.
    pub fn scan(&self) -> Vec<Seen> {
        scan_dir(self.dir.as_fd()).0
    }

    /// [`Runs::scan`], then remove the ended markers no live launch needs
    /// (see [`tidy`]). Under the cache lock.
    pub fn scan_and_tidy(&self) -> Vec<Seen> {
        let (seen, strays, foreign) = scan_dir(self.dir.as_fd());
        for (name, uid) in foreign {
            crate::events::root::foreign_marker(
                &format!("{}/{RUNNING_DIR}/{name}", crate::STATE_DIR),
                uid,
            );
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
            .and_then(|f| lock(&f).ok().map(|own| (f, own)))
            .or_else(|| {
                let _ = fsx::unlink_at(self.dir.as_fd(), tmp.as_str());
                None
            });
        let (shared, own) = match reused {
            Some(pair) => (pair.0, Some(pair.1)),
            None => (open(OFlag::O_CREAT | OFlag::O_EXCL)?, None),
        };
        let result = (|| {
            let own = match own {
                Some(own) => own,
                None => lock(&shared)?,
            };
            let line = line(state, id, started);
            shared.write_all_at(&line, 0)?;
            shared.set_len(line.len() as u64)?;
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
            }),
            Err(e) => {
                let _ = fsx::unlink_at(self.dir.as_fd(), tmp.as_str());
                Err(e)
            }
        }
    }
}

/// The name an ended launch's marker file is left under, emptied and
/// unlocked, for the next launch to take instead of creating a file (at
/// most one; scans never read it as a marker, and unlike the other dot
/// files it is not removed when old: a launch that cannot use it removes
/// it).
const SPARE: &std::ffi::CStr = c".spare";

/// Take the spare marker file under the private name `tmp`: the open file,
/// if it is a regular file of this user with one link; else it is removed
/// and None.
fn claim_spare(dir: BorrowedFd<'_>, tmp: &str) -> Option<File> {
    fsx::rename_at(dir, SPARE, tmp).ok()?;
    let file = openat(
        dir,
        tmp,
        OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(File::from);
    let euid = nix::unistd::geteuid().as_raw();
    let usable = file.as_ref().is_some_and(|f| {
        nix::sys::stat::fstat(f).is_ok_and(|st| {
            let kind = nix::sys::stat::SFlag::from_bits_truncate(st.st_mode)
                & nix::sys::stat::SFlag::S_IFMT;
            kind == nix::sys::stat::SFlag::S_IFREG
                && st.st_nlink == 1
                && st.st_uid == euid
                && st.st_size as u64 <= MAX_MARKER
        })
    });
    if !usable {
        let _ = fsx::unlink_at(dir, tmp);
        return None;
    }
    file
}

fn line(state: State, id: &Identity, started: u128) -> Vec<u8> {
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

/// The markers in `dir`, and the names of unfinished registrations
/// (`.<name>.tmp`).
/// A marker another user owns: its name and owner.
type Foreign = (String, u32);

/// The markers of the directory (a marker another user owns is not one:
/// any user can add a file to a shared root's sticky directory, and a
/// planted live marker would stop the prune), the names of unfinished
/// registrations, and the markers of other users with their owner.
fn scan_dir(dir: BorrowedFd<'_>) -> (Vec<Seen>, Vec<Vec<u8>>, Vec<Foreign>) {
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
    let (id, started, state, host, legacy) = parse(name, text)?;
    let life = if legacy {
        if flock_held(file) {
            Life::Alive
        } else {
            Life::Ended
        }
    } else if !byte_locked(file.as_fd(), ALIVE_BYTE) {
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
    name: String,
    /// Holds byte 0; passed on to the engine.
    shared: File,
    /// Holds byte 1; keepwrap's alone.
    _own: File,
    started: u128,
    id: Identity,
    state: std::cell::Cell<State>,
}

impl Marker {
    /// Say what this launch is doing now (one write of the first word).
    pub fn set_state(&self, state: State) {
        self.state.set(state);
        if let Err(e) = self.shared.write_all_at(state.word(), 0) {
            crate::events::root::cannot_update_marker(
                &format!("{}/{RUNNING_DIR}/{}", crate::STATE_DIR, self.name),
                e,
            );
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

    /// Launches that forbid signing now: every other launch alive, or that
    /// started after this one (it ran alongside, and its engine may have
    /// written some of the rank files).
    pub fn others(&self) -> Vec<Seen> {
        scan_dir(self.dir.as_fd())
            .0
            .into_iter()
            .filter(|s| s.name != self.name && (s.live() || s.started >= self.started))
            .collect()
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
            crate::events::root::cannot_pass_marker(e);
        }
    }
}

impl Marker {
    /// Empty this launch's marker file and leave it as the spare for the
    /// next launch, unless there is one already. Its locks go when this
    /// process and the engine's last holder exit; a launch that takes it
    /// while they still hold it finds it locked and makes a new one.
    fn leave_spare(&self) -> bool {
        let Ok(name) = std::ffi::CString::new(self.name.as_str()) else {
            return false;
        };
        self.shared.set_len(0).is_ok()
            && crate::sys::renameat2_noreplace(self.dir.as_fd(), &name, self.dir.as_fd(), SPARE)
                .is_ok()
    }
}

impl Drop for Marker {
    /// Leave the root: remove the marker, or, when a launch that started
    /// before this one is alive, replace it by an unlocked copy saying
    /// `ended` (a straggler of the engine still holding the old file keeps
    /// its lock on a file nobody reads).
    fn drop(&mut self) {
        let dir = self.dir.as_fd();
        let (seen, strays, _) = scan_dir(dir);
        let needed = seen
            .iter()
            .any(|s| s.name != self.name && s.live() && s.started <= self.started);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(fp: &str, peer: &str, rank: &str) -> Identity {
        Identity {
            fingerprint: fp.into(),
            peer_key: peer.into(),
            rank: rank.into(),
        }
    }

    fn seen(i: Identity, state: State, life: Life) -> Seen {
        Seen {
            name: "1-1".into(),
            pid: 1,
            id: i,
            started: 1,
            state,
            life,
            host: "h".into(),
        }
    }

    #[test]
    fn verdicts() {
        let me = id("a", "k", "-");
        let rows = [
            (seen(id("a", "k", "-"), State::Tuning, Life::Alive), "wait"),
            (seen(id("b", "x", "-"), State::Tuning, Life::Alive), "wait"),
            (seen(id("a", "k", "-"), State::Done, Life::Alive), "go"),
            (seen(id("b", "x", "-"), State::Done, Life::Alive), "other"),
            (seen(id("a", "k", "-"), State::Tuning, Life::Ended), "go"),
            (
                seen(id("a", "k", "-"), State::Done, Life::Orphaned),
                "orphan",
            ),
            (
                seen(id("a", "k", "-"), State::Tuning, Life::Orphaned),
                "orphan",
            ),
            (
                seen(id("a", "k", "-"), State::HandsOff, Life::Alive),
                "handsoff",
            ),
            (
                seen(id("c", "k", "node-rank=1"), State::Tuning, Life::Alive),
                "peer",
            ),
            (seen(id("a", "k", "-"), State::Ended, Life::Alive), "go"),
        ];
        for (s, want) in rows {
            let list = [s.clone()];
            let got = match verdict(&me, &list) {
                Verdict::Go => "go",
                Verdict::Wait(_) => "wait",
                Verdict::HandsOff(Why::Peer, _) => "peer",
                Verdict::HandsOff(Why::Orphan, _) => "orphan",
                Verdict::HandsOff(Why::HandsOff, _) => "handsoff",
                Verdict::HandsOff(Why::OtherLaunch, _) => "other",
            };
            assert_eq!(got, want, "{s:?}");
        }
    }

    #[test]
    fn rank_flags_in_both_spellings() {
        let argv: Vec<OsString> = [
            "x",
            "--node-rank",
            "1",
            "--data-parallel-rank=3",
            "--",
            "--dp-rank",
            "9",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            rank_values(&argv, &RANK_FLAGS),
            vec![
                ("--data-parallel-rank", "3".to_string()),
                ("--node-rank", "1".to_string())
            ]
        );
    }

    #[test]
    fn a_registered_marker_is_seen_alive_with_its_state_and_removed_at_drop() {
        let root = tempfile::tempdir().unwrap();
        let me = id(&"f".repeat(64), &"b".repeat(64), "-");
        let m = Runs::open(root.path())
            .unwrap()
            .register(&me, State::Tuning)
            .unwrap();
        let runs = Runs::open(root.path()).unwrap();
        let seen = runs.scan();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (seen[0].life, seen[0].state, &seen[0].id),
            (Life::Alive, State::Tuning, &me)
        );
        assert_eq!(
            verdict(&id("f00d", "beef", "-"), &seen),
            Verdict::Wait(&seen[0])
        );
        m.mark_done();
        assert_eq!(runs.scan()[0].state, State::Done);
        assert!(m.others().is_empty(), "a launch does not see itself");
        drop(m);
        assert!(runs.scan().is_empty());
        // Its file is left empty as the spare, and nothing else.
        let dir = root.path().join(".keepwrap/running");
        assert_eq!(names(&dir), [".spare"]);
        assert_eq!(std::fs::metadata(dir.join(".spare")).unwrap().len(), 0);
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_next_launch_takes_the_spare_file_unless_something_still_locks_it() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(".keepwrap/running");
        let me = id(&"f".repeat(64), &"b".repeat(64), "-");
        let register = || {
            Runs::open(root.path())
                .unwrap()
                .register(&me, State::Tuning)
                .unwrap()
        };
        drop(register());
        let spare = std::fs::metadata(dir.join(".spare")).unwrap().ino();
        // Taken: the same file, under the marker's name, alive and full.
        let m = register();
        assert_eq!(names(&dir), std::slice::from_ref(&m.name));
        assert_eq!(std::fs::metadata(dir.join(&m.name)).unwrap().ino(), spare);
        let seen = Runs::open(root.path()).unwrap().scan();
        assert_eq!(
            (seen.len(), seen[0].life, seen[0].state),
            (1, Life::Alive, State::Tuning)
        );
        drop(m);
        // A straggler of the engine still holds the spare's byte 0: the
        // next launch makes a new file and the spare goes.
        let straggler = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(".spare"))
            .unwrap();
        lock_byte(straggler.as_fd(), ALIVE_BYTE).unwrap();
        let m = register();
        assert_eq!(names(&dir), std::slice::from_ref(&m.name));
        assert_ne!(std::fs::metadata(dir.join(&m.name)).unwrap().ino(), spare);
        assert_eq!(Runs::open(root.path()).unwrap().scan()[0].life, Life::Alive);
        drop(m);
        drop(straggler);
    }

    #[test]
    fn ranks_of_one_launch_are_peers_and_replicas_are_not() {
        let of = |args: &[&str]| {
            let argv: Vec<OsString> = ["python3", "-m", "sglang.launch_server", "--tp", "2"]
                .iter()
                .chain(args)
                .map(OsString::from)
                .collect();
            let opts = fingerprint::Options {
                profile: fingerprint::ProfileName::Sglang,
                env_prefixes: vec![],
                volatile_env: vec![],
                ignored_args: vec![],
            };
            let launch = Launch::new(&opts, &argv, &[]);
            Identity::of(&launch, &opts, &argv, &[], &[])
        };
        let n0 = of(&["--nnodes", "2", "--node-rank", "0"]);
        let n1 = of(&["--nnodes", "2", "--node-rank=1"]);
        assert_ne!(n0.fingerprint, n1.fingerprint);
        assert!(n0.is_peer_of(&n1) && n1.is_peer_of(&n0));
        assert!(
            !n0.is_peer_of(&of(&["--nnodes", "2", "--node-rank", "0"])),
            "a replica"
        );
        let d0 = of(&["--data-parallel-rank", "0"]);
        let d1 = of(&["--data-parallel-rank", "1"]);
        assert!(d0.is_peer_of(&d1));
        assert!(!d0.is_peer_of(&of(&["--data-parallel-rank", "1", "--tp", "4"])));
        assert!(!of(&[]).is_peer_of(&of(&[])));
    }

    #[test]
    fn a_marker_line_round_trips() {
        let i = id(&"f".repeat(64), &"b".repeat(64), "node-rank=1");
        let l = line(State::Done, &i, 42);
        let (j, started, state, _host, legacy) =
            parse("7-42", std::str::from_utf8(&l).unwrap()).unwrap();
        assert_eq!((j, started, state, legacy), (i, 42, State::Done, false));
        assert!(parse("junk", "tuning a 1 b c").is_none());
        let planted = format!("tuning {} 1 {} \u{1b}[2J h", "a".repeat(64), "b".repeat(64));
        assert!(parse("7-42", &planted).is_none(), "control characters");
        assert!(parse("7-42", "tuning \u{e9}\u{e9}\u{e9}\u{e9}\u{e9} 1 b - h").is_none());
        let legacy = format!("{} 42", "c".repeat(64));
        assert_eq!(parse("7-42", &legacy).unwrap().2, State::HandsOff);
    }
}
