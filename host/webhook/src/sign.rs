//! A delivery's signature: HMAC-SHA256, keyed with the webhook's secret,
//! over `<timestamp>.<raw body>`; the timestamp (Unix seconds) travels in
//! its own header, so a receiver can refuse an old delivery replayed
//! (docs/src/api.md, Verifying a delivery).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature, `v1=<hex>`.
pub const SIGNATURE: &str = "x-chainsieve-signature";
/// The header carrying the signed timestamp.
pub const TIMESTAMP: &str = "x-chainsieve-timestamp";

/// A new secret: `whsec_` and 32 random bytes in hex. The whole string is
/// the key.
pub fn new_secret() -> String {
    format!(
        "whsec_{}",
        alloy_primitives::hex::encode(rand::random::<[u8; 32]>())
    )
}

/// The signature header's value for `body` sent at `timestamp`.
pub fn signature(secret: &str, timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1={}",
        alloy_primitives::hex::encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value Python's `hmac` computes for the same secret, timestamp
    /// and body (the docs' receiver example), and a new timestamp gives a
    /// new signature.
    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        let signed = signature("whsec_test", 1_700_000_000, b"{\"a\":1}");
        assert_eq!(
            signed,
            "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
        assert_ne!(signed, signature("whsec_test", 1_700_000_001, b"{\"a\":1}"));
        let secret = new_secret();
        assert!(secret.starts_with("whsec_") && secret.len() == 6 + 64);
        assert_ne!(secret, new_secret());
    }
}
