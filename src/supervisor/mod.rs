//! The supervisor loop: one `poll` over a signalfd, the cache watch, the
//! health probe and the keeper's commit worker, with timers as the poll
//! timeout. No busy waiting, and no waiting but `poll`: while the child runs
//! and nothing happens, keepwrap sleeps in `poll`.

pub mod child;
pub mod rules;
mod settings;

pub use settings::{Settings, Stopping};

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::keeper::{KeepMode, Keeper, Prepared};
use crate::stops::Stopped;
use child::{Ended, Process};
use rules::Running;

/// Run one launch: prune, spawn, supervise, sign, and exit as the child did.
pub fn run(args: &Settings, command: Vec<OsString>) -> ExitCode {
    if let Some(path) = &args.metrics_file {
        crate::metrics::start(path);
    }
    let signals = match child::block_signals() {
        Ok(set) => set,
        Err(e) => {
            crate::events::Event::CannotBlockSignals {
                error: e.to_string(),
            }
            .emit();
            return ExitCode::from(1);
        }
    };
    let sfd = match SignalFd::with_flags(&signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => {
            crate::events::Event::CannotOpenSignalfd {
                error: e.to_string(),
            }
            .emit();
            return ExitCode::from(1);
        }
    };
    child::become_subreaper();

    // The environment matters only to a launch that may keep the cache.
    let env: Vec<(OsString, OsString)> = if args.cache.disable || args.cache.keep == KeepMode::Never
    {
        Vec::new()
    } else {
        std::env::vars_os().collect()
    };
    let keeps = args.cache.keeps(&command, &env);
    let supervising_only = keeps.is_err();
    let (prepared, set) = match keeps {
        Err(line) => {
            crate::events::Event::SupervisingOnly {
                reason: line.reason().to_string(),
                why: line.to_string(),
            }
            .emit();
            (Prepared::Supervised, Vec::new())
        }
        Ok(read) => match prepare_interruptibly(&args.cache, read, &command, env) {
            Ok(prepared) => prepared,
            Err(stopped) => return stopped_before_start(stopped),
        },
    };

    // The engine inherits the marker's lock: it outlives a `kill -9` of
    // keepwrap for as long as the engine runs.
    if let Some(m) = prepared.marker() {
        m.pass_to_child(true);
    }
    let spawned = child::spawn(&command, &set);
    if let Some(m) = prepared.marker() {
        m.pass_to_child(false);
    }
    let started = Instant::now();
    let pid = match spawned {
        Ok(pid) => pid,
        Err(e) => {
            crate::events::Event::CannotRun {
                program: e.program.to_string_lossy().to_string(),
                reason: e.reason().to_string(),
                status: e.exit_code(),
            }
            .emit();
            return ExitCode::from(e.exit_code());
        }
    };
    let (mut keeper, after_start, _hands_off_marker) = match prepared {
        Prepared::Keeping(k) => (Some(k.keeper), k.after_start, None),
        Prepared::HandsOff(marker) => (None, None, Some(marker)),
        Prepared::Supervised => (None, None, None),
    };
    let after_start = after_start.and_then(run_detached);
    if let Some(k) = keeper.as_mut() {
        k.child_started(pid.as_raw().unsigned_abs());
    }

    let mut child = Process { pid, signals: &sfd };
    let ended = supervise(&mut child, args, &mut keeper);
    rules::drain(&mut child, args.stopping);
    // The work after the start (eviction, the trash) finishes before the
    // statistics are written, unless it takes longer than a bounded wait
    // (what is left of it, the next launch does after its own start).
    if let Some(done) = after_start {
        let _ = done.recv_timeout(AFTER_START_WAIT);
    }
    if let Some(k) = keeper.as_mut() {
        k.child_ended(ended);
    }
    // Every launch ends on how its command ended: the engine's, or a
    // command keepwrap only supervises.
    let signal = match ended {
        Ended::Exited(_) => None,
        Ended::Signaled(signo) => Some(crate::signals::signal_name(signo)),
    };
    let (status, uptime) = (ended.exit_code(), started.elapsed());
    use crate::events::Event;
    match (signal, supervising_only) {
        (None, false) => Event::EngineExited { status, uptime },
        (Some(signal), false) => Event::EngineKilled {
            status,
            signal,
            uptime,
        },
        (None, true) => Event::CommandExited { status, uptime },
        (Some(signal), true) => Event::CommandKilled {
            status,
            signal,
            uptime,
        },
    }
    .emit();
    ExitCode::from(ended.exit_code())
}

