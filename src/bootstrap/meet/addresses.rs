//! Where rank 0's store listens and which addresses it tells the other ranks.

use crate::error::{Error, ErrorKind, Result};
use crate::names;
use std::net::Ipv4Addr;

/// The address to bind the store to and the addresses to publish, in the order to try them:
/// `PSY_ADDR` if set; loopback only when every rank runs on this host; else every up,
/// non-loopback IPv4 address of this host, and loopback last when `all_here` is unknown (a
/// service that cannot say where the ranks run).
pub fn for_store(all_here: Option<bool>) -> Result<(String, Vec<String>)> {
    if let Ok(addr) = std::env::var(names::ADDR) {
        return Ok(("0.0.0.0".into(), vec![addr]));
    }
    if all_here == Some(true) {
        return Ok(("127.0.0.1".into(), vec!["127.0.0.1".into()]));
    }
    let mut found: Vec<String> = host_ipv4()?.iter().map(ToString::to_string).collect();
    if all_here.is_none() {
        found.push("127.0.0.1".into());
    }
    if found.is_empty() {
        return Err(Error::new(
            ErrorKind::Bootstrap,
            "the job spans several nodes but this host (rank 0's) has no up, non-loopback IPv4 \
             address to serve the job's store on; set PSY_ADDR to one the other hosts reach",
        ));
    }
    Ok(("0.0.0.0".into(), found))
}

/// This host's up, non-loopback IPv4 addresses, in the order the kernel lists them.
fn host_ipv4() -> Result<Vec<Ipv4Addr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `list` (freed below with freeifaddrs).
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(Error::io(
            "listing this host's network addresses (getifaddrs)",
            std::io::Error::last_os_error(),
        ));
    }
    let mut found = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let entry = unsafe { &*at };
        at = entry.ifa_next;
        let up = entry.ifa_flags & libc::IFF_UP as u32 != 0;
        let loopback = entry.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !up || loopback || entry.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its real type.
        let family = unsafe { (*entry.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in>() };
        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() && !found.contains(&ip) {
            found.push(ip);
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_lists_no_loopback_address() {
        let found = host_ipv4().unwrap();
        assert!(found.iter().all(|ip| !ip.is_loopback()), "{found:?}");
    }
}
