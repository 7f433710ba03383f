//! The worker thread that runs the commit work ([`Committer`]) off the
//! supervisor loop, and the socket that tells the loop a sign finished.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::commit::{Committer, Job, Report};

/// The worker thread: jobs in order through a channel; each finished sign
/// reported through a socket in the supervisor's poll set, so that the loop
/// keeps forwarding signals and reaping meanwhile. When the thread cannot
/// start, the jobs run in the loop (late, but the launch goes on).
///
/// The thread starts with the first job that needs it while the engine
/// runs: log lines before it are written in the loop (nothing is queued
/// ahead of them), and once the engine has ended the jobs of a launch that
/// never needed the thread run in the loop, which has nothing else to do
/// then (a command that exits at once starts no thread).
pub(super) struct Worker {
    mode: Mode,
    /// Signs sent and not yet taken.
    busy: usize,
    ready: Vec<Report>,
}

/// Where the commit work runs.
enum Mode {
    /// The committer, until the first job that needs the thread.
    Idle(Committer),
    /// On the thread: jobs through the channel, results back through the
    /// other, and the socket readable when a result is queued.
    Thread {
        jobs: mpsc::Sender<Job>,
        results: mpsc::Receiver<Report>,
        wake: UnixStream,
        thread: JoinHandle<()>,
    },
    /// Without a thread (the engine has ended, or the thread could not
    /// start): the committer, run in the loop.
    Inline(Committer),
    /// Stopped: the work is over.
    Stopped,
}

impl Worker {
    pub(super) fn start(committer: Committer) -> Worker {
        Worker {
            mode: Mode::Idle(committer),
            busy: 0,
            ready: Vec::new(),
        }
    }

    /// The engine has ended: a thread that never started is not needed
    /// any more.
    pub(super) fn engine_gone(&mut self) {
        self.mode = match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Idle(c) => Mode::Inline(c),
            other => other,
        };
    }

    /// Start the thread with the idle committer (in the loop when it cannot
    /// start).
    fn spawn_thread(&mut self) {
        let Mode::Idle(committer) = std::mem::replace(&mut self.mode, Mode::Stopped) else {
            return;
        };
        self.mode = Self::thread(committer);
    }

    /// The thread running `committer`, else (logged) `committer` inline.
    fn thread(committer: Committer) -> Mode {
        let (wake, wake_tx) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => {
                crate::events::Event::CommitWorkerFailed {
                    error: e.to_string(),
                }
                .emit();
                return Mode::Inline(committer);
            }
        };
        let _ = wake.set_nonblocking(true);
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (results_tx, results) = mpsc::channel::<Report>();
        let (hand, handed) = mpsc::channel::<Committer>();
        let spawned = std::thread::Builder::new()
            .name("keepwrap-commit".into())
            .spawn(move || {
                // Behind the supervisor loop and the engine for the CPU: the
                // commit can wait a little, a signal or the engine cannot.
                crate::sys::set_thread_nice(10);
                let Ok(mut c) = handed.recv() else {
                    return;
                };
                for job in job_rx {
                    if let Some(report) = c.run(job) {
                        if results_tx.send(report).is_err() {
                            break;
                        }
                        let _ = (&wake_tx).write(&[1]);
                        c.settle();
                    }
                }
                c.finish();
            });
        match spawned {
            Ok(thread) => {
                let _ = hand.send(committer);
                Mode::Thread {
                    jobs,
                    results,
                    wake,
                    thread,
                }
            }
            Err(e) => {
                crate::events::Event::CommitWorkerFailed {
                    error: e.to_string(),
                }
                .emit();
                Mode::Inline(committer)
            }
        }
    }

    pub(super) fn busy(&self) -> bool {
        self.busy > 0
    }

    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.mode {
            Mode::Thread { wake, .. } => Some(wake.as_fd()),
            _ => None,
        }
    }

    /// Run `job`: on the thread (the result comes through [`finished`]), or
    /// here and now without one (the result is returned).
    pub(super) fn run(&mut self, job: Job) -> Option<Report> {
        if let Mode::Idle(c) = &self.mode {
            if let Job::Log(note) = job {
                c.log(note);
                return None;
            }
            self.spawn_thread();
        }
        match &mut self.mode {
            Mode::Inline(c) => c.run(job),
            Mode::Thread { jobs, .. } => {
                let sign = matches!(job, Job::Sign { .. } | Job::Seen { .. });
                if jobs.send(job).is_ok() && sign {
                    self.busy += 1;
                }
                None
            }
            Mode::Idle(_) | Mode::Stopped => None,
        }
    }

    /// What finished since last asked.
    pub(super) fn finished(&mut self) -> Vec<Report> {
        if let Mode::Thread { wake, results, .. } = &self.mode {
            let mut buf = [0u8; 64];
            while matches!((&*wake).read(&mut buf), Ok(n) if n > 0) {}
            while let Ok(r) = results.try_recv() {
                if matches!(r, Report::Signed { .. } | Report::Checked { .. }) {
                    self.busy = self.busy.saturating_sub(1);
                }
                self.ready.push(r);
            }
        }
        std::mem::take(&mut self.ready)
    }

    /// Block until every sign sent has finished (the engine is gone).
    pub(super) fn wait(&mut self) {
        while self.busy > 0 {
            let got = match &self.mode {
                Mode::Thread { results, .. } => results.recv().ok(),
                _ => None,
            };
            match got {
                Some(r) => {
                    if matches!(r, Report::Signed { .. } | Report::Checked { .. }) {
                        self.busy -= 1;
                    }
                    self.ready.push(r);
                }
                None => self.busy = 0,
            }
        }
    }

    /// No more jobs: let the thread finish what it has (the share's
    /// publication included) and end.
    pub(super) fn stop(&mut self) {
        match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Thread { jobs, thread, .. } => {
                drop(jobs);
                let _ = thread.join();
            }
            Mode::Idle(mut c) | Mode::Inline(mut c) => c.finish(),
            Mode::Stopped => {}
        }
    }
}
