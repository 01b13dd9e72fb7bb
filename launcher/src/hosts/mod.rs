//! Host lists: which machines a job may use and how many ranks each may take, read from `-H`,
//! from a hostfile or from a Slurm allocation, and the placement of ranks on them. Everything
//! here is pure (no I/O but [`hostfile::read_hostfile`]), deterministic and independent of psyrun's command
//! line; multi-host launch builds on it.
//!
//! | source | parser | example |
//! |---|---|---|
//! | `-H` / `--host` | [`spec::parse_host_spec`] | `alice@a:4,b:4,[fe80::1]:2` |
//! | `--hostfile` | [`hostfile::parse_hostfile`] / [`hostfile::read_hostfile`] | `node01 slots=8`, `node02:4` |
//! | Slurm | [`slurm::from_slurm_env`] ([`slurm::expand_nodelist`], [`slurm::parse_tasks_per_node`]) | `node[01-04]`, `2(x3),1` |
//!
//! ## One host entry
//!
//! `-H` entries and the first word of a hostfile line share one grammar:
//!
//! ```text
//! entry = [user "@"] host [":" slots]
//! host  = name | "[" ipv6-address "]" | host-list
//! host-list = a name with ranges in brackets, as Slurm writes them: node[01-04,07], rack[1-2]-n[1-4]
//! name  = letters, digits, '-', '.', '_' (not starting with '-' or '.')
//! slots = a positive decimal number
//! ```
//!
//! So `a`, `a:4`, `alice@a`, `alice@a:4`, `[::1]:2` are hosts; there is exactly one `:` outside
//! brackets, and it always introduces the slot count, as in Open MPI and MPICH. An SSH port is
//! never written in an entry (`a:4:2222` and `a:2222` could not be told apart from slot counts):
//! give it in a hostfile (`a slots=4 port=2222`) or in `~/.ssh/config`. IPv6 addresses go in
//! brackets; an unbracketed one is rejected as having too many `:`.
//!
//! ## Duplicates
//!
//! A [`HostList`] keeps hosts in the order first named. A host named again (same name) is merged
//! into the first mention, as mpirun does: slot counts add up (`-H a:2,b:2,a:2` gives `a` four
//! slots), `max_slots` add up (unlimited if any mention is unlimited). Mentions must agree on the
//! user and port, and either all give a slot count or none does (`a,a` is `a` with its core
//! count; `a:2,a` is an error, since "2 plus all cores" means nothing).
//!
//! ## Placement
//!
//! [`place`] fills hosts in order, each up to its slots (mpirun's default `--map-by slot`); a
//! host without a slot count gets `default_slots(host)` (its core count, found by the caller).
//! With `oversubscribe`, ranks beyond the total slots are dealt round-robin to the hosts (never
//! past a host's `max_slots`); each host's ranks stay consecutive.

pub mod hostfile;
pub mod slurm;
pub mod spec;

use crate::placement::{self, HostSlots, Placement};
use std::collections::HashMap;
use std::path::PathBuf;

/// One machine a job may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Its name or address as SSH will be given it (an IPv6 address without brackets).
    pub name: String,
    /// The user to log in as, if not the current one.
    pub user: Option<String>,
    /// The SSH port, if not SSH's default (hostfiles only: `port=N`).
    pub port: Option<u16>,
    /// How many ranks it takes before it is oversubscribed; `None` means as many as it has
    /// cores, which the caller resolves (see [`place`]).
    pub slots: Option<usize>,
    /// The most ranks it may take even when oversubscribing (hostfiles only: `max_slots=N`);
    /// `None` means no limit.
    pub max_slots: Option<usize>,
}

impl Host {
    /// A host called `name`, with no user, port or slot count.
    pub fn new(name: impl Into<String>) -> Host {
        Host {
            name: name.into(),
            user: None,
            port: None,
            slots: None,
            max_slots: None,
        }
    }

    /// The same host with `slots` slots.
    pub fn with_slots(mut self, slots: usize) -> Host {
        self.slots = Some(slots);
        self
    }
}

/// Hosts in the order first named, each name once (see the module docs on duplicates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostList {
    hosts: Vec<Host>,
    index: HashMap<String, usize>,
}

impl HostList {
    /// An empty list.
    pub fn new() -> HostList {
        HostList::default()
    }

