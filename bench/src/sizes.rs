//! Message sizes: parsing `--sizes` (`8:256M`, `8,1K,1M`), the geometric sweep, rounding to whole
//! elements, binary-unit formatting, and the default iteration counts.
//!
//! Sizes use binary suffixes: `K` = 1024, `M` = 1024², `G` = 1024³, `T` = 1024⁴, upper or lower
//! case, optionally followed by `B` or `iB` (`4M`, `4m`, `4MiB` are the same). A size that is not a
//! whole number of elements of the dtype is **rounded up** to the next whole element (see
//! [`round_up_to_elements`]): the size column of the output shows the bytes that actually ran.

use psyne::DType;
use std::fmt;

use crate::model::BenchColl;

/// The sizes swept when `--sizes` is not given (a default sweep to 256 MiB).
pub const DEFAULT_SIZES: &str = "8:256M";

/// The geometric factor when `--factor` is not given.
pub const DEFAULT_FACTOR: f64 = 2.0;

/// Bytes moved per size by the default iteration rule (see [`default_iters`]).
pub const ITER_BUDGET_BYTES: u64 = 1 << 30;

/// Fewest timed iterations the default rule picks.
pub const MIN_ITERS: u64 = 5;

/// Most timed iterations the default rule picks.
pub const MAX_ITERS: u64 = 1000;

/// The most sizes one sweep may have. A default sweep (`8:256M`, factor 2) has 26; factor 1.02
/// over the same range, finer than any published curve needs, has 876. From 1 MiB up the
/// default iteration rule moves about 1 GiB per rank per size (a second or more at 1 GB/s), so
/// a thousand sizes is already the better part of an hour per collective: a longer list is a
/// mistyped `--factor` (`1.0001` over `1:1G` makes about 126,000 sizes, a day or more) far
/// more often than a wish, and expanding it is refused before anything runs, counting only up
/// to this bound (no memory grows with the mistake). Split a really finer sweep into several
/// runs of narrower `--sizes`.
pub const MAX_SIZES: usize = 1000;

/// What `--sizes` said, before the factor is applied.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeSpec {
    /// `MIN:MAX`: a geometric sweep from MIN, multiplying by the factor while ≤ MAX.
    Range {
        /// First size in bytes.
        min: u64,
        /// Largest size allowed, in bytes.
        max: u64,
    },
    /// `A,B,C` or a single `A`: exactly these sizes (sorted, duplicates dropped).
    List(Vec<u64>),
}

/// A `--sizes` or `--factor` value that cannot be used; the message names the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError(pub String);

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SizeError {}

fn err<T>(msg: String) -> Result<T, SizeError> {
    Err(SizeError(msg))
}

/// Parses one size: digits with an optional binary suffix (`8`, `1K`, `4m`, `1G`, `2MiB`).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return err(
            "empty size; write a number of bytes with an optional suffix K, M, G \
             (K = 1024), e.g. 8, 1K, 4M"
                .into(),
        );
    }
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return err(format!(
            "`{t}` is not a size: it must start with a number of bytes, e.g. 8, 1K, 4M"
        ));
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return err(format!(
                "`{t}`: unknown size suffix `{suffix}`; use K, M or G (binary: K = 1024), \
                 e.g. 1K, 4M, 1G"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError(format!("`{t}` is too large for a size in bytes")))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError(format!("`{t}` is too large for a size in bytes")))
}

