//! The supervisor's rules, one row per case, with no process: the flags,
//! the processes (the main child, the rest of its process group, keepwrap's
//! other children, each with how it takes a signal), what comes from
//! outside (times in ms after the start), and what the rules do: each
//! signal sent and to whom, each line said, and when; the exit status; and
//! when the rules are done (the drain included).

use std::collections::VecDeque;

use super::*;

/// How a simulated process takes a signal. KILL kills every one but
/// [`Takes::Stuck`].
#[derive(Debug, Clone, Copy)]
enum Takes {
    /// Dies of any signal (the default action of TERM, INT, HUP, USR1...).
    Dies,
    /// Traps TERM and INT and exits with `code` `after` ms later; ignores
    /// the others.
    Exits { after: u64, code: i32 },
    /// Ignores every signal but KILL.
    Ignores,
    /// Outlives even KILL (a process in an uninterruptible sleep).
    Stuck,
}

/// What comes from outside, at a time in ms.
#[derive(Debug, Clone, Copy)]
enum E {
    /// Another process sends keepwrap this signal.
    Signal(u64, i32),
    /// keepwrap raises this signal itself (a SIGPIPE of one of its writes).
    Own(u64, i32),
    /// The main child exits with this code on its own.
    Exit(u64, i32),
}

impl E {
    fn at(self) -> u64 {
        match self {
            E::Signal(ms, _) | E::Own(ms, _) | E::Exit(ms, _) => ms,
        }
    }
}

/// Whom a signal is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The main child alone.
    Child,
    /// The main child's process group.
    Group,
    /// Each child of keepwrap's still around.
    Children,
}

/// What the rules do, at a time in ms: send a signal, or say a line (by
/// its event's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum A {
    Send(u64, i32, To),
    Say(u64, &'static str),
    /// In a row: `Send` to the group, then to each child (all that is
    /// left).
    All(u64, i32),
}

/// A row's actions, each [`A::All`] as the two it stands for.
fn expanded(expect: &[A]) -> Vec<A> {
    expect
        .iter()
        .flat_map(|&a| match a {
            A::All(ms, signo) => vec![
                A::Send(ms, signo, To::Group),
                A::Send(ms, signo, To::Children),
            ],
            a => vec![a],
        })
        .collect()
}

#[derive(Debug)]
enum State {
    Alive,
    /// Ended, not yet reaped.
    Zombie(Ended),
    Reaped,
}

#[derive(Debug)]
struct Proc {
    takes: Takes,
    /// In the main child's process group (the main child is).
    in_group: bool,
    state: State,
    /// When it exits, once it trapped TERM or INT.
    exits_at: Option<(Instant, i32)>,
}

/// The world of one row: its processes, what comes from outside, and a
/// clock that moves only when the rules wait.
struct Sim {
    t0: Instant,
    now: Instant,
    /// The main child first, then the rest of its group, then the others.
    procs: Vec<Proc>,
    events: VecDeque<E>,
    queue: VecDeque<Received>,
    did: Vec<A>,
}

/// Longer than any row: a wait this long is a wait forever.
const FOREVER: Duration = Duration::from_secs(3600);

impl Sim {
    fn new(row: &Row) -> Sim {
        let proc = |takes, in_group| Proc {
            takes,
            in_group,
            state: State::Alive,
            exits_at: None,
        };
        let mut procs = vec![proc(row.main, true)];
        procs.extend(row.group.iter().map(|&t| proc(t, true)));
        procs.extend(row.others.iter().map(|&t| proc(t, false)));
        let mut events: Vec<E> = row.events.to_vec();
        events.sort_by_key(|e| e.at());
        let t0 = Instant::now();
        Sim {
            t0,
            now: t0,
            procs,
            events: events.into(),
            queue: VecDeque::new(),
            did: Vec::new(),
        }
    }

