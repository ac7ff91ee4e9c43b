//! What the devnet's own accounts do: native transfers, ERC-20 transfers
//! and V2 swaps in the catalog's tokens and pairs, contract creations and
//! set-code delegations, each with the logs it would emit, as every
//! transaction type a chain of 2026 carries (legacy, EIP-2930, EIP-1559,
//! blob where the chain takes blobs, EIP-7702); made here, signed by
//! [`Unsigned::sign`].

use std::sync::Arc;

use alloy_consensus::{
    SignableTransaction, Signed, TxEip1559, TxEip2930, TxEip4844, TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip4844::kzg_to_versioned_hash;
use alloy_eips::eip7702::Authorization;
use alloy_primitives::aliases::U112;
use alloy_primitives::{Address, B256, Bytes, Log as PrimitiveLog, Signature, TxKind, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolEvent};
use rand::Rng;

use super::Devnet;
use super::block::Generated;
use super::profile::{KnownPool, PoolSpec, pool_info, token};
use chainsieve_contracts::abi::{IERC20, IUniswapV2Pair};
use chainsieve_contracts::catalog::KnownToken;
use chainsieve_model::Transaction;

/// `units` whole tokens in the token's smallest unit.
fn whole(token: KnownToken, units: u64) -> U256 {
    U256::from(units) * U256::from(10u64).pow(U256::from(token.decimals))
}

/// The largest ERC-20 transfer, in hundredths of a token: a few thousand
/// dollars' worth, so amounts look like real payments.
fn transfer_cap_hundredths(symbol: &str) -> u64 {
    match symbol {
        "WETH" => 500,
        "WBNB" => 2_000,
        "WPOL" => 2_000_000,
        _ => 1_000_000,
    }
}

/// A pool's reserves, in the pair's token order.
#[derive(Clone, Debug)]
pub(super) struct Pool {
    info: KnownPool,
    reserve0: U256,
    reserve1: U256,
}

impl Pool {
    /// The pool `spec` describes, with its starting reserves.
    pub(super) fn new(tokens: &[KnownToken], spec: &PoolSpec) -> Self {
        let info = pool_info(tokens, spec);
        let a = token(tokens, spec.a);
        let b = token(tokens, spec.b);
        let (ra, rb) = (whole(a, spec.units_a), whole(b, spec.units_b));
        let (reserve0, reserve1) = if a.address == info.token0 {
            (ra, rb)
        } else {
            (rb, ra)
        };
        Self {
            info,
            reserve0,
            reserve1,
        }
    }
}

/// What a generated call does: its receiver, value, input, gas and logs.
struct Effects {
    to: Option<Address>,
    value: U256,
    input: Bytes,
    gas_used: u64,
    logs: Vec<PrimitiveLog>,
}

/// What a blob transaction bids per blob gas (the blob base fee stays at
/// its floor, 1 wei, on the devnet: it keeps no blob market).
const MAX_FEE_PER_BLOB_GAS: u128 = 1_000_000_000;

/// Gas used by each kind of transaction (typical mainnet figures).
pub(super) const TRANSFER_GAS: u64 = 21_000;
const TOKEN_TRANSFER_GAS: u64 = 51_000;
const SWAP_GAS: u64 = 110_000;
pub(super) const CREATE_GAS: u64 = 180_000;
/// What an EIP-2930 access list adds per address and per storage key.
const ACCESS_LIST_ADDRESS_GAS: u64 = 2_400;
const ACCESS_LIST_KEY_GAS: u64 = 1_900;
/// What an EIP-7702 authorization of a new account costs.
pub(super) const AUTHORIZATION_GAS: u64 = 25_000;

/// The KZG commitment of the blob of zeros: the point at infinity. The
/// devnet's blob transactions carry that blob (the devnet keeps no blob
/// data), so their versioned hashes are real ones.
pub const EMPTY_BLOB_COMMITMENT: [u8; 48] = {
    let mut point = [0u8; 48];
    point[0] = 0xc0;
    point
};

/// The versioned hash of the blob of zeros (see [`EMPTY_BLOB_COMMITMENT`]).
pub fn empty_blob_hash() -> B256 {
    kzg_to_versioned_hash(&EMPTY_BLOB_COMMITMENT)
}

/// The gas limit a transaction of `gas_used` asks for: 20% headroom, as
/// wallets' estimates add.
pub(super) fn gas_limit_for(gas_used: u64) -> u64 {
    gas_used + gas_used / 5
}

/// A transaction of the devnet's own accounts, made but not signed yet:
/// signing takes ~50 µs, so a tick's batch is signed off the devnet's task
/// ([`super::Job::Sign`]), which meanwhile keeps announcing submissions.
pub(super) struct Unsigned {
    signer: PrivateKeySigner,
    tx: UnsignedTx,
    /// Its gas limit: what a block reserves for it.
    pub(super) gas: u64,
    gas_used: u64,
    logs: Vec<PrimitiveLog>,
}

enum UnsignedTx {
    Legacy(TxLegacy),
    Eip2930(TxEip2930),
    Eip1559(TxEip1559),
    Eip4844(TxEip4844),
    Eip7702(Box<SetCode>),
}

/// A set-code transaction whose one authorization `authority` signs with
/// the transaction.
struct SetCode {
    tx: TxEip7702,
    authority: PrivateKeySigner,
    authorization: Authorization,
}

impl Unsigned {
    pub(super) fn sign(self) -> Generated {
        let envelope = match self.tx {
            UnsignedTx::Legacy(tx) => TxEnvelope::from(sign(&self.signer, tx)),
            UnsignedTx::Eip2930(tx) => TxEnvelope::from(sign(&self.signer, tx)),
            UnsignedTx::Eip1559(tx) => TxEnvelope::from(sign(&self.signer, tx)),
            UnsignedTx::Eip4844(tx) => TxEnvelope::from(sign(&self.signer, tx)),
            UnsignedTx::Eip7702(set_code) => {
                let SetCode {
                    mut tx,
                    authority,
                    authorization,
                } = *set_code;
                let signature = authority
                    .sign_hash_sync(&authorization.signature_hash())
                    .expect("signing with a local key cannot fail");
                tx.authorization_list = vec![authorization.into_signed(signature)];
                TxEnvelope::from(sign(&self.signer, tx))
            }
        };
        let tx = Transaction::from_envelope(&envelope, self.signer.address());
        Generated {
            tx: Arc::new(tx),
            envelope,
            gas_used: self.gas_used,
            logs: self.logs,
        }
    }
}

impl Devnet {
    /// A new transaction from a random account, with its effects, to sign:
    /// 38% native transfers, 30% token transfers, 25% swaps, 5% creations,
    /// 2% set-code delegations.
    pub(super) fn generate(&mut self) -> Unsigned {
        let sender = self.rng.random_range(0..self.signers.len());
        let from = self.signers[sender].address();
        let other = self.signers
            [(sender + self.rng.random_range(1..self.signers.len())) % self.signers.len()]
        .address();
        let effects = match self.rng.random_range(0..100) {
            0..=37 => {
                // 0.000001 to 5 of the native coin.
                let wei = U256::from(self.rng.random_range(1u64..5_000_000))
                    * U256::from(1_000_000_000_000u64);
                Effects {
                    to: Some(other),
                    value: wei,
                    input: Bytes::new(),
                    gas_used: TRANSFER_GAS,
                    logs: Vec::new(),
                }
            }
            38..=39 => return self.set_code(sender),
            40..=69 => self.token_transfer(from, other),
            70..=94 => self.swap(from),
            _ => {
                let salt: [u8; 8] = self.rng.random();
                let mut code = INIT_CODE_PREFIX.to_vec();
                code.extend_from_slice(&salt);
                Effects {
                    to: None,
                    value: U256::ZERO,
                    input: Bytes::from(code),
                    gas_used: CREATE_GAS,
                    logs: Vec::new(),
                }
            }
        };
        self.unsigned(sender, effects)
    }

    /// The call `effects` describes as the next transaction of `sender`: a
    /// quarter legacy (EIP-155), 5% EIP-2930 (the callee's first slot
    /// listed), 5% of calls a blob transaction where the chain takes blobs,
    /// the rest EIP-1559.
    fn unsigned(&mut self, sender: usize, effects: Effects) -> Unsigned {
        let Effects {
            to,
            value,
            input,
            gas_used,
            logs,
        } = effects;
        let kind = to.map_or(TxKind::Create, TxKind::Call);
        let nonce = self.nonce(sender);
        let chain_id = self.chain_id;
        let (tip, max_fee_per_gas) = self.fees();
        let gas_price = u128::from(self.profile.base_fee) + tip;
        let pick = self.rng.random_range(0..100);
        let listed = (25..=29).contains(&pick);
        let gas_used = if listed {
            gas_used + ACCESS_LIST_ADDRESS_GAS + ACCESS_LIST_KEY_GAS
        } else {
            gas_used
        };
        let gas_limit = gas_limit_for(gas_used);
        let tx = match (pick, to) {
            (0..=24, _) => UnsignedTx::Legacy(TxLegacy {
                chain_id: Some(chain_id),
                nonce,
                gas_price,
                gas_limit,
                to: kind,
                value,
                input,
            }),
            (25..=29, _) => {
                let listed = to.unwrap_or_else(|| self.signers[sender].address().create(nonce));
                UnsignedTx::Eip2930(TxEip2930 {
                    chain_id,
                    nonce,
                    gas_price,
                    gas_limit,
                    to: kind,
                    value,
                    access_list: AccessList(vec![AccessListItem {
                        address: listed,
                        storage_keys: vec![B256::ZERO],
                    }]),
                    input,
                })
            }
            (30..=34, Some(to)) if self.profile.blobs => {
                let tx = TxEip4844 {
                    chain_id,
                    nonce,
                    gas_limit,
                    max_fee_per_gas,
                    max_priority_fee_per_gas: tip,
                    to,
                    value,
                    access_list: AccessList::default(),
                    blob_versioned_hashes: vec![empty_blob_hash()],
                    max_fee_per_blob_gas: MAX_FEE_PER_BLOB_GAS,
                    input,
                };
                UnsignedTx::Eip4844(tx)
            }
            _ => UnsignedTx::Eip1559(TxEip1559 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas: tip,
                to: kind,
                value,
                access_list: AccessList::default(),
                input,
            }),
        };
        Unsigned {
            signer: self.signers[sender].clone(),
            tx,
            gas: gas_limit,
            gas_used,
            logs,
        }
    }

    /// A tip of 1–3 times the chain's typical one, and the fee cap wallets
    /// set with it: twice the base fee plus the tip.
    fn fees(&mut self) -> (u128, u128) {
        let tip = self.profile.tip * self.rng.random_range(100..=300) / 100;
        (tip, 2 * u128::from(self.profile.base_fee) + tip)
    }

    /// `sender`'s next nonce, taken.
    fn nonce(&mut self, sender: usize) -> u64 {
        let nonce = self.nonces[sender];
        self.nonces[sender] += 1;
        nonce
    }

    /// An EIP-7702 transaction of `sender` that sets up a new account: a
    /// fresh key authorises delegating it to the devnet's wallet
    /// implementation, and the transaction calls it.
    fn set_code(&mut self, sender: usize) -> Unsigned {
        let authority = loop {
            // A random 32 bytes is a valid key but for odds of 2^-128.
            if let Ok(key) =
                PrivateKeySigner::from_bytes(&B256::from(self.rng.random::<[u8; 32]>()))
            {
                break key;
            }
        };
        let (tip, max_fee_per_gas) = self.fees();
        let gas_used = TRANSFER_GAS + AUTHORIZATION_GAS;
        let tx = TxEip7702 {
            chain_id: self.chain_id,
            nonce: self.nonce(sender),
            gas_limit: gas_limit_for(gas_used),
            max_fee_per_gas,
            max_priority_fee_per_gas: tip,
            to: authority.address(),
            value: U256::ZERO,
            access_list: AccessList::default(),
            authorization_list: Vec::new(),
            input: Bytes::new(),
        };
        let authorization = Authorization {
            chain_id: U256::from(self.chain_id),
            address: self.wallet_implementation,
            nonce: 0,
        };
        Unsigned {
            signer: self.signers[sender].clone(),
            tx: UnsignedTx::Eip7702(Box::new(SetCode {
                tx,
                authority,
                authorization,
            })),
            gas: gas_limit_for(gas_used),
            gas_used,
            logs: Vec::new(),
        }
    }

    /// `transfer(to, amount)` of a random known token, logging `Transfer`.
    fn token_transfer(&mut self, from: Address, to: Address) -> Effects {
        let token = self.profile.tokens[self.rng.random_range(0..self.profile.tokens.len())];
        let hundredths = self
            .rng
            .random_range(1..=transfer_cap_hundredths(token.symbol));
        let amount = U256::from(hundredths)
            * U256::from(10u64).pow(U256::from(token.decimals.saturating_sub(2)));
        Effects {
            to: Some(token.address),
            value: U256::ZERO,
            input: IERC20::transferCall { to, value: amount }
                .abi_encode()
                .into(),
            gas_used: TOKEN_TRANSFER_GAS,
            logs: vec![transfer_log(token.address, from, to, amount)],
        }
    }

    /// A swap in a random pool, in a random direction, of up to 0.3% of the
    /// input reserve (so prices drift like a market's, not a random walk
    /// off a cliff); reserves follow x·y = k with the 0.3% fee, rounding
    /// the output down as the pair contract requires.
    fn swap(&mut self, trader: Address) -> Effects {
        let index = self.rng.random_range(0..self.pools.len());
        let zero_for_one: bool = self.rng.random();
        let basis_points = U256::from(self.rng.random_range(1u64..=30));
        let pool = &mut self.pools[index];
        let (reserve_in, reserve_out) = if zero_for_one {
            (pool.reserve0, pool.reserve1)
        } else {
            (pool.reserve1, pool.reserve0)
        };
        let amount_in = (reserve_in * basis_points / U256::from(10_000)).max(U256::from(1));
        let amount_out = v2_amount_out(amount_in, reserve_in, reserve_out);
        let (token_in, token_out) = if zero_for_one {
            (pool.info.token0, pool.info.token1)
        } else {
            (pool.info.token1, pool.info.token0)
        };
        let (in0, in1, out0, out1) = if zero_for_one {
            pool.reserve0 += amount_in;
            pool.reserve1 -= amount_out;
            (amount_in, U256::ZERO, U256::ZERO, amount_out)
        } else {
            pool.reserve1 += amount_in;
            pool.reserve0 -= amount_out;
            (U256::ZERO, amount_in, amount_out, U256::ZERO)
        };
        let pair = pool.info.address;
        // With empty `data`: a plain swap, no flash-swap callback.
        let input = IUniswapV2Pair::swapCall {
            amount0Out: out0,
            amount1Out: out1,
            to: trader,
            data: Bytes::new(),
        }
        .abi_encode()
        .into();
        // The order a router-driven swap logs in: the input paid to the
        // pair, the output paid out, the new reserves, the swap.
        let logs = vec![
            transfer_log(token_in, trader, pair, amount_in),
            transfer_log(token_out, pair, trader, amount_out),
            PrimitiveLog {
                address: pair,
                // Far below uint112's bound (a real pair refuses to pass
                // it): `wrapping_from` drops only zero bits.
                data: IUniswapV2Pair::Sync {
                    reserve0: U112::wrapping_from(pool.reserve0),
                    reserve1: U112::wrapping_from(pool.reserve1),
                }
                .encode_log_data(),
            },
            PrimitiveLog {
                address: pair,
                data: IUniswapV2Pair::Swap {
                    sender: trader,
                    amount0In: in0,
                    amount1In: in1,
                    amount0Out: out0,
                    amount1Out: out1,
                    to: trader,
                }
                .encode_log_data(),
            },
        ];
        Effects {
            to: Some(pair),
            value: U256::ZERO,
            input,
            gas_used: SWAP_GAS,
            logs,
        }
    }
}

