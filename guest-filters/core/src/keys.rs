//! Hash maps and sets for the fixed-size byte keys filters index by
//! (addresses, topics, selectors). These keys are keccak outputs or chosen
//! by clients, so a short keyed hash over 8-byte words is enough, and much
//! cheaper in WebAssembly than a general byte-slice hasher (lookups were
//! the largest cost of `match-batch` before this). The seed is random per
//! map, so clients cannot precompute colliding keys.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher, RandomState};

/// An odd constant with well-spread bits (2^64 / φ).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Hashes a key word by word: xor, multiply, rotate the well-mixed high bits
/// down (hashbrown uses both the low and the top bits).
#[derive(Clone, Copy, Debug)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word));
        }
    }

    /// The length prefix of a fixed-size key carries no information.
    #[inline]
    fn write_usize(&mut self, _len: usize) {}

    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.mix(value);
    }

    /// A final avalanche, so the last word's bits reach the top bits too.
    #[inline]
    fn finish(&self) -> u64 {
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(MULTIPLIER);
        h ^ (h >> 29)
    }
}

impl KeyHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(MULTIPLIER).rotate_left(26);
    }
}

/// Builds [`KeyHasher`]s with a seed drawn once per map.
#[derive(Clone, Copy, Debug)]
pub struct RandomKeyState(u64);

impl Default for RandomKeyState {
    fn default() -> Self {
        Self(RandomState::new().hash_one(MULTIPLIER))
    }
}

impl BuildHasher for RandomKeyState {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

/// A map from fixed-size byte keys.
pub type KeyMap<K, V> = HashMap<K, V, RandomKeyState>;
/// A set of fixed-size byte keys.
pub type KeySet<K> = HashSet<K, RandomKeyState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_spread() {
        let mut set: KeySet<[u8; 20]> = KeySet::default();
        for i in 0..10_000u32 {
            let mut key = [0u8; 20];
            key[16..].copy_from_slice(&i.to_be_bytes());
            assert!(set.insert(key));
        }
        assert_eq!(set.len(), 10_000);
        let mut missing = [0u8; 20];
        missing[0] = 1;
        assert!(!set.contains(&missing));
        // Keys differing only in their last bytes still spread over the top
        // bits hashbrown uses to pick control bytes.
        let state = RandomKeyState::default();
        let tops: std::collections::HashSet<u64> = (0..256u32)
            .map(|i| {
                let mut key = [0u8; 20];
                key[19] = i as u8;
                state.hash_one(key) >> 57
            })
            .collect();
        assert!(
            tops.len() > 64,
            "only {} distinct top-7-bit values",
            tops.len()
        );
    }
}
