//! The out-of-band TCP side: which local address a listener binds, and interface enumeration.
//!
//! The address goes into the listen handle, so it must be reachable by peers. Choice, in order:
//! `NCCL_SOCKET_IFNAME` (NCCL's syntax: comma list of prefixes, `^` to exclude, `=` for exact
//! names), the IP of the RDMA port's own netdev (RoCE), then as NCCL picks its own interfaces:
//! an InfiniBand interface (`ib*`), any other that is up except `docker*` and loopback, a
//! `docker*` interface, and loopback last. Link-local addresses are never chosen.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub ip: IpAddr,
    pub up: bool,
    pub loopback: bool,
}

/// Every configured interface address (`getifaddrs`).
pub fn interfaces() -> Vec<IfAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = core::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; on success the list is freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned; the list stays valid until freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-NULL and points to a sockaddr whose family says its real type.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the sockaddr is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        out.push(IfAddr {
            name,
            ip,
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        });
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The name of the interface with index `index` (`if_indextoname`), if there is one.
pub fn interface_name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes, as if_indextoname requires; it returns NULL or buf.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// NCCL's interface filter syntax: `"^docker,lo"`, `"=eth0"`, `"ib"`.
pub fn ifname_matches(filter: &str, name: &str) -> bool {
    let (exclude, list) = match filter.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, filter),
    };
    let (exact, list) = match list.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let hit = list.split(',').filter(|s| !s.is_empty()).any(|p| {
        if exact {
            name == p
        } else {
            name.starts_with(p)
        }
    });
    hit != exclude
}

fn usable(a: &IfAddr) -> bool {
    let link_local = match a.ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    a.up && !link_local
}

/// The address a listener binds, and why: `netdev` is the RDMA port's own netdev (RoCE).
pub fn listen_ip(
    netdev: Option<&str>,
    ifaces: &[IfAddr],
    socket_ifname: Option<&str>,
) -> (IpAddr, String) {
    let v4_first = |it: &mut dyn Iterator<Item = &IfAddr>| -> Option<IfAddr> {
        let all: Vec<&IfAddr> = it.filter(|a| usable(a)).collect();
        all.iter()
            .find(|a| a.ip.is_ipv4())
            .or_else(|| all.first())
            .map(|a| (*a).clone())
    };
    if let Some(filter) = socket_ifname.filter(|f| !f.is_empty()) {
        if let Some(a) = v4_first(&mut ifaces.iter().filter(|a| ifname_matches(filter, &a.name))) {
            return (a.ip, format!("{} (NCCL_SOCKET_IFNAME={filter})", a.name));
        }
    }
    if let Some(nd) = netdev {
        if let Some(a) = v4_first(&mut ifaces.iter().filter(|a| a.name == nd)) {
            return (a.ip, format!("{} (the RDMA port's netdev)", a.name));
        }
    }
    let docker = |a: &IfAddr| a.name.starts_with("docker");
    let others = ifaces.iter().filter(|a| !a.loopback);
    if let Some(a) = v4_first(&mut others.clone().filter(|a| a.name.starts_with("ib"))) {
        return (
            a.ip,
            format!("{} (first InfiniBand interface that is up)", a.name),
        );
    }
    if let Some(a) = v4_first(&mut others.clone().filter(|a| !docker(a))) {
        return (
            a.ip,
            format!(
                "{} (first interface that is up, skipping docker* and lo)",
                a.name
            ),
        );
    }
    if let Some(a) = v4_first(&mut others.filter(|a| docker(a))) {
        return (
            a.ip,
            format!("{} (a docker interface: no other is up)", a.name),
        );
    }
    (
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "lo (no other interface)".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_filters_follow_nccl_syntax() {
        assert!(ifname_matches("eth", "eth0"));
        assert!(!ifname_matches("eth", "ib0"));
        assert!(ifname_matches("eth,ib", "ib0"));
        assert!(!ifname_matches("^docker,lo", "docker0"));
        assert!(ifname_matches("^docker,lo", "eth0"));
        assert!(ifname_matches("=eth0", "eth0"));
        assert!(!ifname_matches("=eth0", "eth01"));
        assert!(!ifname_matches("^=eth0", "eth0"));
    }

    fn iface(name: &str, ip: &str) -> IfAddr {
        IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
            up: true,
            loopback: name == "lo",
        }
    }

    #[test]
    fn the_automatic_choice_skips_docker_loopback_and_link_local_as_nccl_does() {
        let ifs = [
            iface("lo", "127.0.0.1"),
            iface("docker0", "172.17.0.1"),
            iface("eth0", "169.254.3.4"),
            iface("eth0", "fe80::1"),
            iface("net1", "10.0.0.5"),
        ];
        let (ip, why) = listen_ip(None, &ifs, None);
        assert_eq!(ip, "10.0.0.5".parse::<IpAddr>().unwrap());
        assert!(why.starts_with("net1"), "{why}");
        let (ip, _) = listen_ip(None, &ifs[..4], None);
        assert_eq!(
            ip,
            "172.17.0.1".parse::<IpAddr>().unwrap(),
            "docker before lo"
        );
        let (ip, why) = listen_ip(None, &ifs[..1], None);
        assert_eq!(ip, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert!(why.starts_with("lo"), "{why}");
        let mut with_ib = ifs.to_vec();
        with_ib.push(iface("ib0", "10.1.0.5"));
        assert_eq!(
            listen_ip(None, &with_ib, None).0,
            "10.1.0.5".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn the_ports_netdev_and_the_ifname_variable_come_first() {
        let ifs = [iface("eth0", "10.0.0.5"), iface("ens1", "10.9.0.5")];
        assert_eq!(
            listen_ip(Some("ens1"), &ifs, None).0,
            "10.9.0.5".parse::<IpAddr>().unwrap()
        );
        let (ip, why) = listen_ip(Some("ens1"), &ifs, Some("=eth0"));
        assert_eq!(ip, "10.0.0.5".parse::<IpAddr>().unwrap());
        assert!(why.contains("NCCL_SOCKET_IFNAME"), "{why}");
    }

    #[test]
    fn interface_index_one_is_named_and_zero_is_none() {
        assert_eq!(interface_name(0), None);
        assert!(
            interface_name(1).is_some(),
            "the loopback interface has index 1"
        );
    }

    #[test]
    fn host_interfaces_include_loopback() {
        assert!(
            interfaces()
                .iter()
                .any(|a| a.loopback && a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }
}