/// `UniswapV2Library.getAmountOut`: the output for `amount_in` after the
/// 0.3% fee.
fn v2_amount_out(amount_in: U256, reserve_in: U256, reserve_out: U256) -> U256 {
    let with_fee = amount_in * U256::from(997);
    with_fee * reserve_out / (reserve_in * U256::from(1_000) + with_fee)
}

pub(super) fn sign<T: SignableTransaction<Signature>>(
    signer: &PrivateKeySigner,
    tx: T,
) -> Signed<T> {
    let signature = signer
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing with a local key cannot fail");
    tx.into_signed(signature)
}

/// The start of solc's init code (free memory pointer, non-payable check);
/// each creation appends a random salt so creations differ.
const INIT_CODE_PREFIX: [u8; 16] = [
    0x60, 0x80, 0x60, 0x40, 0x52, 0x34, 0x80, 0x15, 0x60, 0x0f, 0x57, 0x5f, 0x80, 0xfd, 0x5b, 0x50,
];

fn transfer_log(token: Address, from: Address, to: Address, amount: U256) -> PrimitiveLog {
    PrimitiveLog {
        address: token,
        data: IERC20::Transfer {
            from,
            to,
            value: amount,
        }
        .encode_log_data(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_eips::eip2718::Encodable2718;
    use alloy_primitives::{B256, keccak256};
    use alloy_rpc_types_eth::Log;

    use super::super::testing::{envelope_of, run_steps, settings};
    use super::super::{ACCOUNTS, known_pools, known_tokens};
    use super::*;

    fn word(data: &[u8], index: usize) -> U256 {
        U256::from_be_slice(&data[index * 32..(index + 1) * 32])
    }

    #[test]
    fn transactions_are_really_signed() {
        for chain in [1, 56, 137] {
            let devnet = &mut Devnet::new(chain, &settings());
            let accounts: HashSet<Address> = devnet.accounts().into_iter().collect();
            assert_eq!(accounts.len(), ACCOUNTS);
            let (_, pending) = run_steps(devnet, 200);
            let mut types = HashSet::new();
            let mut nonces: HashMap<Address, Vec<u64>> = HashMap::new();
            for tx in &pending {
                types.insert(tx.tx_type);
                assert_eq!(tx.chain_id, Some(chain));
                assert!(accounts.contains(&tx.from));
                let envelope = envelope_of(tx);
                assert_eq!(
                    keccak256(envelope.encoded_2718()),
                    tx.hash,
                    "hash is keccak of the signed encoding"
                );
                assert_eq!(
                    envelope.recover_signer().expect("recovers"),
                    tx.from,
                    "from recovers from the signature"
                );
                nonces.entry(tx.from).or_default().push(tx.nonce);
                if let Some(blob) = &tx.blob {
                    assert_eq!(blob.versioned_hashes, [empty_blob_hash()]);
                    assert!(tx.to.is_some(), "a blob transaction calls");
                }
                if let Some(authorizations) = &tx.authorization_list {
                    let authority = authorizations[0]
                        .signed()
                        .recover_authority()
                        .expect("recovers");
                    assert_eq!(Some(authority), tx.to, "it calls the account it sets up");
                    assert_eq!(authorizations[0].chain_id, U256::from(chain));
                }
            }
            let every: HashSet<u8> = if chain == 137 {
                HashSet::from([0, 1, 2, 4])
            } else {
                HashSet::from([0, 1, 2, 3, 4])
            };
            assert_eq!(types, every, "every type the chain takes appears");
            for sequence in nonces.values() {
                assert_eq!(
                    *sequence,
                    (0..sequence.len() as u64).collect::<Vec<_>>(),
                    "nonces are consecutive"
                );
            }
        }
    }

    #[test]
    fn token_transfers_log_transfer_events() {
        let mut devnet = Devnet::new(1, &settings());
        let (blocks, _) = run_steps(&mut devnet, 100);
        let tokens: HashSet<Address> = known_tokens(1).iter().map(|t| t.address).collect();
        let mut transfers = 0;
        let mut kinds = HashSet::new();
        for block in &blocks {
            for tx in &block.transactions {
                let logs: Vec<&Log> = block
                    .logs
                    .iter()
                    .filter(|l| l.transaction_hash == Some(tx.hash))
                    .collect();
                let selector = tx.input.get(..4);
                let Some(to) = tx.to else {
                    kinds.insert("create");
                    assert!(!tx.input.is_empty() && logs.is_empty());
                    continue;
                };
                if tx.tx_type == 4 {
                    kinds.insert("set-code");
                    assert!(tx.value.is_zero() && tx.input.is_empty() && logs.is_empty());
                    assert_eq!(tx.gas, gas_limit_for(TRANSFER_GAS + AUTHORIZATION_GAS));
                } else if tx.input.is_empty() {
                    kinds.insert("native");
                    assert!(tx.value > U256::ZERO && logs.is_empty());
                    let listed = if tx.tx_type == 1 {
                        ACCESS_LIST_ADDRESS_GAS + ACCESS_LIST_KEY_GAS
                    } else {
                        0
                    };
                    assert_eq!(tx.gas, gas_limit_for(TRANSFER_GAS + listed));
                } else if selector == Some(&IERC20::transferCall::SELECTOR[..]) {
                    kinds.insert("erc20");
                    transfers += 1;
                    assert_eq!(tx.input.len(), 4 + 2 * 32);
                    assert!(tx.input[4..16].iter().all(|b| *b == 0), "address padding");
                    let recipient = Address::from_slice(&tx.input[16..36]);
                    let amount = word(&tx.input[4..], 1);
                    assert!(tokens.contains(&to));
                    assert_eq!(logs.len(), 1);
                    let log = logs[0];
                    assert_eq!(Some(log.address()), tx.to);
                    assert_eq!(
                        log.topics(),
                        [
                            IERC20::Transfer::SIGNATURE_HASH,
                            tx.from.into_word(),
                            recipient.into_word()
                        ]
                    );
                    assert_eq!(log.data().data[..], amount.to_be_bytes::<32>()[..]);
                } else {
                    assert_eq!(selector, Some(&IUniswapV2Pair::swapCall::SELECTOR[..]));
                    kinds.insert("swap");
                }
            }
        }
        assert!(transfers > 10);
        assert_eq!(kinds.len(), 5, "every kind appears: {kinds:?}");
    }

    #[test]
    fn swaps_follow_the_constant_product_rule() {
        for chain in [1, 56, 137] {
            let mut devnet = Devnet::new(chain, &settings());
            let (blocks, _) = run_steps(&mut devnet, 150);
            let pools: HashMap<Address, KnownPool> = known_pools(chain)
                .into_iter()
                .map(|p| (p.address, p))
                .collect();
            let mut reserves: HashMap<Address, (U256, U256)> = HashMap::new();
            let mut swaps = 0;
            for block in &blocks {
                for tx in &block.transactions {
                    if tx.input.get(..4) != Some(&IUniswapV2Pair::swapCall::SELECTOR[..]) {
                        continue;
                    }
                    swaps += 1;
                    let pair = tx.to.expect("a call");
                    let pool = pools[&pair];
                    let logs: Vec<&Log> = block
                        .logs
                        .iter()
                        .filter(|l| l.transaction_hash == Some(tx.hash))
                        .collect();
                    let topics: Vec<B256> = logs.iter().map(|l| l.topics()[0]).collect();
                    assert_eq!(
                        topics,
                        [
                            IERC20::Transfer::SIGNATURE_HASH,
                            IERC20::Transfer::SIGNATURE_HASH,
                            IUniswapV2Pair::Sync::SIGNATURE_HASH,
                            IUniswapV2Pair::Swap::SIGNATURE_HASH
                        ]
                    );
                    let (sync, swap) = (logs[2], logs[3]);
                    assert_eq!((sync.address(), swap.address()), (pair, pair));
                    assert_eq!(
                        swap.topics()[1..],
                        [tx.from.into_word(), tx.from.into_word()]
                    );
                    let data = &swap.data().data;
                    let (in0, in1, out0, out1) =
                        (word(data, 0), word(data, 1), word(data, 2), word(data, 3));
                    let args = &tx.input[4..];
                    assert_eq!((word(args, 0), word(args, 1)), (out0, out1));
                    assert_eq!(word(args, 3), U256::from(0x80), "bytes offset");
                    assert_eq!(args.len(), 5 * 32);
                    // The paid-in transfer is of the input token, to the pair.
                    let (token_in, amount_in) = if in0 > U256::ZERO {
                        (pool.token0, in0)
                    } else {
                        (pool.token1, in1)
                    };
                    assert_eq!(logs[0].address(), token_in);
                    assert_eq!(logs[0].topics()[2], pair.into_word());
                    assert_eq!(word(&logs[0].data().data, 0), amount_in);
                    let (r0, r1) = (word(&sync.data().data, 0), word(&sync.data().data, 1));
                    assert!(r0 < U256::from(1u8) << 112 && r1 < U256::from(1u8) << 112);
                    if let Some((p0, p1)) = reserves.insert(pair, (r0, r1)) {
                        assert_eq!((r0, r1), (p0 + in0 - out0, p1 + in1 - out1));
                        assert!(r0 * r1 >= p0 * p1, "k never shrinks");
                        // The pair's own check: k holds on fee-adjusted balances.
                        let adjusted0 = r0 * U256::from(1_000) - in0 * U256::from(3);
                        let adjusted1 = r1 * U256::from(1_000) - in1 * U256::from(3);
                        assert!(adjusted0 * adjusted1 >= p0 * p1 * U256::from(1_000_000));
                    }
                }
            }
            assert!(swaps > 10, "{swaps} swaps on chain {chain}");
            // Prices stay near where they started (token0 of WETH/USDC is USDC).
            if chain == 1 {
                let (r_usdc, r_weth) = reserves[&known_pools(1)[0].address];
                let price =
                    (r_usdc.to::<u128>() as f64 / 1e6) / (r_weth.to::<u128>() as f64 / 1e18);
                assert!((2_000.0..4_000.0).contains(&price), "ETH at {price} USDC");
            }
        }
    }
}
