//! Slurm allocations: the compressed node list of `SLURM_JOB_NODELIST` and the run-length task
//! counts of `SLURM_TASKS_PER_NODE`.
//!
//! ```text
//! node[01-04,07],gpu[1-2]   node01 node02 node03 node04 node07 gpu1 gpu2
//! rack[1-2]-n[1-2]          rack1-n1 rack1-n2 rack2-n1 rack2-n2 (several brackets multiply)
//! 2(x3),1                   2 2 2 1
//! ```
//!
//! In a range `lo-hi` every number is zero-padded to the width of `lo` (`[08-10]` gives `08 09
//! 10`, `[8-10]` gives `8 9 10`), as Slurm does. Names come out in the order written. Brackets do
//! not nest; at most [`MAX_NODES`] names (or task counts) are produced.

use super::{parse_positive, validate_name, Host, HostList, HostsError, Result};

/// The most names [`expand_nodelist`] (and counts [`parse_tasks_per_node`]) will produce, so
/// that a typo like `n[0-99999999]` is an error rather than exhausted memory.
pub const MAX_NODES: usize = 1 << 20;

/// A piece of one node-list item: literal text, or the numbers of one bracket.
enum Piece<'a> {
    Text(&'a str),
    Numbers(Vec<String>),
}

/// Expands a Slurm node list (`node[01-04,07],gpu[1-2]`) into host names, in order.
pub fn expand_nodelist(list: &str) -> Result<Vec<String>> {
    let error = |problem: String| HostsError::Nodelist {
        text: list.to_string(),
        problem,
    };
    if list.is_empty() {
        return Err(error(
            "empty node list; expected names like node[01-04],gpu1".into(),
        ));
    }
    let mut names = Vec::new();
    for item in split_top_level(list).map_err(error)? {
        if item.is_empty() {
            return Err(error(
                "empty name between commas; remove the extra comma".into(),
            ));
        }
        let pieces = pieces(list, item, MAX_NODES - names.len()).map_err(error)?;
        let mut expanded = vec![String::new()];
        for piece in &pieces {
            expanded = match piece {
                Piece::Text(text) => expanded.into_iter().map(|s| s + text).collect(),
                Piece::Numbers(numbers) => {
                    let total = expanded.len().saturating_mul(numbers.len());
                    if total > MAX_NODES - names.len() {
                        return Err(error(too_many()));
                    }
                    let mut next = Vec::with_capacity(total);
                    for prefix in &expanded {
                        next.extend(numbers.iter().map(|n| format!("{prefix}{n}")));
                    }
                    next
                }
            };
        }
        for name in &expanded {
            validate_name(name).map_err(|problem| error(format!("in {name:?}: {problem}")))?;
        }
        names.extend(expanded);
    }
    Ok(names)
}

fn too_many() -> String {
    format!("expands to more than {MAX_NODES} names; check the ranges")
}

/// Where `part` (a slice of `whole`) starts in `whole`: "at character N", counting from 1.
fn at(whole: &str, part: &str) -> String {
    let offset = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    let chars = whole.get(..offset).map_or(0, |s| s.chars().count());
    format!("at character {}", chars + 1)
}

