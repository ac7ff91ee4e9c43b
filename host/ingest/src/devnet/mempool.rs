//! Transactions from outside (`eth_sendRawTransaction`): the checks a
//! node's pool makes, replacement by a higher fee and drops
//! (`anvil_dropTransaction`) as a node's pool has them, the pool's bound,
//! and what a block takes from it.

use std::sync::Arc;

use alloy_consensus::TxEnvelope;
use alloy_eips::eip2930::AccessList;
use alloy_primitives::{Address, B256};
use tokio::sync::oneshot;

use super::Devnet;
use super::block::Generated;
use super::workload::{AUTHORIZATION_GAS, TRANSFER_GAS};
use chainsieve_model::{Fees, Transaction};

/// Transactions waiting for a block, beyond which submissions are refused:
/// a load the blocks cannot carry must not grow the pool without bound.
pub const POOL_LIMIT: usize = 65_536;

/// A transaction sent to the devnet (`eth_sendRawTransaction`): decoded
/// and its signer recovered by the caller, answered on `reply` once
/// accepted (or refused).
#[derive(Debug)]
pub struct Submission {
    pub envelope: TxEnvelope,
    pub from: Address,
    pub reply: Answer,
}

/// Where a submission's outcome goes.
pub type Answer = oneshot::Sender<Result<(), SubmissionRefused>>;

/// Why the devnet refused a submitted transaction; the messages are
/// geth's, so clients that match on them keep working.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmissionRefused {
    #[error("nonce too low: next nonce {expected}, tx nonce {got}")]
    NonceTooLow { expected: u64, got: u64 },
    /// A node would queue it; the devnet keeps no future transactions.
    #[error(
        "nonce too high: next nonce {expected}, tx nonce {got} (the devnet does not queue future transactions)"
    )]
    NonceTooHigh { expected: u64, got: u64 },
    #[error("intrinsic gas too low: gas {gas}, minimum needed {needed}")]
    IntrinsicGas { gas: u64, needed: u64 },
    #[error("exceeds block gas limit: gas {gas}, block gas limit {limit}")]
    GasLimit { gas: u64, limit: u64 },
    #[error("txpool is full: {POOL_LIMIT} transactions wait for a block")]
    PoolFull,
    /// This very transaction is pending already.
    #[error("already known")]
    AlreadyKnown,
    /// The sender's nonce is pending under another transaction whose fee
    /// caps this one does not beat by [`PRICE_BUMP_PERCENT`].
    #[error(
        "replacement transaction underpriced: the pending transaction of nonce {nonce} is replaced by fee caps at least {PRICE_BUMP_PERCENT}% higher"
    )]
    Underpriced { nonce: u64 },
}

/// How much higher both fee caps of a replacement must be, as geth's pool
/// has it (`txpool.pricebump`).
pub const PRICE_BUMP_PERCENT: u128 = 10;

/// Why the devnet did not drop a transaction (`anvil_dropTransaction`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DropRefused {
    #[error("transaction {0} is not pending on the devnet (unknown, or already in a block)")]
    NotPending(B256),
    #[error(
        "transaction {0} is of one of the devnet's own accounts, whose nonces the devnet keeps: only transactions sent to it are dropped"
    )]
    Own(B256),
}

/// A transaction's fee caps: the most it pays per gas, and the most of
/// that as a tip.
fn caps(fees: &Fees) -> (u128, u128) {
    match *fees {
        Fees::GasPrice(price) => (price, price),
        Fees::Dynamic {
            max_fee_per_gas,
            max_priority_fee_per_gas,
            ..
        } => (max_fee_per_gas, max_priority_fee_per_gas),
    }
}

/// Whether `new` replaces `old`: both its caps [`PRICE_BUMP_PERCENT`]
/// higher.
fn outbids(new: &Fees, old: &Fees) -> bool {
    let bumped = |cap: u128| cap.saturating_mul(100 + PRICE_BUMP_PERCENT) / 100;
    let ((new_fee, new_tip), (old_fee, old_tip)) = (caps(new), caps(old));
    new_fee >= bumped(old_fee) && new_tip >= bumped(old_tip)
}

