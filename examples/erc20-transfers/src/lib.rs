//! An example custom filter: `erc20Transfers`, a new `eth_subscribe` type.
//!
//! It consumes logs and keeps ERC-20 `Transfer(address,address,uint256)`
//! events (three topics; ERC-721 transfers have four and are skipped). Every
//! field is optional and the fields are and-ed:
//!
//! ```json
//! ["erc20Transfers", {"tokens": ["0x…"], "from": ["0x…"], "to": ["0x…"], "minAmount": "1000000"}]
//! ```
//!
//! `minAmount` is in the token's smallest unit, a decimal string or `0x` hex.
//!
//! Written as an SDK [`Rule`]: the parameters read once, the test of one log,
//! and the tokens as the index, so a log only meets the subscriptions of its
//! own token (and those naming none).
//!
//! Build it with `cargo build --release --target wasm32-wasip2 -p
//! chainsieve-example-erc20-transfers` (the host's build also puts it in
//! `target/filters/`) and drop the `.wasm` into the filters directory of a
//! running server: the topic appears without a restart.

use chainsieve_filter_sdk::params::{self, ParamsError};
use chainsieve_filter_sdk::{KeySet, LogView, Manifest, Payload, Rule, Source, export_rule};

/// keccak256("Transfer(address,address,uint256)").
const TRANSFER: [u8; 32] = [
    0xdd, 0xf2, 0x52, 0xad, 0x1b, 0xe2, 0xc8, 0x9b, 0x69, 0xc2, 0xb0, 0x68, 0xfc, 0x37, 0x8d, 0xaa,
    0x95, 0x2b, 0xa7, 0xf1, 0x63, 0xc4, 0xa1, 0x16, 0x28, 0xf5, 0x5a, 0x4d, 0xf5, 0x23, 0xb3, 0xef,
];

/// One subscription of `erc20Transfers`; empty sets mean any.
#[derive(Debug)]
pub struct Erc20Transfer {
    /// The index: the SDK hands this subscription only logs of these
    /// tokens (every log when empty).
    tokens: Vec<[u8; 20]>,
    from: KeySet<[u8; 20]>,
    to: KeySet<[u8; 20]>,
    /// Big-endian, so byte order is numeric order.
    min_amount: [u8; 32],
}

impl Rule for Erc20Transfer {
    const MANIFEST: Manifest = Manifest {
        topic: "erc20Transfers",
        source: Source::Logs,
        payload: Payload::Full,
    };
    type Event<'a> = LogView<'a>;

    fn subscribe(params: &str) -> Result<Self, ParamsError> {
        let map = params::filter_object(
            params,
            Self::MANIFEST.topic,
            &["tokens", "from", "to", "minAmount"],
        )?;
        let list = |field: &str| params::hex_list::<20>(map.get(field), field);
        Ok(Self {
            tokens: list("tokens")?,
            from: list("from")?.into_iter().collect(),
            to: list("to")?.into_iter().collect(),
            min_amount: params::optional_uint256(map.get("minAmount"), "minAmount")?,
        })
    }

    /// A log of a named token (the index saw to that) that is an ERC-20
    /// `Transfer` (three topics; ERC-721's has four) within the bounds.
    fn matches(&self, log: &LogView<'_>) -> bool {
        if log.topic_count() != 3 || log.topic(0) != Some(&TRANSFER) {
            return false;
        }
        let (Some(from), Some(to)) = (log.topic(1), log.topic(2)) else {
            return false;
        };
        let Some(amount) = log.data().first_chunk::<32>() else {
            return false;
        };
        let address =
            |word: &[u8; 32]| -> [u8; 20] { word[12..].try_into().expect("20 of 32 bytes") };
        (self.from.is_empty() || self.from.contains(&address(from)))
            && (self.to.is_empty() || self.to.contains(&address(to)))
            && *amount >= self.min_amount
    }

    fn index(&self) -> Option<&[[u8; 20]]> {
        (!self.tokens.is_empty()).then_some(self.tokens.as_slice())
    }

    fn event_key(log: &LogView<'_>) -> Option<[u8; 20]> {
        Some(*log.address())
    }
}

