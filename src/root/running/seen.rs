//! What the markers say and what a launch makes of them: who a launch is
//! ([`Identity`]), what it is doing ([`State`]), a launch seen on the root
//! ([`Seen`]), the text of a marker, and the [`verdict`] of a launch about
//! to start. Decisions over values: the markers' files are `marker.rs`'s.

use std::time::{Duration, UNIX_EPOCH};

use crate::digest::{short, Fingerprint};

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
    pub(super) fn word(self) -> &'static [u8; 8] {
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
    pub fingerprint: Fingerprint,
    /// The cluster fingerprint without the node and data-parallel ranks.
    pub peer_key: String,
    /// The values of the engine's rank flags (`-` when none is given).
    pub rank: String,
}

impl Identity {
    /// The identity of a launch of fingerprint `fingerprint` whose peers
    /// share `peer_key`, told apart by `ranks` (the values of the engine's
    /// rank flags).
    pub fn new(
        fingerprint: Fingerprint,
        peer_key: Fingerprint,
        ranks: &[(&'static str, String)],
    ) -> Identity {
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
            fingerprint,
            peer_key: peer_key.into(),
            rank,
        }
    }

    /// Another node or data-parallel rank of the same multi-node launch.
    pub fn is_peer_of(&self, other: &Identity) -> bool {
        self.peer_key == other.peer_key && self.rank != other.rank
    }
}

/// A value as one whitespace-free token of the marker line.
pub(super) fn token(s: &str) -> String {
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

impl crate::events::OtherLaunch for Seen {
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
    /// An engine whose keepwrap was killed before it was done tuning.
    Orphan,
    /// A launch that keeps nothing itself.
    HandsOff,
}

/// What a launch about to start does about the launches on its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Nobody is in the way: prune, start, sign as usual.
    Go,
    /// Launches done tuning whose engines still run: of another fingerprint
    /// (or orphaned: their keepwrap was killed once they were done). Their
    /// engines loaded their sets at their start and tune no more, so this
    /// launch prunes as usual (their whole signed sets go into the store,
    /// to come back at their next boot) and its engine sees none of their
    /// files; it signs nothing on this boot, as their engines ran beside it.
    Beside(Vec<&'a Seen>),
    /// A launch is still tuning: wait for it.
    Wait(&'a Seen),
    /// Go on without keeping the cache (no prune, no sign).
    HandsOff(Why, &'a Seen),
}

/// Decide, from the launches seen on the root, whether `me` may start now.
/// Peers of a multi-node launch are never waited for (they need each other
/// to finish tuning); neither are orphaned or hands-off engines, which never
/// say when they are done. A launch still tuning, of any fingerprint, is
/// waited for: pruning under it would remove its files in flight. Launches
/// done tuning are gone around ([`Verdict::Beside`]), or, when they are
/// replicas of this launch, shared with.
pub fn verdict<'a>(me: &Identity, seen: &'a [Seen]) -> Verdict<'a> {
    let live: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.live() && s.state != State::Ended)
        .collect();
    if let Some(s) = live.iter().find(|s| me.is_peer_of(&s.id)) {
        return Verdict::HandsOff(Why::Peer, s);
    }
    if let Some(s) = live
        .iter()
        .find(|s| s.life == Life::Orphaned && s.state != State::Done)
    {
        return Verdict::HandsOff(Why::Orphan, s);
    }
    if let Some(s) = live.iter().find(|s| s.state == State::HandsOff) {
        return Verdict::HandsOff(Why::HandsOff, s);
    }
    if let Some(s) = live.iter().find(|s| s.state == State::Tuning) {
        return Verdict::Wait(s);
    }
    // Every launch left is done tuning.
    let beside: Vec<&Seen> = live
        .into_iter()
        .filter(|s| s.id.fingerprint != me.fingerprint || s.life == Life::Orphaned)
        .collect();
    if !beside.is_empty() {
        return Verdict::Beside(beside);
    }
    Verdict::Go
}

/// `(identity, start, state, host)` of a marker's text.
pub(super) fn parse(name: &str, text: &str) -> Option<(Identity, u128, State, String)> {
    let pid_ok = name
        .split_once('-')
        .is_some_and(|(p, s)| p.parse::<u32>().is_ok() && s.parse::<u128>().is_ok());
    if !pid_ok {
        return None;
    }
    let f: Vec<&str> = text.split_whitespace().collect();
    // Only what keepwrap writes: hex digests and plain tokens (a planted
    // marker never puts control characters into a log line).
    let hex = |s: &str| Fingerprint::parse(s).is_some();
    let plain = |s: &str| token(s) == s;
    match f.as_slice() {
        [state, fp, started, peer, rank, host] if hex(peer) && plain(rank) && plain(host) => {
            Some((
                Identity {
                    fingerprint: Fingerprint::parse(fp)?,
                    peer_key: peer.to_string(),
                    rank: rank.to_string(),
                },
                started.parse().ok()?,
                State::parse(state),
                host.to_string(),
            ))
        }
        _ => None,
    }
}
