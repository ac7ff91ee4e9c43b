//! An example contract 0.2 filter: `erc20TransfersDecoded`, the sibling of
//! `erc20Transfers` that delivers each ERC-20 transfer decoded, in a shape
//! of its own:
//!
//! ```json
//! {"token": "0x…", "from": "0x…", "to": "0x…", "amount": "1500000",
//!  "blockNumber": "0x10", "transactionHash": "0x…", "logIndex": "0x0",
//!  "removed": false}
//! ```
//!
//! `amount` is a decimal string in the token's smallest unit (JSON numbers
//! lose precision past 2^53). Subscriptions name tokens, accounts (a
//! transfer from or to one of them) and a minimum amount, all optional and
//! and-ed:
//!
//! ```json
//! ["erc20TransfersDecoded", {"tokens": ["0x…"], "accounts": ["0x…"], "minAmount": "1000000"}]
//! ```
//!
//! Written as an SDK [`Transform`]: it declares the log fields it reads
//! (address, topics, data, block number, log index, transaction hash), so
//! its batches carry only those; the SDK writes each transfer's payload
//! once, whoever it goes to.

use chainsieve_filter_sdk_0_2::decode::{
    TRANSFER_TOPIC, decimal, erc20_transfer, hex_address, hex_word,
};
use chainsieve_filter_sdk_0_2::params::{self, ParamsError};
use std::fmt::Write;

use chainsieve_filter_sdk_0_2::{
    Key, KeySet, LogView, Reach, Source, Transform, export_transform, log_fields,
};

/// The log fields read: what the transfer and its payload need.
pub const READ: u32 = log_fields::ADDRESS
    | log_fields::TOPICS
    | log_fields::DATA
    | log_fields::BLOCK_NUMBER
    | log_fields::LOG_INDEX
    | log_fields::TRANSACTION_HASH;

/// One subscription; empty sets mean any.
#[derive(Debug)]
pub struct DecodedTransfer {
    /// The index: the SDK hands this subscription only logs of these
    /// tokens (every log when empty).
    tokens: Vec<[u8; 20]>,
    /// A transfer from or to one of these.
    accounts: KeySet<[u8; 20]>,
    /// Big-endian, so byte order is numeric order.
    min_amount: [u8; 32],
}

impl Transform for DecodedTransfer {
    const TOPIC: &'static str = "erc20TransfersDecoded";
    const SOURCE: Source = Source::Logs;
    type Event<'a> = LogView<'a, READ>;

    fn subscribe(params: &str) -> Result<Self, ParamsError> {
        let map = params::filter_object(params, Self::TOPIC, &["tokens", "accounts", "minAmount"])?;
        Ok(Self {
            tokens: params::hex_list::<20>(map.get("tokens"), "tokens")?,
            accounts: params::hex_list::<20>(map.get("accounts"), "accounts")?
                .into_iter()
                .collect(),
            min_amount: params::optional_uint256(map.get("minAmount"), "minAmount")?,
        })
    }

    fn matches(&self, log: &LogView<'_, READ>) -> bool {
        erc20_transfer(log).is_some_and(|transfer| {
            (self.accounts.is_empty()
                || self.accounts.contains(&transfer.from)
                || self.accounts.contains(&transfer.to))
                && transfer.amount >= self.min_amount
        })
    }

    fn write(log: &LogView<'_, READ>, out: &mut String) {
        // Only called for a log some subscription matched: a transfer.
        let Some(transfer) = erc20_transfer(log) else {
            out.push_str("null");
            return;
        };
        // Hex, decimal digits and a boolean need no escaping: written
        // straight into the buffer, with no JSON tree in between.
        let _ = write!(
            out,
            r#"{{"token":"{}","from":"{}","to":"{}","amount":"{}","blockNumber":"{:#x}","transactionHash":"{}","logIndex":"{:#x}","removed":{}}}"#,
            hex_address(&transfer.token),
            hex_address(&transfer.from),
            hex_address(&transfer.to),
            decimal(&transfer.amount),
            log.block_number(),
            hex_word(log.transaction_hash()),
            log.log_index(),
            log.removed(),
        );
    }