    /// Builds a list from `hosts` in order, merging duplicates with [`HostList::add`].
    pub fn from_hosts(hosts: impl IntoIterator<Item = Host>) -> Result<HostList, HostsError> {
        let mut list = HostList::new();
        for host in hosts {
            list.add(host)?;
        }
        Ok(list)
    }

    /// Appends `host`, or merges it into the host of the same name already listed: slots add
    /// up, user and port must agree, and either both mentions give a slot count or neither does.
    /// On error the list is unchanged.
    pub fn add(&mut self, host: Host) -> Result<(), HostsError> {
        let Some(&i) = self.index.get(&host.name) else {
            self.index.insert(host.name.clone(), self.hosts.len());
            self.hosts.push(host);
            return Ok(());
        };
        let old = &self.hosts[i];
        let conflict = |problem: String| HostsError::Conflict {
            host: host.name.clone(),
            problem,
        };
        let user = match (&old.user, &host.user) {
            (Some(a), Some(b)) if a != b => {
                return Err(conflict(format!(
                    "named with user {a:?} and with user {b:?}; use one user per host"
                )))
            }
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        let port = match (old.port, host.port) {
            (Some(a), Some(b)) if a != b => {
                return Err(conflict(format!(
                    "named with SSH port {a} and with port {b}; use one port per host"
                )))
            }
            (a, b) => a.or(b),
        };
        let slots = match (old.slots, host.slots) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, None) => None,
            (Some(n), None) | (None, Some(n)) => {
                return Err(conflict(format!(
                    "named once with {n} slot(s) and once without a slot count (all its cores); \
                     give it a slot count every time or never"
                )))
            }
        };
        let max_slots = match (old.max_slots, host.max_slots) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
        let merged = &mut self.hosts[i];
        merged.user = user;
        merged.port = port;
        merged.slots = slots;
        merged.max_slots = max_slots;
        Ok(())
    }

    /// The hosts, in order.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The hosts, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Host> {
        self.hosts.iter()
    }

    /// How many distinct hosts are listed.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether no host is listed.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The list without the host called `name` (unchanged if there is none).
    pub fn without(&self, name: &str) -> HostList {
        let kept = self.hosts.iter().filter(|h| h.name != name).cloned();
        // Every host of a valid list is distinct, so nothing can fail to merge.
        HostList::from_hosts(kept).unwrap_or_default()
    }
}

impl<'a> IntoIterator for &'a HostList {
    type Item = &'a Host;
    type IntoIter = std::slice::Iter<'a, Host>;
    fn into_iter(self) -> Self::IntoIter {
        self.hosts.iter()
    }
}

/// Why a host list could not be read, or ranks could not be placed on it. Each message names
/// the problem, where it is, and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// A `-H` value was not understood.
    #[error("-H {text:?}: {problem}")]
    Spec {
        /// The offending entry (or the whole value, for problems with commas).
        text: String,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// A hostfile line was not understood.
    #[error("{file}:{line}: {text:?}: {problem}")]
    Hostfile {
        /// The file as named by the user.
        file: String,
        /// The 1-based line number.
        line: usize,
        /// The line, without its comment and surrounding blanks.
        text: String,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// A hostfile names no host.
    #[error("{file}: no hosts in the hostfile (only blank lines and comments); add lines like \"node01 slots=8\"")]
    EmptyHostfile {
        /// The file as named by the user.
        file: String,
    },
    /// A hostfile could not be read.
    #[error("reading hostfile {}: {source}", file.display())]
    Read {
        /// The file as named by the user.
        file: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A Slurm node list (`SLURM_JOB_NODELIST`) was not understood.
    #[error("Slurm node list {text:?}: {problem}")]
    Nodelist {
        /// The whole node list.
        text: String,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// `SLURM_TASKS_PER_NODE` was not understood.
    #[error("SLURM_TASKS_PER_NODE {text:?}: {problem}")]
    TasksPerNode {
        /// The variable's value.
        text: String,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// `SLURM_JOB_NODELIST` and `SLURM_TASKS_PER_NODE` describe different numbers of nodes.
    #[error(
        "SLURM_JOB_NODELIST {nodelist:?} names {nodes} node(s) but SLURM_TASKS_PER_NODE {tasks:?} \
         gives task counts for {counts}; they do not come from the same allocation \
         (run inside one salloc/sbatch job, or unset both)"
    )]
    SlurmMismatch {
        /// `SLURM_JOB_NODELIST`.
        nodelist: String,
        /// How many nodes it names.
        nodes: usize,
        /// `SLURM_TASKS_PER_NODE`.
        tasks: String,
        /// How many counts it gives.
        counts: usize,
    },
    /// Two mentions of one host disagree.
    #[error("host {host:?} is {problem}")]
    Conflict {
        /// The host's name.
        host: String,
        /// How the mentions disagree and how to fix it.
        problem: String,
    },
    /// Zero ranks were asked for.
    #[error("a job needs at least one rank; pass -n N with N >= 1")]
    NoRanks,
    /// Ranks were to be placed on an empty host list.
    #[error("no hosts to place ranks on; give some with -H or --hostfile")]
    NoHosts,
    /// More ranks than slots, without oversubscribing.
    #[error(
        "{ranks} ranks do not fit in the {slots} slots of {hosts} host(s); pass --oversubscribe \
         to run more ranks than slots, or add slots (-H host:N, or slots=N in the hostfile)"
    )]
    NotEnoughSlots {
        /// Ranks asked for.
        ranks: usize,
        /// Slots in total.
        slots: usize,
        /// Hosts given.
        hosts: usize,
    },
    /// More ranks than the hosts' `max_slots` allow, even oversubscribing.
    #[error(
        "{ranks} ranks exceed the {max} ranks the hosts' max_slots allow, even with \
         --oversubscribe; raise max_slots in the hostfile, add hosts, or lower -n"
    )]
    OverMaxSlots {
        /// Ranks asked for.
        ranks: usize,
        /// The sum of the hosts' limits.
        max: usize,
    },
}

