//! A key as it is stored: its public id, the SHA-256 of its secret (never
//! the secret: a leaked database or bus bucket reveals no usable key),
//! its plan and grants, and when it was made, expires and was revoked.

use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// One key, as stored and as the admin API shows it (without `digest`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Public, stable: what the admin API, usage and `/metrics` name.
    pub id: String,
    /// The SHA-256 of the secret, in hex ([`digest`]).
    pub digest: String,
    pub name: Option<String>,
    pub plan: String,
    /// Chains the key may use, within its plan's; `None`: the plan's.
    pub chains: Option<Vec<String>>,
    /// Method namespaces or names the key may call, within its plan's;
    /// `None`: the plan's.
    pub methods: Option<Vec<String>>,
    /// Unix seconds; from then on the key is refused.
    pub expires_at: Option<u64>,
    /// Unix seconds; 0 for a key of `[auth] keys`.
    pub created_at: u64,
    /// Unix seconds; a revoked key stays listed (its usage stays readable)
    /// and is refused.
    pub revoked_at: Option<u64>,
}

/// The secret of a new key: `cs_` and 192 random bits in hex, no `/` (it
/// goes in the URL path).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    format!("cs_{}", alloy_primitives::hex::encode(bytes))
}

/// A new key's id: `key_` and 48 random bits in hex (a clash is refused by
/// the store and another drawn).
pub fn new_id() -> String {
    let mut bytes = [0u8; 6];
    rand::rng().fill_bytes(&mut bytes);
    format!("key_{}", alloy_primitives::hex::encode(bytes))
}

/// The SHA-256 of a secret, in hex: how a key is stored and found, and
/// who owns the webhooks it makes. A plain hash suffices: new secrets are
/// random, not passwords to guess.
pub fn digest(secret: &str) -> String {
    alloy_primitives::hex::encode(Sha256::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_url_safe_and_stored_only_as_their_digest() {
        let (one, two) = (new_secret(), new_secret());
        assert_ne!(one, two);
        assert_eq!(one.len(), 51);
        assert!(one.starts_with("cs_") && !one.contains('/'));
        assert_eq!(digest(&one).len(), 64);
        assert_ne!(digest(&one), digest(&two));
        // The known vector: SHA-256("abc").
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(new_id().starts_with("key_") && new_id().len() == 16);
    }
}
