//! Who serves a port of this host: the kernel's socket tables
//! (`/proc/net/tcp`, `/proc/net/tcp6`) name the inode of each listening
//! socket, and `/proc/PID/fd` links (`socket:[INODE]`) name the processes
//! holding it. A health probe's 200 counts only when every socket listening
//! for the probed address belongs to the engine's process tree (keepwrap's
//! children and their descendants). Every scan is bounded by counts
//! (processes, descriptors), never by the clock, so that a loaded host gets
//! the answer an idle one does: past them, the answer is "not the engine"
//! (probe again later). Reading the socket tables takes milliseconds on a
//! busy host (30 ms for 500 sockets, seconds under a heavy load): the
//! caller runs this off the supervisor loop.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

/// Who answered a health probe with 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The listening socket belongs to a process of the engine's tree.
    Engine,
    /// A non-local URL: trusted as given.
    Remote,
    /// Another process listens on the port: who, as a log line says it
    /// (`pid N (comm)`, or `a process outside the engine's tree`).
    Foreign(String),
}

/// Most processes looked at: of the engine's tree, and when naming another
/// process (once a launch).
const MAX_PROCS: usize = 4096;
/// Most descriptors looked at: of the engine's whole tree (about 200 ms of
/// `readlink` on an idle host), and of one process when naming another.
/// The look runs on keepwrap's worker thread, never in the supervisor
/// loop, and only before done.
const MAX_FDS: usize = 65_536;

/// One row of `/proc/net/tcp*`: local address, port, state, inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub addr: IpAddr,
    pub port: u16,
    pub listening: bool,
    pub inode: u64,
}

/// Parse one line of `/proc/net/tcp` or `/proc/net/tcp6` (not the header).
pub fn parse_row(line: &str) -> Option<Row> {
    let mut f = line.split_whitespace();
    let _sl = f.next()?;
    let (addr, port) = f.next()?.split_once(':')?;
    let _remote = f.next()?;
    let state = u8::from_str_radix(f.next()?, 16).ok()?;
    let inode = f.nth(5)?.parse().ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // Each 32-bit word is printed as the host reads it from memory.
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    let addr = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(Row {
        addr,
        port,
        listening: state == 0x0A,
        inode,
    })
}

