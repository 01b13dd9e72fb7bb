//! `-H` / `--host`: a comma-separated list of `[user@]host[:slots]` entries (see the grammar in
//! [the module docs](super)).
//!
//! ```text
//! -H a:4,b:4              two hosts, four slots each
//! -H a,b                  two hosts, as many slots as each has cores
//! -H alice@a:8,bob@b      per-host users
//! -H [fe80::1]:2,10.0.0.7 an IPv6 and an IPv4 address
//! -H a:2,b:2,a:2          a named twice: a gets 4 slots, and comes first
//! -H node[01-04,07]:2     five hosts in Slurm's host-list syntax, two slots each
//! ```
//!
//! Blanks around entries are ignored (`-H "a:4, b:4"`). Not accepted: empty entries (`a,,b`,
//! a trailing comma), an SSH port (`a:4:2222`; use a hostfile's `port=N` or `~/.ssh/config`),
//! bare IPv6 addresses (bracket them), and names starting with `-`.

use super::{parse_entries, slurm, HostList, HostsError, Result};

/// Parses a `-H` value into a host list, merging duplicate hosts.
pub fn parse_host_spec(spec: &str) -> Result<HostList> {
    let error = |text: &str, problem: String| HostsError::Spec {
        text: text.to_string(),
        problem,
    };
    if spec.trim().is_empty() {
        return Err(error(
            spec,
            "no hosts; expected a comma-separated list like a:4,b:4".into(),
        ));
    }
    let mut list = HostList::new();
    // Commas inside brackets belong to a host list (node[1,3]).
    for item in slurm::split_top_level(spec).map_err(|problem| error(spec, problem))? {
        let item = item.trim();
        if item.is_empty() {
            return Err(error(
                spec,
                "empty host entry (two commas in a row, or a comma at an end); remove the extra comma"
                    .into(),
            ));
        }
        for entry in parse_entries(item).map_err(|problem| error(item, problem))? {
            list.add(entry.into_host())
                .map_err(|e| error(item, e.to_string()))?;
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::Host;
    use proptest::prelude::*;

    fn names_slots(spec: &str) -> Vec<(String, Option<usize>)> {
        parse_host_spec(spec)
            .unwrap()
            .iter()
            .map(|h| (h.name.clone(), h.slots))
            .collect()
    }

    fn err(spec: &str) -> String {
        parse_host_spec(spec).unwrap_err().to_string()
    }

    #[test]
    fn slots_and_bare_hosts() {
        assert_eq!(
            names_slots("a:4,b:4"),
            [("a".to_string(), Some(4)), ("b".to_string(), Some(4))]
        );
        assert_eq!(
            names_slots("a,b"),
            [("a".to_string(), None), ("b".to_string(), None)]
        );
        assert_eq!(names_slots(" a:1 , b:2 "), names_slots("a:1,b:2"));
    }

    #[test]
    fn users_and_addresses() {
        let list = parse_host_spec("alice@a:8,bob@b,[fe80::1]:2,10.0.0.7").unwrap();
        assert_eq!(
            list.hosts(),
            &[
                Host {
                    user: Some("alice".into()),
                    ..Host::new("a").with_slots(8)
                },
                Host {
                    user: Some("bob".into()),
                    ..Host::new("b")
                },
                Host::new("fe80::1").with_slots(2),
                Host::new("10.0.0.7"),
            ]
        );
    }

    #[test]
    fn duplicates_add_slots_in_first_order() {
        assert_eq!(
            names_slots("a:2,b:2,a:2"),
            [("a".to_string(), Some(4)), ("b".to_string(), Some(2))]
        );
        assert_eq!(names_slots("a,a"), [("a".to_string(), None)]);
        assert_eq!(
            parse_host_spec("alice@a:1,a:1").unwrap().hosts()[0]
                .user
                .as_deref(),
            Some("alice")
        );
    }

    #[test]
    fn errors_name_the_entry_and_the_fix() {
        assert_eq!(
            err("a:4,b:x"),
            "-H \"b:x\": slot count \"x\" is not a positive number; write host:N, like node01:4"
        );
        assert!(err("").contains("no hosts"));
        assert!(err("  ").contains("no hosts"));
        assert!(err("a,,b").contains("remove the extra comma"));
        assert!(err("a,").contains("remove the extra comma"));
        assert!(err(",a").contains("remove the extra comma"));
        let e = err("a:4:2222");
        assert!(e.starts_with("-H \"a:4:2222\": too many ':'"), "{e}");
        assert!(e.contains("port=N"), "{e}");
        assert!(err("fe80::1:2").contains("IPv6 addresses go in brackets"));
        assert!(err("a:0").contains("not a positive number"));
        assert!(err("-oProxyCommand=sh").contains("cannot start with '-'"));
        let e = err("alice@a:1,bob@a:1");
        assert!(
            e.starts_with("-H \"bob@a:1\": host \"a\" is named with user"),
            "{e}"
        );
        assert!(err("a:1,a").contains("slot count every time or never"));
    }

    proptest! {
        #[test]
        fn never_panics_on_text(s in "\\PC*") {
            let _ = parse_host_spec(&s);
        }

        #[test]
        fn never_panics_on_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_host_spec(&String::from_utf8_lossy(&b));
        }

        #[test]
        fn never_panics_on_near_misses(s in "[a-c@:\\[\\],0-9 .%-]{0,24}") {
            let _ = parse_host_spec(&s);
        }

        #[test]
        fn generated_specs_parse_back(
            hosts in proptest::collection::vec(
                (proptest::option::of("[a-z]{1,6}"), "[a-z][a-z0-9-]{0,8}", 1usize..100),
                1..6,
            )
        ) {
            let spec: Vec<String> = hosts
                .iter()
                .enumerate()
                .map(|(i, (user, name, slots))| {
                    let user = user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
                    format!("{user}{name}{i}:{slots}")
                })
                .collect();
            let list = parse_host_spec(&spec.join(",")).unwrap();
            prop_assert_eq!(list.len(), hosts.len());
            for (i, (h, (user, name, slots))) in list.iter().zip(&hosts).enumerate() {
                prop_assert_eq!(&h.name, &format!("{name}{i}"));
                prop_assert_eq!(&h.user, user);
                prop_assert_eq!(h.slots, Some(*slots));
            }
        }
    }

    #[test]
    fn host_lists_as_slurm_writes_them() {
        let hosts = |spec: &str| -> Vec<String> {
            parse_host_spec(spec)
                .unwrap()
                .iter()
                .map(|h| format!("{}:{}", h.name, h.slots.map_or(0, |s| s)))
                .collect()
        };
        assert_eq!(
            hosts("node[01-03,07]:2"),
            ["node01:2", "node02:2", "node03:2", "node07:2"]
        );
        assert_eq!(
            hosts("rack[1-2]-n[1-2],b:4"),
            [
                "rack1-n1:0",
                "rack1-n2:0",
                "rack2-n1:0",
                "rack2-n2:0",
                "b:4"
            ]
        );
        assert_eq!(
            hosts("n[08-10]"),
            ["n08:0", "n09:0", "n10:0"],
            "zero-padded as Slurm"
        );
        assert_eq!(hosts("n[9-10]"), ["n9:0", "n10:0"]);
        let list = parse_host_spec("alice@gpu[1-2]:4,[fe80::1]:2").unwrap();
        assert_eq!(list.hosts()[1].user.as_deref(), Some("alice"));
        assert_eq!(
            list.hosts()[2].name,
            "fe80::1",
            "IPv6 in brackets still works"
        );
        // Named again through a list: slots add up, as any duplicate.
        assert_eq!(hosts("n[1-2]:2,n1:2"), ["n1:4", "n2:2"]);
        for (bad, says) in [
            ("n[1-", "without a matching"),
            ("n[[1]]", "nested"),
            ("n[3-1]", "backwards"),
            ("n[1-x]", "\"1-x\""),
            ("n[]", "empty brackets"),
            ("n[0-99999999]", "more than"),
            ("n]1[", "without a matching"),
        ] {
            let e = err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    proptest! {
        #[test]
        fn a_range_is_the_hosts_it_names(lo in 0usize..500, len in 1usize..40, width in 1usize..5, slots in 1usize..9) {
            let hi = lo + len - 1;
            let spec = format!("h[{lo:0width$}-{hi}]:{slots}");
            let want: Vec<String> = (lo..=hi)
                .map(|n| format!("h{n:0width$}"))
                .collect();
            let list = parse_host_spec(&spec).unwrap();
            let got: Vec<String> = list.iter().map(|h| h.name.clone()).collect();
            prop_assert_eq!(got, want);
            prop_assert!(list.iter().all(|h| h.slots == Some(slots)));
        }
    }
}
