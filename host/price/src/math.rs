//! Exact pool prices: big-integer rationals, no floats.
//!
//! Arbitrary-size integers rather than U256/U512: a token may declare up
//! to 255 decimals (10^255 needs 848 bits), a V3 price squares a 160-bit
//! `sqrtPriceX96`, and a two-hop route multiplies two such ratios, so a
//! fixed width would overflow or round.
//!
//! Orientation: a pool's `token0`/`token1` are its own (sorted by address).
//! [`v2_price`] and [`v3_price`] give the price of one whole `token0` in
//! `token1`; callers invert for the other direction.

use alloy_primitives::U256;
use num_bigint::BigUint;
use num_rational::Ratio;
use num_traits::{One, Zero};

/// A non-negative exact price.
pub type Price = Ratio<BigUint>;

/// Significant digits written by [`to_decimal`] (docs/src/api.md,
/// token_price: at least 15).
pub const SIGNIFICANT_DIGITS: usize = 18;

/// A pool whose weight is below the largest one's divided by this is left
/// out of a multi-pool price: a dust pool must not move the answer.
pub const DUST_RATIO: u32 = 100;

pub fn big(value: U256) -> BigUint {
    BigUint::from_bytes_le(&value.to_le_bytes::<32>())
}

fn pow10(exponent: u8) -> BigUint {
    BigUint::from(10u32).pow(u32::from(exponent))
}

/// Uniswap V2 (and its forks): one whole token0 in token1 from the
/// reserves; `None` while a reserve is empty.
pub fn v2_price(reserve0: U256, reserve1: U256, decimals0: u8, decimals1: u8) -> Option<Price> {
    if reserve0.is_zero() || reserve1.is_zero() {
        return None;
    }
    Some(Price::new(
        big(reserve1) * pow10(decimals0),
        big(reserve0) * pow10(decimals1),
    ))
}

/// Uniswap V3 (and its forks): one whole token0 in token1 from
/// `sqrtPriceX96` = √(token1/token0) · 2^96; `None` for a zero price.
pub fn v3_price(sqrt_price_x96: U256, decimals0: u8, decimals1: u8) -> Option<Price> {
    if sqrt_price_x96.is_zero() {
        return None;
    }
    let root = big(sqrt_price_x96);
    Some(Price::new(
        &root * &root * pow10(decimals0),
        (BigUint::one() << 192u32) * pow10(decimals1),
    ))
}

/// A V2 pool's liquidity, √(reserve0 · reserve1): the same measure as a V3
/// pool's in-range liquidity, so pools of both kinds weigh alike.
pub fn v2_liquidity(reserve0: U256, reserve1: U256) -> BigUint {
    (big(reserve0) * big(reserve1)).sqrt()
}

/// The liquidity-weighted mean of `prices` (price, weight), leaving out
/// pools below 1/[`DUST_RATIO`] of the largest weight; `None` when nothing
/// has weight.
pub fn weighted(prices: &[(Price, BigUint)]) -> Option<Price> {
    let largest = prices.iter().map(|(_, w)| w).max()?;
    if largest.is_zero() {
        return None;
    }
    let floor = largest / DUST_RATIO;
    let kept = prices.iter().filter(|(_, w)| *w >= floor && !w.is_zero());
    let (sum, total) = kept.fold(
        (Price::zero(), BigUint::zero()),
        |(sum, total), (price, weight)| (sum + price * weight, total + weight),
    );
    Some(sum / total)
}

