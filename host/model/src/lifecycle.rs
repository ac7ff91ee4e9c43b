//! A transaction's life as the `transactionLifecycle` topic tells it: each
//! change of a transaction's stage is a [`Turn`] (docs/src/api.md, A
//! transaction's life). The chain's tracker decides the turns as the
//! chain's steps come and logs them as a step of their own, so a replay or
//! another server tells the same turns at the same places.

use std::sync::Arc;

use alloy_primitives::{Address, B256, U64, U128, U256};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Block, Transaction};

/// What a turn carries of its transaction: every field a filter reads of a
/// transaction except its call data, of which only the selector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxBrief {
    pub hash: B256,
    pub from: Address,
    /// `None` for a contract creation.
    pub to: Option<Address>,
    pub nonce: u64,
    pub tx_type: u8,
    pub value: U256,
    pub gas: u64,
    /// The first four bytes of the call data, when it has four.
    pub selector: Option<[u8; 4]>,
}

impl TxBrief {
    pub fn of(tx: &Transaction) -> Self {
        Self {
            hash: tx.hash,
            from: tx.from,
            to: tx.to,
            nonce: tx.nonce,
            tx_type: tx.tx_type,
            value: tx.value,
            gas: tx.gas,
            selector: tx.input.get(..4).map(|s| [s[0], s[1], s[2], s[3]]),
        }
    }
}

/// A block a stage names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRef {
    pub number: u64,
    pub hash: B256,
}

impl BlockRef {
    pub fn of(block: &Block) -> Self {
        Self {
            number: block.number(),
            hash: block.hash,
        }
    }
}

/// How a mined transaction went, from its receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// `true` when it succeeded (receipt status 1).
    pub success: bool,
    pub gas_used: u64,
    pub effective_gas_price: u128,
}

impl Outcome {
    /// How `block`'s transaction `index` went: its node receipt's `status`,
    /// `gasUsed` and `effectiveGasPrice` (read from the receipt's text,
    /// skipping the rest), or the devnet's gas (which always succeeds);
    /// `None` for a block with neither.
    pub fn of(block: &Block, index: usize) -> Option<Self> {
        let tx = block.transactions.get(index)?;
        match (block.receipts.as_deref(), block.gas_used.as_deref()) {
            (Some(receipts), _) => {
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Read {
                    status: Option<U64>,
                    gas_used: U64,
                    effective_gas_price: Option<U128>,
                }
                let read: Read = serde_json::from_str(receipts.get(index)?).ok()?;
                Some(Outcome {
                    // A receipt before Byzantium has a root, no status.
                    success: read.status.is_none_or(|status| status == U64::from(1)),
                    gas_used: read.gas_used.to(),
                    effective_gas_price: read
                        .effective_gas_price
                        .map_or_else(|| tx.fees.effective(block.base_fee()), |price| price.to()),
                })
            }
            (None, Some(gas)) => Some(Outcome {
                success: true,
                gas_used: *gas.get(index)?,
                effective_gas_price: tx.fees.effective(block.base_fee()),
            }),
            (None, None) => None,
        }
    }
}

/// Where a transaction's life has come to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// In a pool: first seen (at Unix milliseconds `seen_ms`, from node
    /// `seen_by` where the chain has nodes), or back after a reorg took
    /// block `reorged_out` away.
    Pending {
        seen_ms: u64,
        seen_by: Option<Arc<str>>,
        reorged_out: Option<BlockRef>,
    },
    /// Its sender's nonce went to another transaction, pending or mined.
    Replaced { by: B256 },
    /// Gone from every pool without being mined.
    Dropped,
    /// In a canonical block, at `index`; the outcome is `None` where the
    /// source gave no receipt.
    Mined {
        block: BlockRef,
        index: u32,
        outcome: Option<Outcome>,
    },
    /// Its block reached the chain's `safe` block.
    Safe { block: BlockRef, index: u32 },
    /// Its block reached the chain's `finalized` block.
    Finalized { block: BlockRef, index: u32 },
}

impl Stage {
    /// The block it names: none while pending, replaced or dropped.
    pub fn block(&self) -> Option<&BlockRef> {
        match self {
            Stage::Mined { block, .. }
            | Stage::Safe { block, .. }
            | Stage::Finalized { block, .. } => Some(block),
            Stage::Pending { .. } | Stage::Replaced { .. } | Stage::Dropped => None,
        }
    }