/// The result of this module's functions.
pub type Result<T, E = HostsError> = std::result::Result<T, E>;

/// One parsed `[user@]host[:slots]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) user: Option<String>,
    pub(crate) name: String,
    pub(crate) slots: Option<usize>,
}

impl Entry {
    pub(crate) fn into_host(self) -> Host {
        Host {
            name: self.name,
            user: self.user,
            port: None,
            slots: self.slots,
            max_slots: None,
        }
    }
}

/// The grammar of one entry, for error messages.
pub(crate) const ENTRY_GRAMMAR: &str = "[user@]host[:slots]";

/// Parses one `[user@]host[:slots]` entry; the error is the problem, for the caller to place.
pub(crate) fn parse_entry(text: &str) -> Result<Entry, String> {
    if text.is_empty() {
        return Err(format!("empty host; expected {ENTRY_GRAMMAR}"));
    }
    let (user, rest) = match text.split_once('@') {
        Some((user, rest)) => {
            if rest.contains('@') {
                return Err(format!(
                    "more than one '@'; expected {ENTRY_GRAMMAR}, like alice@node01:4"
                ));
            }
            validate_user(user)?;
            (Some(user.to_string()), rest)
        }
        None => (None, text),
    };
    let (name, slots) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((inner, after)) = bracketed.split_once(']') else {
            return Err("'[' without ']'; write IPv6 addresses as [addr] or [addr]:slots".into());
        };
        validate_ipv6(inner)?;
        let slots = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(slots) => Some(parse_slots(slots)?),
                None => {
                    return Err(format!(
                        "unexpected {after:?} after ']'; expected [addr] or [addr]:slots"
                    ))
                }
            },
        };
        (inner.to_string(), slots)
    } else {
        let mut parts = rest.split(':');
        let name = parts.next().unwrap_or_default();
        let slots = parts.next();
        if parts.next().is_some() {
            return Err(format!(
                "too many ':'; expected {ENTRY_GRAMMAR} with one ':' before the slot count. \
                 An SSH port goes in a hostfile (port=N) or ~/.ssh/config; \
                 IPv6 addresses go in brackets, like [fe80::1]:4"
            ));
        }
        validate_name(name)?;
        let slots = slots.map(parse_slots).transpose()?;
        (name.to_string(), slots)
    };
    Ok(Entry { user, name, slots })
}