/// Run [`Keeper::prepare`] on this thread, with TERM, INT, HUP and QUIT
/// watched ([`crate::stops`]): a stop signal ends every wait before the
/// start (the cache lock, the share, another launch still tuning) at once,
/// with 128+N and without starting the engine; one that comes while no
/// wait runs is seen when the next wait starts or when the preparation
/// ends, still before the start. Other signals stay pending and reach the
/// engine once it runs.
fn prepare_interruptibly(
    args: &crate::keeper::Settings,
    read: crate::launch::Command,
    command: &[OsString],
    env: Vec<(OsString, OsString)>,
) -> Result<(Prepared, Vec<(OsString, OsString)>), Stopped> {
    crate::stops::watch();
    let prepared = Keeper::prepare(args, read, command, &env);
    // Stopped in a wait, or since the last one.
    let unwatched = crate::stops::unwatch();
    let prepared = prepared?;
    unwatched?;
    Ok(prepared)
}

/// A stop signal before the engine started: say so; keepwrap exits 128+N.
fn stopped_before_start(Stopped(sig): Stopped) -> ExitCode {
    let code = 128 + sig as i32;
    crate::events::Event::StoppedBeforeStart {
        signal: sig.to_string(),
        status: code,
    }
    .emit();
    ExitCode::from(code as u8)
}

/// Run `job` on a thread of its own, never joined: what it logs comes when
/// it is ready. The receiver says when the part of it keepwrap's exit
/// waits for is done (its sender dropped).
fn run_detached(
    job: Box<dyn FnOnce(std::sync::mpsc::Sender<()>) + Send>,
) -> Option<std::sync::mpsc::Receiver<()>> {
    let (tx, rx) = std::sync::mpsc::channel();
    match std::thread::Builder::new()
        .name("keepwrap-explain".into())
        .spawn(move || job(tx))
    {
        Ok(_) => Some(rx),
        Err(e) => {
            crate::events::Event::ExplainThreadFailed {
                error: e.to_string(),
            }
            .emit();
            None
        }
    }
}

/// Longest wait, once the engine has ended, for the work run after its
/// start.
const AFTER_START_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Forward signals, reap, and drive the keeper until the main child ends.
/// Nothing here waits but `poll`: the keeper's commit work runs on its own
/// thread and reports through a descriptor in the poll set.
fn supervise(child: &mut Process, args: &Settings, keeper: &mut Option<Keeper>) -> Ended {
    let mut running = Running::new(args.stopping);
    loop {
        let now = Instant::now();
        if let Some(k) = keeper.as_mut() {
            k.tick(now);
        }
        running.tick(now, child);
        let deadline = [
            running.deadline(),
            keeper.as_ref().and_then(Keeper::deadline),
        ]
        .into_iter()
        .flatten()
        .min();

        let (watch_fd, probe, worker_fd) = match keeper.as_ref() {
            Some(k) => (k.watch_fd(), k.probe_fd(), k.worker_fd()),
            None => (None, None, None),
        };
        let mut fds = vec![PollFd::new(child.signals.as_fd(), PollFlags::POLLIN)];
        let mut add = |fd, flags| {
            fds.push(PollFd::new(fd, flags));
            fds.len() - 1
        };
        let watch_idx = watch_fd.map(|fd| add(fd, PollFlags::POLLIN));
        let probe_idx = probe.map(|(fd, flags)| add(fd, flags));
        let worker_idx = worker_fd.map(|fd| add(fd, PollFlags::POLLIN));
        match poll(&mut fds, timeout_until(deadline, now)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                crate::events::Event::PollFailed {
                    error: e.to_string(),
                }
                .emit();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let revents = |idx: Option<usize>| {
            idx.and_then(|i| fds[i].revents())
                .unwrap_or(PollFlags::empty())
        };
        let signal_ready = !revents(Some(0)).is_empty();
        let watch_ready = !revents(watch_idx).is_empty();
        let probe_revents = revents(probe_idx);
        let worker_ready = !revents(worker_idx).is_empty();
        drop(fds);

        // Signals first: a forwarded stop reaches the engine, and the
        // keeper (a forwarded stop is never tuning done), before anything
        // else is looked at.
        if signal_ready {
            let ended = running.dispatch(child, |signo| {
                crate::stops::forwarded(signo);
                if let Some(k) = keeper.as_mut() {
                    k.forwarded(signo);
                }
            });
            if let Some(e) = ended {
                return e;
            }
        }
        if let Some(k) = keeper.as_mut() {
            k.on_events(watch_ready, probe_revents, worker_ready);
        }
    }
}

/// A poll timeout that ends at `deadline` (none: no end).
fn timeout_until(deadline: Option<Instant>, now: Instant) -> PollTimeout {
    match deadline {
        None => PollTimeout::NONE,
        Some(d) => {
            let ms = d.saturating_duration_since(now).as_millis();
            // Round up, so that a timer never fires early and spins.
            let ms = if d > now && ms == 0 { 1 } else { ms };
            PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
        }
    }
}
