//! Tuning files: the algorithm for each collective and size range, measured on the machine by
//! `psybench tune` and loaded by every rank (`PSY_TUNING=FILE`, else the default location).
//!
//! ```text
//! # psyne tuning file: written by `psybench tune` (any text after # is a comment)
//! [shm 2]                      # a section: where the group runs, and from how many ranks
//! allreduce    4K  flat        # all-reduce of at most 4 KiB per rank: the node board
//! allreduce  256K  recursive_doubling
//! allreduce   max  ring        # anything larger
//! broadcast   max  default     # the built-in choice, whatever the size
//! ```
//!
//! A section applies to groups of its scope, `shm` (every rank on one host, shared memory
//! allowed) or `net` (anything else: several hosts, or `PSY_TRANSPORT=tcp` on one), with at
//! least its number of ranks; a group uses the section of its scope with the most ranks not
//! above its own (as Open MPI's dynamic rules do), and none when every section has more ranks.
//! Inside a section, a line `COLLECTIVE UP_TO ALGORITHM` says: calls of at most `UP_TO` bytes per
//! rank (the size the automatic choice looks at; `max` for any size), not covered by a line of
//! a smaller `UP_TO`, use `ALGORITHM`. Sizes take the suffixes K, M and G (powers of 1024).
//! `flat` is the node board, and may only cover sizes up to its largest part (1 MiB); `default` is the
//! built-in choice. A call no line covers, or whose algorithm the group cannot run (`flat`
//! without a board, `hier` on one host), is chosen as without a file.

use super::FLAT_MAX_BYTES;
use crate::error::{Error, Result};
use crate::schedule::{Algo, Collective};
use crate::units::{parse_size, show_size};
use std::fmt;
use std::mem::discriminant;
use std::path::Path;

/// Where a group runs, as far as a tuning file tells groups apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Every rank on one host, over shared memory.
    Shm,
    /// Anything else: several hosts, or TCP (or RDMA) forced on one.
    Net,
}

impl Scope {
    /// `shm` or `net`, as sections name it.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Shm => "shm",
            Scope::Net => "net",
        }
    }

    fn parse(name: &str) -> Option<Scope> {
        [Scope::Shm, Scope::Net]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// One line of a section: calls of at most `up_to` bytes per rank use `algo` (`None`: the
/// built-in choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The collective (its root, if any, is ignored).
    pub coll: Collective,
    /// The largest size per rank the rule covers; `u64::MAX` for any.
    pub up_to: u64,
    /// The algorithm; `None` is the built-in choice (`default` in the file).
    pub algo: Option<Algo>,
}

/// The rules for one scope from one number of ranks on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Where the rules apply.
    pub scope: Scope,
    /// The fewest ranks they apply to.
    pub ranks: usize,
    /// The rules, by collective and then ascending `up_to`.
    pub rules: Vec<Rule>,
}

/// A parsed tuning file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rules {
    sections: Vec<Section>,
}

/// The collectives' names in tuning files (as in `PSY_ALGO`).
pub(crate) const NAMES: [(&str, Collective); 9] = [
    ("allreduce", Collective::AllReduce),
    ("broadcast", Collective::Broadcast { root: 0 }),
    ("reduce", Collective::Reduce { root: 0 }),
    ("allgather", Collective::AllGather),
    ("reducescatter", Collective::ReduceScatter),
    ("scatter", Collective::Scatter { root: 0 }),
    ("gather", Collective::Gather { root: 0 }),
    ("alltoall", Collective::AllToAll),
    ("barrier", Collective::Barrier),
];

/// The tuning-file name of `coll`.
pub(crate) fn coll_name(coll: Collective) -> &'static str {
    NAMES
        .iter()
        .find(|(_, c)| discriminant(c) == discriminant(&coll))
        .map(|(n, _)| *n)
        .unwrap_or("?")
}