/// `price` as a plain decimal string: no exponent, at least
/// [`SIGNIFICANT_DIGITS`] significant digits (all integer digits are kept),
/// rounded half up, trailing zeros dropped, so exact values read exactly.
pub fn to_decimal(price: &Price) -> String {
    let (numer, denom) = (price.numer(), price.denom());
    let integer = numer / denom;
    let integer_digits = if integer.is_zero() {
        0
    } else {
        integer.to_string().len()
    };
    // Fraction digits needed: past the leading zeros of a value below 1.
    let fraction_digits = if integer_digits > 0 {
        SIGNIFICANT_DIGITS.saturating_sub(integer_digits)
    } else {
        let mut leading = 0;
        let mut scaled = numer * 10u32;
        while !scaled.is_zero() && &scaled < denom {
            scaled *= 10u32;
            leading += 1;
        }
        leading + SIGNIFICANT_DIGITS
    };
    let scale = BigUint::from(10u32).pow(fraction_digits as u32);
    let scaled = numer * &scale;
    let mut units = &scaled / denom;
    let remainder = scaled - &units * denom;
    if remainder * 2u32 >= *denom {
        units += 1u32;
    }
    let digits = units.to_string();
    if fraction_digits == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = fraction_digits + 1);
    let (whole, fraction) = padded.split_at(padded.len() - fraction_digits);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(text: &str) -> U256 {
        text.parse().expect("decimal U256")
    }

    fn dec(p: Option<Price>) -> String {
        to_decimal(&p.expect("a price"))
    }

    // Expected values below were computed independently with Python's
    // `fractions.Fraction` and `decimal` (60-digit context, ROUND_HALF_UP).

    #[test]
    fn v2_prices_with_different_decimals() {
        // USDC (6) / WETH (18): 30,000,000 USDC against 10,000 WETH.
        let (usdc, weth) = (u("30000000000000"), u("10000000000000000000000"));
        assert_eq!(dec(v2_price(usdc, weth, 6, 18)), "0.000333333333333333333");
        assert_eq!(dec(v2_price(weth, usdc, 18, 6)), "3000");
        // 18 / 18, equal reserves.
        assert_eq!(dec(v2_price(u("5"), u("5"), 18, 18)), "1");
        // WBTC (8) / WETH (18): 100 WBTC against 2,000 WETH.
        assert_eq!(
            dec(v2_price(
                u("10000000000"),
                u("2000000000000000000000"),
                8,
                18
            )),
            "20"
        );
        assert_eq!(
            dec(v2_price(
                u("2000000000000000000000"),
                u("10000000000"),
                18,
                8
            )),
            "0.05"
        );
        // Empty reserves give no price.
        assert!(v2_price(U256::ZERO, u("1"), 18, 18).is_none());
    }

    #[test]
    fn v2_prices_at_the_uint112_limits() {
        let max = u("5192296858534827628530496329220095"); // 2^112 - 1
        assert_eq!(dec(v2_price(max, max, 18, 18)), "1");
        assert_eq!(
            dec(v2_price(u("1"), max, 18, 18)),
            "5192296858534827628530496329220095"
        );
        assert_eq!(
            dec(v2_price(max, u("1"), 18, 18)),
            "0.000000000000000000000000000000000192592994438723585"
        );
        assert_eq!(dec(v2_price(u("3"), max, 6, 18)), "1730765619511609209510");
    }

    #[test]
    fn v3_prices_from_sqrt_price() {
        let one = u("79228162514264337593543950336"); // 2^96: raw price 1
        assert_eq!(dec(v3_price(one, 18, 18)), "1");
        assert_eq!(dec(v3_price(one, 6, 18)), "0.000000000001");
        // A USDC (6) / WETH (18) pool near 2,000 USDC per WETH.
        let usdc_weth = u("1771845812700903892492222464000000");
        assert_eq!(dec(v3_price(usdc_weth, 6, 18)), "0.000500141262055286984");
        // The uint160 limit.
        let max = u("1461501637330902918203684832716283019655932542975"); // 2^160 - 1
        assert_eq!(
            dec(v3_price(max, 18, 18)),
            "340282366920938463463374607431768211456"
        );
        assert_eq!(dec(v3_price(max, 8, 18)), "34028236692093846346337460743");
        assert!(v3_price(U256::ZERO, 18, 18).is_none());
    }

    #[test]
    fn weighting_by_liquidity_leaves_dust_out() {
        let p = |n: u32, d: u32| Price::new(BigUint::from(n), BigUint::from(d));
        let w = |n: u32| BigUint::from(n);
        // 3:1 weights between prices 1 and 2 → 1.25.
        assert_eq!(
            to_decimal(&weighted(&[(p(1, 1), w(300)), (p(2, 1), w(100))]).expect("price")),
            "1.25"
        );
        // A pool with under 1% of the largest weight does not count.
        assert_eq!(
            to_decimal(&weighted(&[(p(1, 1), w(10_000)), (p(1000, 1), w(99))]).expect("price")),
            "1"
        );
        assert!(weighted(&[]).is_none());
        assert!(weighted(&[(p(1, 1), w(0))]).is_none());
        assert_eq!(v2_liquidity(u("4"), u("9")), w(6));
    }

    #[test]
    fn decimals_are_plain_and_precise() {
        let p = |n: u64, d: u64| Price::new(BigUint::from(n), BigUint::from(d));
        assert_eq!(to_decimal(&p(2, 3)), "0.666666666666666667");
        assert_eq!(to_decimal(&p(1, 7_000_000)), "0.000000142857142857142857");
        assert_eq!(
            to_decimal(&p(123_456_789_012_345_678, 10)),
            "12345678901234567.8"
        );
        assert_eq!(to_decimal(&p(0, 1)), "0");
        assert_eq!(to_decimal(&p(1_000_000, 1)), "1000000");
    }
}