/// Parses a `--sizes` value: `MIN:MAX` (geometric) or `A,B,...` (explicit list, also a single size).
pub fn parse_spec(text: &str) -> Result<SizeSpec, SizeError> {
    let t = text.trim();
    if let Some((lo, hi)) = t.split_once(':') {
        if lo.trim().is_empty() || hi.trim().is_empty() {
            return err(format!(
                "`{t}`: a range needs both ends, MIN:MAX, e.g. --sizes 8:256M"
            ));
        }
        if hi.contains(':') {
            return err(format!(
                "`{t}`: a range has one colon, MIN:MAX; set the step with --factor, \
                 e.g. --sizes 8:256M --factor 4"
            ));
        }
        let min = parse_size(lo)?;
        let max = parse_size(hi)?;
        if min == 0 {
            return err(format!(
                "`{t}`: a geometric range cannot start at 0; start at 1 (--sizes 1:{}) \
                 or list 0 explicitly (--sizes 0,1,8,1K)",
                hi.trim()
            ));
        }
        if min > max {
            return err(format!(
                "`{t}`: the range is backwards (MIN is larger than MAX); write it smallest \
                 first: --sizes {}:{}",
                hi.trim(),
                lo.trim()
            ));
        }
        return Ok(SizeSpec::Range { min, max });
    }
    let mut sizes = Vec::new();
    for part in t.split(',') {
        if part.trim().is_empty() {
            return err(format!(
                "`{t}`: empty entry in the size list; separate sizes with single commas, \
                 e.g. --sizes 8,1K,1M"
            ));
        }
        sizes.push(parse_size(part)?);
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(SizeSpec::List(sizes))
}

/// Checks a `--factor` value: a finite number greater than 1.
pub fn check_factor(factor: f64) -> Result<f64, SizeError> {
    if !factor.is_finite() || factor <= 1.0 {
        return err(format!(
            "--factor {factor}: the geometric factor must be greater than 1 \
             (each size is the previous one times the factor), e.g. --factor 2"
        ));
    }
    Ok(factor)
}

/// Expands a spec into ascending sizes. A range starts at MIN and multiplies by `factor` while
/// the result stays ≤ MAX (like nccl-tests: MAX is included only when the steps reach it);
/// non-integer factors round each step up and always advance by at least one byte. More than
/// [`MAX_SIZES`] sizes is an error naming their number and the fix.
pub fn expand(spec: &SizeSpec, factor: f64) -> Result<Vec<u64>, SizeError> {
    match spec {
        SizeSpec::List(v) if v.len() > MAX_SIZES => err(format!(
            "the list has {} sizes, more than the {MAX_SIZES} one sweep may have; measure them \
             in several runs of at most {MAX_SIZES}",
            group_digits(v.len() as f64)
        )),
        SizeSpec::List(v) => Ok(v.clone()),
        SizeSpec::Range { min, max } => {
            let factor = check_factor(factor)?;
            let mut out = vec![*min];
            let mut cur = *min;
            loop {
                let next_f = (cur as f64 * factor).ceil();
                let next = if next_f >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    (next_f as u64).max(cur + 1)
                };
                if next > *max || next == cur {
                    break;
                }
                if out.len() == MAX_SIZES {
                    return err(too_many(*min, *max, factor));
                }
                out.push(next);
                cur = next;
            }
            Ok(out)
        }
    }
}

/// The error for a range of more than [`MAX_SIZES`] sizes: about how many, and the factor that
/// would cover the same range in at most [`MAX_SIZES`].
fn too_many(min: u64, max: u64, factor: f64) -> String {
    let span = max as f64 / min as f64;
    // The smallest factor, to two decimals, whose sweep of the range fits.
    let fits = (span.ln() / (MAX_SIZES - 1) as f64).exp();
    let fits = ((fits * 100.0).ceil() / 100.0).max(1.01);
    format!(
        "{}:{} with --factor {factor} makes about {} sizes, more than the {MAX_SIZES} one sweep \
         may have (each size from 1M up takes a second or more); use a larger --factor \
         (--factor {fits} covers this range in at most {MAX_SIZES} sizes, --factor 2 in {}) or \
         a narrower --sizes",
        format_size(min),
        format_size(max),
        group_digits(range_len(min, max, factor)),
        range_len(min, max, 2.0),
    )
}