/// The component's filter: every subscription's rule, kept by the SDK.
pub type Erc20Transfers = chainsieve_filter_sdk::Rules<Erc20Transfer>;

export_rule!(Erc20Transfer);

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk::layout::{BatchWriter, LogFields};
    use chainsieve_filter_sdk::{Filter, match_batch};

    use super::*;

    const USDC: [u8; 20] = [0x11; 20];
    const WETH: [u8; 20] = [0x22; 20];
    const ALICE: [u8; 20] = [0xaa; 20];
    const BOB: [u8; 20] = [0xbb; 20];

    fn word(address: &[u8; 20]) -> [u8; 32] {
        let mut w = [0u8; 32];
        w[12..].copy_from_slice(address);
        w
    }

    fn hex(address: &[u8; 20]) -> String {
        format!(
            "0x{}",
            address
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    }

    /// A test transfer: token, from, to, amount, and whether it is an
    /// ERC-721 transfer (amount as a fourth topic).
    type TestTransfer = ([u8; 20], [u8; 20], [u8; 20], u128, bool);

    fn run(f: &Erc20Transfers, logs: &[TestTransfer]) -> Vec<(u32, u64)> {
        let mut w = BatchWriter::new(Source::Logs, logs.len());
        for (token, from, to, amount, nft) in logs {
            let mut topics = vec![TRANSFER, word(from), word(to)];
            let mut data = [0u8; 32];
            data[16..].copy_from_slice(&amount.to_be_bytes());
            if *nft {
                topics.push(data);
            }
            w.push_log(&LogFields {
                address: token,
                topics: &topics,
                data: if *nft { &[] } else { &data },
                block_number: 1,
                log_index: 0,
                transaction_index: 0,
                transaction_hash: &[0; 32],
                removed: false,
            });
        }
        let mut pairs: Vec<_> = match_batch(f, &w.finish())
            .expect("logs batch")
            .pairs()
            .collect();
        pairs.sort_unstable();
        pairs
    }

    #[test]
    fn fields_are_anded_and_nft_transfers_skipped() {
        let mut f = Erc20Transfers::default();
        f.subscribe(
            1,
            &format!(
                r#"[{{"tokens":["{}"],"to":["{}"],"minAmount":"1000"}}]"#,
                hex(&USDC),
                hex(&BOB)
            ),
        )
        .expect("valid");
        f.subscribe(2, "[]").expect("valid");
        f.subscribe(
            3,
            &format!(r#"[{{"from":["{}"],"minAmount":"0x10000"}}]"#, hex(&ALICE)),
        )
        .expect("valid");
        let got = run(
            &f,
            &[
                (USDC, ALICE, BOB, 5_000, false),  // 1, 2
                (USDC, ALICE, BOB, 999, false),    // 2 (below 1000)
                (WETH, ALICE, BOB, 70_000, false), // 2, 3 (not USDC; 70000 ≥ 0x10000)
                (USDC, BOB, ALICE, 5_000, false),  // 2 (to is not BOB)
                (USDC, ALICE, BOB, 5_000, true),   // none: an ERC-721 transfer
            ],
        );
        assert_eq!(got, vec![(0, 1), (0, 2), (1, 2), (2, 2), (2, 3), (3, 2)]);
        f.unsubscribe(2);
        f.unsubscribe(1);
        assert_eq!(run(&f, &[(USDC, ALICE, BOB, 1 << 20, false)]), vec![(0, 3)]);
    }

    #[test]
    fn bad_params_are_explained() {
        let err = |p: &str| {
            Erc20Transfers::default()
                .subscribe(1, p)
                .expect_err("invalid")
                .to_string()
        };
        assert!(err(r#"[{"minAmount":"-5"}]"#).contains("minAmount must be a decimal or 0x-hex"));
        assert!(err(r#"[{"minAmount":12}]"#).contains("minAmount"));
        assert!(err(r#"[{"token":[]}]"#).contains("unknown filter field \"token\""));
        assert!(err(r#"[{"tokens":["0x1"]}]"#).contains("tokens \"0x1\" must have 40 hex digits"));
    }
}
