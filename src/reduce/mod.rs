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
    element_kernel::<T, false>(op, dst, src);
}

/// Runs `$body` with `$o` bound to `op` as written out, one arm per op, so that each arm
/// compiles to a tight, vectorisable loop with the op a constant (`avg` sums; the caller divides).
macro_rules! for_each_op {
    ($op:expr, $o:ident => $body:expr) => {
        for_each_op!(@arms $op, $o => $body; Prod, Min, Max, BAnd, BOr, BXor)
    };
    (@arms $op:expr, $o:ident => $body:expr; $($name:ident),*) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => {
                let $o = ReduceOp::Sum;
                $body
            }
            $(ReduceOp::$name => {
                let $o = ReduceOp::$name;
                $body
            })*
        }
    };
}

/// `dst[i] = op(dst[i], src[i])`, or with `ONTO` `op(src[i], dst[i])`, element by element.
#[inline(always)]
fn each_element<T: Element, const ONTO: bool>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    for_each_op!(op, o => {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = if ONTO {
                T::combine(o, *s, *d)
            } else {
                T::combine(o, *d, *s)
            };
        }
    })
}

/// `dst[i] = op(first[i], src[i])`, element by element.
#[inline(always)]
fn each_pair<T: Element>(op: ReduceOp, dst: &mut [T], first: &[T], src: &[T]) {
    for_each_op!(op, o => {
        for ((d, a), s) in dst.iter_mut().zip(first).zip(src) {
            *d = T::combine(o, *a, *s);
        }
    })
}

/// [`each_element`], compiled for AVX2 where the CPU has it (32 bytes an instruction where the
/// baseline, SSE2, takes 16).
#[inline]
fn element_kernel<T: Element, const ONTO: bool>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this CPU has AVX2 (just detected).
        return unsafe { avx2::each_element::<T, ONTO>(op, dst, src) };
    }
    each_element::<T, ONTO>(op, dst, src)
}

/// [`each_pair`], compiled for AVX2 where the CPU has it.
#[inline]
fn pair_kernel<T: Element>(op: ReduceOp, dst: &mut [T], first: &[T], src: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this CPU has AVX2 (just detected).
        return unsafe { avx2::each_pair::<T>(op, dst, first, src) };
    }
    each_pair::<T>(op, dst, first, src)
}

/// The element loops compiled with AVX2 enabled: the same source, inlined into functions the
/// compiler may use AVX2 in.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Element, ReduceOp};

    /// [`super::each_element`] with AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn each_element<T: Element, const ONTO: bool>(
        op: ReduceOp,
        dst: &mut [T],
        src: &[T],
    ) {
        super::each_element::<T, ONTO>(op, dst, src)
    }

    /// [`super::each_pair`] with AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn each_pair<T: Element>(
        op: ReduceOp,
        dst: &mut [T],
        first: &[T],
        src: &[T],
    ) {
        super::each_pair::<T>(op, dst, first, src)
    }
}

