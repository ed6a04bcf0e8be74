//! Division by a number fixed when a limiter is made (a GCRA's time per unit): one
//! multiplication and one shift, where a `div` instruction was the slowest of a memory check
//! (see the benchmarks page).
//!
//! The method is Granlund and Montgomery's ("Division by invariant integers using
//! multiplication", 1994): for a divisor `d` with `2^(l-1) < d <= 2^l`, the multiplier
//! `m = ceil(2^k / d)` with `k >= N + l` gives `floor(n * m / 2^k) == floor(n / d)` for every
//! `n < 2^N`. Write `m * d = 2^k + e` with `0 <= e < d`, and `n = q * d + r`: then
//! `n * m / 2^k = q + (r + n * e / 2^k) / d`, and `n * e < 2^N * 2^l <= 2^k` keeps the fraction
//! below `(r + 1) / d <= 1`. Every figure a limiter divides is below 2^54 (counts are at most
//! 2^53), so `N` is 54.

/// The numerators this division is exact for are below 2^`NUMERATOR_BITS`.
const NUMERATOR_BITS: u32 = 54;

/// A divisor prepared for [`Divisor::divide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divisor {
    /// `ceil(2^k / d)`; 0 for `d == 1` (whose multiplier, 2^64, does not fit).
    multiplier: u64,
    /// `k - 64`: the shift after taking the high word of the product.
    shift: u32,
}

impl Divisor {
    /// Prepares division by `divisor` (at least 1).
    pub(crate) fn new(divisor: u64) -> Divisor {
        assert!(divisor > 0, "division by zero");
        if divisor == 1 {
            return Divisor { multiplier: 0, shift: 0 };
        }
        // `l`: the bits of `divisor - 1`, so that 2^(l-1) < divisor <= 2^l.
        let l = u64::BITS - (divisor - 1).leading_zeros();
        // At least 64, so that the high word of the product is taken before any shift; with
        // `divisor >= 2`, `ceil(2^k / divisor) < 2^(k - l + 1) <= 2^64` fits a word.
        let k = (NUMERATOR_BITS + l).max(64);
        let multiplier = (1u128 << k).div_ceil(u128::from(divisor));
        Divisor { multiplier: u64::try_from(multiplier).expect("the multiplier fits a word"), shift: k - 64 }
    }

    /// `numerator / divisor`, rounded down, for any `numerator` below 2^54.
    #[inline(always)]
    pub(crate) fn divide(self, numerator: u64) -> u64 {
        debug_assert!(numerator < 1 << NUMERATOR_BITS, "{numerator} is beyond the exact range");
        if self.multiplier == 0 {
            return numerator;
        }
        ((u128::from(numerator) * u128::from(self.multiplier)) >> 64) as u64 >> self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Divisors and numerators at the edges: powers of two and their neighbours, the largest
    /// figures, and multiples of the divisor and one short of them.
    #[test]
    fn edges_divide_exactly() {
        let max = (1u64 << NUMERATOR_BITS) - 1;
        let mut divisors = vec![1, 2, 3, 7, 10, 1000, 1001, 999_999, max, max - 1, 1 << 53];
        for bit in 0..NUMERATOR_BITS {
            divisors.extend([(1 << bit) + 1, 1 << bit, (1u64 << bit).saturating_sub(1).max(1)]);
        }
        for d in divisors {
            let divisor = Divisor::new(d);
            let mut numerators =
                vec![0, 1, d - 1, d, d + 1, max, max - 1, max / d * d, (max / d * d).saturating_sub(1)];
            numerators.retain(|n| *n <= max);
            for n in numerators {
                assert_eq!(divisor.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_division_is_exact(d in 1u64..(1 << NUMERATOR_BITS), n in 0u64..(1 << NUMERATOR_BITS)) {
            prop_assert_eq!(Divisor::new(d).divide(n), n / d);
        }

        #[test]
        fn small_divisors_are_exact(d in 1u64..100_000, n in 0u64..(1 << NUMERATOR_BITS)) {
            prop_assert_eq!(Divisor::new(d).divide(n), n / d);
        }
    }
}