/// Does a socket listening on `local` accept a connection to `to`?
fn serves(local: IpAddr, to: IpAddr) -> bool {
    match (local, to) {
        (IpAddr::V4(l), IpAddr::V4(t)) => l.is_unspecified() || l == t,
        (IpAddr::V6(l), IpAddr::V6(t)) => l.is_unspecified() || l == t,
        // A dual-stack socket on `::` (or on the mapped address).
        (IpAddr::V6(l), IpAddr::V4(t)) => l.is_unspecified() || l.to_ipv4_mapped() == Some(t),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

/// Inodes of the sockets listening for connections to `to`, from the text
/// of `/proc/net/tcp` and `/proc/net/tcp6`.
pub fn listeners(tables: &[&str], to: SocketAddr) -> Vec<u64> {
    let mut out: Vec<u64> = tables
        .iter()
        .flat_map(|t| t.lines().skip(1))
        .filter_map(parse_row)
        .filter(|r| r.listening && r.port == to.port() && serves(r.addr, to.ip()))
        .map(|r| r.inode)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Is `addr` one whose 200 must be checked against the engine's tree:
/// loopback, the wildcard, or any address of this host (an interface of
/// keepwrap's network namespace: a pod's own IP, `--host $(POD_IP)`)? When
/// the interfaces cannot be listed, every address is (a 200 counts only
/// when the engine's own tree serves it).
pub fn is_local(addr: SocketAddr) -> bool {
    match host_addresses() {
        Ok(host) => is_local_among(addr.ip(), &host),
        Err(_) => true,
    }
}

/// [`is_local`] against the host's addresses `host`.
pub fn is_local_among(ip: IpAddr, host: &[IpAddr]) -> bool {
    let ip = match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || ip.is_unspecified() || host.contains(&ip)
}

/// The addresses of this network namespace's interfaces (`getifaddrs`).
pub fn host_addresses() -> nix::Result<Vec<IpAddr>> {
    Ok(nix::ifaddrs::getifaddrs()?
        .filter_map(|i| {
            let a = i.address?;
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

/// Children of `pid`, from `/proc/PID/task/*/children`.
pub(crate) fn children(pid: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// The engine's tree: keepwrap's children (the engine, and orphans of it
/// reparented to keepwrap) and all their descendants, `MAX_PROCS` of them
/// at most.
fn engine_tree() -> Vec<u32> {
    let mut tree = Vec::new();
    let mut todo = children("self");
    let mut seen = HashSet::new();
    while let Some(pid) = todo.pop() {
        if tree.len() >= MAX_PROCS {
            break;
        }
        if !seen.insert(pid) {
            continue;
        }
        tree.push(pid);
        todo.extend(children(&pid.to_string()));
    }
    tree
}

/// Which of `inodes` process `pid` holds, added to `found`; looks at no
/// more than `budget` descriptors, and takes those it looked at from it.
fn holds(pid: u32, inodes: &[u64], found: &mut HashSet<u64>, budget: &mut usize) {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return;
    };
    for fd in fds.flatten() {
        let Some(left) = budget.checked_sub(1) else {
            return;
        };
        *budget = left;
        let Ok(link) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let link = link.as_os_str().as_encoded_bytes();
        let inode = link
            .strip_prefix(b"socket:[")
            .and_then(|r| r.strip_suffix(b"]"))
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(i) = inode.filter(|i| inodes.contains(i)) {
            found.insert(i);
        }
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().escape_debug().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// Who serves `to` (an address of this host): the engine when every socket
/// listening for it is held by the engine's tree; else the first other
/// process found holding one (`pid N (comm)`), or "a process outside the
/// engine's tree" when none of the first `MAX_PROCS` processes does. `name`: look
/// for that other process (once is enough for a log line).
pub fn owner_of(to: SocketAddr, name: bool) -> Owner {
    let started = Instant::now();
    let outside = || Owner::Foreign("a process outside the engine's tree".to_string());
    let tcp = std::fs::read_to_string("/proc/net/tcp");
    let tcp6 = std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let tcp = match tcp {
        Ok(t) => t,
        // Without the kernel's word, the 200 cannot be the engine's.
        Err(e) => {
            return Owner::Foreign(format!(
                "a process keepwrap cannot see (/proc/net/tcp: {e})"
            ))
        }
    };
    let inodes = listeners(&[&tcp, &tcp6], to);
    if inodes.is_empty() {
        return outside();
    }
    let tables = started.elapsed();
    let tree = engine_tree();
    crate::events::Event::PortListeners {
        address: to.to_string(),
        inodes: inodes.to_vec(),
        tables,
        pids: tree.clone(),
    }
    .emit();
    let mut found = HashSet::new();
    let mut budget = MAX_FDS;
    for &pid in &tree {
        holds(pid, &inodes, &mut found, &mut budget);
        if found.len() == inodes.len() {
            return Owner::Engine;
        }
    }
    if !name {
        return outside();
    }
    let foreign: Vec<u64> = inodes.into_iter().filter(|i| !found.contains(i)).collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return outside();
    };
    let me = std::process::id();
    for entry in procs.flatten().take(MAX_PROCS) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || tree.contains(&pid) {
            continue;
        }
        let (mut hit, mut budget) = (HashSet::new(), MAX_FDS);
        holds(pid, &foreign, &mut hit, &mut budget);
        if !hit.is_empty() {
            return Owner::Foreign(format!("pid {pid} ({})", comm(pid)));
        }
    }
    outside()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:7530 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1
   3: 0500000A:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:7531 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 666 1 0000000000000000 100 0 0 10 0
";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rows_parse_as_the_kernel_prints_them() {
        let row = parse_row(TCP.lines().nth(1).unwrap()).unwrap();
        assert_eq!(
            row,
            Row {
                addr: "127.0.0.1".parse().unwrap(),
                port: 30000,
                listening: true,
                inode: 111
            }
        );
        let row = parse_row(TCP6.lines().nth(2).unwrap()).unwrap();
        assert_eq!(row.addr, "::1".parse::<IpAddr>().unwrap());
        assert_eq!((row.port, row.inode), (8080, 666));
        assert_eq!(parse_row("garbage"), None);
        assert_eq!(parse_row("0: 0100007F:zz 0:0 0A"), None);
    }

    #[test]
    fn listeners_for_an_address_include_wildcards_and_dual_stack() {
        let t = [TCP, TCP6];
        assert_eq!(listeners(&t, addr("127.0.0.1:30000")), vec![111]);
        assert_eq!(listeners(&t, addr("127.0.0.1:8080")), vec![222]);
        assert_eq!(listeners(&t, addr("[::1]:8080")), vec![666]);
        // 10.0.0.5:30001 does not answer on loopback; `::` does.
        assert_eq!(listeners(&t, addr("127.0.0.1:30001")), vec![555]);
        assert_eq!(listeners(&t, addr("127.0.0.1:9")), Vec::<u64>::new());
    }

    #[test]
    fn loopback_wildcard_and_this_hosts_addresses_are_local() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let host = [ip("10.1.2.3"), ip("fe80::1")];
        for a in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "10.1.2.3",
            "::ffff:10.1.2.3",
            "fe80::1",
        ] {
            assert!(is_local_among(ip(a), &host), "{a}");
        }
        for a in ["10.1.2.4", "fe80::2", "192.0.2.1"] {
            assert!(!is_local_among(ip(a), &host), "{a}");
        }
        // this machine's own interfaces, loopback among them
        let mine = host_addresses().unwrap();
        assert!(mine.iter().any(IpAddr::is_loopback), "{mine:?}");
        for a in &mine {
            assert!(is_local(SocketAddr::new(*a, 1)), "{a}");
        }
    }

    #[test]
    fn a_port_served_outside_the_tree_or_by_nobody_is_not_the_engines() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // This test process holds the socket: it is outside keepwrap's
        // (here: the test's) children, and it is named.
        match owner_of(addr(&format!("127.0.0.1:{port}")), true) {
            Owner::Foreign(who) => assert!(
                who.starts_with("a process outside") || who.starts_with("pid "),
                "{who}"
            ),
            other => panic!("{other:?}"),
        }
        drop(l);
        assert!(matches!(
            owner_of(addr(&format!("127.0.0.1:{port}")), true),
            Owner::Foreign(_)
        ));
    }
}