/// How many bytes [`Reducer::apply_from`] copies and then reduces at a time where no kernel
/// takes three operands: a piece that stays in the first-level cache between the two (a multiple
/// of every element size).
const COPY_PIECE: usize = 16 << 10;

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
        if !self.applies_onto() {
            return false;
        }
        let op = self.op;
        with_dtype!(self.dtype, T => {
            element_kernel::<T, true>(op, bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src))
        });
        true
    }

    /// Whether [`Reducer::apply_onto`] applies (all but `f16` and `bf16`).
    pub fn applies_onto(&self) -> bool {
        half_kernels::Half::of(self.dtype).is_none()
    }

    /// `dst = op(first, src)` on byte slices of equal length as [`Reducer::apply`] takes them:
    /// bit for bit what copying `first` to `dst` and then applying `src` gives, in one pass over
    /// the three (for `f16` and `bf16`, whose kernels reduce in place, a copy and a reduction a
    /// cache-sized piece at a time).
    pub(crate) fn apply_from(&self, dst: &mut [u8], first: &[u8], src: &[u8]) {
        debug_assert!(dst.len() == first.len() && dst.len() == src.len());
        if half_kernels::Half::of(self.dtype).is_some() {
            for ((d, a), s) in dst
                .chunks_mut(COPY_PIECE)
                .zip(first.chunks(COPY_PIECE))
                .zip(src.chunks(COPY_PIECE))
            {
                d.copy_from_slice(a);
                self.apply(d, s);
            }
            return;
        }
        let op = self.op;
        with_dtype!(self.dtype, T => pair_kernel::<T>(
            op,
            bytemuck::cast_slice_mut(dst),
            bytemuck::cast_slice(first),
            bytemuck::cast_slice(src),
        ));
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

    /// `apply_onto(dst = b, a)` and `apply_from(dst, a, b)` against copying `a` to `dst` and
    /// applying `b`, bit for bit.
    fn onto_and_from_match_copy_then_apply<T: Element>(a: &[T], b: &[T], bits: fn(&T) -> u64) {
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
            let mut from = vec![b[0]; a.len()];
            reducer.apply_from(
                bytemuck::cast_slice_mut(&mut from),
                bytemuck::cast_slice(a),
                bytemuck::cast_slice(b),
            );
            for i in 0..a.len() {
                assert_eq!(bits(&onto[i]), bits(&copied[i]), "{} {op} at {i}", T::DTYPE);
                assert_eq!(bits(&from[i]), bits(&copied[i]), "{} {op} at {i}", T::DTYPE);
            }
        }
    }

    #[test]
    fn halves_applied_from_give_the_bits_of_copying_then_applying() {
        // Longer than the pieces the halves are copied and reduced in, and not a whole number
        // of them.
        let a: Vec<bf16> = (0..20_001)
            .map(|i| bf16::from_f32((i as f32 * 0.37).sin() * 9.0))
            .collect();
        let b: Vec<bf16> = (0..20_001)
            .map(|i| bf16::from_f32((i as f32 * 0.11).cos() * 5.0))
            .collect();
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let reducer = Reducer::new(DType::BF16, op).unwrap();
            let mut copied = a.clone();
            reducer.apply(
                bytemuck::cast_slice_mut(&mut copied),
                bytemuck::cast_slice(&b),
            );
            let mut from = vec![bf16::ZERO; a.len()];
            reducer.apply_from(
                bytemuck::cast_slice_mut(&mut from),
                bytemuck::cast_slice(&a),
                bytemuck::cast_slice(&b),
            );
            assert!(
                from.iter()
                    .zip(&copied)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{op}"
            );
        }
    }

    #[test]
    fn applying_onto_or_from_gives_the_bits_of_copying_then_applying() {
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
        onto_and_from_match_copy_then_apply(&a, &b, |x| u64::from(x.to_bits()));
        let (a, b): (Vec<f64>, Vec<f64>) = pairs().map(|(x, y)| (x as f64, y as f64)).unzip();
        onto_and_from_match_copy_then_apply(&a, &b, |x| x.to_bits());
        let a: Vec<i32> = (-20..20).map(|x| x * 7919).collect();
        let b: Vec<i32> = (0..40).map(|x| i32::MAX - x * 3).collect();
        onto_and_from_match_copy_then_apply(&a, &b, |x| *x as u32 as u64);
        let a: Vec<u8> = (0..=255).collect();
        let b: Vec<u8> = (0..=255).rev().collect();
        onto_and_from_match_copy_then_apply(&a, &b, |x| u64::from(*x));
    }

    /// The kernels this CPU runs (AVX2 where it has it) against the baseline loops, bit for bit,
    /// on every op and on lengths around the vector widths.
    fn kernels_match_the_baseline<T: Element>(values: &[T], bits: fn(&T) -> u64) {
        for op in ReduceOp::ALL {
            if op.check(T::DTYPE).is_err() {
                continue;
            }
            for len in [0, 1, 7, 8, 33, values.len() / 2] {
                let (a, b) = (&values[..len], &values[values.len() - len..]);
                let run = |kernel: bool| {
                    let (mut el, mut onto, mut pair) = (a.to_vec(), a.to_vec(), b.to_vec());
                    if kernel {
                        element_kernel::<T, false>(op, &mut el, b);
                        element_kernel::<T, true>(op, &mut onto, b);
                        pair_kernel::<T>(op, &mut pair, a, b);
                    } else {
                        each_element::<T, false>(op, &mut el, b);
                        each_element::<T, true>(op, &mut onto, b);
                        each_pair::<T>(op, &mut pair, a, b);
                    }
                    [el, onto, pair].map(|v| v.iter().map(bits).collect::<Vec<_>>())
                };
                assert_eq!(run(true), run(false), "{} {op}, {len} elements", T::DTYPE);
            }
        }
    }

    #[test]
    fn the_kernels_this_cpu_runs_give_the_baseline_bits() {
        let specials = [f32::from_bits(0x7fc0_0001), -0.0, 0.0, f32::INFINITY, -1.5];
        let floats: Vec<f32> = (0..200)
            .map(|i| {
                specials
                    .get(i % 11)
                    .copied()
                    .unwrap_or((i as f32 * 0.37).sin() * 1e3)
            })
            .collect();
        kernels_match_the_baseline(&floats, |x| u64::from(x.to_bits()));
        let doubles: Vec<f64> = floats.iter().map(|&x| x as f64 * 1.000_1).collect();
        kernels_match_the_baseline(&doubles, |x| x.to_bits());
        let ints: Vec<i32> = (0..200).map(|i| (i * 7919) ^ (i << 25)).collect();
        kernels_match_the_baseline(&ints, |x| *x as u32 as u64);
        let bytes: Vec<u8> = (0..200).map(|i| (i * 37) as u8).collect();
        kernels_match_the_baseline(&bytes, |x| u64::from(*x));
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