    fn ms(&self) -> u64 {
        (self.now - self.t0).as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Process `i` ends: the kernel tells keepwrap with a CHLD.
    fn end(&mut self, i: usize, ended: Ended) {
        if matches!(self.procs[i].state, State::Alive) {
            self.procs[i].state = State::Zombie(ended);
            self.queue.push_back(Received {
                signo: libc::SIGCHLD,
                by_keepwrap: false,
            });
        }
    }

    fn deliver(&mut self, i: usize, signo: i32) {
        let p = &mut self.procs[i];
        if !matches!(p.state, State::Alive) {
            return;
        }
        let at = self.now;
        match (p.takes, signo) {
            (Takes::Stuck, _) => {}
            (_, libc::SIGKILL) | (Takes::Dies, _) => self.end(i, Ended::Signaled(signo)),
            (Takes::Exits { after, code }, libc::SIGTERM | libc::SIGINT) => {
                // A second TERM does not hasten it.
                p.exits_at
                    .get_or_insert((at + Duration::from_millis(after), code));
            }
            _ => {}
        }
    }

    /// keepwrap's children: the main child until reaped, the others of its
    /// group once it ended (they are reparented to keepwrap), and the
    /// others.
    fn children(&self) -> Vec<usize> {
        let main_ended = !matches!(self.procs[0].state, State::Alive);
        (0..self.procs.len())
            .filter(|&i| !matches!(self.procs[i].state, State::Reaped))
            .filter(|&i| i == 0 || !self.procs[i].in_group || main_ended)
            .collect()
    }

    /// The next time something happens on its own.
    fn next(&self) -> Option<Instant> {
        let event = self.events.front().map(|e| self.at(e.at()));
        let exit = self
            .procs
            .iter()
            .filter_map(|p| p.exits_at.map(|(at, _)| at));
        event.into_iter().chain(exit).min()
    }

    /// Everything due by now happens.
    fn happen(&mut self) {
        while let Some(&e) = self.events.front() {
            if self.at(e.at()) > self.now {
                break;
            }
            self.events.pop_front();
            match e {
                E::Signal(_, signo) | E::Own(_, signo) => self.queue.push_back(Received {
                    signo,
                    by_keepwrap: matches!(e, E::Own(..)),
                }),
                E::Exit(_, code) => self.end(0, Ended::Exited(code)),
            }
        }
        for i in 0..self.procs.len() {
            if let Some((at, code)) = self.procs[i].exits_at {
                if at <= self.now {
                    self.procs[i].exits_at = None;
                    self.end(i, Ended::Exited(code));
                }
            }
        }
    }
}

impl Child for Sim {
    fn signal(&mut self, signo: i32, group: bool) {
        self.did.push(A::Send(
            self.ms(),
            signo,
            if group { To::Group } else { To::Child },
        ));
        for i in 0..self.procs.len() {
            if i == 0 || (group && self.procs[i].in_group) {
                self.deliver(i, signo);
            }
        }
    }

    fn signal_children(&mut self, signo: i32) {
        let children = self.children();
        if !children.is_empty() {
            self.did.push(A::Send(self.ms(), signo, To::Children));
        }
        for i in children {
            self.deliver(i, signo);
        }
    }

    fn reap(&mut self) -> Option<Ended> {
        let mut main = None;
        for (i, p) in self.procs.iter_mut().enumerate() {
            if let State::Zombie(ended) = p.state {
                p.state = State::Reaped;
                if i == 0 {
                    main = Some(ended);
                }
            }
        }
        main
    }

