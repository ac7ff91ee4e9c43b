//! What the devnet knows that its blocks do not carry, for the methods a
//! wallet calls around `eth_sendRawTransaction` (docs/src/api.md,
//! Devnet transactions): each sender's nonces, mined and pending, and each
//! account's balance (the gas each transaction used is in its block, for
//! receipts). The devnet's task writes it; RPC methods read it. A mutex,
//! held for a map lookup or update only.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use alloy_primitives::{Address, I256, U256};

use super::block::Generated;
use chainsieve_model::{Block, Transaction};

#[derive(Debug)]
pub struct Accounts {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per sender: the nonce after its last mined transaction, and after
    /// its last announced one.
    nonces: HashMap<Address, (u64, u64)>,
    /// What each account received less what it paid, from its genesis
    /// allocation. Signed: the devnet checks no balance, so an outside
    /// sender may spend what it never had (read as zero), and a reorg
    /// undoes exactly what its blocks did.
    balances: HashMap<Address, I256>,
}

impl Accounts {
    /// A ledger with `funded` accounts holding `allocation` wei at genesis.
    pub fn new(funded: impl IntoIterator<Item = Address>, allocation: U256) -> Self {
        let allocation = I256::from_raw(allocation);
        Self {
            inner: Mutex::new(Inner {
                balances: funded.into_iter().map(|a| (a, allocation)).collect(),
                ..Inner::default()
            }),
        }
    }

    /// `address`'s balance now.
    pub fn balance(&self, address: Address) -> U256 {
        let balance = self.inner().balances.get(&address).copied();
        balance.map_or(U256::ZERO, |b| b.max(I256::ZERO).into_raw())
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `address`'s transaction count: mined, or with what is pending too.
    pub fn nonce(&self, address: Address, pending: bool) -> u64 {
        let (mined, announced) = self
            .inner()
            .nonces
            .get(&address)
            .copied()
            .unwrap_or_default();
        if pending { announced.max(mined) } else { mined }
    }

    /// Transactions pending (a submission once accepted, the devnet's own
    /// once announced): their senders' pending nonces count them.
    pub(super) fn pending(&self, txs: &[std::sync::Arc<Transaction>]) {
        let mut inner = self.inner();
        for tx in txs {
            let entry = inner.nonces.entry(tx.from).or_default();
            entry.1 = entry.1.max(tx.nonce + 1);
        }
    }

    /// `from`'s transactions of nonce `nonce` and after left the pool
    /// unmined: its pending nonce is `nonce` again.
    pub(super) fn unpend(&self, from: Address, nonce: u64) {
        let mut inner = self.inner();
        let entry = inner.nonces.entry(from).or_default();
        entry.1 = nonce.max(entry.0);
    }

    /// A block orphaned by a reorg: its transfers and fees are undone (its
    /// transactions are mined again on the new branch).
    pub(super) fn orphaned(&self, block: &Block, content: &[Generated]) {
        let mut inner = self.inner();
        for (index, generated) in content.iter().enumerate() {
            inner.transfer(block, index, generated, false);
        }
    }

    /// A block built from `content`.
    pub(super) fn built(&self, block: &Block, content: &[Generated]) {
        let mut inner = self.inner();
        for (index, generated) in content.iter().enumerate() {
            inner.transfer(block, index, generated, true);
            let tx = &generated.tx;
            let entry = inner.nonces.entry(tx.from).or_default();
            entry.0 = entry.0.max(tx.nonce + 1);
        }
    }
}

impl Inner {
    /// Moves `generated`'s value and fee (`mined`: transaction `index` of
    /// `block`), or moves them back.
    fn transfer(&mut self, block: &Block, index: usize, generated: &Generated, mined: bool) {
        let tx = &generated.tx;
        let fee = block.fee(index, generated.gas_used);
        let sign = |amount: U256| {
            let amount = I256::from_raw(amount);
            if mined { amount } else { -amount }
        };
        *self.balances.entry(tx.from).or_default() -= sign(tx.value + fee);
        // Only accounts that receive something get an entry: a creation's
        // new address (one in twenty devnet transactions) mostly gets none,
        // so the map grows with the accounts in use, not with the chain.
        if !tx.value.is_zero() {
            let to = tx.to.unwrap_or_else(|| tx.from.create(tx.nonce));
            *self.balances.entry(to).or_default() += sign(tx.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::CanonicalChain;
    use crate::devnet::Devnet;
    use chainsieve_config::DevnetSettings;
    use chainsieve_model::SourceEvent;

    /// Through the devnet's blocks and reorgs, the ledger's balances are
    /// the genesis allocations less the fees of the canonical blocks' transactions
    /// (value only moves) at the gas each block says each used, which adds
    /// up to its header's, and each sender's mined nonce follows its last one.
    #[test]
    fn balances_gas_and_nonces_follow_the_canonical_chain() {
        let settings = DevnetSettings {
            reorg_every: 4,
            reorg_depth: 2,
            transactions_per_block: 30,
            ..DevnetSettings::default()
        };
        let mut devnet = Devnet::new(1, &settings);
        let ledger = devnet.ledger();
        let funded: I256 = ledger.inner().balances.values().copied().sum();
        let mut canonical = CanonicalChain::new(1_000);
        canonical.apply(devnet.genesis()).expect("genesis");
        let mut reorged = false;
        for _ in 0..120 {
            for event in devnet.next_step() {
                if let SourceEvent::Block(block) = event {
                    let changes = canonical.apply(block).expect("connects");
                    reorged |= changes
                        .iter()
                        .any(|c| matches!(c, chainsieve_model::ChainEvent::Removed(_)));
                }
            }
        }
        assert!(reorged, "the run went through reorgs");
        let mut fees = I256::ZERO;
        let mut last_nonce: HashMap<Address, u64> = HashMap::new();
        for block in canonical.blocks() {
            let gas = block.gas_used.as_deref().expect("the devnet says its gas");
            assert_eq!(gas.len(), block.transactions.len());
            for (index, tx) in block.transactions.iter().enumerate() {
                fees += I256::from_raw(block.fee(index, gas[index]));
                last_nonce.insert(tx.from, tx.nonce);
            }
            assert_eq!(
                gas.iter().sum::<u64>(),
                block.header.gas_used,
                "block {}",
                block.number()
            );
        }
        let held: I256 = ledger.inner().balances.values().copied().sum();
        assert_eq!(held, funded - fees);
        for (sender, nonce) in last_nonce {
            assert_eq!(ledger.nonce(sender, false), nonce + 1);
        }
    }
}