/// The collective a `PSY_ALGO` or tuning-file name means (`all_reduce` = `allreduce`, `bcast` =
/// `broadcast`).
pub(crate) fn parse_coll(name: &str) -> Option<Collective> {
    let name = name.trim().replace(['_', '-'], "").to_lowercase();
    let name = if name == "bcast" {
        "broadcast".into()
    } else {
        name
    };
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// The file's name for the built-in choice.
pub const DEFAULT: &str = "default";

/// The largest tuning file read, in bytes. `psybench tune` writes a few lines per collective and
/// section (a few KiB for every layout a cluster has); 1 MiB leaves room for any comments.
pub const TUNING_LIMIT: u64 = 1 << 20;

/// Whether a tuning file may name `algo` for `coll`.
fn allowed(coll: Collective, algo: Algo) -> bool {
    algo == Algo::Flat || Algo::for_collective(coll).contains(&algo)
}

impl Rules {
    /// Rules made of `sections` (each section's rules are sorted; a later section of the same
    /// scope and ranks replaces an earlier one).
    pub fn new(sections: Vec<Section>) -> Result<Rules> {
        let mut rules = Rules::default();
        for s in sections {
            rules.replace(s)?;
        }
        Ok(rules)
    }

    /// The sections, by scope and ranks.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// Puts `section` in, replacing one of the same scope and ranks: how `psybench tune` adds
    /// what it measured to a file that holds other layouts.
    pub fn replace(&mut self, mut section: Section) -> Result<()> {
        for r in &section.rules {
            check_rule(r)?;
        }
        if section.ranks == 0 {
            return Err(Error::config("a tuning section needs at least 1 rank"));
        }
        section.rules.sort_by_key(|r| (coll_index(r.coll), r.up_to));
        self.sections
            .retain(|s| (s.scope, s.ranks) != (section.scope, section.ranks));
        self.sections.push(section);
        self.sections.sort_by_key(|s| (s.scope, s.ranks));
        Ok(())
    }

    /// The section a group of `ranks` in `scope` uses: the one of that scope with the most ranks
    /// not above `ranks`.
    pub fn section_for(&self, scope: Scope, ranks: usize) -> Option<&Section> {
        self.sections
            .iter()
            .filter(|s| s.scope == scope && s.ranks <= ranks)
            .max_by_key(|s| s.ranks)
    }

    /// The algorithm the file gives `coll` of `bytes` per rank in a group of `ranks` in `scope`,
    /// if a line covers it.
    pub fn lookup(
        &self,
        scope: Scope,
        ranks: usize,
        coll: Collective,
        bytes: usize,
    ) -> Option<Algo> {
        self.section_for(scope, ranks)?
            .rules
            .iter()
            .find(|r| discriminant(&r.coll) == discriminant(&coll) && bytes as u64 <= r.up_to)
            .and_then(|r| r.algo)
    }

    /// Parses a tuning file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Rules> {
        let mut sections: Vec<Section> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |msg: String| Error::config(format!("{origin}:{}: {msg}", i + 1));
            if let Some(head) = line.strip_prefix('[') {
                let head = head.strip_suffix(']').ok_or_else(|| {
                    at(format!(
                        "`{line}` does not end in `]`; a section reads `[shm 2]`"
                    ))
                })?;
                sections.push(parse_head(head).map_err(at)?);
                continue;
            }
            let section = sections.last_mut().ok_or_else(|| {
                at(format!(
                    "`{line}` comes before any section; start the file with one such as `[shm 2]`"
                ))
            })?;
            let rule = parse_rule(line).map_err(at)?;
            check_rule(&rule).map_err(|e| at(e.message().to_string()))?;
            section.rules.push(rule);
        }
        Rules::new(sections)
    }

    /// Reads and parses the tuning file at `path`: a regular file of at most [`TUNING_LIMIT`]
    /// bytes ([`crate::textfile::read_regular`]: a FIFO or a device is refused at once, not
    /// waited on or read without end).
    pub fn load(path: &Path) -> Result<Rules> {
        let text = crate::textfile::read_regular(path, TUNING_LIMIT).map_err(|e| {
            Error::config(format!(
                "cannot read the tuning file {}: {e}; write one with `psybench tune`, or set PSY_TUNING=off",
                path.display()
            ))
        })?;
        Rules::parse(&text, &path.display().to_string())
    }
}