/// About how many sizes `MIN:MAX` has with `factor`, without listing them: one more byte per
/// step while that is more than the factor gives (below `1 / (factor - 1)`), then geometric.
fn range_len(min: u64, max: u64, factor: f64) -> f64 {
    let (mut cur, max) = (min as f64, max as f64);
    let mut n = 1.0;
    let knee = 1.0 / (factor - 1.0);
    if cur < knee {
        let end = knee.min(max);
        n += (end - cur).floor();
        cur = end;
    }
    if cur < max {
        n += ((max / cur).ln() / factor.ln()).floor();
    }
    n
}

/// `n` rounded, with thousands separated: `123,457`.
fn group_digits(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses `--sizes` and `--factor` together into ascending sizes in bytes.
pub fn parse_sizes(text: &str, factor: f64) -> Result<Vec<u64>, SizeError> {
    expand(&parse_spec(text)?, factor)
}

/// Rounds `bytes` up to a whole number of `elem_size`-byte elements.
pub fn round_up_to_elements(bytes: u64, elem_size: u64) -> u64 {
    let e = elem_size.max(1);
    bytes.div_ceil(e).saturating_mul(e)
}

/// Rounds every size up to whole elements of `dtype`, keeping them ascending and distinct.
pub fn round_sizes(sizes: &[u64], dtype: DType) -> Vec<u64> {
    let mut out: Vec<u64> = sizes
        .iter()
        .map(|b| round_up_to_elements(*b, dtype.size() as u64))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The element count and the actual byte size that run for a requested size.
///
/// The count is `bytes` rounded up to whole elements; for the operations whose size is a total
/// split over ranks (all-gather, reduce-scatter, all-to-all, gather, scatter) it is further
/// rounded up to a multiple of `ranks`, so every rank's chunk is the same length. Barrier moves
/// nothing: `(0, 0)`.
pub fn element_count(coll: BenchColl, bytes: u64, dtype: DType, ranks: usize) -> (u64, u64) {
    let elem = dtype.size() as u64;
    let mut count = bytes.div_ceil(elem.max(1));
    match coll {
        BenchColl::Barrier => return (0, 0),
        BenchColl::AllGather
        | BenchColl::ReduceScatter
        | BenchColl::AllToAll
        | BenchColl::Gather
        | BenchColl::Scatter => {
            let r = (ranks as u64).max(1);
            count = count.div_ceil(r).saturating_mul(r);
        }
        BenchColl::AllReduce | BenchColl::Broadcast | BenchColl::Reduce | BenchColl::SendRecv => {}
    }
    (count, count.saturating_mul(elem))
}

/// Default `(warmup, iters)` for a size: a fixed byte budget per size.
///
/// `iters = clamp(2^30 / bytes, 5, 1000)` (1000 for sizes up to 1 MiB, 5 from 256 MiB on), and
/// `warmup = clamp(iters / 10, 2, 20)`. From 1 MiB up each size then moves about 1 GiB per rank,
/// below that 1000 iterations take milliseconds each: a default sweep 8:256M moves about 11 GiB
/// per rank, under a minute at 1 GB/s (two ranks over loopback TCP do better).
pub fn default_iters(bytes: u64) -> (u64, u64) {
    let iters = (ITER_BUDGET_BYTES / bytes.max(1)).clamp(MIN_ITERS, MAX_ITERS);
    let warmup = (iters / 10).clamp(2, 20);
    (warmup, iters)
}

/// Formats bytes with a binary unit: `8`, `1K`, `1.5K`, `256M`, `1G` (no `B`, like `--sizes`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (unit, shift) in UNITS {
        let scale = 1u64 << shift;
        if bytes >= scale {
            if bytes % scale == 0 {
                return format!("{}{unit}", bytes / scale);
            }
            let v = bytes as f64 / scale as f64;
            let s = format!("{v:.1}");
            let s = s.strip_suffix(".0").unwrap_or(&s);
            return format!("{s}{unit}");
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(8), "8");
        assert_eq!(format_size(1024), "1K");
        assert_eq!(format_size(1536), "1.5K");
        assert_eq!(format_size(256 << 20), "256M");
        assert_eq!(format_size(1 << 30), "1G");
    }
}
