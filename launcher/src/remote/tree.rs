//! A tree launch: psyrun reaches at most `--tree-width` hosts itself, and each of those reaches
//! the next level and relays for it ([`super::relay`]), so no one node makes a thousand SSH
//! connections (PRRTE routes its daemons through a radix tree, Slurm through `TreeWidth`).
//!
//! The shape is a pure function of the host list and the width ([`split`]), applied the same way
//! by psyrun and by every relaying agent on the hosts below it: the first `width` hosts are
//! reached directly, and the rest are dealt to them in contiguous runs. 1,024 hosts at width 32
//! are 32 hosts reached by psyrun, each reaching 31: two levels.
//!
//! Messages to a host below go down as [`ToAgent::Relay`] and
//! what it says comes up wrapped ([`super::protocol`]); heartbeats are per hop, so a relay that is
//! lost makes psyrun report its whole subtree lost, and the hosts below it, hearing nothing from
//! their relay, stop their ranks themselves.

use super::constants::MIN_WIDTH;
use super::protocol::{path_bytes, path_from};
use super::protocol::{RelayHost, ToAgent};
use super::ssh::SshTarget;
use super::ssh_config::HostKeyPolicy;
use std::time::Duration;

/// Splits the hosts `below` (indices, in order) among the at most `width` that are reached
/// directly: each with the hosts it relays for, in order.
pub fn split(below: &[usize], width: usize) -> Vec<(usize, Vec<usize>)> {
    let width = width.max(MIN_WIDTH);
    if below.len() <= width {
        return below.iter().map(|&h| (h, Vec::new())).collect();
    }
    let (heads, rest) = below.split_at(width);
    let (each, extra) = (rest.len() / width, rest.len() % width);
    let mut at = 0;
    heads
        .iter()
        .enumerate()
        .map(|(i, &head)| {
            let n = each + usize::from(i < extra);
            let run = rest[at..at + n].to_vec();
            at += n;
            (head, run)
        })
        .collect()
}

/// The number of levels below psyrun for `hosts` hosts at `width` (0 for no hosts).
pub fn depth(hosts: usize, width: usize) -> usize {
    fn below(n: usize, width: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let all: Vec<usize> = (0..n).collect();
        1 + split(&all, width)
            .iter()
            .map(|(_, run)| below(run.len(), width))
            .max()
            .unwrap_or(0)
    }
    below(hosts, width)
}

/// The relaying agent of every host (`None`: psyrun reaches it itself) for `hosts` hosts.
pub fn parents(hosts: usize, width: usize) -> Vec<Option<usize>> {
    fn walk(below: &[usize], parent: Option<usize>, width: usize, out: &mut [Option<usize>]) {
        for (head, run) in split(below, width) {
            out[head] = parent;
            walk(&run, Some(head), width, out);
        }
    }
    let mut out = vec![None; hosts];
    let all: Vec<usize> = (0..hosts).collect();
    walk(&all, None, width, &mut out);
    out
}

/// The Reach that asks an agent to reach `hosts` at `width` (psyrun's first level, or a
/// relay's hosts that relay in turn).
pub fn reach_message(
    width: usize,
    heartbeat_timeout: Duration,
    remote_psyrun: &std::path::Path,
    hosts: Vec<RelayHost>,
) -> ToAgent {
    ToAgent::Reach {
        width: u32::try_from(width).unwrap_or(u32::MAX),
        heartbeat_timeout_ms: u64::try_from(heartbeat_timeout.as_millis()).unwrap_or(u64::MAX),
        remote_psyrun: path_bytes(remote_psyrun),
        hosts,
    }
}

/// What a relaying agent needs to reach host `index` as `target` says (`local`: as a child
/// process, for `--launcher local`).
pub fn relay_host(index: usize, target: &SshTarget, local: bool) -> RelayHost {
    RelayHost {
        host: u32::try_from(index).unwrap_or(u32::MAX),
        name: target.name.clone(),
        local,
        address: target.address.clone(),
        user: target.user.clone(),
        port: target.port,
        identities: target.identities.iter().map(|p| path_bytes(p)).collect(),
        connect_timeout_ms: u64::try_from(target.connect_timeout.as_millis()).unwrap_or(u64::MAX),
        policy: match target.policy {
            HostKeyPolicy::Strict => 0,
            HostKeyPolicy::AcceptNew => 1,
            HostKeyPolicy::Off => 2,
        },
        known_hosts: path_bytes(&target.known_hosts),
    }
}

/// The SSH target a [`RelayHost`] stands for (an unknown policy number is strict).
pub fn target_of(h: &RelayHost) -> SshTarget {
    let path = |b: &Vec<u8>| path_from(b);
    SshTarget {
        name: h.name.clone(),
        address: h.address.clone(),
        user: h.user.clone(),
        port: h.port,
        identities: h.identities.iter().map(path).collect(),
        connect_timeout: Duration::from_millis(h.connect_timeout_ms),
        policy: match h.policy {
            1 => HostKeyPolicy::AcceptNew,
            2 => HostKeyPolicy::Off,
            _ => HostKeyPolicy::Strict,
        },
        known_hosts: path(&h.known_hosts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_the_width_every_host_is_reached_directly() {
        assert_eq!(split(&[], 4), vec![]);
        assert_eq!(
            split(&[0, 1, 2], 4),
            vec![(0, vec![]), (1, vec![]), (2, vec![])]
        );
        assert_eq!(depth(32, 32), 1);
        assert_eq!(parents(3, 4), vec![None; 3]);
    }

    #[test]
    fn beyond_the_width_the_rest_is_dealt_in_runs() {
        let all: Vec<usize> = (0..11).collect();
        // 8 left over for 3 heads: 3, 3, 2.
        assert_eq!(
            split(&all, 3),
            vec![(0, vec![3, 4, 5]), (1, vec![6, 7, 8]), (2, vec![9, 10])]
        );
    }

    #[test]
    fn every_host_has_one_place_and_the_tree_is_shallow() {
        for width in [2, 3, 4, 8, 32] {
            for n in 0..200 {
                let p = parents(n, width);
                // Every host below a parent comes after it, and at most `width` share a parent.
                for (h, parent) in p.iter().enumerate() {
                    if let Some(q) = parent {
                        assert!(*q < h, "n {n} width {width}: {h} under {q}");
                    }
                }
                for q in std::iter::once(None).chain((0..n).map(Some)) {
                    assert!(p.iter().filter(|x| **x == q).count() <= width);
                }
            }
        }
        assert_eq!(depth(1024, 32), 2);
        assert_eq!(depth(1056, 32), 2);
        assert_eq!(depth(33, 32), 2);
        assert_eq!(depth(16, 4), 2);
        assert_eq!(depth(32, 4), 3);
    }

    #[test]
    fn a_target_survives_the_relay() {
        let t = SshTarget {
            name: "h7".into(),
            address: "10.0.0.7".into(),
            user: "me".into(),
            port: 2222,
            identities: vec!["/k/a".into(), "/k/b".into()],
            connect_timeout: Duration::from_millis(1500),
            policy: HostKeyPolicy::AcceptNew,
            known_hosts: "/k/known".into(),
        };
        let r = relay_host(7, &t, false);
        assert_eq!(r.host, 7);
        assert_eq!(target_of(&r), t);
    }
}
