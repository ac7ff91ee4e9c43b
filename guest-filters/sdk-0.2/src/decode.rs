//! The logs transforming filters decode most: ERC-20 `Transfer`, Uniswap
//! V2 and V3 `Swap`, read from a log's address, topics and data (a view
//! that does not declare those fields does not compile), with amounts as
//! decimal strings, as JSON carries numbers past 2^53.

use alloy_primitives::{I256, U256};

use crate::LogView;

/// keccak256("Transfer(address,address,uint256)").
pub const TRANSFER_TOPIC: [u8; 32] =
    alloy_primitives::hex!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// keccak256("Swap(address,uint256,uint256,uint256,uint256,address)"):
/// Uniswap V2 and its forks.
pub const V2_SWAP_TOPIC: [u8; 32] =
    alloy_primitives::hex!("d78ad95fa46c994b6551d0da85fc275fe613ce37657fb8d5e3d130840159d822");

/// keccak256("Swap(address,address,int256,int256,uint160,uint128,int24)"):
/// Uniswap V3 and its forks.
pub const V3_SWAP_TOPIC: [u8; 32] =
    alloy_primitives::hex!("c42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67");

/// An ERC-20 transfer (three topics: ERC-721's `Transfer` has four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub token: [u8; 20],
    pub from: [u8; 20],
    pub to: [u8; 20],
    /// In the token's smallest unit, big-endian.
    pub amount: [u8; 32],
}

/// A Uniswap V2 swap: what went into and out of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V2Swap {
    pub pool: [u8; 20],
    pub sender: [u8; 20],
    pub to: [u8; 20],
    pub amount0_in: [u8; 32],
    pub amount1_in: [u8; 32],
    pub amount0_out: [u8; 32],
    pub amount1_out: [u8; 32],
}

/// A Uniswap V3 swap: the pool's signed balance changes (positive: into
/// the pool) and its state after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Swap {
    pub pool: [u8; 20],
    pub sender: [u8; 20],
    pub recipient: [u8; 20],
    /// Two's complement, big-endian.
    pub amount0: [u8; 32],
    pub amount1: [u8; 32],
    pub sqrt_price_x96: [u8; 32],
    pub liquidity: u128,
    pub tick: i32,
}

/// The log as an ERC-20 transfer, if it is one.
pub fn erc20_transfer<const F: u32>(log: &LogView<'_, F>) -> Option<Transfer> {
    if log.topic_count() != 3 || log.topic(0) != Some(&TRANSFER_TOPIC) {
        return None;
    }
    Some(Transfer {
        token: *log.address(),
        from: address(log.topic(1)?),
        to: address(log.topic(2)?),
        amount: *word(log.data(), 0)?,
    })
}

/// The log as a Uniswap V2 swap, if it is one.
pub fn uniswap_v2_swap<const F: u32>(log: &LogView<'_, F>) -> Option<V2Swap> {
    if log.topic_count() != 3 || log.topic(0) != Some(&V2_SWAP_TOPIC) {
        return None;
    }
    let data = log.data();
    Some(V2Swap {
        pool: *log.address(),
        sender: address(log.topic(1)?),
        to: address(log.topic(2)?),
        amount0_in: *word(data, 0)?,
        amount1_in: *word(data, 1)?,
        amount0_out: *word(data, 2)?,
        amount1_out: *word(data, 3)?,
    })
}

/// The log as a Uniswap V3 swap, if it is one.
pub fn uniswap_v3_swap<const F: u32>(log: &LogView<'_, F>) -> Option<V3Swap> {
    if log.topic_count() != 3 || log.topic(0) != Some(&V3_SWAP_TOPIC) {
        return None;
    }
    let data = log.data();
    let liquidity = word(data, 3)?;
    let tick = word(data, 4)?;
    Some(V3Swap {
        pool: *log.address(),
        sender: address(log.topic(1)?),
        recipient: address(log.topic(2)?),
        amount0: *word(data, 0)?,
        amount1: *word(data, 1)?,
        sqrt_price_x96: *word(data, 2)?,
        liquidity: u128::from_be_bytes(liquidity[16..].try_into().ok()?),
        tick: i32::from_be_bytes(tick[28..].try_into().ok()?),
    })
}

/// A uint256 word as a decimal string.
pub fn decimal(word: &[u8; 32]) -> String {
    U256::from_be_bytes(*word).to_string()
}

/// An int256 word (two's complement) as a decimal string.
pub fn signed_decimal(word: &[u8; 32]) -> String {
    I256::from_raw(U256::from_be_bytes(*word)).to_string()
}

/// An address as `0x` and 40 lowercase hex digits.
pub fn hex_address(address: &[u8; 20]) -> String {
    alloy_primitives::hex::encode_prefixed(address)
}

/// A 32-byte word (a hash) as `0x` and 64 lowercase hex digits.
pub fn hex_word(word: &[u8; 32]) -> String {
    alloy_primitives::hex::encode_prefixed(word)
}

