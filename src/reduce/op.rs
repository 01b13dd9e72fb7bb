//! [`ReduceOp`], the reduction operations, and the one f32 step of every op on half types: a
//! leaf of the base layer that the element types ([`crate::dtype`]) and the kernels
//! ([`super::half_kernels`]) both name.

/// How values from different ranks are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// Sum (integers wrap on overflow).
    Sum = 1,
    /// Product (integers wrap on overflow).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Mean over the ranks: a sum divided by the world size at the end (integers truncate).
    Avg,
    /// Bitwise and (integer types only).
    BAnd,
    /// Bitwise or (integer types only).
    BOr,
    /// Bitwise exclusive or (integer types only).
    BXor,
}

impl ReduceOp {
    /// Every op, in tag order.
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::BAnd,
        ReduceOp::BOr,
        ReduceOp::BXor,
    ];

    /// The lower-case name (`sum`, `band`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::BAnd => "band",
            ReduceOp::BOr => "bor",
            ReduceOp::BXor => "bxor",
        }
    }

    /// Parses a name as printed by [`ReduceOp::name`].
    pub fn parse(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| o.name() == name)
    }

    /// The op with wire tag `tag`, if any.
    pub fn from_tag(tag: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| *o as u8 == tag)
    }

    /// True for the bitwise ops.
    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor)
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The f32 step of every op on half types: the one definition that
/// [`Element::combine`](crate::dtype::Element::combine) for `f16`/`bf16` and every kernel in `half_kernels`
/// follow. It pins down what IEEE 754 and Rust leave open, so that every implementation agrees
/// to the bit whatever the compiler does with the operands:
///
/// - sum and product: when `x` is NaN the result is `x` (a compiler may swap the operands of `+`,
///   and `NaN + NaN` gives whichever the hardware sees first);
/// - min and max: spelled out rather than `f32::min`, which may return either zero for
///   `min(-0.0, 0.0)`: when `y` is not strictly smaller (larger) the result is `x`, unless `x` is
///   NaN, then it is `y`;
/// - bitwise ops (refused for floats before any data moves) leave `x`.
#[inline(always)]
pub(crate) fn combine_f32(op: ReduceOp, x: f32, y: f32) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => {
            if x.is_nan() {
                x
            } else {
                x + y
            }
        }
        ReduceOp::Prod => {
            if x.is_nan() {
                x
            } else {
                x * y
            }
        }
        ReduceOp::Min => {
            if y < x || x.is_nan() {
                y
            } else {
                x
            }
        }
        ReduceOp::Max => {
            if y > x || x.is_nan() {
                y
            } else {
                x
            }
        }
        ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor => x,
    }
}