/// The gas a transaction uses before any code runs (the yellow paper's
/// intrinsic gas): all a devnet transaction uses, as the devnet runs none.
fn intrinsic_gas(envelope: &TxEnvelope) -> u64 {
    use alloy_consensus::Transaction as _;
    let authorizations = envelope.authorization_list().map_or(0, <[_]>::len) as u64;
    intrinsic(
        envelope.input(),
        envelope.is_create(),
        envelope.access_list(),
    ) + authorizations * AUTHORIZATION_GAS
}

/// [`intrinsic_gas`] of a transaction's parts.
pub fn intrinsic(input: &[u8], create: bool, access_list: Option<&AccessList>) -> u64 {
    let data: u64 = input
        .iter()
        .map(|&byte| if byte == 0 { 4 } else { 16 })
        .sum();
    let create = if create { 32_000 } else { 0 };
    let access = access_list.map_or(0, |list| {
        list.iter()
            .map(|item| 2_400 + 1_900 * item.storage_keys.len() as u64)
            .sum()
    });
    TRANSFER_GAS + create + data + access
}

impl Devnet {
    /// Takes a submitted transaction into the pool if it is the sender's
    /// next and a block can carry it; returns it for announcement.
    pub fn accept(
        &mut self,
        envelope: TxEnvelope,
        from: Address,
    ) -> Result<Arc<Transaction>, SubmissionRefused> {
        use alloy_consensus::Transaction as _;
        let gas = envelope.gas_limit();
        let needed = intrinsic_gas(&envelope);
        if gas < needed {
            return Err(SubmissionRefused::IntrinsicGas { gas, needed });
        }
        let limit = self.gas_limit();
        if gas > limit {
            return Err(SubmissionRefused::GasLimit { gas, limit });
        }
        if self.pending.len() >= POOL_LIMIT {
            return Err(SubmissionRefused::PoolFull);
        }
        let own = self.signers.iter().position(|s| s.address() == from);
        let next = match own {
            Some(account) => &mut self.nonces[account],
            None => self.submitted_nonces.entry(from).or_default(),
        };
        let (expected, got) = (*next, envelope.nonce());
        if got < expected {
            // Still pending: replaced by a higher fee, in its place.
            let Some(at) = self
                .pending
                .iter()
                .position(|g| g.tx.from == from && g.tx.nonce == got)
            else {
                return Err(SubmissionRefused::NonceTooLow { expected, got });
            };
            let tx = Arc::new(Transaction::from_envelope(&envelope, from));
            if tx.hash == self.pending[at].tx.hash {
                return Err(SubmissionRefused::AlreadyKnown);
            }
            if !outbids(&tx.fees, &self.pending[at].tx.fees) {
                return Err(SubmissionRefused::Underpriced { nonce: got });
            }
            self.pending[at] = Generated {
                tx: tx.clone(),
                envelope,
                gas_used: needed,
                logs: Vec::new(),
            };
            return Ok(tx);
        }
        if got > expected {
            return Err(SubmissionRefused::NonceTooHigh { expected, got });
        }
        *next += 1;
        let tx = Arc::new(Transaction::from_envelope(&envelope, from));
        self.pending.push_back(Generated {
            tx: tx.clone(),
            envelope,
            gas_used: needed,
            logs: Vec::new(),
        });
        Ok(tx)
    }

    /// Drops the pending transaction `hash` sent to the devnet, and its
    /// sender's later ones (which its nonce held up): what
    /// `anvil_dropTransaction` does to a node's pool. The sender's next
    /// nonce is the dropped one's again. The hashes dropped, in nonce
    /// order.
    pub fn drop_pending(&mut self, hash: B256) -> Result<Vec<B256>, DropRefused> {
        let tx = self
            .pending
            .iter()
            .find(|g| g.tx.hash == hash)
            .map(|g| g.tx.clone())
            .ok_or(DropRefused::NotPending(hash))?;
        if self.signers.iter().any(|s| s.address() == tx.from) {
            return Err(DropRefused::Own(hash));
        }
        let mut dropped: Vec<(u64, B256)> = Vec::new();
        self.pending.retain(|g| {
            let gone = g.tx.from == tx.from && g.tx.nonce >= tx.nonce;
            if gone {
                dropped.push((g.tx.nonce, g.tx.hash));
            }
            !gone
        });
        dropped.sort_unstable();
        self.submitted_nonces.insert(tx.from, tx.nonce);
        self.ledger().unpend(tx.from, tx.nonce);
        Ok(dropped.into_iter().map(|(_, hash)| hash).collect())
    }