    fn leftovers(&mut self) -> bool {
        self.procs.iter().any(|p| !matches!(p.state, State::Reaped))
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn wait(&mut self, until: Instant) {
        if !self.queue.is_empty() {
            return;
        }
        match self.next() {
            Some(at) if at <= until => self.now = self.now.max(at),
            _ => {
                assert!(
                    until < self.t0 + FOREVER,
                    "the rules wait forever at {} ms",
                    self.ms()
                );
                self.now = until;
            }
        }
        self.happen();
    }

    fn received(&mut self) -> Option<Received> {
        self.queue.pop_front()
    }

    fn say(&mut self, event: crate::events::Event) {
        self.did.push(A::Say(self.ms(), event.code()));
    }
}

struct Row {
    name: &'static str,
    stopping: Stopping,
    main: Takes,
    /// The rest of the main child's process group.
    group: &'static [Takes],
    /// keepwrap's other children, each in a group of its own.
    others: &'static [Takes],
    events: &'static [E],
    expect: &'static [A],
    /// keepwrap's exit status.
    status: u8,
    /// When the rules are done, the drain included (ms).
    done: u64,
}

/// What one row does, as the supervisor runs the rules: while the main
/// child runs, `--kill-after` first, then a wait until a signal or the
/// next deadline, then the signals read; once it ended, the drain.
fn run(row: &Row) -> (Vec<A>, u8, u64) {
    let mut sim = Sim::new(row);
    let mut running = Running::new(row.stopping);
    let ended = loop {
        let now = sim.now();
        running.tick(now, &mut sim);
        sim.wait(running.deadline().unwrap_or(sim.t0 + FOREVER));
        if sim.queue.is_empty() {
            continue;
        }
        if let Some(ended) = running.dispatch(&mut sim, |_| {}) {
            break ended;
        }
    };
    drain(&mut sim, row.stopping);
    let done = sim.ms();
    (sim.did, ended.exit_code(), done)
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `--grace 10s`, no `--kill-group`, no `--kill-after`.
const PLAIN: Stopping = Stopping {
    kill_group: false,
    grace: ms(10_000),
    kill_after: None,
};

const TERM: i32 = libc::SIGTERM;
const INT: i32 = libc::SIGINT;
const KILL: i32 = libc::SIGKILL;
const HUP: i32 = libc::SIGHUP;
const USR1: i32 = libc::SIGUSR1;

/// `--kill-after 300ms`.
const AFTER_300: Stopping = Stopping {
    kill_after: Some(ms(300)),
    ..PLAIN
};

/// `--grace 300ms`.
const GRACE_300: Stopping = Stopping {
    grace: ms(300),
    ..PLAIN
};

/// `--kill-group`.
const GROUP: Stopping = Stopping {
    kill_group: true,
    ..PLAIN
};

/// A main child alone, that dies of any signal, under [`PLAIN`].
const ROW: Row = Row {
    name: "",
    stopping: PLAIN,
    main: Takes::Dies,
    group: &[],
    others: &[],
    events: &[],
    expect: &[],
    status: 0,
    done: 0,
};

const ROWS: &[Row] = &[
    // Forwarding while the child runs.
    Row {
        name: "TERM reaches the child alone, which dies of it: 143",
        events: &[E::Signal(100, TERM)],
        expect: &[A::Send(100, TERM, To::Child)],
        status: 143,
        done: 100,
        ..ROW
    },
    Row {
        name: "a signal the child does not trap kills it: 128+N",
        events: &[E::Signal(100, USR1)],
        expect: &[A::Send(100, USR1, To::Child)],
        status: 138,
        done: 100,
        ..ROW
    },
    Row {
        name: "--kill-group: TERM reaches the whole group",
        stopping: GROUP,
        group: &[Takes::Dies],
        events: &[E::Signal(100, TERM)],
        expect: &[A::Send(100, TERM, To::Group)],
        status: 143,
        done: 100,
        ..ROW
    },
    Row {
        name: "--kill-group: a realtime signal reaches the whole group",
        stopping: GROUP,
        main: Takes::Ignores,
        events: &[E::Signal(100, 64), E::Exit(200, 0)],
        expect: &[A::Send(100, 64, To::Group)],
        status: 0,
        done: 200,
        ..ROW
    },
    Row {
        name: "keepwrap's own SIGPIPE is not forwarded",
        events: &[E::Own(100, libc::SIGPIPE), E::Exit(200, 0)],
        expect: &[],
        status: 0,
        done: 200,
        ..ROW
    },
    Row {
        name: "the terminal stops and a CHLD from outside are not forwarded",
        events: &[
            E::Signal(100, libc::SIGTSTP),
            E::Signal(150, libc::SIGTTIN),
            E::Signal(200, libc::SIGCHLD),
            E::Exit(300, 3),
        ],
        expect: &[],
        status: 3,
        done: 300,
        ..ROW
    },
    // --kill-after.
    Row {
        name: "--kill-after KILLs the group of a child that ignores TERM",
        stopping: AFTER_300,
        main: Takes::Ignores,
        events: &[E::Signal(100, TERM)],
        expect: &[
            A::Send(100, TERM, To::Child),
            A::Say(400, "kill_after"),
            A::Send(400, KILL, To::Group),
        ],
        status: 137,
        done: 400,
        ..ROW
    },
    Row {
        name: "--kill-after without --kill-group KILLs the group: nothing is left to drain",
        stopping: AFTER_300,
        main: Takes::Ignores,
        group: &[Takes::Ignores],
        events: &[E::Signal(100, TERM)],
        expect: &[
            A::Send(100, TERM, To::Child),
            A::Say(400, "kill_after"),
            A::Send(400, KILL, To::Group),
        ],
        status: 137,
        done: 400,
        ..ROW
    },
    Row {
        name: "--kill-after with --kill-group",
        stopping: Stopping {
            kill_group: true,
            kill_after: Some(ms(300)),
            ..PLAIN
        },
        main: Takes::Ignores,
        group: &[Takes::Ignores],
        events: &[E::Signal(100, TERM)],
        expect: &[
            A::Send(100, TERM, To::Group),
            A::Say(400, "kill_after"),
            A::Send(400, KILL, To::Group),
        ],
        status: 137,
        done: 400,
        ..ROW
    },
    Row {
        name: "only the first TERM or INT arms --kill-after",
        stopping: AFTER_300,
        main: Takes::Ignores,
        events: &[E::Signal(100, TERM), E::Signal(300, INT)],
        expect: &[
            A::Send(100, TERM, To::Child),
            A::Send(300, INT, To::Child),
            A::Say(400, "kill_after"),
            A::Send(400, KILL, To::Group),
        ],
        status: 137,
        done: 400,
        ..ROW
    },
    Row {
        name: "INT arms --kill-after, HUP does not",
        stopping: AFTER_300,
        main: Takes::Ignores,
        events: &[E::Signal(0, HUP), E::Signal(500, INT)],
        expect: &[
            A::Send(0, HUP, To::Child),
            A::Send(500, INT, To::Child),
            A::Say(800, "kill_after"),
            A::Send(800, KILL, To::Group),
        ],
        status: 137,
        done: 800,
        ..ROW
    },
    Row {
        name: "a child that exits within --kill-after is not killed",
        stopping: Stopping {
            kill_after: Some(ms(1000)),
            ..PLAIN
        },
        main: Takes::Exits {
            after: 200,
            code: 0,
        },
        events: &[E::Signal(100, TERM)],
        expect: &[A::Send(100, TERM, To::Child)],
        status: 0,
        done: 300,
        ..ROW
    },
    Row {
        name: "--kill-after does nothing until a TERM or INT",
        stopping: Stopping {
            kill_after: Some(ms(100)),
            ..PLAIN
        },
        main: Takes::Ignores,
        events: &[E::Exit(5000, 3)],
        expect: &[],
        status: 3,
        done: 5000,
        ..ROW
    },
    // The drain, once the child ended.
    Row {
        name: "a child that leaves nothing is done at once",
        events: &[E::Exit(100, 7)],
        expect: &[],
        status: 7,
        done: 100,
        ..ROW
    },
    Row {
        name: "the rest of the group gets TERM, and goes on it",
        stopping: Stopping {
            grace: ms(30_000),
            ..PLAIN
        },
        group: &[Takes::Dies],
        events: &[E::Exit(100, 0)],
        expect: &[A::Say(100, "drain_term"), A::All(100, TERM)],
        status: 0,
        done: 100,
        ..ROW
    },
    Row {
        name: "a leftover that takes its time within the grace ends the drain when it goes",
        stopping: Stopping {
            grace: ms(1000),
            ..PLAIN
        },
        group: &[Takes::Exits {
            after: 250,
            code: 0,
        }],
        events: &[E::Exit(100, 0)],
        expect: &[A::Say(100, "drain_term"), A::All(100, TERM)],
        status: 0,
        done: 350,
        ..ROW
    },
    Row {
        name: "a leftover that ignores TERM gets KILL when the grace ends",
        stopping: GRACE_300,
        group: &[Takes::Ignores],
        events: &[E::Exit(100, 0)],
        expect: &[
            A::Say(100, "drain_term"),
            A::All(100, TERM),
            A::Say(400, "drain_kill"),
            A::All(400, KILL),
        ],
        status: 0,
        done: 400,
        ..ROW
    },
    Row {
        name: "without --kill-group the child dies of TERM alone; the group is drained",
        stopping: GRACE_300,
        group: &[Takes::Ignores],
        events: &[E::Signal(100, TERM)],
        expect: &[
            A::Send(100, TERM, To::Child),
            A::Say(100, "drain_term"),
            A::All(100, TERM),
            A::Say(400, "drain_kill"),
            A::All(400, KILL),
        ],
        status: 143,
        done: 400,
        ..ROW
    },
    Row {
        name: "an orphan outside the group is drained too",
        stopping: GRACE_300,
        others: &[Takes::Ignores],
        events: &[E::Exit(100, 0)],
        expect: &[
            A::Say(100, "drain_term"),
            A::All(100, TERM),
            A::Say(400, "drain_kill"),
            A::All(400, KILL),
        ],
        status: 0,
        done: 400,
        ..ROW
    },
    Row {
        name:
            "a signal during the grace reaches the group and every child; keepwrap's own does not",
        stopping: Stopping {
            grace: ms(1000),
            ..PLAIN
        },
        group: &[Takes::Ignores],
        events: &[
            E::Exit(100, 0),
            E::Signal(300, HUP),
            E::Own(400, libc::SIGPIPE),
            E::Signal(500, libc::SIGTSTP),
        ],
        expect: &[
            A::Say(100, "drain_term"),
            A::All(100, TERM),
            A::All(300, HUP),
            A::Say(1100, "drain_kill"),
            A::All(1100, KILL),
        ],
        status: 0,
        done: 1100,
        ..ROW
    },
    Row {
        name: "what KILL cannot end is waited for 2 s, no longer",
        stopping: GRACE_300,
        group: &[Takes::Stuck],
        events: &[E::Exit(100, 0)],
        expect: &[
            A::Say(100, "drain_term"),
            A::All(100, TERM),
            A::Say(400, "drain_kill"),
            A::All(400, KILL),
        ],
        status: 0,
        done: 2400,
        ..ROW
    },
];

#[test]
fn every_row_of_the_supervisor_table() {
    let mut failed = Vec::new();
    for row in ROWS {
        let (did, status, done) = run(row);
        if did != expanded(row.expect) || status != row.status || done != row.done {
            failed.push(format!(
                "{}:\n  expected {:?}, status {}, done at {} ms\n  got      {:?}, status {}, done at {} ms",
                row.name, row.expect, row.status, row.done, did, status, done
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_signals_forwarded_are_told_in_order() {
    let row = Row {
        main: Takes::Ignores,
        events: &[
            E::Signal(0, HUP),
            E::Own(0, libc::SIGPIPE),
            E::Signal(0, libc::SIGWINCH),
            E::Signal(0, libc::SIGTTOU),
            E::Signal(0, USR1),
        ],
        ..ROW
    };
    let mut sim = Sim::new(&row);
    sim.wait(sim.t0);
    let mut told = Vec::new();
    let ended = Running::new(PLAIN).dispatch(&mut sim, |signo| told.push(signo));
    assert_eq!(ended, None);
    assert_eq!(told, [HUP, libc::SIGWINCH, USR1]);
}