/// The address in an indexed topic's low 20 bytes.
fn address(topic: &[u8; 32]) -> [u8; 20] {
    let mut address = [0; 20];
    address.copy_from_slice(&topic[12..]);
    address
}

/// Word `index` of ABI-encoded data.
fn word(data: &[u8], index: usize) -> Option<&[u8; 32]> {
    data.get(32 * index..32 * (index + 1))?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use alloy_primitives::keccak256;

    use super::*;
    use crate::layout::LogFields;
    use crate::{ProjectedBatch, ProjectedWriter, Source, log_fields};

    const READ: u32 = log_fields::ADDRESS | log_fields::TOPICS | log_fields::DATA;

    fn topic_of(address: &[u8; 20]) -> [u8; 32] {
        let mut topic = [0; 32];
        topic[12..].copy_from_slice(address);
        topic
    }

    fn uint(value: i128) -> [u8; 32] {
        I256::try_from(value)
            .expect("fits")
            .into_raw()
            .to_be_bytes()
    }

    /// Decodes `topics` and `data` of a log at `pool` with `decode`.
    fn decoded<T>(
        topics: &[[u8; 32]],
        data: &[u8],
        decode: impl Fn(&LogView<'_, READ>) -> Option<T>,
    ) -> Option<T> {
        let mut writer = ProjectedWriter::new(Source::Logs, READ, 1);
        writer.push_log(&LogFields {
            address: &[0x11; 20],
            topics,
            data,
            block_number: 1,
            log_index: 0,
            transaction_index: 0,
            transaction_hash: &[0; 32],
            removed: false,
        });
        let bytes = writer.finish();
        let batch = ProjectedBatch::<READ>::parse(&bytes).expect("a batch");
        let log = batch.logs().expect("logs").next().expect("one log");
        decode(&log)
    }

    #[test]
    fn the_event_topics_are_their_signatures_hashes() {
        assert_eq!(
            keccak256("Transfer(address,address,uint256)").0,
            TRANSFER_TOPIC
        );
        assert_eq!(
            keccak256("Swap(address,uint256,uint256,uint256,uint256,address)").0,
            V2_SWAP_TOPIC
        );
        assert_eq!(
            keccak256("Swap(address,address,int256,int256,uint160,uint128,int24)").0,
            V3_SWAP_TOPIC
        );
    }

    /// An ERC-20 transfer decodes; an ERC-721 one (four topics) does not.
    #[test]
    fn transfers_decode_and_nft_transfers_do_not() {
        let (alice, bob) = ([0xaa; 20], [0xbb; 20]);
        let amount = uint(1_500_000);
        let topics = [TRANSFER_TOPIC, topic_of(&alice), topic_of(&bob)];
        let transfer = decoded(&topics, &amount, erc20_transfer).expect("a transfer");
        assert_eq!(
            (transfer.token, transfer.from, transfer.to),
            ([0x11; 20], alice, bob)
        );
        assert_eq!(decimal(&transfer.amount), "1500000");
        let nft = [TRANSFER_TOPIC, topic_of(&alice), topic_of(&bob), amount];
        assert_eq!(decoded(&nft, &[], erc20_transfer), None);
        assert_eq!(
            decoded(&topics, &[1, 2], erc20_transfer),
            None,
            "short data"
        );
    }

    #[test]
    fn v2_and_v3_swaps_decode_with_signed_amounts() {
        let (sender, to) = ([0x01; 20], [0x02; 20]);
        let v2_data = [uint(0), uint(5), uint(7), uint(0)].concat();
        let v2 = decoded(
            &[V2_SWAP_TOPIC, topic_of(&sender), topic_of(&to)],
            &v2_data,
            uniswap_v2_swap,
        )
        .expect("a V2 swap");
        assert_eq!(decimal(&v2.amount1_in), "5");
        assert_eq!(decimal(&v2.amount0_out), "7");
        let v3_data = [uint(-1_000), uint(2_000), uint(1 << 96), uint(99), uint(-5)].concat();
        let v3 = decoded(
            &[V3_SWAP_TOPIC, topic_of(&sender), topic_of(&to)],
            &v3_data,
            uniswap_v3_swap,
        )
        .expect("a V3 swap");
        assert_eq!(signed_decimal(&v3.amount0), "-1000");
        assert_eq!(signed_decimal(&v3.amount1), "2000");
        assert_eq!(decimal(&v3.sqrt_price_x96), (1u128 << 96).to_string());
        assert_eq!((v3.liquidity, v3.tick), (99, -5));
        assert_eq!(v3.recipient, to);
        assert_eq!(
            decoded(&[V3_SWAP_TOPIC], &v3_data, uniswap_v3_swap),
            None,
            "a swap names sender and recipient"
        );
    }

    #[test]
    fn hex_is_prefixed_lowercase() {
        assert_eq!(hex_address(&[0xab; 20]), format!("0x{}", "ab".repeat(20)));
        assert_eq!(hex_word(&[0; 32]), format!("0x{}", "00".repeat(32)));
    }
}
