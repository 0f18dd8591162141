//! Which binary opened a connection (docs/design.md §10): the client socket's
//! inode (one exact `sock_diag` netlink query by its addresses; reading
//! `/proc/net/tcp{,6}` instead when netlink is unavailable, which costs
//! milliseconds once a namespace holds thousands of sockets, TIME_WAIT
//! included), the processes holding it from `/proc/*/fd`, and their
//! executables. Exactly one executable, or unknown.
//! Unknown is never an error: the matcher then grants only rules without
//! `binaries` (docs/policy-semantics.md §7).

use std::collections::BTreeSet;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// How the proxy tells binaries apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IdentityMode {
    /// Look the peer up in /proc (needs a shared PID namespace in a Pod).
    Proc,
    /// Every caller is unknown.
    None,
}

/// Whether this process can look into other uids' processes: makes
/// CAP_SYS_PTRACE effective when it is only permitted, and says whether it
/// is effective now. Call it before any thread starts (capabilities are per
/// thread; threads started later inherit them).
///
/// In the sandbox Pod the proxy runs as uid 1337, and a container runtime
/// passes a non-root process none of its container's capabilities across
/// exec. The image's binary therefore carries CAP_SYS_PTRACE as a
/// *permitted-only* file capability (`cap_sys_ptrace=p`), raised here: with
/// the effective bit set instead, the kernel would refuse to exec the same
/// binary as `agentgate-init`, whose bounding set lacks the capability.
pub fn raise_ptrace() -> std::io::Result<bool> {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    let mut sets = capabilities(None)?;
    if sets.effective.contains(CapabilitySet::SYS_PTRACE) {
        return Ok(true);
    }
    if !sets.permitted.contains(CapabilitySet::SYS_PTRACE) {
        return Ok(false);
    }
    sets.effective |= CapabilitySet::SYS_PTRACE;
    set_capabilities(None, sets)?;
    Ok(true)
}

/// Finds the one executable whose process holds the client end of a TCP
/// connection: the socket whose local address is `client` and whose remote
/// address is `server` (the proxy's own address for explicit connections,
/// the original destination for redirected ones).
pub fn binary_of(proc_root: &Path, client: SocketAddr, server: SocketAddr) -> Option<String> {
    let (client, server) = (unmap(client), unmap(server));
    let inode = match socket_inode_by_netlink(client, server) {
        Ok(inode) => inode?,
        Err(_) => socket_inode(proc_root, client, server)?,
    };
    let executables = holders(proc_root, inode);
    let mut exes = executables.into_iter();
    match (exes.next(), exes.next()) {
        (Some(exe), None) => Some(exe),
        _ => None,
    }
}

fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// Asks the kernel for the one TCP socket whose local address is `client`
/// and remote address is `server` (an exact lookup, not a dump). `Ok(None)`:
/// no such socket; `Err`: netlink is unavailable here.
fn socket_inode_by_netlink(client: SocketAddr, server: SocketAddr) -> std::io::Result<Option<u64>> {
    use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_sys::protocols::NETLINK_SOCK_DIAG;
    use netlink_sys::{Socket, SocketAddr as NetlinkAddr};

    if client.is_ipv4() != server.is_ipv4() {
        return Ok(None);
    }
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&NetlinkAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family: if client.is_ipv4() { AF_INET } else { AF_INET6 },
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: SocketId {
                source_port: client.port(),
                destination_port: server.port(),
                source_address: client.ip(),
                destination_address: server.ip(),
                interface_id: 0,
                // All 0xff: "no cookie", look the socket up by its addresses.
                cookie: [0xff; 8],
            },
        })
        .into(),
    );
    request.finalize();
    let mut buffer = vec![0u8; request.buffer_len()];
    request.serialize(&mut buffer);
    socket.send(&buffer, 0)?;
    let mut answer = Vec::with_capacity(8192);
    socket.recv(&mut answer, 0)?;
    let message = NetlinkMessage::<SockDiagMessage>::deserialize(&answer)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    match message.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
            Ok(Some(u64::from(response.header.inode)).filter(|inode| *inode != 0))
        }
        // ENOENT: the client already closed, or is not in this namespace.
        NetlinkPayload::Error(_) => Ok(None),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "unexpected sock_diag answer",
        )),
    }
}

/// Parses `0100007F:1F90` (IPv4) or the 32-hex-digit IPv6 form of
/// /proc/net/tcp6. The kernel prints each 32-bit word in host byte order.
fn parse_proc_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(unmap(SocketAddr::new(ip, port)))
}

