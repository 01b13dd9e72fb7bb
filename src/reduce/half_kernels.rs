//! Half-precision reduction kernels (`f16`, `bf16`).
//!
//! Every element is widened to f32, combined in f32 and rounded back once (round to nearest,
//! ties to even): `dst[i] = round(op(f32(dst[i]), f32(src[i])))`. That is, bit for bit, what
//! [`Element::combine`](crate::dtype::Element::combine) does one element at a time (the tests
//! below check it on random bit patterns, NaNs, infinities, subnormals and every tail length).
//! One pairwise step therefore rounds once; a reduction over `p` ranks rounds `p - 1` times.
//!
//! Implementations, the best one chosen once per process at first use ([`Impl::chosen`]):
//!
//! - **x86-64 with AVX2 and F16C**: 16 elements a step. f16 converts with F16C (`vcvtph2ps`,
//!   `vcvtps2ph` rounding to nearest even); bf16 widens by a 16-bit shift and narrows with the
//!   integer form of round-to-nearest-even (plus `half`'s NaN rule), so it needs no AVX-512.
//! - **Portable** (any other CPU): blocks of 256 elements converted to f32, combined, converted
//!   back (f16 through the `half` crate's slice conversions, bf16 with branch-free bit arithmetic
//!   the compiler vectorises).
//!
//! AVX-512 (`avx512f`, `avx512bf16`) is not used: its intrinsics and target features were
//! stabilised in Rust 1.89, after psyne's minimum Rust version (1.80). The AVX2 kernels already
//! run at memory speed on large buffers (`results/half-kernels/`).

use super::op::{combine_f32, ReduceOp};
use crate::dtype::DType;
use std::sync::OnceLock;

/// Which of the two 16-bit float formats a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Half {
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of an f32).
    Bf16,
}

impl Half {
    /// The half format of `dtype`, if it is one.
    #[inline(always)]
    pub(crate) const fn of(dtype: DType) -> Option<Half> {
        match dtype {
            DType::F16 => Some(Half::F16),
            DType::BF16 => Some(Half::Bf16),
            _ => None,
        }
    }
}

/// One implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Impl {
    /// Plain Rust, any CPU.
    Portable,
    /// AVX2 + F16C intrinsics (x86-64).
    #[cfg(target_arch = "x86_64")]
    Avx2F16c,
}

impl Impl {
    /// The fastest implementation this CPU runs, detected once and cached.
    pub(crate) fn chosen() -> Impl {
        static CHOICE: OnceLock<Impl> = OnceLock::new();
        *CHOICE.get_or_init(|| Impl::available().pop().unwrap_or(Impl::Portable))
    }

    /// Every implementation this CPU can run, slowest (portable) first.
    pub(crate) fn available() -> Vec<Impl> {
        #[allow(unused_mut)]
        let mut all = vec![Impl::Portable];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            all.push(Impl::Avx2F16c);
        }
        all
    }
}

// The ops as const-generic tags, so that each kernel is one monomorphic loop.
const SUM: u8 = ReduceOp::Sum as u8;
const PROD: u8 = ReduceOp::Prod as u8;
const MIN: u8 = ReduceOp::Min as u8;
const MAX: u8 = ReduceOp::Max as u8;

/// `dst[i] = round(op(f32(dst[i]), f32(src[i])))` over the bits of `kind` values, with the
/// implementation chosen for this CPU. Slices of unequal length are reduced over the shorter.
#[inline]
pub(crate) fn reduce(kind: Half, op: ReduceOp, dst: &mut [u16], src: &[u16]) {
    // SAFETY: `Impl::chosen` returns only an implementation this CPU was detected to run.
    unsafe { run(Impl::chosen(), kind, op, dst, src) }
}

/// [`reduce`] with a given implementation (the tests run every one this CPU has).
///
/// # Panics
/// If this CPU cannot run `imp`.
#[cfg(test)]
pub(crate) fn reduce_with(imp: Impl, kind: Half, op: ReduceOp, dst: &mut [u16], src: &[u16]) {
    assert!(
        Impl::available().contains(&imp),
        "this CPU cannot run the {imp:?} half kernels"
    );
    // SAFETY: `imp` is one this CPU runs (checked just above).
    unsafe { run(imp, kind, op, dst, src) }
}