/// Splits at the commas outside brackets, checking that brackets pair up and do not nest.
pub(crate) fn split_top_level(list: &str) -> std::result::Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut start, mut open) = (0, None);
    for (i, c) in list.char_indices() {
        let here = || at(list, &list[i..]);
        match c {
            '[' if open.is_some() => {
                return Err(format!(
                    "nested '[' {} inside a bracket; Slurm ranges do not nest, write a[1-2]b[3-4]",
                    here()
                ))
            }
            '[' => open = Some(i),
            ']' if open.is_none() => return Err(format!("']' {} without a matching '['", here())),
            ']' => open = None,
            ',' if open.is_none() => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if let Some(i) = open {
        return Err(format!(
            "'[' {} without a matching ']'",
            at(list, &list[i..])
        ));
    }
    items.push(&list[start..]);
    Ok(items)
}

/// Splits one item of `list` (brackets balanced, not nested) into text and bracket pieces;
/// `room` is how many names may still be produced.
fn pieces<'a>(
    list: &str,
    item: &'a str,
    room: usize,
) -> std::result::Result<Vec<Piece<'a>>, String> {
    let mut out = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            out.push(Piece::Text(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let close = after
            .find(']')
            .ok_or_else(|| "'[' without a matching ']'".to_string())?;
        out.push(Piece::Numbers(numbers(list, &after[..close], room)?));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// Expands the inside of one bracket of `list`: `01-04,07`.
fn numbers(list: &str, inside: &str, room: usize) -> std::result::Result<Vec<String>, String> {
    if inside.is_empty() {
        return Err("empty brackets; write ranges like [1-4] or lists like [1,3]".into());
    }
    let mut out = Vec::new();
    for range in inside.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let number = |s: &str| -> std::result::Result<u64, String> {
            if let Some(bad) = s.find(|c: char| !c.is_ascii_digit()) {
                let c = s[bad..].chars().next().unwrap_or(' ');
                return Err(format!(
                    "[{inside}]: {range:?} is not a number or a range like 01-04 ({c:?} {})",
                    at(list, &s[bad..])
                ));
            }
            if s.is_empty() {
                return Err(format!(
                    "[{inside}]: {range:?} is not a number or a range like 01-04 (a number is \
                     missing {})",
                    at(list, s)
                ));
            }
            s.parse()
                .map_err(|_| format!("[{inside}]: {s} is too large a number"))
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if b < a {
            return Err(format!(
                "[{inside}]: range {range} runs backwards; write {hi}-{lo}"
            ));
        }
        let count = usize::try_from(b - a)
            .ok()
            .and_then(|n| n.checked_add(1))
            .unwrap_or(usize::MAX);
        if count > room.saturating_sub(out.len()) {
            return Err(too_many());
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Compresses host names into a Slurm node list that [`expand_nodelist`] turns back into the
/// same names in the same order: runs of consecutive names that share a prefix and end in
/// numbers go into one bracket (`node01,node02,node03,node07` → `node[01-03,07]`). The names
/// must be valid host names (no `[`, `]` or `,`).
#[cfg(test)]
pub fn compress_nodelist<S: AsRef<str>>(names: &[S]) -> String {
    /// A group of consecutive names `prefix` + number: its ranges (first digits, last number).
    struct Group<'a> {
        prefix: &'a str,
        ranges: Vec<(&'a str, u64, u64)>,
    }
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    let mut order: Vec<Result<usize, usize>> = Vec::new(); // Ok(group) or Err(plain name)
    for name in names {
        let name = name.as_ref();
        let digits_at = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (prefix, digits) = name.split_at(digits_at);
        let Some(n) = (!digits.is_empty())
            .then(|| digits.parse::<u64>().ok())
            .flatten()
        else {
            plain.push(name);
            order.push(Err(plain.len() - 1));
            continue;
        };
        if let Some(Ok(g)) = order.last() {
            let group = &mut groups[*g];
            if group.prefix == prefix {
                if let Some(last) = group.ranges.last_mut() {
                    let width = last.0.len();
                    if n.checked_sub(1) == Some(last.2) && format!("{n:0width$}") == digits {
                        last.2 = n;
                        continue;
                    }
                }
                group.ranges.push((digits, n, n));
                continue;
            }
        }
        groups.push(Group {
            prefix,
            ranges: vec![(digits, n, n)],
        });
        order.push(Ok(groups.len() - 1));
    }
    let items: Vec<String> = order
        .iter()
        .map(|item| match *item {
            Err(p) => plain[p].to_string(),
            Ok(g) => {
                let group = &groups[g];
                match group.ranges.as_slice() {
                    [(digits, a, b)] if a == b => format!("{}{digits}", group.prefix),
                    ranges => {
                        let inside: Vec<String> = ranges
                            .iter()
                            .map(|&(digits, a, b)| {
                                let width = digits.len();
                                if a == b {
                                    digits.to_string()
                                } else {
                                    format!("{digits}-{b:0width$}")
                                }
                            })
                            .collect();
                        format!("{}[{}]", group.prefix, inside.join(","))
                    }
                }
            }
        })
        .collect();
    items.join(",")
}

/// Expands `SLURM_TASKS_PER_NODE` (`2(x3),1`) into one task count per node: `[2, 2, 2, 1]`.
pub fn parse_tasks_per_node(text: &str) -> Result<Vec<usize>> {
    let error = |problem: String| HostsError::TasksPerNode {
        text: text.to_string(),
        problem,
    };
    let mut counts = Vec::new();
    for item in text.split(',') {
        let (count, repeat) = match item.split_once('(') {
            None => (item, "1"),
            Some((count, rest)) => {
                let repeat = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| error(format!("{item:?} is not N or N(xM), like 2 or 2(x3)")))?;
                (count, repeat)
            }
        };
        let count = parse_positive(count).ok_or_else(|| {
            error(format!(
                "{item:?}: expected a positive task count, like 2 or 2(x3)"
            ))
        })?;
        let repeat = parse_positive(repeat).ok_or_else(|| {
            error(format!(
                "{item:?}: expected a positive repeat count, like 2(x3)"
            ))
        })?;
        if repeat > MAX_NODES - counts.len() {
            return Err(error(format!("describes more than {MAX_NODES} nodes")));
        }
        counts.extend(std::iter::repeat(count).take(repeat));
    }
    Ok(counts)
}

/// The hosts of the Slurm allocation this process runs in, from `SLURM_JOB_NODELIST` (or the
/// older `SLURM_NODELIST`) and `SLURM_TASKS_PER_NODE`, looked up with `get` (pass
/// `&|k| std::env::var(k).ok()`). Each node gets its task count as slots (no slot count if
/// `SLURM_TASKS_PER_NODE` is unset). `None` outside an allocation (no node list, or an empty
/// one); an error if either variable is malformed or they disagree on the number of nodes.
pub fn from_slurm_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<HostList>> {
    let Some(nodelist) = get("SLURM_JOB_NODELIST")
        .or_else(|| get("SLURM_NODELIST"))
        .filter(|s| !s.trim().is_empty())
    else {
        return Ok(None);
    };
    let names = expand_nodelist(&nodelist)?;
    let counts = match get("SLURM_TASKS_PER_NODE") {
        None => vec![None; names.len()],
        Some(tasks) => {
            let counts = parse_tasks_per_node(&tasks)?;
            if counts.len() != names.len() {
                return Err(HostsError::SlurmMismatch {
                    nodes: names.len(),
                    counts: counts.len(),
                    nodelist,
                    tasks,
                });
            }
            counts.into_iter().map(Some).collect()
        }
    };
    let hosts = names.into_iter().zip(counts).map(|(name, slots)| Host {
        slots,
        ..Host::new(name)
    });
    HostList::from_hosts(hosts).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn expand(list: &str) -> Vec<String> {
        expand_nodelist(list).unwrap()
    }

    fn err(list: &str) -> String {
        expand_nodelist(list).unwrap_err().to_string()
    }

    #[test]
    fn ranges_lists_and_padding() {
        assert_eq!(
            expand("node[01-04,07],gpu[1-2]"),
            ["node01", "node02", "node03", "node04", "node07", "gpu1", "gpu2"]
        );
        assert_eq!(expand("a"), ["a"]);
        assert_eq!(expand("a,b1,c"), ["a", "b1", "c"]);
        assert_eq!(expand("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(expand("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(expand("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(expand("n[007]"), ["n007"]);
        assert_eq!(expand("n[3,1]"), ["n3", "n1"]);
        assert_eq!(expand("[1-2]"), ["1", "2"]);
        assert_eq!(expand("n[1-2]-ib"), ["n1-ib", "n2-ib"]);
        assert_eq!(
            expand("rack[1-2]-n[1-2]"),
            ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
        );
    }

    #[test]
    fn malformed_lists_are_rejected() {
        assert!(err("n[1-[2-3]]").contains("Slurm ranges do not nest"));
        assert!(err("n[1-2").contains("'[' at character 2 without a matching ']'"));
        assert!(err("n1-2]").contains("']' at character 5 without a matching '['"));
        assert!(err("n[]").contains("empty brackets"));
        assert!(err("n[a-b]").contains("is not a number or a range"));
        assert!(err("n[1-]").contains("is not a number or a range"));
        assert!(err("n[1-2-3]").contains("is not a number or a range"));
        assert!(err("n[1,,2]").contains("is not a number or a range"));
        assert!(err("n[5-3]").contains("runs backwards; write 3-5"));
        assert!(err("n[1-99999999999999999999999]").contains("too large"));
        assert!(err("n[0-99999999]").contains("more than 1048576 names"));
        assert!(err("a[0-1023]b[0-1024]").contains("more than 1048576 names"));
        assert!(err("").contains("empty node list"));
        assert!(err("a,,b").contains("remove the extra comma"));
        assert!(err("a,").contains("remove the extra comma"));
        assert!(err("-n[1-2]").contains("cannot start with '-'"));
        assert!(err("n 1").contains("not allowed in a host name"));
        assert_eq!(
            err("n[5-3]"),
            "Slurm node list \"n[5-3]\": [5-3]: range 5-3 runs backwards; write 3-5"
        );
        // The bad character is named with its place.
        assert!(
            err("node[01-0x]").ends_with("('x' at character 10)"),
            "{}",
            err("node[01-0x]")
        );
        assert!(err("ab,n[1-2").contains("'[' at character 5 without"));
        assert!(err("n1],b").contains("']' at character 3 without"));
        assert!(err("n[1-[2-3]]").contains("'[' at character 5 inside"));
        assert!(
            err("n[1,,2]").contains("a number is missing at character 5"),
            "{}",
            err("n[1,,2]")
        );
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(parse_tasks_per_node("4").unwrap(), [4]);
        assert_eq!(parse_tasks_per_node("1(x1),16(x2)").unwrap(), [1, 16, 16]);
        let err = |t: &str| parse_tasks_per_node(t).unwrap_err().to_string();
        assert!(err("").contains("expected a positive task count"));
        assert!(err("2,").contains("expected a positive task count"));
        assert!(err("0").contains("expected a positive task count"));
        assert!(err("x").contains("expected a positive task count"));
        assert!(err("2(3)").contains("is not N or N(xM)"));
        assert!(err("2(x3").contains("is not N or N(xM)"));
        assert!(err("2(x0)").contains("positive repeat count"));
        assert!(err("(x2)").contains("positive task count"));
        assert!(err("1(x99999999999)").contains("more than 1048576 nodes"));
        assert_eq!(
            err("2(y3)"),
            "SLURM_TASKS_PER_NODE \"2(y3)\": \"2(y3)\" is not N or N(xM), like 2 or 2(x3)"
        );
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn slurm_env() {
        assert!(from_slurm_env(&env(&[])).unwrap().is_none());
        assert!(from_slurm_env(&env(&[("SLURM_JOB_NODELIST", "")]))
            .unwrap()
            .is_none());
        let hosts = from_slurm_env(&env(&[
            ("SLURM_JOB_NODELIST", "node[01-03],gpu1"),
            ("SLURM_TASKS_PER_NODE", "2(x3),1"),
        ]))
        .unwrap()
        .unwrap();
        let got: Vec<_> = hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(
            got,
            [
                ("node01", Some(2)),
                ("node02", Some(2)),
                ("node03", Some(2)),
                ("gpu1", Some(1))
            ]
        );
        let hosts = from_slurm_env(&env(&[("SLURM_NODELIST", "a,b")]))
            .unwrap()
            .unwrap();
        assert_eq!(hosts.hosts(), &[Host::new("a"), Host::new("b")]);
    }

    #[test]
    fn slurm_env_errors() {
        let e = from_slurm_env(&env(&[
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SLURM_JOB_NODELIST \"n[1-3]\" names 3 node(s) but SLURM_TASKS_PER_NODE \"2(x2)\" \
             gives task counts for 2; they do not come from the same allocation \
             (run inside one salloc/sbatch job, or unset both)"
        );
        assert!(matches!(
            from_slurm_env(&env(&[("SLURM_JOB_NODELIST", "n[1-")])),
            Err(HostsError::Nodelist { .. })
        ));
        assert!(matches!(
            from_slurm_env(&env(&[
                ("SLURM_JOB_NODELIST", "n1"),
                ("SLURM_TASKS_PER_NODE", "z")
            ])),
            Err(HostsError::TasksPerNode { .. })
        ));
    }

    #[test]
    fn compress_examples() {
        let c = |names: &[&str]| compress_nodelist(names);
        assert_eq!(
            c(&["node01", "node02", "node03", "node04", "node07", "gpu1", "gpu2"]),
            "node[01-04,07],gpu[1-2]"
        );
        assert_eq!(c(&[]), "");
        assert_eq!(c(&["login"]), "login");
        assert_eq!(c(&["n1"]), "n1");
        assert_eq!(c(&["n9", "n10"]), "n[9-10]");
        assert_eq!(c(&["n09", "n10"]), "n[09-10]");
        assert_eq!(c(&["n9", "n010"]), "n[9,010]");
        assert_eq!(c(&["n1", "m2", "n3"]), "n1,m2,n3");
        assert_eq!(c(&["1", "2"]), "[1-2]");
    }

    /// Runs of names `prefix` + consecutive numbers, zero-padded to `width`.
    fn arb_names() -> impl Strategy<Value = Vec<String>> {
        let prefixes = ["node", "gpu", "n", "rack1-n", "", "a.b_c"];
        proptest::collection::vec(
            (
                0..prefixes.len(),
                proptest::option::weighted(0.85, 0u64..120),
                1u64..6,
                0usize..4,
            ),
            0..8,
        )
        .prop_map(move |runs| {
            let mut names = Vec::new();
            for (p, start, len, width) in runs {
                let prefix = prefixes[p];
                match start {
                    None if prefix.is_empty() => names.push("login".to_string()),
                    None => names.push(prefix.to_string()),
                    Some(start) => {
                        names.extend((start..start + len).map(|n| format!("{prefix}{n:0width$}")))
                    }
                }
            }
            names
        })
    }

    proptest! {
        #[test]
        fn compress_round_trips(names in arb_names()) {
            let list = compress_nodelist(&names);
            if names.is_empty() {
                prop_assert_eq!(list, "");
            } else {
                prop_assert_eq!(expand_nodelist(&list).unwrap(), names);
            }
        }

        #[test]
        fn compressed_lists_are_stable(names in arb_names()) {
            prop_assume!(!names.is_empty());
            let list = compress_nodelist(&names);
            prop_assert_eq!(compress_nodelist(&expand_nodelist(&list).unwrap()), list);
        }

        #[test]
        fn never_panics_on_text(s in "\\PC*") {
            let _ = expand_nodelist(&s);
            let _ = parse_tasks_per_node(&s);
            let _ = compress_nodelist(&[s.as_str()]);
            let s2 = s.clone();
            let _ = from_slurm_env(&move |k: &str| (k != "SLURM_NODELIST").then(|| s2.clone()));
        }

        #[test]
        fn never_panics_on_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let s = String::from_utf8_lossy(&b);
            let _ = expand_nodelist(&s);
            let _ = parse_tasks_per_node(&s);
        }

        #[test]
        fn never_panics_on_near_misses(s in "[a-c0-9\\[\\],x()-]{0,24}") {
            let _ = expand_nodelist(&s);
            let _ = parse_tasks_per_node(&s);
        }
    }
}
