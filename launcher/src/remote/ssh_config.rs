//! The part of OpenSSH's client configuration (`~/.ssh/config`) psyrun honours, parsed purely.
//!
//! Keywords (case-insensitive): `Host` (patterns with `*`, `?` and `!`), `HostName` (`%h` is the
//! name given), `User`, `Port`, `IdentityFile` (repeatable; `~` is the home directory),
//! `ConnectTimeout`, `StrictHostKeyChecking`, `UserKnownHostsFile`. As in OpenSSH, the first
//! value found for a host wins, blocks apply in file order, `Host *` at the end gives defaults,
//! and both `Key Value` and `Key=Value` are accepted. Other keywords are ignored; a `Match`
//! block is skipped (psyrun cannot evaluate it) until the next `Host`.

use std::path::{Path, PathBuf};

/// What the configuration says about one host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    /// The real host name or address (`HostName`), if given.
    pub hostname: Option<String>,
    /// `User`.
    pub user: Option<String>,
    /// `Port`.
    pub port: Option<u16>,
    /// `IdentityFile`s, in order.
    pub identity_files: Vec<PathBuf>,
    /// `ConnectTimeout`, seconds.
    pub connect_timeout: Option<u64>,
    /// `StrictHostKeyChecking`.
    pub strict_host_key_checking: Option<HostKeyPolicy>,
    /// `UserKnownHostsFile` (the first file named).
    pub known_hosts: Option<PathBuf>,
}

/// `StrictHostKeyChecking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// `yes` (and `ask`, which psyrun cannot ask): an unknown host is refused.
    Strict,
    /// `accept-new`: an unknown host is accepted, a changed key refused.
    AcceptNew,
    /// `no` / `off`: any key is accepted.
    Off,
}

/// A configuration file, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshConfig {
    blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// `None` for lines before the first `Host` (they apply to every host); patterns otherwise.
    patterns: Option<Vec<String>>,
    /// A `Match` block, skipped.
    skipped: bool,
    settings: Vec<(String, String, usize)>,
}

/// A line psyrun could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {problem}")]
pub struct SshConfigError {
    /// The file.
    pub file: String,
    /// The line number, from 1.
    pub line: usize,
    /// What is wrong and what was expected.
    pub problem: String,
}

/// The largest SSH configuration read (as for a hostfile: hand-written or generated host
/// entries; 16 MiB is far more than any).
pub const SSH_CONFIG_LIMIT: u64 = 16 << 20;