    /// The stage's name in a notification.
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Pending { .. } => "pending",
            Stage::Replaced { .. } => "replaced",
            Stage::Dropped => "dropped",
            Stage::Mined { .. } => "mined",
            Stage::Safe { .. } => "safe",
            Stage::Finalized { .. } => "finalized",
        }
    }
}

/// One change of one transaction's stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub tx: TxBrief,
    pub stage: Stage,
}

impl Turn {
    /// The turn as a notification's `result` (docs/src/api.md, A
    /// transaction's life).
    pub fn to_json(&self) -> String {
        let tx = &self.tx;
        let mut object = json!({
            "transactionHash": tx.hash,
            "from": tx.from,
            "to": tx.to,
            "nonce": U64::from(tx.nonce),
            "stage": self.stage.name(),
        });
        let at = |block: &BlockRef, index: u32| {
            json!({
                "blockHash": block.hash,
                "blockNumber": U64::from(block.number),
                "transactionIndex": U64::from(index),
            })
        };
        let more = match &self.stage {
            Stage::Pending {
                seen_ms,
                seen_by,
                reorged_out,
            } => {
                let mut more = json!({ "seenAt": U64::from(*seen_ms) });
                if let Some(node) = seen_by {
                    more["seenBy"] = json!(node);
                }
                if let Some(block) = reorged_out {
                    more["reorgedOut"] = json!({
                        "blockHash": block.hash,
                        "blockNumber": U64::from(block.number),
                    });
                }
                more
            }
            Stage::Replaced { by } => json!({ "replacedBy": by }),
            Stage::Dropped => json!({}),
            Stage::Mined {
                block,
                index,
                outcome,
            } => {
                let mut more = at(block, *index);
                if let Some(outcome) = outcome {
                    more["status"] = json!(U64::from(u8::from(outcome.success)));
                    more["gasUsed"] = json!(U64::from(outcome.gas_used));
                    more["effectiveGasPrice"] = json!(U128::from(outcome.effective_gas_price));
                }
                more
            }
            Stage::Safe { block, index } | Stage::Finalized { block, index } => at(block, *index),
        };
        if let (Value::Object(object), Value::Object(more)) = (&mut object, more) {
            object.extend(more);
        }
        object.to_string()
    }