/// # Safety
/// `imp` is one of [`Impl::available`] (this CPU has the instructions it uses).
#[inline]
unsafe fn run(imp: Impl, kind: Half, op: ReduceOp, dst: &mut [u16], src: &[u16]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    match imp {
        Impl::Portable => portable::reduce(kind, op, dst, src),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and F16C (this function's contract: `Avx2F16c` is available
        // only when both were detected).
        Impl::Avx2F16c => unsafe { x86::reduce(kind, op, dst, src) },
    }
}

/// Plain Rust: blocks converted to f32, combined, converted back.
mod portable {
    use super::{combine_f32, Half, ReduceOp, MAX, MIN, PROD, SUM};
    use half::f16;
    use half::slice::HalfFloatSliceExt;

    const BLOCK: usize = 256;

    /// `bf16 -> f32` exactly as `half::bf16::to_f32` (a NaN comes out quiet).
    #[inline(always)]
    pub(super) fn bf16_to_f32(b: u16) -> f32 {
        let x = (b as u32) << 16;
        let quiet = if b & 0x7FFF > 0x7F80 { 0x0040_0000 } else { 0 };
        f32::from_bits(x | quiet)
    }

    /// `f32 -> bf16` exactly as `half::bf16::from_f32`: round to nearest, ties to even; a NaN
    /// keeps its top bits and is made quiet.
    #[inline(always)]
    pub(super) fn f32_to_bf16(f: f32) -> u16 {
        let x = f.to_bits();
        let y = if x & 0x7FFF_FFFF > 0x7F80_0000 {
            x | 0x0040_0000
        } else {
            x.wrapping_add(0x7FFF + ((x >> 16) & 1))
        };
        (y >> 16) as u16
    }

    fn widen(kind: Half, from: &[u16], to: &mut [f32]) {
        match kind {
            Half::F16 => {
                let from: &[f16] = bytemuck::cast_slice(from);
                from.convert_to_f32_slice(to);
            }
            Half::Bf16 => {
                for (t, f) in to.iter_mut().zip(from) {
                    *t = bf16_to_f32(*f);
                }
            }
        }
    }

    fn narrow(kind: Half, from: &[f32], to: &mut [u16]) {
        match kind {
            Half::F16 => {
                let to: &mut [f16] = bytemuck::cast_slice_mut(to);
                to.convert_from_f32_slice(from);
            }
            Half::Bf16 => {
                for (t, f) in to.iter_mut().zip(from) {
                    *t = f32_to_bf16(*f);
                }
            }
        }
    }

    pub(super) fn reduce(kind: Half, op: ReduceOp, dst: &mut [u16], src: &[u16]) {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => blocks::<SUM>(kind, dst, src),
            ReduceOp::Prod => blocks::<PROD>(kind, dst, src),
            ReduceOp::Min => blocks::<MIN>(kind, dst, src),
            ReduceOp::Max => blocks::<MAX>(kind, dst, src),
            // Refused before data moves; kept exact anyway (a round trip through f32).
            ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor => blocks::<0>(kind, dst, src),
        }
    }

    fn blocks<const OP: u8>(kind: Half, dst: &mut [u16], src: &[u16]) {
        let op = match OP {
            SUM => ReduceOp::Sum,
            PROD => ReduceOp::Prod,
            MIN => ReduceOp::Min,
            MAX => ReduceOp::Max,
            _ => ReduceOp::BAnd,
        };
        let (mut a, mut b) = ([0f32; BLOCK], [0f32; BLOCK]);
        for (d, s) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
            let n = d.len();
            widen(kind, d, &mut a[..n]);
            widen(kind, s, &mut b[..n]);
            for (x, y) in a[..n].iter_mut().zip(&b[..n]) {
                *x = combine_f32(op, *x, *y);
            }
            narrow(kind, &a[..n], d);
        }
    }

    /// Rounds f32 values to `kind` (for the tests of the rounding alone).
    #[cfg(test)]
    pub(super) fn round(kind: Half, from: &[f32]) -> Vec<u16> {
        let mut out = vec![0u16; from.len()];
        narrow(kind, from, &mut out);
        out
    }
}