/// Parses an entry whose host may be a host list in Slurm's (and pdsh's, Flux's) syntax, as
/// [`slurm::expand_nodelist`] reads it: `node[01-04,07]:2` stands for `node01:2`, `node02:2`, ...,
/// `rack[1-2]-n[1-2]` for four hosts. The user and the slot count apply to every host it names.
/// An entry without brackets (or an IPv6 address in them) is one [`parse_entry`].
pub(crate) fn parse_entries(text: &str) -> Result<Vec<Entry>, String> {
    let (user, rest) = match text.split_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, text),
    };
    if rest.starts_with('[') || !rest.contains('[') {
        return parse_entry(text).map(|e| vec![e]);
    }
    let (pattern, slots) = match rest.rsplit_once(':') {
        Some((pattern, slots)) if !slots.contains(']') => (pattern, Some(slots)),
        _ => (rest, None),
    };
    let names = slurm::expand_nodelist(pattern).map_err(|e| match e {
        HostsError::Nodelist { problem, .. } => format!("in the host list {pattern:?}: {problem}"),
        other => other.to_string(),
    })?;
    names
        .iter()
        .map(|name| {
            let user = user.map(|u| format!("{u}@")).unwrap_or_default();
            let slots = slots.map(|s| format!(":{s}")).unwrap_or_default();
            parse_entry(&format!("{user}{name}{slots}"))
        })
        .collect()
}

/// Parses a positive decimal count (digits only: no sign, no blanks); `None` otherwise.
pub(crate) fn parse_positive(text: &str) -> Option<usize> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n > 0)
}

fn parse_slots(text: &str) -> Result<usize, String> {
    if text.is_empty() {
        return Err("missing slot count after ':'; write host:N, like node01:4".into());
    }
    parse_positive(text).ok_or_else(|| {
        format!("slot count {text:?} is not a positive number; write host:N, like node01:4")
    })
}

/// The longest host name accepted (DNS's limit).
const MAX_NAME: usize = 253;

/// Checks a host name: letters, digits, `-`, `.`, `_`, not starting with `-` (which ssh would
/// take for an option) or `.`.
pub(crate) fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("missing host name; expected {ENTRY_GRAMMAR}"));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "host name is {} characters long; at most {MAX_NAME} are allowed",
            name.len()
        ));
    }
    if name.starts_with('-') || name.starts_with('.') {
        return Err("host names cannot start with '-' or '.'".into());
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        return Err(format!(
            "{c:?} is not allowed in a host name; use letters, digits, '-', '.' and '_'"
        ));
    }
    Ok(())
}

fn validate_user(user: &str) -> Result<(), String> {
    if user.is_empty() {
        return Err("missing user name before '@'; write user@host, or just host".into());
    }
    if user.starts_with('-') {
        return Err("user names cannot start with '-'".into());
    }
    if let Some(c) = user
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        return Err(format!(
            "{c:?} is not allowed in a user name; use letters, digits, '-', '.' and '_'"
        ));
    }
    Ok(())
}

fn validate_ipv6(inner: &str) -> Result<(), String> {
    let (addr, zone) = match inner.split_once('%') {
        Some((addr, zone)) => (addr, Some(zone)),
        None => (inner, None),
    };
    if addr.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(format!(
            "[{inner}] is not an IPv6 address; brackets are only for IPv6 addresses, like [fe80::1]"
        ));
    }
    if let Some(zone) = zone {
        if zone.is_empty()
            || !zone
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "bad zone {zone:?} in [{inner}]; write [addr%interface], like [fe80::1%eth0]"
            ));
        }
    }
    Ok(())
}

/// Places `ranks` ranks on `hosts`, filling hosts in order up to their slots (mpirun's
/// `--map-by slot`). A host without a slot count has `default_slots(host)` slots (its cores);
/// `max_slots` caps a host's slots. Without `oversubscribe`, more ranks than slots is an error;
/// with it, the extra ranks are dealt round-robin to the hosts below their `max_slots`, and each
/// host's ranks stay consecutive. The result is indexed by rank; [`Placement::host`] indexes
/// `hosts`.
pub fn place(
    hosts: &HostList,
    ranks: usize,
    default_slots: impl Fn(&Host) -> usize,
    oversubscribe: bool,
) -> Result<Vec<Placement>> {
    place_by(hosts, ranks, default_slots, oversubscribe, false)
}