    /// The oldest pending transactions whose gas limits fit one block; the
    /// rest wait for the next.
    pub(super) fn take_block_content(&mut self) -> Vec<Generated> {
        let limit = self.gas_limit();
        let mut reserved = 0;
        let fitting = self
            .pending
            .iter()
            .take_while(|g| {
                reserved += g.tx.gas;
                reserved <= limit
            })
            .count();
        self.pending.drain(..fitting).collect()
    }
}

#[cfg(test)]
mod tests {
    use alloy_consensus::proofs::calculate_transaction_root;
    use alloy_consensus::{SignableTransaction, TxLegacy};
    use alloy_primitives::{Bytes, Signature, TxKind, U256};

    use super::super::testing::{envelope_of, nonces, outside, quiet, run_steps, signed_by};
    use super::super::{DevnetSettings, Job, Step};
    use super::*;
    use chainsieve_model::SourceEvent;

    #[test]
    fn submitted_transactions_are_checked_announced_and_mined() {
        let mut devnet = Devnet::new(1, &quiet());
        let (first, from) = outside(0, 21_000, &[]);
        let tx = devnet
            .accept(first.clone(), from)
            .expect("the sender's first");
        assert_eq!((tx.hash, tx.from, tx.nonce), (*first.tx_hash(), from, 0));
        assert_eq!(
            envelope_of(&tx),
            first,
            "the model carries the whole transaction"
        );

        let refused = [
            // Nonces in order, as a node's pool wants them; the same one
            // again is known.
            (first, SubmissionRefused::AlreadyKnown),
            (
                outside(2, 21_000, &[]).0,
                SubmissionRefused::NonceTooHigh {
                    expected: 1,
                    got: 2,
                },
            ),
            // Calldata costs 4 gas per zero byte and 16 per other byte.
            (
                outside(1, 21_019, &[0, 1]).0,
                SubmissionRefused::IntrinsicGas {
                    gas: 21_019,
                    needed: 21_020,
                },
            ),
            (
                outside(1, 60_000_001, &[]).0,
                SubmissionRefused::GasLimit {
                    gas: 60_000_001,
                    limit: 60_000_000,
                },
            ),
        ];
        for (tx, refusal) in refused {
            assert_eq!(devnet.accept(tx, from), Err(refusal));
        }
        let (second, _) = outside(1, 50_000, &[0, 1]);
        devnet.accept(second, from).expect("the sender's second");

        let (blocks, pending) = run_steps(&mut devnet, 5);
        assert!(
            pending.is_empty(),
            "nothing generated, nothing announced twice"
        );
        let block = &blocks[1];
        assert_eq!(block.number(), 1);
        assert_eq!(nonces(block), [0, 1]);
        // They succeed with their intrinsic gas and log nothing.
        assert_eq!(block.header.gas_used, 21_000 + 21_020);
        assert!(block.logs.is_empty());
        let envelopes: Vec<TxEnvelope> =
            block.transactions.iter().map(|t| envelope_of(t)).collect();
        assert_eq!(
            block.header.transactions_root,
            calculate_transaction_root(&envelopes)
        );
    }

