//! When tuning is done: the rules (`--done`) and the HTTP health probe.

pub mod owner;
pub mod progress;
pub mod tls;
pub mod watch;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrStorage};

use crate::clock::DurationError;

/// Why a `--done` rule cannot be used, for this launch or at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DoneError {
    #[error("'{0}' is not a done rule: use auto, health, health=URL, quiet=DURATION or exit")]
    NotARule(String),
    /// `quiet=` and a text that is not a duration.
    #[error(transparent)]
    Quiet(#[from] DurationError),
    /// A health URL that cannot be probed: the URL and why.
    #[error("health URL '{0}': {1}")]
    Url(String, &'static str),
    /// `auto` for a vLLM server that requires a client certificate.
    #[error("a vLLM server that requires a client certificate (--ssl-cert-reqs 2) cannot be probed: give --done quiet=DURATION")]
    ClientCertificate,
    /// An HTTPS server, on a CPU without what keepwrap's TLS needs.
    #[error("{0} cannot be probed: this CPU lacks {1}, which keepwrap's TLS needs: give --done quiet=DURATION")]
    TlsUnsupported(String, &'static str),
    /// `auto` for a vLLM server on a Unix socket.
    #[error("a vLLM server on a Unix socket (--uds) cannot be probed: give --done health=URL or --done quiet=DURATION")]
    UnixSocket,
    /// `auto` for a headless vLLM node whose launch names neither the
    /// head's address and API port nor this node's ranks.
    #[error("a headless vLLM node whose head address and API port, or ranks, cannot be read from the launch: give --done health=http://HEAD:PORT/health")]
    HeadlessUnknown,
    /// `auto` for a command whose exit status may not be the engine's.
    #[error("an exit 0 of this launch would not prove the engine's ({0}): give --done health=URL or --done quiet=DURATION")]
    ExitUnproven(String),
}

/// `--done`: when keepwrap considers the engine's tuning finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoneRule {
    /// An SGLang server launch: the first 200 from its `/health`; any other
    /// command: a 0 exit.
    Auto,
    /// The first 200 from this URL (default: derived from the launch argv).
    Health(Option<String>),
    /// No cache write for this long after the last one.
    Quiet(Duration),
    /// The child exits 0.
    Exit,
}

impl DoneRule {
    pub fn parse(s: &str) -> Result<DoneRule, DoneError> {
        let s = s.trim();
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        match (name, value) {
            ("auto", None) => Ok(DoneRule::Auto),
            ("exit", None) => Ok(DoneRule::Exit),
            ("health", None) => Ok(DoneRule::Health(None)),
            ("health", Some(url)) => {
                Endpoint::parse(url).map(|_| DoneRule::Health(Some(url.to_string())))
            }
            ("quiet", Some(d)) => Ok(DoneRule::Quiet(crate::clock::parse_duration(d)?)),
            _ => Err(DoneError::NotARule(s.to_string())),
        }
    }
}

/// What decides that tuning is done, resolved for one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// The first 200 from this endpoint.
    Health(Endpoint),
    /// No cache write for this long after the last one.
    Quiet(Duration),
    /// The child exits 0.
    Exit,
    /// A headless vLLM node: the first 200 from the head's endpoint (another
    /// process, on another node: trusted as given).
    HeadHealth(Endpoint),
    /// A headless vLLM node: every one of these rank files (names) has
    /// landed, then none for this long.
    RankFiles(Vec<String>, Duration),
}

impl DoneRule {
    /// Resolve `auto` and a bare `health`: `server_done`, the engine's rule
    /// for both when the launch runs a server the engine knows; `health`,
    /// what a bare `health` probes otherwise (`engine::Engine::done`);
    /// `exit_unproven`, why the command's exit 0 does not prove the
    /// engine's (then `auto` has no rule).
    pub fn resolve(
        &self,
        exit_unproven: Option<String>,
        server_done: Option<Result<Done, DoneError>>,
        health: Endpoint,
    ) -> Result<Done, DoneError> {
        let done = self.resolve_rule(exit_unproven, server_done, health)?;
        if let Done::Health(ep) | Done::HeadHealth(ep) = &done {
            if let Some(missing) = ep.tls.then(tls::unsupported).flatten() {
                return Err(DoneError::TlsUnsupported(ep.to_string(), missing));
            }
        }
        Ok(done)
    }

