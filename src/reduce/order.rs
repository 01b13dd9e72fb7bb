//! [`ReduceOrder`]: in what order a reduction combines the ranks' values, chosen per group
//! (`PSY_REDUCE_ORDER`, [`crate::Tunables::reduce_order`]) and per call
//! ([`crate::Group::with_reduce_order`]).
//!
//! Floating-point sums and products are not associative, so the bits of a reduction depend on
//! the order its algorithm combines the ranks' contributions, and psyne picks algorithms by
//! size, tuning file and transport. [`ReduceOrder::Canonical`] fixes the order: every output
//! element is the rank-order fold `((x0 ⊕ x1) ⊕ x2) ⊕ … ⊕ x_{p-1}`, so a result has the same bits
//! whatever the size, algorithm, chunking, tuning file or transport.

use crate::error::{Error, Result};

/// The order in which a reducing collective combines the ranks' contributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReduceOrder {
    /// Whatever order the fastest algorithm for the call has (ring, recursive doubling, trees):
    /// every rank gets the same bits, but another size, algorithm, tuning file or transport may
    /// give other bits for floating-point sums and products.
    #[default]
    Fast,
    /// Every output element is the rank-order fold `((x0 ⊕ x1) ⊕ x2) ⊕ … ⊕ x_{p-1}` (`avg`:
    /// that sum divided by the size as in fast order; `f16`/`bf16` combine each pair in f32 and
    /// round back, as always), bit for bit what `psyne::oracle` (feature `testing`) computes, on every rank.
    Canonical,
}

impl ReduceOrder {
    /// Both orders.
    pub const ALL: [ReduceOrder; 2] = [ReduceOrder::Fast, ReduceOrder::Canonical];

    /// The name used in `PSY_REDUCE_ORDER`, psybench's `--reduce-order` and Python.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOrder::Fast => "fast",
            ReduceOrder::Canonical => "canonical",
        }
    }

    /// Parses `fast` or `canonical`, with an error naming both.
    pub fn parse(text: &str) -> Result<ReduceOrder> {
        let text = text.trim();
        ReduceOrder::ALL
            .into_iter()
            .find(|o| o.name() == text)
            .ok_or_else(|| {
                Error::config(format!(
                    "reduce order `{text}` is not known; choose `fast` (the default) or \
                     `canonical` (rank-order sums, the same bits for every algorithm and size), \
                     e.g. {}=canonical",
                    crate::names::REDUCE_ORDER
                ))
            })
    }

    /// The order `get` (normally `std::env::var`) gives for `PSY_REDUCE_ORDER`: fast when unset
    /// or empty.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<ReduceOrder> {
        match get(crate::names::REDUCE_ORDER) {
            Some(v) if !v.trim().is_empty() => ReduceOrder::parse(&v),
            _ => Ok(ReduceOrder::Fast),
        }
    }
}

impl std::fmt::Display for ReduceOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused_with_the_choices() {
        for o in ReduceOrder::ALL {
            assert_eq!(ReduceOrder::parse(o.name()).unwrap(), o);
        }
        let err = ReduceOrder::parse("exact").unwrap_err();
        assert!(err.message().contains("canonical"), "{err}");
        assert!(err.message().contains("PSY_REDUCE_ORDER"), "{err}");
    }

    #[test]
    fn the_environment_default_is_fast() {
        assert_eq!(
            ReduceOrder::from_lookup(&|_| None).unwrap(),
            ReduceOrder::Fast
        );
        let canon = |_: &str| Some("canonical".to_string());
        assert_eq!(
            ReduceOrder::from_lookup(&canon).unwrap(),
            ReduceOrder::Canonical
        );
    }
}
