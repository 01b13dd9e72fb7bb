//! `--hostfile`: one host per line, in Open MPI's or MPICH's format, mixed freely.
//!
//! ```text
//! # the GPU nodes             a comment line; blank lines are skipped too
//! node01 slots=8              Open MPI: 8 slots
//! node02 slots=4 max_slots=8  4 slots, up to 8 when oversubscribing (max-slots=8 also works)
//! alice@node03                as user alice, with as many slots as node03 has cores
//! node04:8                    MPICH: 8 slots
//! bob@node05:2 port=2222      user, slots and an SSH port
//! [fe80::7]:4  # trailing     an IPv6 address, and a trailing comment
//! rack[1-2]-n[01-02] slots=2  four hosts (Slurm's host-list syntax), 2 slots each
//! ```
//!
//! A line is `[user@]host[:slots]` (see [the module docs](super)) followed by any of
//! `slots=N`, `max_slots=N` (or `max-slots=N`) and `port=N`, separated by blanks. Everything
//! from `#` on is a comment. A host on several lines is merged as the module docs describe.
//! Errors name the file, the line number and the line, and say what was expected.

use super::{parse_entries, parse_positive, HostList, HostsError, Result};
use std::path::Path;

/// What a hostfile line looks like, for error messages.
const LINE_GRAMMAR: &str = "[user@]host[:slots] [slots=N] [max_slots=N] [port=N]";

/// The largest hostfile read: a line per host, so 16 MiB is hundreds of thousands of hosts,
/// far beyond any cluster, and still a small read.
pub const HOSTFILE_LIMIT: u64 = 16 << 20;

/// Reads the hostfile at `path` (a file of text or a pipe, at most [`HOSTFILE_LIMIT`], see
/// [`crate::textfile`]) and parses it with [`parse_hostfile`], naming it as given.
pub fn read_hostfile(path: &Path) -> Result<HostList> {
    let text = crate::textfile::read(path, HOSTFILE_LIMIT).map_err(|source| HostsError::Read {
        file: path.to_path_buf(),
        source,
    })?;
    parse_hostfile(&path.display().to_string(), &text)
}

/// Parses the text of a hostfile; `file` names it in error messages. A file without any host is
/// an error.
pub fn parse_hostfile(file: &str, text: &str) -> Result<HostList> {
    let mut list = HostList::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let error = |problem: String| HostsError::Hostfile {
            file: file.to_string(),
            line: i + 1,
            text: line.to_string(),
            problem,
        };
        for host in parse_line(line).map_err(error)? {
            list.add(host).map_err(|e| error(e.to_string()))?;
        }
    }
    if list.is_empty() {
        return Err(HostsError::EmptyHostfile {
            file: file.to_string(),
        });
    }
    Ok(list)
}

