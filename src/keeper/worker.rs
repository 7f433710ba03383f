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
#[derive(Default)]
pub(super) struct Worker {
    /// The committer until the thread starts.
    idle: Option<Committer>,
    jobs: Option<mpsc::Sender<Job>>,
    results: Option<mpsc::Receiver<Report>>,
    /// Readable when a result is queued.
    wake: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    /// Without a thread: the committer, run in the loop.
    inline: Option<Committer>,
    /// Signs sent and not yet taken.
    busy: usize,
    ready: Vec<Report>,
}

impl Worker {
    pub(super) fn start(committer: Committer) -> Worker {
        Worker {
            idle: Some(committer),
            ..Worker::default()
        }
    }

    /// The engine has ended: a thread that never started is not needed
    /// any more.
    pub(super) fn engine_gone(&mut self) {
        if let Some(c) = self.idle.take() {
            self.inline = Some(c);
        }
    }

    /// Start the thread with the idle committer.
    fn spawn_thread(&mut self) {
        let Some(committer) = self.idle.take() else {
            return;
        };
        let mut w = Worker::default();
        let (wake, wake_tx) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => {
                crate::events::keeper::commit_worker_failed(e);
                w.inline = Some(committer);
                *self = w;
                return;
            }
        };
        let _ = wake.set_nonblocking(true);
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (results_tx, results) = mpsc::channel::<Report>();
        let (hand, handed) = mpsc::channel::<Committer>();
        let spawned = crate::signals::spawn("keepwrap-commit", move || {
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
                w.jobs = Some(jobs);
                w.results = Some(results);
                w.wake = Some(wake);
                w.thread = Some(thread);
            }
            Err(e) => {
                crate::events::keeper::commit_worker_failed(e);
                w.inline = Some(committer);
            }
        }
        w.busy = self.busy;
        w.ready = std::mem::take(&mut self.ready);
        *self = w;
    }

    pub(super) fn busy(&self) -> bool {
        self.busy > 0
    }

    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.wake.as_ref().map(AsFd::as_fd)
    }

    /// Run `job`: on the thread (the result comes through [`finished`]), or
    /// here and now without one (the result is returned).
    pub(super) fn run(&mut self, job: Job) -> Option<Report> {
        if self.idle.is_some() {
            if let Job::Log(note) = &job {
                note.emit();
                return None;
            }
            self.spawn_thread();
        }
        if let Some(c) = self.inline.as_mut() {
            return c.run(job);
        }
        let sign = matches!(job, Job::Sign { .. });
        if let Some(jobs) = &self.jobs {
            if jobs.send(job).is_ok() && sign {
                self.busy += 1;
            }
        }
        None
    }

    /// What finished since last asked.
    pub(super) fn finished(&mut self) -> Vec<Report> {
        if let Some(w) = self.wake.as_ref() {
            let mut buf = [0u8; 64];
            while matches!((&*w).read(&mut buf), Ok(n) if n > 0) {}
        }
        if let Some(rx) = &self.results {
            while let Ok(r) = rx.try_recv() {
                if matches!(r, Report::Signed { .. }) {
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
            match self.results.as_ref().map(mpsc::Receiver::recv) {
                Some(Ok(r)) => {
                    if matches!(r, Report::Signed { .. }) {
                        self.busy -= 1;
                    }
                    self.ready.push(r);
                }
                _ => self.busy = 0,
            }
        }
    }

    /// No more jobs: let the thread finish what it has (the share's
    /// publication included) and end.
    pub(super) fn stop(&mut self) {
        self.engine_gone();
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(c) = self.inline.as_mut() {
            c.finish();
        }
    }
}