/// The inode of the one socket with these addresses, if exactly one.
fn socket_inode(proc_root: &Path, client: SocketAddr, server: SocketAddr) -> Option<u64> {
    let mut inodes = BTreeSet::new();
    for table in ["net/tcp", "net/tcp6"] {
        let Ok(text) = fs::read_to_string(proc_root.join(table)) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(remote), Some(inode)) =
                (fields.get(1), fields.get(2), fields.get(9))
            else {
                continue;
            };
            if parse_proc_addr(local) == Some(client) && parse_proc_addr(remote) == Some(server) {
                match inode.parse::<u64>() {
                    Ok(0) | Err(_) => {}
                    Ok(inode) => {
                        inodes.insert(inode);
                    }
                }
            }
        }
    }
    let mut it = inodes.into_iter();
    match (it.next(), it.next()) {
        (Some(inode), None) => Some(inode),
        _ => None,
    }
}

/// The executables of every process with an fd on the socket. A process
/// whose executable cannot be read, or was deleted, makes the answer
/// ambiguous (it is added as a name no rule matches).
fn holders(proc_root: &Path, inode: u64) -> BTreeSet<String> {
    let target = PathBuf::from(format!("socket:[{inode}]"));
    let mut exes = BTreeSet::new();
    let Ok(processes) = fs::read_dir(proc_root) else {
        return exes;
    };
    for process in processes.flatten() {
        let name = process.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let holds = match fs::read_dir(process.path().join("fd")) {
            Ok(fds) => fds
                .flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|link| link == target)),
            // Another uid's fd directory is mode 0500: listing it takes
            // CAP_DAC_READ_SEARCH, which would also grant open_by_handle_at
            // (a way out of the container). CAP_SYS_PTRACE alone lets us
            // duplicate its descriptors and compare their inodes instead.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // Neither way in (a kernel thread has no descriptors to
                // duplicate): skipped, as an unreadable fd directory is.
                holds_by_pidfd(&process.path(), &name.to_string_lossy(), inode).unwrap_or(false)
            }
            Err(_) => continue,
        };
        if holds {
            let exe = fs::read_link(process.path().join("exe"))
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
                .filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)"));
            exes.insert(exe.unwrap_or_else(|| " unreadable".to_string()));
        }
    }
    exes
}

/// The most descriptors scanned in one process without /proc/PID/fd.
const MAX_SCANNED_FDS: i32 = 1 << 16;

/// Whether process `pid` holds a descriptor on socket `inode`, found by
/// duplicating each of its descriptors (`pidfd_getfd`, which needs
/// CAP_SYS_PTRACE over it) and comparing inodes. `None`: the process
/// cannot be inspected this way.
fn holds_by_pidfd(process_dir: &Path, pid: &str, inode: u64) -> Option<bool> {
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let pid = Pid::from_raw(pid.parse().ok()?)?;
    // The size of its descriptor table bounds the scan.
    let status = fs::read_to_string(process_dir.join("status")).ok()?;
    let table: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|n| n.trim().parse().ok())?;
    let pidfd = match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(pidfd) => pidfd,
        // Gone meanwhile: it holds nothing.
        Err(rustix::io::Errno::SRCH) => return Some(false),
        Err(_) => return None,
    };
    for fd in 0..table.min(MAX_SCANNED_FDS) {
        match pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()) {
            Ok(copy) => {
                let is_it = rustix::fs::fstat(&copy).is_ok_and(|st| {
                    st.st_ino == inode
                        && rustix::fs::FileType::from_raw_mode(st.st_mode)
                            == rustix::fs::FileType::Socket
                });
                if is_it {
                    return Some(true);
                }
            }
            Err(rustix::io::Errno::BADF) => {}
            Err(rustix::io::Errno::SRCH) => return Some(false),
            Err(_) => return None,
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_proc_addresses() {
        let v4 = parse_proc_addr("0100007F:1F90").unwrap();
        assert_eq!(v4, "127.0.0.1:8080".parse().unwrap());
        let v6 = parse_proc_addr("00000000000000000000000001000000:0050").unwrap();
        assert_eq!(v6, "[::1]:80".parse().unwrap());
        let mapped = parse_proc_addr("0000000000000000FFFF00000100007F:0050").unwrap();
        assert_eq!(mapped, "127.0.0.1:80".parse().unwrap());
        assert_eq!(parse_proc_addr("zz"), None);
    }

    #[test]
    fn finds_this_test_binary() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let exe = fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(
            binary_of(Path::new("/proc"), peer, server),
            Some(exe.to_string_lossy().into_owned())
        );
        // The server end is not the client's socket.
        let unrelated: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(binary_of(Path::new("/proc"), peer, unrelated), None);
        // Both ways of finding the socket agree.
        let by_netlink = socket_inode_by_netlink(peer, server).unwrap();
        assert!(by_netlink.is_some());
        assert_eq!(by_netlink, socket_inode(Path::new("/proc"), peer, server));
    }
}
