//! Sweep presets in TOML (`psybench --config configs/quick.toml`).
//!
//! Every sweep flag is a key of the same name (`sizes`, `factor`, `dtype`, `op`, `root`, `algo`,
//! `transport`, `iters`, `warmup`, `rounds`, `in-place`, `cadence`, `no-check`, `backend`, `csv`, `json`,
//! `plot`, `peak`, and `np` for `-n`), plus `collective` for what the subcommand names. Lists may
//! be written as a comma-separated string or a TOML array (`algo = ["ring", "rd"]`,
//! `sizes = [8, "1K", "1M"]`). Unknown keys are errors naming the key. Flags on the command line
//! override the file; output paths are relative to the current directory, like flags.
//!
//! ```toml
//! collective = "allreduce"
//! sizes = "8:256M"
//! algo = "ring,rd"
//! backend = "native"
//! json = "allreduce.json"
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One item of a list value: a string or a whole number.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Item {
    /// `"1K"`, `"ring"`
    Text(String),
    /// `8`
    Number(u64),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Text(s) => f.write_str(s),
            Item::Number(n) => write!(f, "{n}"),
        }
    }
}

/// A value that is a list: one string (comma-separated, as on the command line), one number, or
/// an array of those.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ListValue {
    /// `"ring,rd"` or `"8:256M"`
    One(Item),
    /// `["ring", "rd"]`
    Many(Vec<Item>),
}

impl ListValue {
    /// The value as the command line would spell it (items joined by commas).
    pub fn to_flag(&self) -> String {
        match self {
            ListValue::One(i) => i.to_string(),
            ListValue::Many(v) => v.iter().map(Item::to_string).collect::<Vec<_>>().join(","),
        }
    }

    /// A value given as command-line text.
    pub fn text(s: impl Into<String>) -> ListValue {
        ListValue::One(Item::Text(s.into()))
    }
}

/// The keys of a preset, all optional. The same struct carries the flags of a command line
/// (see [`crate::cli`]), so the two merge field by field ([`SweepFile::or`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SweepFile {
    /// Operations: a name, `all`, or a list.
    pub collective: Option<ListValue>,
    /// Local ranks to spawn (`-n`).
    pub np: Option<usize>,
    /// `MIN:MAX` or a list of sizes.
    pub sizes: Option<ListValue>,
    /// Geometric factor of a range.
    pub factor: Option<f64>,
    /// Element type name.
    pub dtype: Option<String>,
    /// Reduction op name.
    pub op: Option<String>,
    /// Root rank.
    pub root: Option<usize>,
    /// Algorithms (`auto`, names).
    pub algo: Option<ListValue>,
    /// Transport (`tcp`, `auto`).
    pub transport: Option<String>,
    /// Reduction orders (`fast`, `canonical`, or a list: alternated per size).
    pub reduce_order: Option<ListValue>,
    /// Timed iterations per size.
    pub iters: Option<u64>,
    /// Warm-up iterations per size.
    pub warmup: Option<u64>,
    /// Rounds per size (backends alternating).
    pub rounds: Option<u64>,
    /// In place.
    pub in_place: Option<bool>,
    /// All-reduce shared buffers (`Group::alloc_shared`).
    pub shared_buffers: Option<bool>,
    /// `stream` or `isolated`.
    pub cadence: Option<String>,
    /// Skip the element-by-element check.
    pub no_check: Option<bool>,
    /// Backends (`native`, `mpi`).
    pub backend: Option<ListValue>,
    /// CSV output.
    pub csv: Option<PathBuf>,
    /// JSON output.
    pub json: Option<PathBuf>,
    /// PNG output.
    pub plot: Option<PathBuf>,
    /// Reference bandwidth in GB/s.
    pub peak: Option<f64>,
}

impl SweepFile {
    /// Field by field: `self` where set, else `under` (flags `.or(file)`: flags win).
    pub fn or(self, under: SweepFile) -> SweepFile {
        SweepFile {
            collective: self.collective.or(under.collective),
            np: self.np.or(under.np),
            sizes: self.sizes.or(under.sizes),
            factor: self.factor.or(under.factor),
            dtype: self.dtype.or(under.dtype),
            op: self.op.or(under.op),
            root: self.root.or(under.root),
            algo: self.algo.or(under.algo),
            transport: self.transport.or(under.transport),
            reduce_order: self.reduce_order.or(under.reduce_order),
            iters: self.iters.or(under.iters),
            warmup: self.warmup.or(under.warmup),
            rounds: self.rounds.or(under.rounds),
            in_place: self.in_place.or(under.in_place),
            shared_buffers: self.shared_buffers.or(under.shared_buffers),
            cadence: self.cadence.or(under.cadence),
            no_check: self.no_check.or(under.no_check),
            backend: self.backend.or(under.backend),
            csv: self.csv.or(under.csv),
            json: self.json.or(under.json),
            plot: self.plot.or(under.plot),
            peak: self.peak.or(under.peak),
        }
    }
}

/// A preset that cannot be read or parsed; the message names the file and the key or line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is malformed or has an unknown key or a wrong type.
    #[error("config file {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What toml said (line, column and the key).
        message: String,
    },
}

/// Every key a preset may have.
pub const KEYS: [&str; 21] = [
    "collective",
    "np",
    "sizes",
    "factor",
    "dtype",
    "op",
    "root",
    "algo",
    "transport",
    "reduce-order",
    "iters",
    "warmup",
    "rounds",
    "in-place",
    "cadence",
    "no-check",
    "backend",
    "csv",
    "json",
    "plot",
    "peak",
];

/// Parses preset text; `path` only names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<SweepFile, ConfigError> {
    toml::from_str(text).map_err(|e: toml::de::Error| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The largest preset read: a preset is a few lines of keys (at most [`KEYS`]); 1 MiB leaves
/// room for any comments.
pub const CONFIG_LIMIT: u64 = 1 << 20;

/// Reads (a file of text or a pipe, at most [`CONFIG_LIMIT`], see [`psyrun::textfile`]) and
/// parses a preset.
pub fn load(path: &Path) -> Result<SweepFile, ConfigError> {
    let text = psyrun::textfile::read(path, CONFIG_LIMIT).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}