/// Refuses a rule a group could never run as written.
fn check_rule(r: &Rule) -> Result<()> {
    let Some(algo) = r.algo else {
        return Ok(());
    };
    if !allowed(r.coll, algo) {
        let mut ok: Vec<_> = Algo::for_collective(r.coll)
            .iter()
            .map(|a| a.name())
            .collect();
        ok.extend([Algo::Flat.name(), DEFAULT]);
        return Err(Error::config(format!(
            "`{}` is not an algorithm for {}; choose one of: {}",
            algo,
            coll_name(r.coll),
            ok.join(", ")
        )));
    }
    if algo == Algo::Flat && r.up_to > FLAT_MAX_BYTES as u64 {
        return Err(Error::config(format!(
            "flat (the node board) takes at most {FLAT_MAX_BYTES} bytes per rank, not {}; end its range at {}",
            show_size(r.up_to),
            show_size(FLAT_MAX_BYTES as u64)
        )));
    }
    Ok(())
}

fn coll_index(coll: Collective) -> usize {
    NAMES
        .iter()
        .position(|(_, c)| discriminant(c) == discriminant(&coll))
        .unwrap_or(NAMES.len())
}

fn parse_head(head: &str) -> std::result::Result<Section, String> {
    let words: Vec<&str> = head.split_whitespace().collect();
    let [scope, ranks] = words[..] else {
        return Err(format!(
            "section `[{head}]` is not `[SCOPE RANKS]`, e.g. `[shm 2]` or `[net 8]`"
        ));
    };
    let scope = Scope::parse(scope)
        .ok_or_else(|| format!("unknown scope `{scope}` in `[{head}]`; use shm or net"))?;
    let ranks = ranks
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{ranks}` in `[{head}]` is not a number of ranks (1 or more)"))?;
    Ok(Section {
        scope,
        ranks,
        rules: Vec::new(),
    })
}

fn parse_rule(line: &str) -> std::result::Result<Rule, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [coll, up_to, algo] = words[..] else {
        return Err(format!(
            "`{line}` is not `COLLECTIVE UP_TO ALGORITHM`, e.g. `allreduce 64K recursive_doubling`"
        ));
    };
    let coll = parse_coll(coll).ok_or_else(|| {
        let all: Vec<_> = NAMES.iter().map(|(n, _)| *n).collect();
        format!("unknown collective `{coll}`; known: {}", all.join(", "))
    })?;
    let up_to = parse_size(up_to)
        .ok_or_else(|| format!("`{up_to}` is not a size such as 4096, 64K, 2M or max"))?;
    let algo = match algo {
        DEFAULT => None,
        name => Some(Algo::parse(name).ok_or_else(|| format!("unknown algorithm `{name}`"))?),
    };
    Ok(Rule { coll, up_to, algo })
}

impl fmt::Display for Rules {
    /// The file's text, which [`Rules::parse`] reads back to the same rules.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.sections.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            writeln!(f, "[{} {}]", s.scope.name(), s.ranks)?;
            for r in &s.rules {
                writeln!(
                    f,
                    "{:<14}{:>6}  {}",
                    coll_name(r.coll),
                    show_size(r.up_to),
                    r.algo.map_or(DEFAULT, Algo::name)
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# a comment
[shm 2]
allreduce 4K flat   # the board
all_reduce 256K rd
allreduce max ring
bcast max pipeline
reduce 64K default
reduce max binomial

[shm 8]
allreduce max ring

[net 2]
allgather 1M hier
";

    #[test]
    fn a_file_round_trips_and_answers_by_scope_ranks_and_size() {
        let rules = Rules::parse(FILE, "t").unwrap();
        assert_eq!(Rules::parse(&rules.to_string(), "again").unwrap(), rules);
        let ar = Collective::AllReduce;
        assert_eq!(rules.lookup(Scope::Shm, 2, ar, 4096), Some(Algo::Flat));
        assert_eq!(
            rules.lookup(Scope::Shm, 2, ar, 4097),
            Some(Algo::RecursiveDoubling)
        );
        assert_eq!(
            rules.lookup(Scope::Shm, 3, ar, 256 << 10),
            Some(Algo::RecursiveDoubling)
        );
        assert_eq!(
            rules.lookup(Scope::Shm, 7, ar, (256 << 10) + 1),
            Some(Algo::Ring)
        );
        // From 8 ranks on, the [shm 8] section: small all-reduces are no longer flat.
        assert_eq!(rules.lookup(Scope::Shm, 8, ar, 8), Some(Algo::Ring));
        assert_eq!(rules.lookup(Scope::Shm, 64, ar, 8), Some(Algo::Ring));
        assert_eq!(
            rules.lookup(Scope::Shm, 2, Collective::Broadcast { root: 1 }, 8),
            Some(Algo::Pipeline)
        );
        // Nothing for 1 rank, nothing for an uncovered collective or size, nothing in net for
        // all-reduce.
        assert_eq!(rules.lookup(Scope::Shm, 1, ar, 8), None);
        assert_eq!(rules.lookup(Scope::Shm, 2, Collective::AllToAll, 8), None);
        assert_eq!(
            rules.lookup(Scope::Net, 4, Collective::AllGather, (1 << 20) + 1),
            None
        );
        assert_eq!(rules.lookup(Scope::Net, 4, ar, 8), None);
        // `default` lines give the built-in choice (None) and end where they say.
        let reduce = Collective::Reduce { root: 0 };
        assert_eq!(rules.lookup(Scope::Shm, 2, reduce, 64 << 10), None);
        assert_eq!(
            rules.lookup(Scope::Shm, 2, reduce, (64 << 10) + 1),
            Some(Algo::Binomial)
        );
    }

    #[test]
    fn a_later_section_of_the_same_layout_replaces_the_earlier() {
        let rules = Rules::parse(
            "[shm 2]\nallreduce max ring\n[shm 2]\nallreduce max rd\n",
            "t",
        )
        .unwrap();
        assert_eq!(rules.sections().len(), 1);
        assert_eq!(
            rules.lookup(Scope::Shm, 2, Collective::AllReduce, 1 << 30),
            Some(Algo::RecursiveDoubling)
        );
    }

    #[test]
    fn bad_files_name_the_line_and_the_fix() {
        let cases = [
            ("allreduce max ring", "t:1:", "before any section"),
            ("[shm two]\n", "t:1:", "number of ranks"),
            ("[disk 2]\n", "t:1:", "use shm or net"),
            ("[shm 2\n", "t:1:", "does not end in"),
            ("[shm 2]\n\nallreduce 8X ring", "t:3:", "is not a size"),
            ("[shm 2]\nallsum max ring", "t:2:", "known: allreduce"),
            (
                "[shm 2]\nallreduce max pairwise",
                "t:2:",
                "choose one of: ring",
            ),
            ("[shm 2]\nbroadcast 2M flat", "t:2:", "end its range at 1M"),
            (
                "[shm 2]\nallreduce ring",
                "t:2:",
                "COLLECTIVE UP_TO ALGORITHM",
            ),
            ("[shm 2]\nallreduce max magic", "t:2:", "unknown algorithm"),
        ];
        for (text, place, fix) in cases {
            let e = Rules::parse(text, "t").unwrap_err();
            assert!(
                e.message().contains(place) && e.message().contains(fix),
                "{text:?}: {e}"
            );
        }
        let e = Rules::load(Path::new("/nonexistent/psyne-tuning")).unwrap_err();
        assert!(e.message().contains("psybench tune"), "{e}");
    }
}