impl SshConfig {
    /// Parses `text` (read from `file`, named in errors).
    pub fn parse(file: &str, text: &str) -> Result<SshConfig, SshConfigError> {
        let mut blocks = vec![Block {
            patterns: None,
            skipped: false,
            settings: Vec::new(),
        }];
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = split_keyword(line).ok_or_else(|| SshConfigError {
                file: file.into(),
                line: line_no,
                problem: format!("{line:?} has no value; write `Keyword value`"),
            })?;
            let key = key.to_ascii_lowercase();
            match key.as_str() {
                "host" => blocks.push(Block {
                    patterns: Some(value.split_whitespace().map(unquote).collect()),
                    skipped: false,
                    settings: Vec::new(),
                }),
                "match" => blocks.push(Block {
                    patterns: None,
                    skipped: true,
                    settings: Vec::new(),
                }),
                _ => {
                    if let Some(b) = blocks.last_mut() {
                        b.settings.push((key, unquote(value), line_no));
                    }
                }
            }
        }
        let config = SshConfig { blocks };
        // Check the values psyrun uses now, so a typo is reported before any connection.
        for b in &config.blocks {
            for (key, value, line) in &b.settings {
                let bad = |problem: String| SshConfigError {
                    file: file.into(),
                    line: *line,
                    problem,
                };
                match key.as_str() {
                    "port" => {
                        value
                            .parse::<u16>()
                            .ok()
                            .filter(|&p| p > 0)
                            .ok_or_else(|| {
                                bad(format!("Port {value:?} is not a port number (1-65535)"))
                            })?;
                    }
                    "connecttimeout" => {
                        value.parse::<u64>().map_err(|_| {
                            bad(format!(
                                "ConnectTimeout {value:?} is not a number of seconds"
                            ))
                        })?;
                    }
                    "stricthostkeychecking" => {
                        policy(value).ok_or_else(|| {
                            bad(format!(
                                "StrictHostKeyChecking {value:?}: use yes, accept-new or no"
                            ))
                        })?;
                    }
                    _ => {}
                }
            }
        }
        Ok(config)
    }

    /// Reads and parses `path` (a file of text or a pipe, at most [`SSH_CONFIG_LIMIT`], see
    /// [`crate::textfile`]); a missing file is an empty configuration.
    pub fn read(path: &Path) -> Result<SshConfig, SshConfigError> {
        match crate::textfile::read(path, SSH_CONFIG_LIMIT) {
            Ok(text) => SshConfig::parse(&path.display().to_string(), &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SshConfig::default()),
            Err(e) => Err(SshConfigError {
                file: path.display().to_string(),
                line: 0,
                problem: format!("cannot read it: {e}"),
            }),
        }
    }

    /// The settings for `host` (the name as given on psyrun's command line), with `home` for
    /// `~`.
    pub fn lookup(&self, host: &str, home: &Path) -> HostConfig {
        let mut c = HostConfig::default();
        for b in &self.blocks {
            if b.skipped {
                continue;
            }
            if let Some(patterns) = &b.patterns {
                if !matches_patterns(patterns, host) {
                    continue;
                }
            }
            for (key, value, _) in &b.settings {
                match key.as_str() {
                    "hostname" if c.hostname.is_none() => {
                        c.hostname = Some(value.replace("%h", host));
                    }
                    "user" if c.user.is_none() => c.user = Some(value.clone()),
                    "port" if c.port.is_none() => c.port = value.parse().ok(),
                    "identityfile" => c.identity_files.push(expand_home(value, home)),
                    "connecttimeout" if c.connect_timeout.is_none() => {
                        c.connect_timeout = value.parse().ok();
                    }
                    "stricthostkeychecking" if c.strict_host_key_checking.is_none() => {
                        c.strict_host_key_checking = policy(value);
                    }
                    "userknownhostsfile" if c.known_hosts.is_none() => {
                        c.known_hosts = value
                            .split_whitespace()
                            .next()
                            .map(|f| expand_home(f, home));
                    }
                    _ => {}
                }
            }
        }
        c
    }
}

fn policy(value: &str) -> Option<HostKeyPolicy> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "ask" => Some(HostKeyPolicy::Strict),
        "accept-new" => Some(HostKeyPolicy::AcceptNew),
        "no" | "off" => Some(HostKeyPolicy::Off),
        _ => None,
    }
}

/// `Key value`, `Key=value` or `Key = value`.
fn split_keyword(line: &str) -> Option<(&str, &str)> {
    let end = line.find(|c: char| c.is_whitespace() || c == '=')?;
    let key = &line[..end];
    let rest = line[end..].trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest).trim();
    (!key.is_empty() && !rest.is_empty()).then_some((key, rest))
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

fn expand_home(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None if path == "~" => home.to_path_buf(),
        None => PathBuf::from(path),
    }
}

/// OpenSSH's rule: the host matches if some positive pattern matches and no negated one does.
fn matches_patterns(patterns: &[String], host: &str) -> bool {
    let mut matched = false;
    for p in patterns {
        if let Some(neg) = p.strip_prefix('!') {
            if glob(neg.as_bytes(), host.as_bytes()) {
                return false;
            }
        } else if glob(p.as_bytes(), host.as_bytes()) {
            matched = true;
        }
    }
    matched
}

