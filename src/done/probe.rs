//! The HTTP health probe of `--done health`: non-blocking, driven by the
//! supervisor's poll loop (a name lookup on a thread of its own, then
//! connect, send `GET`, read the status line, over TLS for HTTPS).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrStorage};

use super::endpoint::Endpoint;
use super::tls;

impl Endpoint {
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

#[cfg(test)]
mod tests {
    use super::*;

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