/// AVX2 + F16C, 16 elements a step.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Half, ReduceOp, MAX, MIN, PROD, SUM};
    use std::arch::x86_64::*;

    /// Elements per step.
    const STEP: usize = 16;

    /// How far ahead to prefetch, in elements (2 KiB). Without it, buffers far larger than the
    /// caches reduced at about 75% of f32's rate on an AMD EPYC; 1 KiB, 4 KiB and 8 KiB ahead
    /// were slower than 2 KiB (`results/half-kernels/`).
    const PREFETCH: usize = 1024;

    /// Loading 16 half values as two vectors of f32, and storing them back rounded. Which
    /// element sits in which lane is the format's business: `store` puts every lane back where
    /// `load` took it from, and the ops between are lane-wise.
    trait Format {
        /// Reads 16 values at `p`.
        ///
        /// # Safety
        /// `p` is valid for reading 16 `u16`s (any alignment); the CPU has AVX2 and F16C.
        unsafe fn load(p: *const u16) -> (__m256, __m256);
        /// Rounds `v` (as returned by `load`) and writes the 16 values at `p`. With
        /// `ANY_NAN = false` the caller promises that every NaN in `v` is quiet and has its low
        /// 16 bits clear (what the sum and product of loaded values give), which spares bf16 its
        /// NaN test; `true` takes any f32.
        ///
        /// # Safety
        /// `p` is valid for writing 16 `u16`s (any alignment); the CPU has AVX2 and F16C.
        unsafe fn store<const ANY_NAN: bool>(p: *mut u16, v: (__m256, __m256));
    }

    /// IEEE binary16 through F16C.
    struct F16;

    impl Format for F16 {
        #[inline(always)]
        unsafe fn load(p: *const u16) -> (__m256, __m256) {
            // SAFETY: `p..p + 16` is readable and F16C is present (this function's contract);
            // `loadu` has no alignment requirement.
            unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                    _mm256_cvtph_ps(_mm_loadu_si128(p.add(8).cast())),
                )
            }
        }

        #[inline(always)]
        unsafe fn store<const ANY_NAN: bool>(p: *mut u16, v: (__m256, __m256)) {
            // SAFETY: `p..p + 16` is writable and F16C is present (this function's contract);
            // `storeu` has no alignment requirement. Rounding 0 is round to nearest even,
            // regardless of MXCSR.
            unsafe {
                _mm_storeu_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.0));
                _mm_storeu_si128(
                    p.add(8).cast(),
                    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v.1),
                );
            }
        }
    }

    /// bfloat16 through AVX2 integer arithmetic.
    struct Bf16;

    impl Bf16 {
        /// Each 32-bit lane of `v` rounded to bf16 as `half::bf16::from_f32` does; the result is
        /// in the high 16 bits of the lane (the low 16 are left over). With `ANY_NAN = false`,
        /// every NaN lane must be quiet with its low 16 bits clear: then the rounding below
        /// leaves it as it is, and no NaN test is needed.
        ///
        /// # Safety
        /// The CPU has AVX2.
        #[inline(always)]
        unsafe fn narrow<const ANY_NAN: bool>(v: __m256) -> __m256i {
            // SAFETY: AVX2 is present (this function's contract); only register arithmetic.
            unsafe {
                let x = _mm256_castps_si256(v);
                // Not NaN: x + 0x7FFF + (bit 16 of x), then the top half: ties to even. A finite
                // value that rounds up past the largest bf16 carries into the exponent and
                // becomes infinity, as it should; infinities have no low bits to carry.
                let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
                let rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
                if !ANY_NAN {
                    return rounded;
                }
                // NaN: keep the top bits and set the quiet bit (no rounding).
                let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
                let quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x0040_0000));
                _mm256_blendv_epi8(rounded, quiet, nan)
            }
        }
    }

    impl Format for Bf16 {
        #[inline(always)]
        unsafe fn load(p: *const u16) -> (__m256, __m256) {
            // SAFETY: `p..p + 16` is readable and AVX2 is present (this function's contract);
            // `loadu` has no alignment requirement.
            unsafe {
                let v = _mm256_loadu_si256(p.cast());
                // Seen as 32-bit words, the even elements are the low halves (a shift left by 16
                // makes each its f32) and the odd ones the high halves (already f32 once the low
                // half is cleared).
                (
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
                    _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-0x1_0000))),
                )
            }
        }

        #[inline(always)]
        unsafe fn store<const ANY_NAN: bool>(p: *mut u16, v: (__m256, __m256)) {
            // SAFETY: `p..p + 16` is writable and AVX2 is present (this function's contract).
            // The even elements go back to the low halves of the words, the odd ones to the high
            // halves, undoing `load`.
            unsafe {
                let even = _mm256_srli_epi32::<16>(Bf16::narrow::<ANY_NAN>(v.0));
                let odd =
                    _mm256_and_si256(Bf16::narrow::<ANY_NAN>(v.1), _mm256_set1_epi32(-0x1_0000));
                _mm256_storeu_si256(p.cast(), _mm256_or_si256(even, odd));
            }
        }
    }

    /// `op(x, y)` lane by lane, as [`super::combine_f32`] does.
    ///
    /// # Safety
    /// The CPU has AVX.
    #[inline(always)]
    unsafe fn combine<const OP: u8>(x: __m256, y: __m256) -> __m256 {
        // SAFETY: AVX is present (this function's contract); only register arithmetic.
        unsafe {
            let x_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
            match OP {
                // Where `x` is NaN the answer is `x`, made quiet: `x + x` (the same operand on
                // both sides, so their order cannot matter).
                SUM => _mm256_add_ps(x, _mm256_blendv_ps(y, x, x_nan)),
                PROD => _mm256_mul_ps(x, _mm256_blendv_ps(y, x, x_nan)),
                // `_mm256_min_ps(y, x)` is `y < x ? y : x`; where `x` is NaN the answer is `y`.
                MIN => _mm256_blendv_ps(_mm256_min_ps(y, x), y, x_nan),
                MAX => _mm256_blendv_ps(_mm256_max_ps(y, x), y, x_nan),
                _ => x,
            }
        }
    }

    /// `d[..16] = op(d[..16], s[..16])`.
    ///
    /// # Safety
    /// `d` is valid for reading and writing 16 `u16`s, `s` for reading 16; the CPU has AVX2 and
    /// F16C.
    #[inline(always)]
    unsafe fn step<F: Format, const OP: u8>(d: *mut u16, s: *const u16) {
        // SAFETY: this function's contract.
        unsafe {
            let x = F::load(d);
            let y = F::load(s);
            let r = (combine::<OP>(x.0, y.0), combine::<OP>(x.1, y.1));
            // A sum or product is NaN only as a NaN operand made quiet, or the default NaN:
            // quiet, and with the low 16 bits of a loaded value (zero for bf16). Min and max
            // pass a NaN operand through as it is, which may be signalling.
            if OP == SUM || OP == PROD {
                F::store::<false>(d, r);
            } else {
                F::store::<true>(d, r);
            }
        }
    }

    /// # Safety
    /// The CPU has AVX2 and F16C.
    #[target_feature(enable = "avx,avx2,f16c")]
    unsafe fn run<F: Format, const OP: u8>(dst: &mut [u16], src: &[u16]) {
        let n = dst.len().min(src.len());
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        // Two steps a turn, for more independent work in flight.
        while i + 2 * STEP <= n {
            // SAFETY: `i + 32 <= n` elements of both slices are in bounds; AVX2 and F16C are
            // present (this function's contract). The prefetched addresses may lie past the
            // slices: they are computed with `wrapping_add` (no out-of-bounds offset) and a
            // prefetch never faults or reads into the program.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(d.add(i).wrapping_add(PREFETCH).cast());
                _mm_prefetch::<_MM_HINT_T0>(s.add(i).wrapping_add(PREFETCH).cast());
                step::<F, OP>(d.add(i), s.add(i));
                step::<F, OP>(d.add(i + STEP), s.add(i + STEP));
            }
            i += 2 * STEP;
        }
        if i + STEP <= n {
            // SAFETY: `i + 16 <= n`; AVX2 and F16C are present.
            unsafe { step::<F, OP>(d.add(i), s.add(i)) };
            i += STEP;
        }
        // The tail (fewer than 16) through the same code, in zero-padded copies.
        let left = n - i;
        if left > 0 {
            let (mut a, mut b) = ([0u16; STEP], [0u16; STEP]);
            a[..left].copy_from_slice(&dst[i..n]);
            b[..left].copy_from_slice(&src[i..n]);
            // SAFETY: `a` and `b` hold 16 elements each; AVX2 and F16C are present.
            unsafe { step::<F, OP>(a.as_mut_ptr(), b.as_ptr()) };
            dst[i..n].copy_from_slice(&a[..left]);
        }
    }

    /// # Safety
    /// The CPU has AVX2 and F16C.
    unsafe fn with_op<F: Format>(op: ReduceOp, dst: &mut [u16], src: &[u16]) {
        // SAFETY: AVX2 and F16C are present (this function's contract).
        unsafe {
            match op {
                ReduceOp::Sum | ReduceOp::Avg => run::<F, SUM>(dst, src),
                ReduceOp::Prod => run::<F, PROD>(dst, src),
                ReduceOp::Min => run::<F, MIN>(dst, src),
                ReduceOp::Max => run::<F, MAX>(dst, src),
                ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor => run::<F, 0>(dst, src),
            }
        }
    }

    /// # Safety
    /// The CPU has AVX2 and F16C.
    pub(super) unsafe fn reduce(kind: Half, op: ReduceOp, dst: &mut [u16], src: &[u16]) {
        // SAFETY: AVX2 and F16C are present (this function's contract).
        unsafe {
            match kind {
                Half::F16 => with_op::<F16>(op, dst, src),
                Half::Bf16 => with_op::<Bf16>(op, dst, src),
            }
        }
    }

    /// Rounds f32 values to `kind` through the vector store path (for the tests of the rounding
    /// alone).
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C.
    #[cfg(test)]
    #[target_feature(enable = "avx,avx2,f16c")]
    pub(super) unsafe fn round(kind: Half, from: &[f32]) -> Vec<u16> {
        let mut out = vec![0u16; from.len().next_multiple_of(STEP)];
        let mut padded = from.to_vec();
        padded.resize(out.len(), 0.0);
        for (o, f) in out.chunks_exact_mut(STEP).zip(padded.chunks_exact(STEP)) {
            // `load` of Bf16 splits a block into its even and its odd elements; the same split
            // of the f32 input makes `store` write them back in order.
            let f: Vec<f32> = match kind {
                Half::F16 => f.to_vec(),
                Half::Bf16 => (0..STEP).map(|i| f[(i % 8) * 2 + i / 8]).collect(),
            };
            // SAFETY: each chunk holds 16 elements; AVX2 and F16C are present.
            unsafe {
                let v = (
                    _mm256_loadu_ps(f.as_ptr()),
                    _mm256_loadu_ps(f.as_ptr().add(8)),
                );
                match kind {
                    Half::F16 => F16::store::<true>(o.as_mut_ptr(), v),
                    Half::Bf16 => Bf16::store::<true>(o.as_mut_ptr(), v),
                }
            }
        }
        out.truncate(from.len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Element;
    use half::{bf16, f16};

    /// The scalar definition, one element at a time, on bits.
    fn scalar(kind: Half, op: ReduceOp, x: u16, y: u16) -> u16 {
        match kind {
            Half::F16 => f16::combine(op, f16::from_bits(x), f16::from_bits(y)).to_bits(),
            Half::Bf16 => bf16::combine(op, bf16::from_bits(x), bf16::from_bits(y)).to_bits(),
        }
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// Bit patterns that stress every case of `kind`: zeros, subnormals, the largest finite
    /// values, infinities, quiet and signalling NaNs of both signs, ties.
    fn specials(kind: Half) -> Vec<u16> {
        let mut v: Vec<u16> = match kind {
            Half::F16 => vec![
                0x0000, 0x0001, 0x0002, 0x03FF, 0x0400, 0x3C00, 0x3C01, 0x7BFF, 0x7C00, 0x7C01,
                0x7D00, 0x7E00, 0x7FFF, 0x4000, 0x3800, 0x1400, 0x0200,
            ],
            Half::Bf16 => vec![
                0x0000, 0x0001, 0x0002, 0x007F, 0x0080, 0x3F80, 0x3F81, 0x7F7F, 0x7F80, 0x7F81,
                0x7FA0, 0x7FC0, 0x7FFF, 0x4000, 0x3F00, 0x0100, 0x0040,
            ],
        };
        let negatives: Vec<u16> = v.iter().map(|b| b | 0x8000).collect();
        v.extend(negatives);
        v
    }

    /// `n` values: random bits, a quarter of them replaced by specials.
    fn values(kind: Half, rng: &mut Rng, n: usize) -> Vec<u16> {
        let sp = specials(kind);
        (0..n)
            .map(|_| {
                let r = rng.next();
                if r & 3 == 0 {
                    sp[(r >> 8) as usize % sp.len()]
                } else {
                    (r >> 32) as u16
                }
            })
            .collect()
    }

    const OPS: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];
    const KINDS: [Half; 2] = [Half::F16, Half::Bf16];

    fn check(imp: Impl, kind: Half, op: ReduceOp, a: &[u16], b: &[u16], what: &str) {
        let mut d = a.to_vec();
        reduce_with(imp, kind, op, &mut d, b);
        for i in 0..a.len() {
            let want = scalar(kind, op, a[i], b[i]);
            assert_eq!(
                d[i], want,
                "{imp:?} {kind:?} {op} {what} at {i}: {:#06x} op {:#06x} gave {:#06x}, scalar {want:#06x}",
                a[i], b[i], d[i]
            );
        }
    }

    #[test]
    fn every_implementation_matches_the_scalar_path_for_every_tail_and_offset() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for imp in Impl::available() {
            for kind in KINDS {
                for op in OPS {
                    for len in 0..=67 {
                        // Offsets 0..3 into a larger buffer: slices that start off any vector
                        // alignment.
                        let a = values(kind, &mut rng, len + 3);
                        let b = values(kind, &mut rng, len + 3);
                        for off in 0..3 {
                            let what = format!("len {len} offset {off}");
                            check(imp, kind, op, &a[off..off + len], &b[off..off + len], &what);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_implementation_matches_the_scalar_path_on_every_bit_pattern() {
        // Every 16-bit pattern as `dst`, against random `src` and against each special.
        let mut rng = Rng(42);
        let all: Vec<u16> = (0..=u16::MAX).collect();
        for imp in Impl::available() {
            for kind in KINDS {
                let mut srcs = vec![values(kind, &mut rng, all.len())];
                for s in specials(kind) {
                    srcs.push(vec![s; all.len()]);
                }
                for op in OPS {
                    for src in &srcs {
                        check(imp, kind, op, &all, src, "all patterns");
                        check(imp, kind, op, src, &all, "all patterns as src");
                    }
                }
            }
        }
    }

    #[test]
    fn rounding_matches_the_half_crate_on_random_f32_bits() {
        let mut rng = Rng(7);
        let mut f: Vec<f32> = (0..200_000)
            .map(|_| f32::from_bits(rng.next() as u32))
            .collect();
        // Ties, values next to ties, the edges of overflow and underflow, NaNs, infinities.
        for bits in [
            0x3F80_8000u32,
            0x3F81_8000,
            0x3F80_8001,
            0x3F80_7FFF,
            0x7F7F_FFFF,
            0x7F7F_8000,
            0x7F7F_7FFF,
            0x7F80_0000,
            0x7F80_0001,
            0x7FC0_0000,
            0x7FBF_FFFF,
            0x0000_8000,
            0x0000_0001,
            0x477F_F000,
            0x477F_EFFF,
            0x3300_0000,
            0x3300_0001,
            0x3380_0000,
        ] {
            f.push(f32::from_bits(bits));
            f.push(f32::from_bits(bits | 0x8000_0000));
        }
        let want_f16: Vec<u16> = f.iter().map(|x| f16::from_f32(*x).to_bits()).collect();
        let want_bf16: Vec<u16> = f.iter().map(|x| bf16::from_f32(*x).to_bits()).collect();
        assert_eq!(portable::round(Half::F16, &f), want_f16);
        assert_eq!(portable::round(Half::Bf16, &f), want_bf16);
        #[cfg(target_arch = "x86_64")]
        if Impl::available().contains(&Impl::Avx2F16c) {
            // SAFETY: AVX2 and F16C were detected just above.
            let (g16, gb16) = unsafe { (x86::round(Half::F16, &f), x86::round(Half::Bf16, &f)) };
            for i in 0..f.len() {
                assert_eq!(g16[i], want_f16[i], "f16 of {:#010x}", f[i].to_bits());
                assert_eq!(gb16[i], want_bf16[i], "bf16 of {:#010x}", f[i].to_bits());
            }
        }
    }

    #[test]
    fn bf16_widening_matches_the_half_crate_on_every_pattern() {
        for b in 0..=u16::MAX {
            assert_eq!(
                portable::bf16_to_f32(b).to_bits(),
                bf16::from_bits(b).to_f32().to_bits(),
                "{b:#06x}"
            );
        }
    }

    #[test]
    fn the_choice_is_cached_and_the_best_available() {
        assert_eq!(Impl::chosen(), Impl::chosen());
        assert_eq!(Impl::available().last().copied(), Some(Impl::chosen()));
        assert_eq!(Impl::available()[0], Impl::Portable);
    }

    #[test]
    fn unequal_lengths_reduce_the_common_prefix() {
        for imp in Impl::available() {
            let mut d = vec![0x3C00u16; 20]; // f16 1.0
            reduce_with(imp, Half::F16, ReduceOp::Sum, &mut d, &[0x3C00; 17]);
            assert_eq!(&d[..17], &[0x4000; 17][..]);
            assert_eq!(&d[17..], &[0x3C00; 3][..]);
        }
    }
}