/// `*` and `?` wildcard matching (case-insensitive, as host names are).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        // `*` first: a literal '*' in the name must not be taken for the pattern's star.
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if pi < p.len() && (p[pi] == b'?' || p[pi].eq_ignore_ascii_case(&s[si])) {
            pi += 1;
            si += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: &str = "/home/u";

    #[test]
    fn first_value_wins_and_defaults_come_last() {
        let text = "\
# a comment
Host psyh*
  HostName 10.0.0.%h
  User root
  IdentityFile ~/k1

Host psyh2 !psyh3
  Port 2222
  User nobody

Host *
  User everyone
  Port=2200
  IdentityFile = \"/etc/k2\"
  ConnectTimeout 5
  StrictHostKeyChecking accept-new
  UserKnownHostsFile /dev/null ~/.ssh/other
";
        let c = SshConfig::parse("cfg", text).unwrap();
        let h2 = c.lookup("psyh2", Path::new(HOME));
        assert_eq!(h2.hostname.as_deref(), Some("10.0.0.psyh2"));
        assert_eq!(h2.user.as_deref(), Some("root"));
        assert_eq!(h2.port, Some(2222));
        assert_eq!(
            h2.identity_files,
            vec![PathBuf::from("/home/u/k1"), PathBuf::from("/etc/k2")]
        );
        assert_eq!(h2.connect_timeout, Some(5));
        assert_eq!(h2.strict_host_key_checking, Some(HostKeyPolicy::AcceptNew));
        assert_eq!(h2.known_hosts, Some(PathBuf::from("/dev/null")));
        // psyh3 is excluded from the second block.
        let h3 = c.lookup("psyh3", Path::new(HOME));
        assert_eq!(h3.port, Some(2200));
        let other = c.lookup("elsewhere", Path::new(HOME));
        assert_eq!(other.hostname, None);
        assert_eq!(other.user.as_deref(), Some("everyone"));
    }

    #[test]
    fn match_blocks_are_skipped_and_bad_values_name_the_line() {
        let c = SshConfig::parse("f", "Match user x\n  Port 1\nHost a\n  Port 2\n").unwrap();
        assert_eq!(c.lookup("a", Path::new(HOME)).port, Some(2));
        assert_eq!(c.lookup("b", Path::new(HOME)).port, None);
        let e = SshConfig::parse("f", "Host a\n  Port x\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("f", 2));
        assert!(e.problem.contains("port number"), "{e}");
        let e = SshConfig::parse("f", "\n\nHostName\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = SshConfig::parse("f", "StrictHostKeyChecking maybe\n").unwrap_err();
        assert!(e.problem.contains("accept-new"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_names_a_line_and_never_panics(
            text in "((Host|HostName|User|Port|IdentityFile|ConnectTimeout|Match|StrictHostKeyChecking|#x)[ =]?[ -~]{0,12}\n){0,8}",
            name in "[a-z0-9.*?!-]{0,10}",
        ) {
            match SshConfig::parse("f", &text) {
                Ok(c) => {
                    let _ = c.lookup(&name, Path::new(HOME));
                }
                Err(e) => proptest::prop_assert!(e.line >= 1 && e.line <= text.lines().count()),
            }
        }

        #[test]
        fn a_star_pattern_matches_every_name(name in "[ -~]{0,16}") {
            proptest::prop_assert!(glob(b"*", name.as_bytes()));
            proptest::prop_assert!(glob(name.as_bytes(), name.as_bytes()) || name.contains(['*', '?']));
        }
    }

    #[test]
    fn globbing() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"node??", b"node01"));
        assert!(!glob(b"node??", b"node1"));
        assert!(glob(b"*.example.*", b"a.example.org"));
        assert!(glob(b"NODE*", b"node7"));
        assert!(!glob(b"a*b", b"acbd"));
        assert!(glob(b"a*b*", b"acbd"));
        // Found by the property test: a '*' in the name is not the pattern's star.
        assert!(glob(b"*", b"* "));
        assert!(glob(b"a*", b"a*b"));
    }
}