    fn resolve_rule(
        &self,
        exit_unproven: Option<String>,
        server_done: Option<Result<Done, DoneError>>,
        health: Endpoint,
    ) -> Result<Done, DoneError> {
        match (self, server_done) {
            (DoneRule::Auto | DoneRule::Health(None), Some(done)) => done,
            (DoneRule::Auto, None) => match exit_unproven {
                Some(why) => Err(DoneError::ExitUnproven(why)),
                None => Ok(Done::Exit),
            },
            (DoneRule::Exit, _) => Ok(Done::Exit),
            (DoneRule::Health(None), None) => Ok(Done::Health(health)),
            (DoneRule::Health(Some(url)), _) => Endpoint::parse(url).map(Done::Health),
            (DoneRule::Quiet(d), _) => Ok(Done::Quiet(*d)),
        }
    }
}

impl Done {
    /// A headless node's rank-files rule with the quiet window `quiet`
    /// (`--headless-quiet`); any other rule as it is.
    pub fn headless_quiet(self, quiet: Duration) -> Done {
        match self {
            Done::RankFiles(names, _) => Done::RankFiles(names, quiet),
            done => done,
        }
    }
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Done::Health(ep) => write!(f, "when GET {ep} first answers 200"),
            Done::Quiet(d) => write!(
                f,
                "when no cache file has landed for {}",
                humantime::format_duration(*d)
            ),
            Done::Exit => write!(f, "when the command exits 0"),
            Done::HeadHealth(ep) => write!(
                f,
                "when GET {ep} (the head's API server; this node is headless) first answers 200"
            ),
            Done::RankFiles(names, d) => write!(
                f,
                "when this headless node's {} ({}) have landed and no cache file has for {}",
                crate::events::counted(names.len(), "rank file", "rank files"),
                names.join(", "),
                humantime::format_duration(*d)
            ),
        }
    }
}

/// An HTTP endpoint to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host as written in the URL (brackets kept for IPv6), for `Host:`.
    pub host: String,
    pub port: u16,
    pub path: String,
    /// HTTPS: the request goes over TLS.
    pub tls: bool,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

impl Endpoint {
    /// `/health` on the server's `host` (none or a wildcard: loopback) and
    /// `port` as the engine's `int()` reads it (`default` when none or
    /// not a port); `tls`: HTTPS.
    pub fn health(host: Option<&str>, port: Option<&str>, default: u16, tls: bool) -> Endpoint {
        let host = match host.unwrap_or("127.0.0.1") {
            "0.0.0.0" | "" => "127.0.0.1".to_string(),
            "::" | "[::]" => "[::1]".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        Endpoint {
            host,
            port: port.and_then(python_u16).unwrap_or(default),
            path: "/health".into(),
            tls,
        }
    }

    /// `http://HOST[:PORT][/PATH]` or `https://...`.
    pub fn parse(url: &str) -> Result<Endpoint, DoneError> {
        let bad = |why: &'static str| DoneError::Url(url.to_string(), why);
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err(bad("only http:// and https:// URLs can be probed")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/health".to_string()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = &v6[end + 1..];
            (format!("[{}]", &v6[..end]), port.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| bad("the port is not a number from 0 to 65535"))?,
            None if tls => 443,
            None => 80,
        };
        Ok(Endpoint {
            host,
            port,
            path,
            tls,
        })
    }

    fn socket_addr(&self) -> io::Result<SocketAddr> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        (host, self.port).to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.host),
            )
        })
    }
}

/// A non-blocking HTTP/1.1 health probe, driven by the supervisor's poll
/// loop: connect, send `GET`, read the status line. One probe at a time,
/// `interval` apart, each bounded by `timeout`.
pub struct Probe {
    endpoint: Endpoint,
    addr: Option<SocketAddr>,
    /// The name lookup under way on its own thread, if any.
    resolver: Option<Resolver>,
    interval: Duration,
    timeout: Duration,
    next_at: Instant,
    state: ProbeState,
}

/// A name lookup on a thread of its own (`getaddrinfo` blocks, for as long
/// as a DNS server takes not to answer): it sends its answer, then closes
/// the pipe's write end, which makes `wake` readable for the poll loop.
struct Resolver {
    answer: mpsc::Receiver<io::Result<SocketAddr>>,
    wake: OwnedFd,
}

