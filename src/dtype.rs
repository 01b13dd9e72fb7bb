//! Element types that collectives accept. A type opts in through [`Element`]; inside, buffers are
//! bytes and the element type travels as a [`DType`] tag.

use crate::reduce::op::{combine_f32, ReduceOp};
use half::{bf16, f16};

/// The runtime tag of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// `f32`
    F32 = 1,
    /// `f64`
    F64,
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// IEEE half precision (`half::f16`)
    F16,
    /// bfloat16 (`half::bf16`)
    BF16,
}

/// Runs `$body` with `$t` naming the Rust type of `$dtype`'s elements (a `match` over every
/// dtype, one arm per type). With `$f16, $bf16` given, the half-precision dtypes name those types
/// instead (MPI moves them as `u16`).
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        $crate::dtype::with_dtype!($dtype, $t, ::half::f16, ::half::bf16 => $body)
    };
    ($dtype:expr, $t:ident, $f16:ty, $bf16:ty => $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::dtype::DType::I8 => {
                type $t = i8;
                $body
            }
            $crate::dtype::DType::I16 => {
                type $t = i16;
                $body
            }
            $crate::dtype::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::dtype::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::dtype::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::dtype::DType::U16 => {
                type $t = u16;
                $body
            }
            $crate::dtype::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::dtype::DType::U64 => {
                type $t = u64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = $f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = $bf16;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

impl DType {
    /// Every dtype, in tag order.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// True for the floating-point types (bitwise reductions are refused for them).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The Rust name of the type, for messages.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The dtype with wire tag `tag`, if any.
    pub fn from_tag(tag: u8) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as u8 == tag)
    }

    /// Parses a name as printed by [`DType::name`].
    pub fn parse(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A type whose slices can be communicated and reduced.
///
/// Implemented for f32, f64, i8..i64, u8..u64, f16 and bf16. `combine` is the scalar definition of
/// every reduction op; the slice kernels in [`crate::reduce`] must agree with it element for element.
pub trait Element: bytemuck::Pod + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// The runtime tag of this type.
    const DTYPE: DType;

    /// `op(a, b)` for one element. [`ReduceOp::Avg`] combines as a sum (the division by the world
    /// size happens once, at the end). Bitwise ops on float types return `a` unchanged: callers
    /// reject them before any data moves (see [`ReduceOp::check`]).
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;

    /// `self / n`, the last step of [`ReduceOp::Avg`] (integer types truncate toward zero).
    fn div_count(self, n: usize) -> Self;

    /// Converts a small integer, for building test inputs (wraps or rounds like `as`).
    fn from_i64(v: i64) -> Self;
}

macro_rules! int_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::BAnd => a & b,
                    ReduceOp::BOr => a | b,
                    ReduceOp::BXor => a ^ b,
                }
            }
            fn div_count(self, n: usize) -> Self {
                (self as i128 / n as i128) as $t
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    )*};
}
int_element!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

macro_rules! float_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor => a,
                }
            }
            fn div_count(self, n: usize) -> Self {
                self / n as $t
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    )*};
}
float_element!(f32 => F32, f64 => F64);

macro_rules! half_element {
    ($($t:ident => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                // Widened to f32, combined there, rounded once (crate::reduce::half_kernels).
                $t::from_f32(combine_f32(op, a.to_f32(), b.to_f32()))
            }
            fn div_count(self, n: usize) -> Self {
                $t::from_f32(self.to_f32() / n as f32)
            }
            fn from_i64(v: i64) -> Self {
                $t::from_f32(v as f32)
            }
        }
    )*};
}
half_element!(f16 => F16, bf16 => BF16);