    #[test]
    fn blocks_take_what_fits_their_gas_limit_and_leave_the_rest_pending() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                gas_limit: Some(100_000),
                ..quiet()
            },
        );
        for nonce in 0..10 {
            let (tx, from) = outside(nonce, 21_000, &[]);
            devnet.accept(tx, from).expect("in order");
        }
        let (blocks, _) = run_steps(&mut devnet, 15);
        let mined: Vec<Vec<u64>> = blocks[1..].iter().map(|b| nonces(b)).collect();
        assert_eq!(mined, [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert!(blocks.iter().all(|b| b.header.gas_limit == 100_000));
    }

    /// While a block is built off the devnet's task, submissions keep
    /// being accepted; they wait for the next block.
    #[test]
    fn submissions_during_a_block_build_go_to_the_next_block() {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                pending_batches_per_block: 1,
                ..quiet()
            },
        );
        let (first, from) = outside(0, 21_000, &[]);
        devnet.accept(first, from).expect("first");
        assert!(matches!(devnet.step(), Step::Announce(events) if events.is_empty()));
        let Step::Work(job @ Job::Build(_)) = devnet.step() else {
            panic!("the second tick is the block's");
        };
        let (during, _) = outside(1, 21_000, &[]);
        devnet
            .accept(during, from)
            .expect("accepted while building");
        let events = devnet.finish(job.run());
        let [SourceEvent::Block(block)] = &events[..] else {
            panic!("one block: {events:?}");
        };
        assert_eq!(nonces(block), [0]);
        // (run_steps lists genesis first.)
        let (blocks, _) = run_steps(&mut devnet, 2);
        assert_eq!(blocks[1].parent_hash(), block.hash);
        assert_eq!(nonces(&blocks[1]), [1]);
    }

    /// A devnet whose first tick made a batch of `transactions` of its own;
    /// its accounts' nonces before the tick, and the job that signs it.
    fn signing(transactions: u32) -> (Devnet, Vec<u64>, Job) {
        let mut devnet = Devnet::new(
            1,
            &DevnetSettings {
                pending_batches_per_block: 1,
                transactions_per_block: transactions,
                ..quiet()
            },
        );
        let before = devnet.nonces.clone();
        let Step::Work(job @ Job::Sign { .. }) = devnet.step() else {
            panic!("the first tick is a batch to sign");
        };
        (devnet, before, job)
    }

    /// The devnet's own batch is signed off its task too: the tick only
    /// makes it, a submission is taken while it is signed, the batch is
    /// announced once signed, and the next block mines both.
    #[test]
    fn submissions_while_a_batch_is_signed_are_taken_and_mined_with_it() {
        let (mut devnet, _, job) = signing(3);
        let (during, from) = outside(0, 21_000, &[]);
        devnet.accept(during, from).expect("accepted while signing");
        let events = devnet.finish(job.run());
        let [SourceEvent::Pending { txs: batch, .. }] = &events[..] else {
            panic!("one pending batch: {events:?}");
        };
        assert_eq!(batch.len(), 3);
        // (run_steps lists genesis first.)
        let (blocks, _) = run_steps(&mut devnet, 1);
        let mined: Vec<_> = blocks[1].transactions.iter().map(|tx| tx.hash).collect();
        for tx in batch {
            assert!(mined.contains(&tx.hash), "the signed batch is mined");
        }
        assert!(
            blocks[1].transactions.iter().any(|tx| tx.from == from),
            "the submission is mined with it"
        );
    }

    /// A submission from one of the devnet's own accounts while that
    /// account's batch transaction is signed takes the nonce after it, and
    /// is mined after it.
    #[test]
    fn an_own_account_submitting_while_its_batch_is_signed_follows_it() {
        let (mut devnet, before, job) = signing(1);
        let account = (0..before.len())
            .find(|&i| devnet.nonces[i] != before[i])
            .expect("the batch took one account's nonce");
        let signer = devnet.signers[account].clone();
        let next = devnet.nonces[account];
        let submitted = signed_by(&signer, next, 21_000, &[]);
        devnet
            .accept(submitted, signer.address())
            .expect("the nonce after the batch's");
        devnet.finish(job.run());
        // (run_steps lists genesis first.)
        let (blocks, _) = run_steps(&mut devnet, 1);
        let from_account: Vec<u64> = blocks[1]
            .transactions
            .iter()
            .filter(|tx| tx.from == signer.address())
            .map(|tx| tx.nonce)
            .collect();
        assert_eq!(from_account, [next - 1, next], "mined in nonce order");
    }

    #[test]
    fn a_full_pool_refuses_more() {
        let mut devnet = Devnet::new(1, &quiet());
        let from = Address::repeat_byte(0x77);
        // The devnet trusts the caller's recovered sender, so unsigned
        // stand-ins fill the pool quickly.
        let stand_in = |nonce| {
            TxEnvelope::from(
                TxLegacy {
                    chain_id: Some(1),
                    nonce,
                    gas_price: 1,
                    gas_limit: 21_000,
                    to: TxKind::Call(from),
                    value: U256::ZERO,
                    input: Bytes::new(),
                }
                .into_signed(Signature::test_signature()),
            )
        };
        for nonce in 0..POOL_LIMIT as u64 {
            devnet.accept(stand_in(nonce), from).expect("room");
        }
        assert_eq!(
            devnet.accept(stand_in(POOL_LIMIT as u64), from),
            Err(SubmissionRefused::PoolFull)
        );
    }

    /// A legacy transfer of `from` at `price` per gas (unsigned: the devnet
    /// trusts the caller's recovered sender).
    fn priced(nonce: u64, price: u128, from: Address) -> TxEnvelope {
        TxEnvelope::from(
            TxLegacy {
                chain_id: Some(1),
                nonce,
                gas_price: price,
                gas_limit: 21_000,
                to: TxKind::Call(from),
                value: U256::from(price),
                input: Bytes::new(),
            }
            .into_signed(Signature::test_signature()),
        )
    }

    /// A pending nonce is taken over by a fee at least 10% higher, in the
    /// pool's place of the first; a lower bump is geth's refusal; once in a
    /// block, the nonce is too low.
    #[test]
    fn a_higher_fee_replaces_a_pending_transaction_in_its_place() {
        let mut devnet = Devnet::new(1, &quiet());
        let from = Address::repeat_byte(0x77);
        let first = devnet.accept(priced(0, 100, from), from).expect("first");
        devnet.accept(priced(1, 100, from), from).expect("next");
        assert_eq!(
            devnet.accept(priced(0, 109, from), from),
            Err(SubmissionRefused::Underpriced { nonce: 0 })
        );
        let second = devnet.accept(priced(0, 110, from), from).expect("outbids");
        assert_ne!(first.hash, second.hash);
        let pool: Vec<_> = devnet.pending.iter().map(|g| g.tx.hash).collect();
        assert_eq!(pool.len(), 2);
        assert_eq!(pool[0], second.hash, "in the first's place");
        devnet.take_block_content();
        assert_eq!(
            devnet.accept(priced(0, 500, from), from),
            Err(SubmissionRefused::NonceTooLow {
                expected: 2,
                got: 0
            })
        );
    }

    /// A drop takes the transaction and its sender's later ones out, and
    /// gives the nonce back; the devnet's own accounts' and unknown ones
    /// are refused.
    #[test]
    fn a_drop_takes_the_nonces_after_it_too() {
        let mut devnet = Devnet::new(1, &quiet());
        let from = Address::repeat_byte(0x77);
        let txs: Vec<_> = (0..3)
            .map(|nonce| {
                devnet
                    .accept(priced(nonce, 100, from), from)
                    .expect("taken")
            })
            .collect();
        assert_eq!(
            devnet.drop_pending(txs[1].hash),
            Ok(vec![txs[1].hash, txs[2].hash])
        );
        assert_eq!(devnet.ledger().nonce(from, true), 1);
        assert_eq!(
            devnet.drop_pending(txs[1].hash),
            Err(DropRefused::NotPending(txs[1].hash))
        );
        devnet
            .accept(priced(1, 100, from), from)
            .expect("its nonce again");
        let own = devnet.accounts()[0];
        let theirs = devnet
            .accept(priced(0, 100, own), own)
            .expect("an own account's");
        assert_eq!(
            devnet.drop_pending(theirs.hash),
            Err(DropRefused::Own(theirs.hash))
        );
    }
}