impl Resolver {
    /// Look `endpoint` up on a new thread; `None` when none can start.
    fn start(endpoint: &Endpoint) -> Option<Resolver> {
        let (wake, done) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let (tx, answer) = mpsc::channel();
        let endpoint = endpoint.clone();
        std::thread::Builder::new()
            .name("keepwrap-resolve".into())
            .spawn(move || {
                let _ = tx.send(endpoint.socket_addr());
                drop(done);
            })
            .ok()?;
        Some(Resolver { answer, wake })
    }
}

enum ProbeState {
    Idle,
    /// A 200 is being judged (who serves the port): no other probe until
    /// [`Probe::defer`]. A judge slower than the interval (a loaded host)
    /// spaces the probes out instead of queueing judges behind it.
    Judging,
    /// Waiting for the resolver's answer.
    Resolving {
        deadline: Instant,
    },
    Connecting {
        stream: TcpStream,
        deadline: Instant,
    },
    Reading {
        stream: TcpStream,
        buf: Vec<u8>,
        deadline: Instant,
    },
    /// HTTPS: the handshake, the request and the answer, all through the
    /// TLS connection (`buf`: the plaintext answer so far).
    Tls {
        stream: TcpStream,
        conn: Box<rustls::ClientConnection>,
        buf: Vec<u8>,
        deadline: Instant,
    },
}

/// What one step of the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Pending,
    /// The endpoint answered this status (not 200), or failed: probe again.
    NotYet,
    Ready,
}

impl Probe {
    pub fn new(endpoint: Endpoint, interval: Duration, timeout: Duration, start: Instant) -> Probe {
        Probe {
            endpoint,
            addr: None,
            resolver: None,
            interval,
            timeout,
            next_at: start,
            state: ProbeState::Idle,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The address probed, once resolved.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The last answer, a 200, is being judged: no other probe until it
    /// is ([`Probe::defer`] when it did not count).
    pub fn judging(&mut self) {
        self.state = ProbeState::Judging;
    }

    /// The last answer did not count: probe again one interval from now.
    pub fn defer(&mut self, now: Instant) {
        self.state = ProbeState::Idle;
        self.next_at = now.checked_add(self.interval).unwrap_or(now);
    }

    /// The socket to poll, with the events it waits for.
    pub fn poll_fd(&self) -> Option<(BorrowedFd<'_>, PollFlags)> {
        match &self.state {
            ProbeState::Idle | ProbeState::Judging => None,
            ProbeState::Resolving { .. } => self
                .resolver
                .as_ref()
                .map(|r| (r.wake.as_fd(), PollFlags::POLLIN)),
            ProbeState::Connecting { stream, .. } => Some((stream.as_fd(), PollFlags::POLLOUT)),
            ProbeState::Reading { stream, .. } => Some((stream.as_fd(), PollFlags::POLLIN)),
            ProbeState::Tls { stream, conn, .. } => {
                let out = if conn.wants_write() {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::empty()
                };
                Some((stream.as_fd(), PollFlags::POLLIN | out))
            }
        }
    }

    /// When the probe next needs attention without an fd event (none while
    /// its last 200 is judged).
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            ProbeState::Idle => Some(self.next_at),
            ProbeState::Judging => None,
            ProbeState::Resolving { deadline }
            | ProbeState::Connecting { deadline, .. }
            | ProbeState::Reading { deadline, .. }
            | ProbeState::Tls { deadline, .. } => Some(*deadline),
        }
    }

