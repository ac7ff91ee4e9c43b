//! The devnet's blocks verify, every transaction type among them, and a
//! spoiled one fails naming what was spoiled: the model's verification
//! (`chainsieve_model::verify`) held to the blocks the devnet builds.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::{B256, Bloom, U256};
use chainsieve_model::verify::{self, LogMember, VerifyError, verify};
use chainsieve_model::{Block, SourceEvent};

use super::{Devnet, DevnetSettings};

/// The blocks of `steps` devnet ticks on `chain`, genesis first.
fn devnet_blocks(chain: u64, steps: usize, per_block: u32) -> Vec<Arc<Block>> {
    let settings = DevnetSettings {
        seed: 7,
        genesis_timestamp: Some(1_700_000_000),
        transactions_per_block: per_block,
        ..DevnetSettings::default()
    };
    let mut devnet = Devnet::new(chain, &settings);
    let mut blocks = vec![devnet.genesis()];
    for _ in 0..steps {
        for event in devnet.next_step() {
            if let SourceEvent::Block(block) = event {
                blocks.push(block);
            }
        }
    }
    blocks
}

/// A devnet block with several transactions and logs, to spoil.
fn busy_block() -> Block {
    let blocks = devnet_blocks(1, 10, 20);
    let block = blocks
        .iter()
        .find(|b| b.transactions.len() >= 5 && b.logs.len() >= 3)
        .expect("a busy block");
    verify(block).expect("verifies as built");
    (**block).clone()
}

#[test]
fn devnet_blocks_of_every_type_verify() {
    for chain in [1, 56, 137] {
        let blocks = devnet_blocks(chain, 60, 30);
        let mut types = BTreeSet::new();
        for block in &blocks {
            types.extend(block.transactions.iter().map(|tx| tx.tx_type));
            verify(block).unwrap_or_else(|e| panic!("chain {chain} {}: {e}", block.number()));
        }
        let every = if chain == 137 {
            vec![0, 1, 2, 4]
        } else {
            vec![0, 1, 2, 3, 4]
        };
        assert_eq!(
            types.into_iter().collect::<Vec<_>>(),
            every,
            "chain {chain}"
        );
        assert!(blocks.iter().any(|b| !b.logs.is_empty()));
    }
}

#[test]
fn a_changed_header_field_fails_the_header_hash() {
    let block = busy_block();
    let mut changed = block.clone();
    changed.header.gas_used += 1;
    let computed = changed.header.hash_slow();
    assert_eq!(
        verify(&changed),
        Err(VerifyError::HeaderHash {
            expected: block.hash,
            computed
        })
    );
    let mut other = block;
    other.hash = B256::repeat_byte(1);
    assert!(matches!(
        verify(&other),
        Err(VerifyError::HeaderHash { .. })
    ));
}

#[test]
fn a_changed_transaction_fails_naming_its_index() {
    let block = busy_block();
    let mut changed = block.clone();
    Arc::make_mut(&mut changed.transactions[3]).value += U256::from(1);
    let error = verify(&changed).expect_err("a changed value");
    assert!(
        matches!(error, VerifyError::TransactionHash { index: 3, expected, .. } if expected == block.transactions[3].hash),
        "{error}"
    );
    assert!(error.to_string().starts_with("transaction 3 "), "{error}");

    // Each transaction itself, but one missing or two swapped: the root.
    let mut missing = block.clone();
    missing.transactions.pop();
    let mut swapped = block.clone();
    swapped.transactions.swap(0, 1);
    for spoiled in [missing, swapped] {
        let error = verify(&spoiled).expect_err("not the header's list");
        assert!(
            matches!(error, VerifyError::TransactionsRoot { expected, .. } if expected == block.header.transactions_root),
            "{error}"
        );
    }
}

#[test]
fn a_removed_log_or_a_changed_topic_fails_the_bloom() {
    let block = busy_block();
    // A log whose address and topics no other log repeats.
    let alone = (0..block.logs.len())
        .find(|&i| {
            let rest = block.logs.iter().enumerate().filter(|&(j, _)| j != i);
            let mut bloom = Bloom::ZERO;
            for (_, log) in rest {
                bloom.accrue_raw_log(log.address(), log.topics());
            }
            bloom != block.header.logs_bloom
        })
        .expect("a log of its own");
    let mut removed = block.clone();
    removed.logs.remove(alone);
    for (i, log) in removed.logs.iter_mut().enumerate() {
        log.log_index = Some(i as u64);
    }
    let error = verify(&removed).expect_err("a log missing");
    assert!(
        matches!(
            error,
            VerifyError::LogsMissing {
                missing_bits: 1..,
                ..
            }
        ),
        "{error}"
    );
    let mut none = block.clone();
    none.logs.clear();
    assert!(matches!(
        verify(&none),
        Err(VerifyError::LogsMissing { count: 0, .. })
    ));

    let mut changed = block.clone();
    let topic = B256::repeat_byte(0x5a);
    changed.logs[1].inner.data.topics_mut()[0] = topic;
    let error = verify(&changed).expect_err("a changed topic");
    assert_eq!(
        error,
        VerifyError::LogNotInBloom {
            index: 1,
            member: LogMember::Topic { position: 0, topic }
        }
    );
    assert!(error.to_string().contains("log 1's topic 0"), "{error}");
}

#[test]
fn logs_must_be_the_blocks_in_order() {
    let block = busy_block();
    let spoil = |change: fn(&mut Block)| {
        let mut spoiled = block.clone();
        change(&mut spoiled);
        verify(&spoiled).expect_err("spoiled")
    };
    assert!(matches!(
        spoil(|b| b.logs[2].block_number = Some(999_999)),
        VerifyError::LogBlock {
            index: 2,
            found_number: Some(999_999),
            ..
        }
    ));
    assert!(matches!(
        spoil(|b| b.logs[0].block_hash = None),
        VerifyError::LogBlock { index: 0, .. }
    ));
    assert_eq!(
        spoil(|b| b.logs.swap(0, 1)),
        VerifyError::LogIndex { index: 0, found: 1 }
    );
    assert!(matches!(
        spoil(|b| b.logs[1].transaction_hash = Some(B256::ZERO)),
        VerifyError::LogTransaction { index: 1, .. }
    ));
    assert!(matches!(
        spoil(|b| b.logs[1].transaction_index = Some(10_000)),
        VerifyError::LogTransaction {
            index: 1,
            transaction_index: 10_000,
            ..
        }
    ));
}

/// What each check costs on a 300-transaction block (run with
/// `--ignored --nocapture`; debug builds are several times slower).
#[test]
#[ignore = "a measurement, not a check"]
fn cost_of_a_300_transaction_block() {
    let blocks = devnet_blocks(56, 8, 300);
    let block = blocks
        .iter()
        .max_by_key(|b| b.transactions.len())
        .expect("blocks");
    let rounds = 50;
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        for _ in 0..rounds {
            f();
        }
        start.elapsed() / rounds
    };
    let header = time(&|| {
        block.header.hash_slow();
    });
    let txs = time(&|| {
        verify::transactions(block).expect("verifies");
    });
    let logs = time(&|| verify::logs(block, &[]).expect("verifies"));
    let all = time(&|| verify(block).expect("verifies"));
    eprintln!(
        "{} transactions, {} logs: header {header:?}, transactions {txs:?}, logs {logs:?}, all {all:?}",
        block.transactions.len(),
        block.logs.len()
    );
}
