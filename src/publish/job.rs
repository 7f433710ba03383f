//! A publication's thread, awaited up to a deadline: the thread's end
//! wakes the wait at once; a stop is looked for at waits that grow from
//! [`FIRST_LOOK`] to [`LAST_LOOK`].

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The first wait before a stop is looked for.
const FIRST_LOOK: Duration = Duration::from_millis(5);
/// The longest wait between two looks for a stop.
const LAST_LOOK: Duration = Duration::from_millis(50);

/// A thread running one publication.
pub struct Job {
    /// Disconnected when the thread ends (its sender dropped, a panic too).
    ended: mpsc::Receiver<()>,
    handle: JoinHandle<()>,
}

/// How a wait for a [`Job`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    Done,
    TimedOut,
    Stopped,
}

impl Job {
    /// Run `f` on a thread named `name`.
    pub fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<Job> {
        let (tx, ended) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _ended = tx;
                f()
            })?;
        Ok(Job { ended, handle })
    }

    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Wait until the thread ends, `deadline` passes, or `stop()` says to
    /// stop (a thread that ended is never said stopped).
    pub fn wait(&self, deadline: Instant, stop: impl Fn() -> bool) -> Waited {
        let mut step = FIRST_LOOK;
        loop {
            if let Err(mpsc::TryRecvError::Disconnected) = self.ended.try_recv() {
                return Waited::Done;
            }
            if stop() {
                return Waited::Stopped;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::TimedOut;
            }
            match self.ended.recv_timeout(left.min(step)) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return Waited::Done,
                Err(mpsc::RecvTimeoutError::Timeout) => step = (step * 2).min(LAST_LOOK),
            }
        }
    }

    /// Join the thread (after [`Job::wait`] said `Done`).
    pub fn join(self) {
        let _ = self.handle.join();
    }
}