    /// Advance: start a probe when due, time one out, or handle its socket
    /// being ready.
    pub fn step(&mut self, now: Instant, ready: bool) -> ProbeResult {
        let state = std::mem::replace(&mut self.state, ProbeState::Idle);
        let (next, result) = match state {
            ProbeState::Idle if now >= self.next_at => self.start(now),
            ProbeState::Idle => (ProbeState::Idle, ProbeResult::Pending),
            ProbeState::Resolving { deadline } if ready || now >= deadline => {
                self.resolved(deadline, now)
            }
            ProbeState::Connecting { deadline, .. }
            | ProbeState::Reading { deadline, .. }
            | ProbeState::Tls { deadline, .. }
                if now >= deadline && !ready =>
            {
                crate::events::Event::ProbeTimedOut {
                    url: self.endpoint.to_string(),
                }
                .emit();
                (ProbeState::Idle, ProbeResult::NotYet)
            }
            ProbeState::Connecting { stream, deadline } if ready => match stream.take_error() {
                Ok(None) => self.send(stream, deadline),
                Ok(Some(e)) | Err(e) => {
                    crate::events::Event::ProbeFailed {
                        url: self.endpoint.to_string(),
                        error: e.to_string(),
                    }
                    .emit();
                    (ProbeState::Idle, ProbeResult::NotYet)
                }
            },
            ProbeState::Reading {
                stream,
                buf,
                deadline,
            } if ready => self.read(stream, buf, deadline),
            ProbeState::Tls {
                stream,
                conn,
                buf,
                deadline,
            } if ready => self.drive_tls(stream, conn, buf, deadline),
            other => (other, ProbeResult::Pending),
        };
        if result == ProbeResult::NotYet {
            self.next_at = now + self.interval;
        }
        self.state = next;
        result
    }

    fn start(&mut self, now: Instant) -> (ProbeState, ProbeResult) {
        let deadline = now + self.timeout;
        match self.addr {
            Some(addr) => self.connect(addr, deadline),
            // A lookup still under way from an earlier probe is waited for,
            // not started again.
            None if self.resolver.is_some() => self.resolved(deadline, now),
            None => match Resolver::start(&self.endpoint) {
                Some(r) => {
                    self.resolver = Some(r);
                    (ProbeState::Resolving { deadline }, ProbeResult::Pending)
                }
                // No thread: look it up here rather than never.
                None => {
                    let answer = self.endpoint.socket_addr();
                    self.connect_to(answer, deadline)
                }
            },
        }
    }