    /// A turn read back from its notification shape ([`Turn::to_json`]),
    /// as the component harness reads event files: what the notification
    /// does not carry (the transaction's type, value, gas and selector) is
    /// zero.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Read {
            transaction_hash: B256,
            from: Address,
            #[serde(default)]
            to: Option<Address>,
            nonce: U64,
            stage: String,
            #[serde(default)]
            seen_at: Option<U64>,
            #[serde(default)]
            seen_by: Option<Arc<str>>,
            #[serde(default)]
            reorged_out: Option<At>,
            #[serde(default)]
            replaced_by: Option<B256>,
            #[serde(flatten)]
            at: Option<At>,
            #[serde(default)]
            transaction_index: Option<U64>,
            #[serde(default)]
            status: Option<U64>,
            #[serde(default)]
            gas_used: Option<U64>,
            #[serde(default)]
            effective_gas_price: Option<U128>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct At {
            block_hash: B256,
            block_number: U64,
        }
        let read: Read = serde_json::from_str(json)?;
        let missing =
            |what: &str| serde::de::Error::custom(format!("a {} turn needs {what}", read.stage));
        let block = || {
            read.at
                .as_ref()
                .map(|at| BlockRef {
                    number: at.block_number.to(),
                    hash: at.block_hash,
                })
                .ok_or_else(|| missing("blockHash and blockNumber"))
        };
        let index = || {
            read.transaction_index
                .map(|i| u32::try_from(i.to::<u64>()).unwrap_or(u32::MAX))
                .ok_or_else(|| missing("transactionIndex"))
        };
        let stage = match read.stage.as_str() {
            "pending" => Stage::Pending {
                seen_ms: read.seen_at.map_or(0, |at| at.to()),
                seen_by: read.seen_by.clone(),
                reorged_out: read.reorged_out.as_ref().map(|at| BlockRef {
                    number: at.block_number.to(),
                    hash: at.block_hash,
                }),
            },
            "replaced" => Stage::Replaced {
                by: read.replaced_by.ok_or_else(|| missing("replacedBy"))?,
            },
            "dropped" => Stage::Dropped,
            "mined" => Stage::Mined {
                block: block()?,
                index: index()?,
                outcome: match (read.status, read.gas_used, read.effective_gas_price) {
                    (Some(status), Some(gas_used), Some(price)) => Some(Outcome {
                        success: status == U64::from(1),
                        gas_used: gas_used.to(),
                        effective_gas_price: price.to(),
                    }),
                    _ => None,
                },
            },
            "safe" => Stage::Safe {
                block: block()?,
                index: index()?,
            },
            "finalized" => Stage::Finalized {
                block: block()?,
                index: index()?,
            },
            other => {
                return Err(serde::de::Error::custom(format!(
                    "unknown stage {other:?} (pending, replaced, dropped, mined, safe or finalized)"
                )));
            }
        };
        Ok(Turn {
            tx: TxBrief {
                hash: read.transaction_hash,
                from: read.from,
                to: read.to,
                nonce: read.nonce.to(),
                tx_type: 0,
                value: U256::ZERO,
                gas: 0,
                selector: None,
            },
            stage,
        })
    }

    /// Roughly the heap bytes it holds, for the log's byte bound.
    pub fn approximate_bytes(&self) -> usize {
        let node = match &self.stage {
            Stage::Pending { seen_by, .. } => seen_by.as_deref().map_or(0, str::len),
            _ => 0,
        };
        std::mem::size_of::<Self>() + node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief() -> TxBrief {
        TxBrief {
            hash: B256::repeat_byte(0x11),
            from: Address::repeat_byte(0xaa),
            to: None,
            nonce: 7,
            tx_type: 0,
            value: U256::ZERO,
            gas: 0,
            selector: None,
        }
    }

    /// The turn's notification, checked to read back as the turn.
    fn json_of(stage: Stage) -> Value {
        let turn = Turn { tx: brief(), stage };
        let text = turn.to_json();
        assert_eq!(Turn::from_json(&text).expect("reads back"), turn);
        serde_json::from_str(&text).expect("a turn is JSON")
    }

    /// Each stage's members, in the book's names and shapes.
    #[test]
    fn each_stage_says_what_it_is() {
        let block = BlockRef {
            number: 0x10,
            hash: B256::repeat_byte(0xbb),
        };
        let pending = json_of(Stage::Pending {
            seen_ms: 1_000,
            seen_by: Some("a".into()),
            reorged_out: Some(block),
        });
        assert_eq!(pending["transactionHash"], json!(B256::repeat_byte(0x11)));
        assert_eq!(pending["to"], Value::Null);
        assert_eq!(pending["nonce"], "0x7");
        assert_eq!(pending["stage"], "pending");
        assert_eq!(pending["seenAt"], "0x3e8");
        assert_eq!(pending["seenBy"], "a");
        assert_eq!(pending["reorgedOut"]["blockNumber"], "0x10");
        let first = json_of(Stage::Pending {
            seen_ms: 1,
            seen_by: None,
            reorged_out: None,
        });
        assert!(first.get("seenBy").is_none() && first.get("reorgedOut").is_none());
        let mined = json_of(Stage::Mined {
            block,
            index: 3,
            outcome: Some(Outcome {
                success: false,
                gas_used: 21_000,
                effective_gas_price: 7,
            }),
        });
        assert_eq!(mined["stage"], "mined");
        assert_eq!(mined["blockHash"], json!(block.hash));
        assert_eq!(mined["transactionIndex"], "0x3");
        assert_eq!(mined["status"], "0x0");
        assert_eq!(mined["gasUsed"], "0x5208");
        assert_eq!(mined["effectiveGasPrice"], "0x7");
        let replaced = json_of(Stage::Replaced {
            by: B256::repeat_byte(0x22),
        });
        assert_eq!(replaced["replacedBy"], json!(B256::repeat_byte(0x22)));
        assert_eq!(json_of(Stage::Dropped)["stage"], "dropped");
        let safe = json_of(Stage::Finalized { block, index: 1 });
        assert_eq!(safe["stage"], "finalized");
        assert_eq!(safe["blockNumber"], "0x10");
    }
}