/// [`place`], or with `by_node` the same slots dealt round-robin across the hosts (`--map-by
/// node`: rank 0 on the first host, rank 1 on the second, ...).
pub fn place_by(
    hosts: &HostList,
    ranks: usize,
    default_slots: impl Fn(&Host) -> usize,
    oversubscribe: bool,
    by_node: bool,
) -> Result<Vec<Placement>> {
    if ranks == 0 {
        return Err(HostsError::NoRanks);
    }
    if hosts.is_empty() {
        return Err(HostsError::NoHosts);
    }
    let caps: Vec<Option<usize>> = hosts.iter().map(|h| h.max_slots).collect();
    let mut counts: Vec<usize> = hosts
        .iter()
        .map(|h| {
            let slots = h.slots.unwrap_or_else(|| default_slots(h));
            h.max_slots.map_or(slots, |max| slots.min(max))
        })
        .collect();
    let slots = counts.iter().fold(0usize, |a, &c| a.saturating_add(c));
    if slots < ranks {
        if !oversubscribe {
            return Err(HostsError::NotEnoughSlots {
                ranks,
                slots,
                hosts: hosts.len(),
            });
        }
        if caps.iter().all(Option::is_some) {
            let max = caps
                .iter()
                .flatten()
                .fold(0usize, |a, &c| a.saturating_add(c));
            if max < ranks {
                return Err(HostsError::OverMaxSlots { ranks, max });
            }
        }
        let mut extra = ranks - slots;
        while extra > 0 {
            for (count, cap) in counts.iter_mut().zip(&caps) {
                if extra > 0 && cap.map_or(true, |cap| *count < cap) {
                    *count += 1;
                    extra -= 1;
                }
            }
        }
    }
    let shape: Vec<HostSlots> = hosts
        .iter()
        .zip(counts)
        .map(|(h, slots)| HostSlots {
            name: h.name.clone(),
            slots,
        })
        .collect();
    let placed = if by_node {
        placement::place_round_robin(&shape, ranks)
    } else {
        placement::place(&shape, ranks)
    };
    placed.map_err(|e| match e {
        placement::PlacementError::NoRanks => HostsError::NoRanks,
        placement::PlacementError::NotEnoughSlots {
            ranks,
            slots,
            hosts,
        } => HostsError::NotEnoughSlots {
            ranks,
            slots,
            hosts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(text: &str) -> Entry {
        parse_entry(text).unwrap()
    }

    #[test]
    fn entry_grammar() {
        assert_eq!(
            entry("a"),
            Entry {
                user: None,
                name: "a".into(),
                slots: None
            }
        );
        assert_eq!(entry("node-01.cluster_x:16").slots, Some(16));
        let e = entry("alice@a:4");
        assert_eq!(
            (e.user.as_deref(), e.name.as_str(), e.slots),
            (Some("alice"), "a", Some(4))
        );
        assert_eq!(entry("alice@a").slots, None);
        assert_eq!(entry("[::1]").name, "::1");
        assert_eq!(entry("[fe80::1%eth0]:2").slots, Some(2));
        assert_eq!(entry("bob@[2001:db8::5]:3").user.as_deref(), Some("bob"));
        assert_eq!(entry("10.0.0.1:2").name, "10.0.0.1");
    }

    #[test]
    fn entry_errors_say_what_to_write() {
        let err = |t: &str| parse_entry(t).unwrap_err();
        assert!(err("").contains("empty host"));
        assert!(err("a:4:2222").contains("too many ':'"));
        assert!(err("a:4:2222").contains("port=N"));
        assert!(err("fe80::1").contains("brackets"));
        assert!(err("a:").contains("missing slot count"));
        assert!(err("a:0").contains("not a positive number"));
        assert!(err("a:+4").contains("not a positive number"));
        assert!(err("a:x").contains("not a positive number"));
        assert!(err("a:99999999999999999999999").contains("not a positive number"));
        assert!(err("@a").contains("missing user"));
        assert!(err("a@b@c").contains("more than one '@'"));
        assert!(err("-oProxyCommand=x").contains("cannot start with '-'"));
        assert!(err("-a").contains("cannot start with '-'"));
        assert!(err("-u@a").contains("user names cannot start"));
        assert!(err(".a").contains("cannot start"));
        assert!(err("a#22").contains("'#' is not allowed"));
        assert!(err("a b").contains("' ' is not allowed"));
        assert!(err("x y@a").contains("user name"));
        assert!(err(":4").contains("missing host name"));
        assert!(err("[::1").contains("without ']'"));
        assert!(err("[node01]").contains("not an IPv6 address"));
        assert!(err("[::1]4").contains("after ']'"));
        assert!(err("[::1]:").contains("missing slot count"));
        assert!(err("[fe80::1%]").contains("bad zone"));
        assert!(err(&"a".repeat(254)).contains("at most 253"));
    }

    #[test]
    fn duplicates_merge_in_first_order() {
        let list = HostList::from_hosts([
            Host::new("a").with_slots(2),
            Host::new("b").with_slots(1),
            Host {
                user: Some("u".into()),
                port: Some(22),
                ..Host::new("a").with_slots(3)
            },
        ])
        .unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list.hosts()[0].name, "a");
        assert_eq!(list.hosts()[0].slots, Some(5));
        assert_eq!(list.hosts()[0].user.as_deref(), Some("u"));
        assert_eq!(list.hosts()[0].port, Some(22));
        assert_eq!(list.hosts()[1].name, "b");

        let list = HostList::from_hosts([Host::new("a"), Host::new("a")]).unwrap();
        assert_eq!(list.hosts(), &[Host::new("a")]);

        let capped = |max| Host {
            max_slots: max,
            ..Host::new("m").with_slots(1)
        };
        let list = HostList::from_hosts([capped(Some(2)), capped(Some(3))]).unwrap();
        assert_eq!(list.hosts()[0].max_slots, Some(5));
        let list = HostList::from_hosts([capped(Some(2)), capped(None)]).unwrap();
        assert_eq!(list.hosts()[0].max_slots, None);
    }

    #[test]
    fn conflicting_duplicates_are_rejected_and_leave_the_list_alone() {
        let mut list = HostList::from_hosts([Host {
            user: Some("u".into()),
            port: Some(22),
            ..Host::new("a").with_slots(2)
        }])
        .unwrap();
        let before = list.clone();
        let e = list
            .add(Host {
                user: Some("v".into()),
                ..Host::new("a").with_slots(1)
            })
            .unwrap_err();
        assert!(
            e.to_string().contains("user \"u\" and with user \"v\""),
            "{e}"
        );
        let e = list
            .add(Host {
                port: Some(2222),
                ..Host::new("a").with_slots(1)
            })
            .unwrap_err();
        assert!(e.to_string().contains("port 22 and with port 2222"), "{e}");
        let e = list.add(Host::new("a")).unwrap_err();
        assert!(
            e.to_string().contains("slot count every time or never"),
            "{e}"
        );
        assert_eq!(list, before);
    }

    fn list(slots: &[Option<usize>]) -> HostList {
        HostList::from_hosts(slots.iter().enumerate().map(|(i, &s)| Host {
            slots: s,
            ..Host::new(format!("h{i}"))
        }))
        .unwrap()
    }

    fn shape(p: &[Placement]) -> Vec<(usize, usize, usize, usize)> {
        p.iter()
            .map(|p| (p.host, p.local_rank, p.local_size, p.node_rank))
            .collect()
    }

    #[test]
    fn place_fills_by_slot_and_resolves_default_slots() {
        let hosts = list(&[Some(2), None, Some(1)]);
        let p = place(&hosts, 5, |_| 2, false).unwrap();
        assert_eq!(
            shape(&p),
            [
                (0, 0, 2, 0),
                (0, 1, 2, 0),
                (1, 0, 2, 1),
                (1, 1, 2, 1),
                (2, 0, 1, 2)
            ]
        );
        let p = place(&hosts, 3, |h| if h.name == "h1" { 8 } else { 0 }, false).unwrap();
        assert_eq!(shape(&p), [(0, 0, 2, 0), (0, 1, 2, 0), (1, 0, 1, 1)]);
    }

    #[test]
    fn place_errors_state_counts_and_the_fix() {
        let hosts = list(&[Some(2), Some(2)]);
        let e = place(&hosts, 5, |_| 1, false).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("5 ranks do not fit in the 4 slots of 2 host(s)"),
            "{msg}"
        );
        assert!(msg.contains("--oversubscribe"), "{msg}");
        assert!(msg.contains("add slots"), "{msg}");
        assert!(matches!(
            place(&hosts, 0, |_| 1, true),
            Err(HostsError::NoRanks)
        ));
        assert!(matches!(
            place(&HostList::new(), 1, |_| 1, true),
            Err(HostsError::NoHosts)
        ));
    }

    #[test]
    fn oversubscribing_deals_extra_ranks_round_robin() {
        let hosts = list(&[Some(2), Some(1)]);
        let p = place(&hosts, 6, |_| 1, true).unwrap();
        // Slots 2 + 1, then 3 extra: one each, then one more for h0.
        assert_eq!(
            shape(&p),
            [
                (0, 0, 4, 0),
                (0, 1, 4, 0),
                (0, 2, 4, 0),
                (0, 3, 4, 0),
                (1, 0, 2, 1),
                (1, 1, 2, 1)
            ]
        );
        // Within the slots, oversubscribing changes nothing.
        assert_eq!(
            place(&hosts, 3, |_| 1, true).unwrap(),
            place(&hosts, 3, |_| 1, false).unwrap()
        );
    }

    #[test]
    fn max_slots_caps_oversubscription() {
        let hosts = HostList::from_hosts([
            Host {
                max_slots: Some(2),
                ..Host::new("a").with_slots(1)
            },
            Host {
                max_slots: Some(3),
                ..Host::new("b").with_slots(1)
            },
        ])
        .unwrap();
        let p = place(&hosts, 5, |_| 1, true).unwrap();
        assert_eq!(p.iter().filter(|p| p.host == 0).count(), 2);
        assert_eq!(p.iter().filter(|p| p.host == 1).count(), 3);
        let e = place(&hosts, 6, |_| 1, true).unwrap_err();
        assert!(
            e.to_string()
                .contains("6 ranks exceed the 5 ranks the hosts' max_slots allow"),
            "{e}"
        );
        // A default slot count above max_slots is cut down to it.
        let hosts = HostList::from_hosts([Host {
            max_slots: Some(2),
            ..Host::new("a")
        }])
        .unwrap();
        assert!(place(&hosts, 3, |_| 8, false).is_err());
        assert_eq!(place(&hosts, 2, |_| 8, false).unwrap().len(), 2);
    }

    fn arb_hosts() -> impl Strategy<Value = HostList> {
        proptest::collection::vec(
            (
                proptest::option::of(1usize..6),
                proptest::option::weighted(0.3, 0usize..8),
            ),
            0..6,
        )
        .prop_map(|spec| {
            HostList::from_hosts(spec.into_iter().enumerate().map(|(i, (slots, max))| Host {
                slots,
                max_slots: max,
                ..Host::new(format!("h{i}"))
            }))
            .unwrap_or_default()
        })
    }

    proptest! {
        #[test]
        fn placement_respects_slots_and_numbers_ranks_once(
            hosts in arb_hosts(),
            ranks in 0usize..40,
            default in 0usize..4,
            oversubscribe: bool,
        ) {
            let slots_of = |h: &Host| {
                let s = h.slots.unwrap_or(default);
                h.max_slots.map_or(s, |m| s.min(m))
            };
            let total: usize = hosts.iter().map(slots_of).sum();
            match place(&hosts, ranks, |_| default, oversubscribe) {
                Ok(p) => {
                    prop_assert_eq!(p.len(), ranks);
                    for (r, pl) in p.iter().enumerate() {
                        prop_assert_eq!(pl.rank, r);
                    }
                    for (i, h) in hosts.iter().enumerate() {
                        let here: Vec<_> = p.iter().filter(|p| p.host == i).collect();
                        if !oversubscribe {
                            prop_assert!(here.len() <= slots_of(h));
                        }
                        if let Some(max) = h.max_slots {
                            prop_assert!(here.len() <= max);
                        }
                        let local: Vec<_> = here.iter().map(|p| p.local_rank).collect();
                        prop_assert_eq!(local, (0..here.len()).collect::<Vec<_>>());
                        prop_assert!(here.iter().all(|p| p.local_size == here.len()));
                    }
                }
                Err(_) => {
                    let fits = ranks > 0 && !hosts.is_empty() && ranks <= total;
                    prop_assert!(!fits, "{} ranks fit in {} slots but were refused", ranks, total);
                }
            }
            if !oversubscribe && ranks > 0 && !hosts.is_empty() {
                prop_assert_eq!(place(&hosts, ranks, |_| default, false).is_ok(), ranks <= total);
            }
        }

        #[test]
        fn entry_parser_never_panics(s in "\\PC*") {
            let _ = parse_entry(&s);
        }
    }
}