    /// The resolver's answer, if it has one: connect to the address, or
    /// probe again later (the lookup failed, or it is still under way past
    /// `deadline`, and goes on for the next probe).
    fn resolved(&mut self, deadline: Instant, now: Instant) -> (ProbeState, ProbeResult) {
        let answer = match self.resolver.as_ref().map(|r| r.answer.try_recv()) {
            Some(Err(mpsc::TryRecvError::Empty)) if now < deadline => {
                return (ProbeState::Resolving { deadline }, ProbeResult::Pending)
            }
            Some(Err(mpsc::TryRecvError::Empty)) => {
                crate::events::Event::ProbeTimedOut {
                    url: self.endpoint.to_string(),
                }
                .emit();
                return (ProbeState::Idle, ProbeResult::NotYet);
            }
            Some(Ok(answer)) => answer,
            None | Some(Err(mpsc::TryRecvError::Disconnected)) => Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the name lookup ended without an answer",
            )),
        };
        self.resolver = None;
        self.connect_to(answer, deadline)
    }

    /// A name lookup's answer: connect to the address (kept for the next
    /// probes), or probe again later, one line saying why not now.
    fn connect_to(
        &mut self,
        answer: io::Result<SocketAddr>,
        deadline: Instant,
    ) -> (ProbeState, ProbeResult) {
        match answer {
            Ok(a) => {
                self.addr = Some(a);
                self.connect(a, deadline)
            }
            Err(e) => {
                crate::events::Event::ProbeUnresolved {
                    host: self.endpoint.host.to_string(),
                    error: e.to_string(),
                }
                .emit();
                (ProbeState::Idle, ProbeResult::NotYet)
            }
        }
    }

    fn connect(&self, addr: SocketAddr, deadline: Instant) -> (ProbeState, ProbeResult) {
        let family = if addr.is_ipv6() {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let fd = match socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                crate::events::Event::ProbeSocketFailed {
                    error: e.to_string(),
                }
                .emit();
                return (ProbeState::Idle, ProbeResult::NotYet);
            }
        };
        let sockaddr = SockaddrStorage::from(addr);
        let stream = TcpStream::from(fd);
        match connect(stream.as_raw_fd(), &sockaddr) {
            Ok(()) => self.send(stream, deadline),
            Err(Errno::EINPROGRESS) | Err(Errno::EINTR) => (
                ProbeState::Connecting { stream, deadline },
                ProbeResult::Pending,
            ),
            Err(e) => {
                crate::events::Event::ProbeFailed {
                    url: self.endpoint.to_string(),
                    error: e.to_string(),
                }
                .emit();
                (ProbeState::Idle, ProbeResult::NotYet)
            }
        }
    }

    fn send(&self, mut stream: TcpStream, deadline: Instant) -> (ProbeState, ProbeResult) {
        let request = self.request();
        if self.endpoint.tls {
            return self.start_tls(stream, request, deadline);
        }
        match stream.write(request.as_bytes()) {
            Ok(n) if n == request.len() => (
                ProbeState::Reading {
                    stream,
                    buf: Vec::new(),
                    deadline,
                },
                ProbeResult::Pending,
            ),
            Ok(_) => (ProbeState::Idle, ProbeResult::NotYet),
            Err(e) => {
                crate::events::Event::ProbeFailed {
                    url: self.endpoint.to_string(),
                    error: e.to_string(),
                }
                .emit();
                (ProbeState::Idle, ProbeResult::NotYet)
            }
        }
    }

    fn request(&self) -> String {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: keepwrap/{}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.endpoint.path,
            self.endpoint.host,
            self.endpoint.port,
            env!("CARGO_PKG_VERSION")
        )
    }

    /// A TLS connection over the connected `stream`, with the request
    /// queued to go out once the handshake is done.
    fn start_tls(
        &self,
        stream: TcpStream,
        request: String,
        deadline: Instant,
    ) -> (ProbeState, ProbeResult) {
        let ip = match self.addr {
            Some(a) => a.ip(),
            None => return (ProbeState::Idle, ProbeResult::NotYet),
        };
        let mut conn = match tls::connect(&self.endpoint.host, ip) {
            Ok(c) => Box::new(c),
            Err(e) => {
                crate::events::Event::ProbeFailed {
                    url: self.endpoint.to_string(),
                    error: e.to_string(),
                }
                .emit();
                return (ProbeState::Idle, ProbeResult::NotYet);
            }
        };
        if let Err(e) = conn.writer().write_all(request.as_bytes()) {
            crate::events::Event::ProbeFailed {
                url: self.endpoint.to_string(),
                error: e.to_string(),
            }
            .emit();
            return (ProbeState::Idle, ProbeResult::NotYet);
        }
        self.drive_tls(stream, conn, Vec::new(), deadline)
    }

    /// Move the TLS connection on as far as the socket allows: send what
    /// it has to send, take in what arrived, read the plaintext answer up
    /// to its status line.
    fn drive_tls(
        &self,
        mut stream: TcpStream,
        mut conn: Box<rustls::ClientConnection>,
        mut buf: Vec<u8>,
        deadline: Instant,
    ) -> (ProbeState, ProbeResult) {
        let failed = |e: &dyn std::fmt::Display| {
            crate::events::Event::ProbeFailed {
                url: self.endpoint.to_string(),
                error: e.to_string(),
            }
            .emit();
            (ProbeState::Idle, ProbeResult::NotYet)
        };
        loop {
            while conn.wants_write() {
                match conn.write_tls(&mut stream) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return failed(&e),
                }
            }
            let mut chunk = [0u8; 512];
            loop {
                match conn.reader().read(&mut chunk) {
                    Ok(0) => return (ProbeState::Idle, self.answer(&buf)),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        if buf.windows(2).any(|w| w == b"\r\n") || buf.len() > 4096 {
                            return (ProbeState::Idle, self.answer(&buf));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // closed without close_notify: what came is the answer
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        return (ProbeState::Idle, self.answer(&buf))
                    }
                    Err(e) => return failed(&e),
                }
            }
            if !conn.wants_read() {
                return (
                    ProbeState::Tls {
                        stream,
                        conn,
                        buf,
                        deadline,
                    },
                    ProbeResult::Pending,
                );
            }
            match conn.read_tls(&mut stream) {
                Ok(0) => return (ProbeState::Idle, self.answer(&buf)),
                Ok(_) => {
                    if let Err(e) = conn.process_new_packets() {
                        // tell the server why, as a client should
                        let _ = conn.write_tls(&mut stream);
                        return failed(&e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return (
                        ProbeState::Tls {
                            stream,
                            conn,
                            buf,
                            deadline,
                        },
                        ProbeResult::Pending,
                    )
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return failed(&e),
            }
        }
    }

    /// A whole or partial answer: Ready on a 200 status line.
    fn answer(&self, buf: &[u8]) -> ProbeResult {
        match status_code(buf) {
            Some(200) => ProbeResult::Ready,
            status => {
                crate::events::Event::ProbeStatus {
                    url: self.endpoint.to_string(),
                    status,
                }
                .emit();
                ProbeResult::NotYet
            }
        }
    }

    fn read(
        &self,
        mut stream: TcpStream,
        mut buf: Vec<u8>,
        deadline: Instant,
    ) -> (ProbeState, ProbeResult) {
        let mut chunk = [0u8; 512];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(2).any(|w| w == b"\r\n") || buf.len() > 4096 {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return (
                        ProbeState::Reading {
                            stream,
                            buf,
                            deadline,
                        },
                        ProbeResult::Pending,
                    )
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    crate::events::Event::ProbeFailed {
                        url: self.endpoint.to_string(),
                        error: e.to_string(),
                    }
                    .emit();
                    return (ProbeState::Idle, ProbeResult::NotYet);
                }
            }
        }
        (ProbeState::Idle, self.answer(&buf))
    }
}

