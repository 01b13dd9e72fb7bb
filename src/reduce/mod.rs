//! Reduction operations and the kernels that apply them to byte buffers of a known [`DType`].

use crate::dtype::{with_dtype, DType, Element};
use crate::error::{Error, Result};

pub(crate) mod half_kernels;
pub(crate) mod op;
mod order;

pub use op::ReduceOp;
pub use order::ReduceOrder;

impl ReduceOp {
    /// Refuses combinations that have no meaning, before any data moves.
    pub fn check(self, dtype: DType) -> Result<()> {
        if self.is_bitwise() && dtype.is_float() {
            return Err(Error::invalid(format!(
                "reduce op `{}` is bitwise and is defined only for integer types, not {dtype}; \
                 use an integer buffer, or sum/prod/min/max/avg for floats",
                self.name()
            )));
        }
        Ok(())
    }
}

/// `dst[i] = op(dst[i], src[i])` for typed slices of equal length.
///
/// `f16` and `bf16` go through vectorised kernels that widen to f32, combine and round back once
/// per element, bit for bit what [`Element::combine`] gives (the module `half_kernels` says how).
#[inline]
pub fn reduce_slice<T: Element>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    debug_assert_eq!(dst.len(), src.len());
    // `T::DTYPE` is a constant: for the other types this branch compiles away.
    if let Some(kind) = half_kernels::Half::of(T::DTYPE) {
        half_kernels::reduce(
            kind,
            op,
            bytemuck::cast_slice_mut(dst),
            bytemuck::cast_slice(src),
        );
        return;
    }
    each_element::<T, false>(op, dst, src);
}

/// `dst[i] = op(dst[i], src[i])`, or with `ONTO` `op(src[i], dst[i])`, element by element: one
/// monomorphic loop per op so that each compiles to a tight, vectorisable loop.
#[inline(always)]
fn each_element<T: Element, const ONTO: bool>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    macro_rules! each {
        ($op:expr) => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = if ONTO {
                    T::combine($op, *s, *d)
                } else {
                    T::combine($op, *d, *s)
                };
            }
        };
    }
    match op {
        ReduceOp::Sum | ReduceOp::Avg => each!(ReduceOp::Sum),
        ReduceOp::Prod => each!(ReduceOp::Prod),
        ReduceOp::Min => each!(ReduceOp::Min),
        ReduceOp::Max => each!(ReduceOp::Max),
        ReduceOp::BAnd => each!(ReduceOp::BAnd),
        ReduceOp::BOr => each!(ReduceOp::BOr),
        ReduceOp::BXor => each!(ReduceOp::BXor),
    }
}

/// A type-erased reduction: `dst = op(dst, src)` over whole elements of one dtype.
#[derive(Clone, Copy)]
pub struct Reducer {
    dtype: DType,
    op: ReduceOp,
}

impl Reducer {
    /// A reducer for `op` over `dtype`, refusing bitwise ops on floats.
    pub fn new(dtype: DType, op: ReduceOp) -> Result<Self> {
        op.check(dtype)?;
        Ok(Reducer { dtype, op })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Applies the op to byte slices holding whole, aligned elements. Both slices must have equal
    /// length, a multiple of the element size, and be aligned for the element type (buffers come
    /// from typed allocations or the executor's 8-byte-aligned scratch).
    pub fn apply(&self, dst: &mut [u8], src: &[u8]) {
        let op = self.op;
        with_dtype!(self.dtype, T => {
            reduce_slice::<T>(op, bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src))
        })
    }