/// Parses one line (comment and surrounding blanks removed, not empty): its hosts, more than one
/// when the first word is a host list (`node[01-04] slots=2`), each with the line's settings.
fn parse_line(line: &str) -> std::result::Result<Vec<super::Host>, String> {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or_default();
    let mut entries = parse_entries(first)?.into_iter().map(|e| e.into_host());
    let mut host = entries.next().ok_or("a host list that names no host")?;
    let others: Vec<super::Host> = entries.collect();
    let from_entry = host.slots.is_some();
    let (mut seen_slots, mut seen_max, mut seen_port) = (false, false, false);
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            return Err(format!(
                "expected key=value after the host, like slots=8, found {word:?}; \
                 a line is {LINE_GRAMMAR}"
            ));
        };
        let twice = |key: &str| format!("{key} is given twice; keep one");
        match key {
            "slots" => {
                if from_entry {
                    return Err(format!("slots given twice ({first} and {word}); keep one"));
                }
                if seen_slots {
                    return Err(twice("slots"));
                }
                seen_slots = true;
                host.slots =
                    Some(parse_positive(value).ok_or_else(|| {
                        "slots must be a positive number, like slots=8".to_string()
                    })?);
            }
            "max_slots" | "max-slots" => {
                if seen_max {
                    return Err(twice("max_slots"));
                }
                seen_max = true;
                host.max_slots = Some(parse_positive(value).ok_or_else(|| {
                    "max_slots must be a positive number, like max_slots=16".to_string()
                })?);
            }
            "port" => {
                if seen_port {
                    return Err(twice("port"));
                }
                seen_port = true;
                let port = parse_positive(value)
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| {
                        "port must be a number from 1 to 65535, like port=2222".to_string()
                    })?;
                host.port = Some(port);
            }
            _ => return Err(format!("unknown setting {key:?}; a line is {LINE_GRAMMAR}")),
        }
    }
    if let (Some(slots), Some(max)) = (host.slots, host.max_slots) {
        if max < slots {
            return Err(format!(
                "max_slots={max} is less than the {slots} slots; max_slots must be at least slots"
            ));
        }
    }
    let settings = host.clone();
    let mut hosts = vec![host];
    hosts.extend(others.into_iter().map(|h| super::Host {
        name: h.name,
        ..settings.clone()
    }));
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::Host;
    use proptest::prelude::*;

    fn parse(text: &str) -> Vec<Host> {
        parse_hostfile("hosts.txt", text).unwrap().hosts().to_vec()
    }

    fn err(text: &str) -> String {
        parse_hostfile("hosts.txt", text).unwrap_err().to_string()
    }

    #[test]
    fn open_mpi_format() {
        let hosts =
            parse("node01 slots=8\nnode02 slots=4 max_slots=8\nuser@node03\nnode04 max-slots=2\n");
        assert_eq!(
            hosts,
            [
                Host::new("node01").with_slots(8),
                Host {
                    max_slots: Some(8),
                    ..Host::new("node02").with_slots(4)
                },
                Host {
                    user: Some("user".into()),
                    ..Host::new("node03")
                },
                Host {
                    max_slots: Some(2),
                    ..Host::new("node04")
                },
            ]
        );
    }

    #[test]
    fn mpich_format_comments_blanks_and_ports_mixed() {
        let hosts = parse(
            "# cluster\n\n   \nnode01:8\n\tnode02 slots=2   # the small one\r\n\
             bob@node05:2 port=2222\n[fe80::7]:4#tight\n# end",
        );
        assert_eq!(
            hosts,
            [
                Host::new("node01").with_slots(8),
                Host::new("node02").with_slots(2),
                Host {
                    user: Some("bob".into()),
                    port: Some(2222),
                    ..Host::new("node05").with_slots(2)
                },
                Host::new("fe80::7").with_slots(4),
            ]
        );
    }

    #[test]
    fn repeated_lines_add_slots() {
        let hosts = parse("a slots=2\nb:1\na:3\n");
        assert_eq!(
            hosts,
            [Host::new("a").with_slots(5), Host::new("b").with_slots(1)]
        );
    }

    #[test]
    fn errors_carry_file_line_text_and_expectation() {
        assert_eq!(
            err("# hosts\nnode00 slots=1\nnode01 slots=x\n"),
            "hosts.txt:3: \"node01 slots=x\": slots must be a positive number, like slots=8"
        );
        assert!(err("a slots=0").contains("hosts.txt:1: \"a slots=0\": slots must be a positive"));
        assert!(err("a slots=").contains("slots must be a positive"));
        assert!(err("a max_slots=no").contains("max_slots must be a positive number"));
        assert!(err("a port=0").contains("port must be a number from 1 to 65535"));
        assert!(err("a port=65536").contains("port must be a number from 1 to 65535"));
        assert!(err("a:4 slots=4").contains("slots given twice (a:4 and slots=4)"));
        assert!(err("a slots=1 slots=2").contains("slots is given twice"));
        assert!(err("a port=1 port=2").contains("port is given twice"));
        assert!(err("a max_slots=1 max-slots=2").contains("max_slots is given twice"));
        assert!(err("a slots=4 max_slots=2").contains("max_slots=2 is less than the 4 slots"));
        let e = err("a cpus=4");
        assert!(e.contains("unknown setting \"cpus\""), "{e}");
        assert!(e.contains("[slots=N] [max_slots=N] [port=N]"), "{e}");
        assert!(err("a b").contains("expected key=value after the host, like slots=8, found \"b\""));
        assert!(err("\n\na:4:22").starts_with("hosts.txt:3: \"a:4:22\": too many ':'"));
        assert!(err("-a").contains("cannot start with '-'"));
        let e = err("u@a:1\nv@a:1");
        assert!(
            e.starts_with("hosts.txt:2: \"v@a:1\": host \"a\" is named with user"),
            "{e}"
        );
        assert!(err("a port=22\na port=23").contains("hosts.txt:2:"));
    }

    #[test]
    fn empty_files_are_errors() {
        for text in ["", "\n\n", "# only a comment\n   # and another"] {
            assert_eq!(
                err(text),
                "hosts.txt: no hosts in the hostfile (only blank lines and comments); \
                 add lines like \"node01 slots=8\""
            );
        }
    }

    #[test]
    fn read_hostfile_names_the_file() {
        let dir = std::env::temp_dir().join(format!("psyrun-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hosts");
        std::fs::write(&path, "a:2\nb slots=x\n").unwrap();
        let e = read_hostfile(&path).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}:2: ", path.display())), "{e}");
        std::fs::write(&path, "a:2\nb slots=3\n").unwrap();
        assert_eq!(read_hostfile(&path).unwrap().len(), 2);
        let missing = dir.join("missing");
        let e = read_hostfile(&missing).unwrap_err();
        assert!(matches!(e, HostsError::Read { .. }));
        assert!(e.to_string().starts_with("reading hostfile "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #[test]
        fn never_panics_on_text(s in "\\PC*") {
            let _ = parse_hostfile("f", &s);
        }

        #[test]
        fn never_panics_on_bytes(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = parse_hostfile("f", &String::from_utf8_lossy(&b));
        }

        #[test]
        fn never_panics_on_near_misses(s in "[ab@:=# \n\t0-9]{0,12}( ?(slots|max_slots|port)=[0-9x]{0,6}){0,3}") {
            let _ = parse_hostfile("f", &s);
        }
    }

    #[test]
    fn a_host_list_line_gives_every_host_its_settings() {
        let hosts = parse("rack[1-2]-n[01-02] slots=2 port=2222\nsolo:1\n");
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            names,
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02", "solo"]
        );
        assert!(hosts[..4]
            .iter()
            .all(|h| h.slots == Some(2) && h.port == Some(2222)));
        let e = parse_hostfile("h", "node[1-x] slots=2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("h:1:") && e.contains("\"1-x\""), "{e}");
    }
}