/// The status code of an HTTP/1.x status line.
fn status_code(buf: &[u8]) -> Option<u16> {
    let line = buf.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Does a server launch serve HTTPS: `--ssl-certfile` or `--ssl-keyfile`
/// (uvicorn, which SGLang and vLLM run, turns TLS on with either), read by
/// `option`?
pub fn serves_tls(option: impl Fn(&str) -> Option<String>) -> bool {
    ["--ssl-certfile", "--ssl-keyfile"]
        .iter()
        .any(|f| option(f).is_some_and(|v| !v.is_empty()))
}

/// A number up to 65535 as Python's `int(text)` reads it (SGLang's and
/// vLLM's `--port` is `type=int`): surrounding whitespace, a sign, leading zeros and single
/// `_` between digits are allowed (`int(" 3_1555 ")` is 31555). ASCII
/// digits only: another script's digits, which `int()` also reads, give
/// None (the default port is probed).
pub fn python_u16(text: &str) -> Option<u16> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let b = t.as_bytes();
    let ok = !b.is_empty()
        && b.iter().all(|&c| c.is_ascii_digit() || c == b'_')
        && b.first().is_some_and(u8::is_ascii_digit)
        && b.last().is_some_and(u8::is_ascii_digit)
        && !t.contains("__");
    if !ok {
        return None;
    }
    let digits: String = t.chars().filter(|&c| c != '_').collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_urls_parse() {
        assert_eq!(
            Endpoint::parse("http://localhost:8080/ready")
                .unwrap()
                .to_string(),
            "http://localhost:8080/ready"
        );
        assert_eq!(
            Endpoint::parse("http://[::1]:81").unwrap().to_string(),
            "http://[::1]:81/health"
        );
        let https = Endpoint::parse("https://x/health").unwrap();
        assert_eq!((https.tls, https.port), (true, 443));
        assert_eq!(https.to_string(), "https://x:443/health");
        assert!(Endpoint::parse("ftp://x/health")
            .unwrap_err()
            .to_string()
            .contains("only http:// and https://"));
        assert!(Endpoint::parse("http://x:99999/").is_err());
    }

    #[test]
    fn done_rules_parse() {
        assert_eq!(
            DoneRule::parse("quiet=30s").unwrap(),
            DoneRule::Quiet(Duration::from_secs(30))
        );
        assert_eq!(DoneRule::parse("health").unwrap(), DoneRule::Health(None));
        assert!(DoneRule::parse("later")
            .unwrap_err()
            .to_string()
            .contains("auto, health"));
        assert_eq!(
            DoneRule::parse("health=https://x:8443").unwrap(),
            DoneRule::Health(Some("https://x:8443".into()))
        );
        assert!(DoneRule::parse("health=ftp://x").is_err());
    }

    #[test]
    fn numbers_read_as_python_int_reads_them() {
        for (text, port) in [
            ("8000", Some(8000)),
            ("31_555", Some(31555)),
            (" +0031555\n", Some(31555)),
            ("0", Some(0)),
            ("00", Some(0)),
            ("65535", Some(65535)),
            ("65536", None),
            ("-1", None),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("0x10", None),
            ("", None),
            ("1 0", None),
            ("99999999999999999999999", None),
        ] {
            assert_eq!(python_u16(text), port, "{text:?}");
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_code(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"SSH-2.0\r\n"), None);
    }
}