    /// `dst = op(src, dst)` (`src` the first operand, bit for bit what copying `src` to `dst` and
    /// then applying the old `dst` would give) on byte slices as [`Reducer::apply`] takes them.
    /// Returns false, leaving `dst` alone, for `f16` and `bf16` (their kernels put the running
    /// value first): the caller then copies and applies.
    pub fn apply_onto(&self, dst: &mut [u8], src: &[u8]) -> bool {
        if half_kernels::Half::of(self.dtype).is_some() {
            return false;
        }
        let op = self.op;
        with_dtype!(self.dtype, T => {
            each_element::<T, true>(op, bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src))
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn bitwise_on_float_is_refused_with_a_fix() {
        let err = ReduceOp::BXor.check(DType::F32).unwrap_err();
        assert!(err.message().contains("integer"), "{err}");
        assert!(ReduceOp::BXor.check(DType::U8).is_ok());
    }

    #[test]
    fn erased_kernel_matches_scalar_combine() {
        for op in ReduceOp::ALL {
            let a: Vec<i16> = (-20..20).collect();
            let b: Vec<i16> = (0..40).map(|x| x * 3 - 50).collect();
            let mut dst = a.clone();
            Reducer::new(DType::I16, op)
                .unwrap()
                .apply(bytemuck::cast_slice_mut(&mut dst), bytemuck::cast_slice(&b));
            for i in 0..a.len() {
                assert_eq!(dst[i], i16::combine(op, a[i], b[i]), "{op} at {i}");
            }
        }
    }

    /// `apply_onto(dst = b, a)` against copying `a` to `dst` and applying `b`, bit for bit.
    fn onto_matches_copy_then_apply<T: Element>(a: &[T], b: &[T], bits: fn(&T) -> u64) {
        for op in ReduceOp::ALL {
            let Ok(reducer) = Reducer::new(T::DTYPE, op) else {
                continue;
            };
            let mut onto = b.to_vec();
            assert!(
                reducer.apply_onto(bytemuck::cast_slice_mut(&mut onto), bytemuck::cast_slice(a))
            );
            let mut copied = a.to_vec();
            reducer.apply(
                bytemuck::cast_slice_mut(&mut copied),
                bytemuck::cast_slice(b),
            );
            for i in 0..a.len() {
                assert_eq!(bits(&onto[i]), bits(&copied[i]), "{} {op} at {i}", T::DTYPE);
            }
        }
    }

    #[test]
    fn applying_onto_gives_the_bits_of_copying_then_applying() {
        // NaNs of different payloads on both sides (the first operand's wins), signed zeros,
        // infinities and ordinary values, in every pairing.
        let specials = [
            f32::from_bits(0x7fc0_0001),
            f32::from_bits(0xffc0_0002),
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1.5,
            -3.25,
        ];
        let pairs = || {
            specials
                .iter()
                .flat_map(|&x| specials.iter().map(move |&y| (x, y)))
        };
        let (a, b): (Vec<f32>, Vec<f32>) = pairs().unzip();
        onto_matches_copy_then_apply(&a, &b, |x| u64::from(x.to_bits()));
        let (a, b): (Vec<f64>, Vec<f64>) = pairs().map(|(x, y)| (x as f64, y as f64)).unzip();
        onto_matches_copy_then_apply(&a, &b, |x| x.to_bits());
        let a: Vec<i32> = (-20..20).map(|x| x * 7919).collect();
        let b: Vec<i32> = (0..40).map(|x| i32::MAX - x * 3).collect();
        onto_matches_copy_then_apply(&a, &b, |x| *x as u32 as u64);
        let a: Vec<u8> = (0..=255).collect();
        let b: Vec<u8> = (0..=255).rev().collect();
        onto_matches_copy_then_apply(&a, &b, |x| u64::from(*x));
    }

    #[test]
    fn halves_are_not_applied_onto() {
        let mut d = [f16::ONE; 4];
        let reducer = Reducer::new(DType::F16, ReduceOp::Sum).unwrap();
        assert!(!reducer.apply_onto(
            bytemuck::cast_slice_mut(&mut d),
            bytemuck::cast_slice(&[f16::ONE; 4])
        ));
        assert_eq!(d, [f16::ONE; 4]);
    }

    fn half_kernel_matches_combine<T: Element>(
        dtype: DType,
        from: fn(f32) -> T,
        bits: fn(T) -> u16,
    ) {
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            // More than one block, with values that round in the half type.
            let a: Vec<T> = (0..1300)
                .map(|i| from((i as f32 * 0.37).sin() * 9.0))
                .collect();
            let b: Vec<T> = (0..1300)
                .map(|i| from((i as f32 * 0.11).cos() * 5.0))
                .collect();
            let mut d = a.clone();
            Reducer::new(dtype, op)
                .unwrap()
                .apply(bytemuck::cast_slice_mut(&mut d), bytemuck::cast_slice(&b));
            for i in 0..a.len() {
                assert_eq!(
                    bits(d[i]),
                    bits(T::combine(op, a[i], b[i])),
                    "{dtype} {op} at {i}"
                );
            }
        }
    }

    #[test]
    fn half_kernels_match_scalar_combine_bit_for_bit() {
        half_kernel_matches_combine::<f16>(DType::F16, f16::from_f32, f16::to_bits);
        half_kernel_matches_combine::<bf16>(DType::BF16, bf16::from_f32, bf16::to_bits);
    }

    #[test]
    fn names_round_trip() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::parse(op.name()), Some(op));
            assert_eq!(ReduceOp::from_tag(op as u8), Some(op));
        }
    }
}
