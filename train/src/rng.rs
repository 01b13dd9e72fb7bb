//! A small seeded random number generator (SplitMix64): the same numbers on every machine and
//! every rank, with no dependency.

/// SplitMix64 (Steele, Lea and Flood, 2014): 64 bits of state, passes BigCrush, one multiply-xorshift
/// chain per number. Plenty for initial weights and shuffles.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator for one purpose (`stream`, for example the epoch) derived from `seed`, so
    /// streams do not overlap in practice.
    pub fn stream(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, with 24 random bits (every value exactly representable in f32).
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in `[-a, a)`.
    pub fn symmetric(&mut self, a: f32) -> f32 {
        (2.0 * self.unit_f32() - 1.0) * a
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift; the bias is below 2^-32 for
    /// the sizes used here.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_fixed_by_the_seed() {
        // SplitMix64's published first output for seed 0.
        assert_eq!(Rng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn shuffles_are_permutations() {
        let mut v: Vec<usize> = (0..100).collect();
        Rng::stream(1, 2).shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn ranges_hold() {
        let mut r = Rng::new(3);
        for _ in 0..10_000 {
            let u = r.unit_f32();
            assert!((0.0..1.0).contains(&u));
            assert!(r.below(7) < 7);
            let s = r.symmetric(0.5);
            assert!((-0.5..0.5).contains(&s));
        }
    }
}