    fn index(&self) -> Option<&[[u8; 20]]> {
        (!self.tokens.is_empty()).then_some(self.tokens.as_slice())
    }

    fn event_key(log: &LogView<'_, READ>) -> Option<[u8; 20]> {
        Some(*log.address())
    }

    /// Only transfers can match: logs of the subscription's tokens, or
    /// else any log whose first topic is the `Transfer` event's.
    fn reach(&self) -> Reach {
        if self.tokens.is_empty() {
            Reach::Keys(vec![Key::Topic(0, TRANSFER_TOPIC)])
        } else {
            Reach::Keys(self.tokens.iter().map(|t| Key::Emitter(*t)).collect())
        }
    }
}

/// The component's filter: every subscription's transform, kept by the SDK.
pub type DecodedTransfers = chainsieve_filter_sdk_0_2::Transforms<DecodedTransfer>;

export_transform!(DecodedTransfer);

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk_0_2::layout::LogFields;
    use chainsieve_filter_sdk_0_2::{Filter, Matches, ProjectedWriter, match_batch};

    use chainsieve_filter_sdk_0_2::serde_json::{self, json};

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

    /// A test transfer: token, from, to, amount.
    type TestTransfer = ([u8; 20], [u8; 20], [u8; 20], u128);

    /// A batch of transfers, in layout 2 with the fields the filter
    /// declares, as the host writes it.
    fn run(filter: &DecodedTransfers, transfers: &[TestTransfer]) -> Matches {
        let mut writer = ProjectedWriter::new(Source::Logs, READ, transfers.len());
        for (index, (token, from, to, amount)) in transfers.iter().enumerate() {
            let mut data = [0u8; 32];
            data[16..].copy_from_slice(&amount.to_be_bytes());
            writer.push_log(&LogFields {
                address: token,
                topics: &[TRANSFER_TOPIC, word(from), word(to)],
                data: &data,
                block_number: 16,
                log_index: index as u32,
                transaction_index: 0,
                transaction_hash: &[0x77; 32],
                removed: false,
            });
        }
        match_batch(filter, &writer.finish()).expect("a logs batch")
    }

    /// Each matching transfer goes out decoded, its payload written once
    /// for all its subscribers.
    #[test]
    fn transfers_are_delivered_decoded_once_for_all() {
        let mut filter = DecodedTransfers::default();
        let usdc = format!(r#"[{{"tokens":["{}"]}}]"#, hex_address(&USDC));
        filter.subscribe(1, &usdc).expect("valid");
        let alice = format!(
            r#"[{{"accounts":["{}"],"minAmount":"1000"}}]"#,
            hex_address(&ALICE)
        );
        filter.subscribe(2, &alice).expect("valid");
        let matches = run(
            &filter,
            &[
                (USDC, ALICE, BOB, 1_500_000),
                (WETH, BOB, ALICE, 10),
                (USDC, BOB, BOB, 5),
            ],
        );
        let mut pairs: Vec<_> = matches.pairs().collect();
        pairs.sort_unstable();
        assert_eq!(pairs, [(0, 1), (0, 2), (2, 1)]);
        assert_eq!(matches.payload_ends.len(), 2, "one payload per event");
        let payload: serde_json::Value = serde_json::from_slice(
            matches
                .written(matches.payload_of(0).expect("written"))
                .expect("a payload"),
        )
        .expect("JSON");
        assert_eq!(
            payload,
            json!({
                "token": hex_address(&USDC),
                "from": hex_address(&ALICE),
                "to": hex_address(&BOB),
                "amount": "1500000",
                "blockNumber": "0x10",
                "transactionHash": hex_word(&[0x77; 32]),
                "logIndex": "0x0",
                "removed": false,
            })
        );
    }

    #[test]
    fn bad_params_say_what_is_wrong() {
        let mut filter = DecodedTransfers::default();
        let refused = filter
            .subscribe(1, r#"[{"wallets":[]}]"#)
            .expect_err("unknown field");
        assert!(refused.to_string().contains("wallets"), "{refused}");
        let refused = filter
            .subscribe(1, r#"[{"minAmount":"lots"}]"#)
            .expect_err("bad amount");
        assert!(refused.to_string().contains("minAmount"), "{refused}");
    }
}
