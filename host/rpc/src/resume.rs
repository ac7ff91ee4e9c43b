//! The options object `eth_subscribe` may end with: `{"resumeFrom":
//! "<cursor>"}` or `{"fromBlock": "0x…"}` (docs/src/architecture.md, The event
//! log), and `{"finality": "safe" | "finalized"}` (docs/src/api.md,
//! Finality), alone or beside either. An object whose only members are
//! options is the options object; the host takes it out, so the filter
//! component never sees it.

use chainsieve_filter_core::Source;
use serde_json::{Map, Value};

use super::RpcError;
use super::params::parse_quantity;
use chainsieve_eventlog::cursor::{Cursor, ResumeError, ResumeFrom};
use chainsieve_model::Grade;

const RESUME_FROM: &str = "resumeFrom";
const FROM_BLOCK: &str = "fromBlock";
const FINALITY: &str = "finality";
const OPTIONS: [&str; 3] = [RESUME_FROM, FROM_BLOCK, FINALITY];

/// What the options object asks.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Options {
    /// Replay the log from here first.
    pub from: Option<ResumeFrom>,
    /// Tell of blocks only once they are this final.
    pub finality: Option<Grade>,
}

/// Takes the options object off the end of `params` (the parameters after
/// the topic) and reads it, for a topic that consumes `source`.
pub(super) fn take_options(params: &mut Vec<Value>, source: Source) -> Result<Options, RpcError> {
    let options = match params.last() {
        Some(Value::Object(last)) if is_options(last) => last.clone(),
        _ => {
            if params.iter().any(|param| param.get(RESUME_FROM).is_some()) {
                return Err(RpcError::invalid_params(
                    "resumeFrom goes in an options object of its own, the last parameter: [\"logs\", {\"address\": \"0x…\"}, {\"resumeFrom\": \"<cursor>\"}]",
                ));
            }
            return Ok(Options::default());
        }
    };
    params.pop();
    let finality = options
        .get(FINALITY)
        .map(|grade| finality(grade, source))
        .transpose()?;
    let from = if options.len() > usize::from(finality.is_some()) {
        Some(read(&options, source)?)
    } else {
        None
    };
    Ok(Options { from, finality })
}

/// Whether `object` is an options object: not empty, every member an
/// option.
pub(super) fn is_options(object: &Map<String, Value>) -> bool {
    !object.is_empty() && object.keys().all(|key| OPTIONS.contains(&key.as_str()))
}

fn finality(grade: &Value, source: Source) -> Result<Grade, RpcError> {
    if !source.in_blocks() {
        return Err(RpcError::invalid_params(
            "finality applies to the mined streams (newHeads, logs, bvMinedTransactions, transactionReceipts and custom topics on them); pending transactions are in no block yet, and a lifecycle turn tells its own finality",
        ));
    }
    match grade.as_str() {
        Some("safe") => Ok(Grade::Safe),
        Some("finalized") => Ok(Grade::Finalized),
        _ => Err(RpcError::invalid_params(format!(
            "finality must be \"safe\" or \"finalized\", got {grade}"
        ))),
    }
}

fn read(options: &Map<String, Value>, source: Source) -> Result<ResumeFrom, RpcError> {
    match (options.get(RESUME_FROM), options.get(FROM_BLOCK)) {
        (Some(_), Some(_)) => Err(RpcError::invalid_params(
            "give resumeFrom or fromBlock, not both",
        )),
        (Some(Value::String(cursor)), None) => {
            let cursor = cursor
                .parse::<Cursor>()
                .map_err(|malformed| RpcError::invalid_params(malformed.to_string()))?;
            // A block's event is no place in a pending stream; the end of a
            // block's step (the head cursor) is one in every stream.
            if !source.in_blocks() && cursor.block.is_some() && !cursor.is_step_end() {
                return Err(RpcError::invalid_params(format!(
                    "the cursor {cursor} is of a block's event; this topic's events are in no block (pending transactions, lifecycle turns): resume it with one of its own cursors"
                )));
            }
            Ok(ResumeFrom::After(cursor))
        }
        (Some(other), None) => Err(RpcError::invalid_params(format!(
            "resumeFrom must be the cursor string of a notification, got {other}"
        ))),
        (None, Some(block)) => {
            if !source.in_blocks() {
                return Err(RpcError::invalid_params(
                    "fromBlock replays the mined streams (newHeads, logs, bvMinedTransactions, transactionReceipts and custom topics on them); this topic's events are in no block (pending transactions, lifecycle turns): resume it with resumeFrom",
                ));
            }
            block
                .as_str()
                .and_then(parse_quantity)
                .map(ResumeFrom::Block)
                .ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "fromBlock must be a block number as a hex quantity (\"0x1b4\"), got {block}"
                    ))
                })
        }
        (None, None) => Err(RpcError::invalid_params(
            "an options object names resumeFrom or fromBlock",
        )),
    }
}

/// The JSON-RPC error for a resume the log refuses.
pub(super) fn refusal(error: ResumeError) -> RpcError {
    match error {
        ResumeError::OtherChain(message) | ResumeError::Ahead(message) => {
            RpcError::invalid_params(message)
        }
        ResumeError::TooOld(message) | ResumeError::Unknown(message) => {
            RpcError::not_found(message)
        }
        ResumeError::NotYet(message) => RpcError::unavailable(message),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::code;

    /// What the options say of where to start, and the params left.
    fn take(params: Value, source: Source) -> (Result<Option<ResumeFrom>, RpcError>, Value) {
        let (taken, left) = take_all(params, source);
        (taken.map(|options| options.from), left)
    }

    fn take_all(params: Value, source: Source) -> (Result<Options, RpcError>, Value) {
        let mut params = params.as_array().expect("an array").clone();
        let taken = take_options(&mut params, source);
        (taken, Value::Array(params))
    }

    const CURSOR: &str = "eth:12:3:00000000000000ff";

    #[test]
    fn a_block_s_cursor_does_not_resume_a_pending_topic() {
        let mined = "eth:12@5:0:00000000000000ff";
        let (taken, _) = take(json!([{"resumeFrom": mined}]), Source::PendingTransactions);
        let refused = taken.expect_err("refused");
        assert_eq!(refused.code, code::INVALID_PARAMS);
        assert!(
            refused.message.contains("pending transactions"),
            "{}",
            refused.message
        );
        let (taken, _) = take(json!([{"resumeFrom": mined}]), Source::Logs);
        assert!(taken.is_ok(), "a mined topic takes it");
        // The head cursor, at a block's step, resumes a pending topic too.
        let head = "eth:12@5:4294967295:00000000000000ff";
        let (taken, _) = take(json!([{"resumeFrom": head}]), Source::PendingTransactions);
        assert!(taken.is_ok(), "{taken:?}");
    }

    #[test]
    fn the_options_object_is_taken_out_before_the_filter_sees_the_params() {
        let cursor: Cursor = CURSOR.parse().expect("a cursor");
        let address = json!({"address": "0x00000000000000000000000000000000000000aa"});
        for (params, source, rest) in [
            (
                json!([address, {"resumeFrom": CURSOR}]),
                Source::Logs,
                json!([address]),
            ),
            (json!([{"resumeFrom": CURSOR}]), Source::Heads, json!([])),
            (
                json!([true, {"resumeFrom": CURSOR}]),
                Source::PendingTransactions,
                json!([true]),
            ),
        ] {
            let (taken, left) = take(params, source);
            assert_eq!(taken, Ok(Some(ResumeFrom::After(cursor.clone()))));
            assert_eq!(left, rest);
        }
        let (taken, left) = take(json!([{"fromBlock": "0x1b4"}]), Source::MinedTransactions);
        assert_eq!(taken, Ok(Some(ResumeFrom::Block(0x1b4))));
        assert_eq!(left, json!([]));
    }

    #[test]
    fn finality_stands_alone_or_beside_where_to_start() {
        let (taken, left) = take_all(json!([{"finality": "finalized"}]), Source::Logs);
        assert_eq!(
            taken,
            Ok(Options {
                from: None,
                finality: Some(Grade::Finalized)
            })
        );
        assert_eq!(left, json!([]));
        let (taken, _) = take_all(
            json!([{"finality": "safe", "fromBlock": "0x10"}]),
            Source::Heads,
        );
        assert_eq!(
            taken,
            Ok(Options {
                from: Some(ResumeFrom::Block(0x10)),
                finality: Some(Grade::Safe)
            })
        );
    }

    #[test]
    fn objects_that_are_not_only_options_stay_with_the_filter() {
        for params in [
            json!([{}]),
            json!([{"address": "0xaa", "fromBlock": "0x1"}]),
            json!([true]),
            json!([]),
        ] {
            let (taken, left) = take(params.clone(), Source::Logs);
            assert_eq!(taken, Ok(None));
            assert_eq!(left, params);
        }
    }

    #[test]
    fn bad_options_are_invalid_params_that_say_what_is_wrong() {
        for (params, source, says) in [
            (
                json!([{"resumeFrom": "yesterday"}]),
                Source::Heads,
                "not a chainsieve cursor",
            ),
            (
                json!([{"resumeFrom": 12}]),
                Source::Heads,
                "must be the cursor string",
            ),
            (
                json!([{"resumeFrom": CURSOR, "fromBlock": "0x1"}]),
                Source::Heads,
                "not both",
            ),
            (json!([{"fromBlock": "12"}]), Source::Logs, "hex quantity"),
            (
                json!([{"fromBlock": "0x1"}]),
                Source::PendingTransactions,
                "resume it with resumeFrom",
            ),
            (
                json!([{"address": "0xaa", "resumeFrom": CURSOR}]),
                Source::Logs,
                "options object of its own",
            ),
            (
                json!([{"finality": "latest"}]),
                Source::Logs,
                "finality must be \"safe\" or \"finalized\", got \"latest\"",
            ),
            (
                json!([true, {"finality": "finalized"}]),
                Source::PendingTransactions,
                "pending transactions are in no block yet",
            ),
        ] {
            let (taken, _) = take(params.clone(), source);
            let error = taken.expect_err("refused");
            assert_eq!(error.code, code::INVALID_PARAMS, "{params}");
            assert!(error.message.contains(says), "{params}: {}", error.message);
        }
    }

    #[test]
    fn refusals_map_to_eip_1474_codes() {
        let code_of = |error| refusal(error).code;
        assert_eq!(code_of(ResumeError::TooOld("x".into())), code::NOT_FOUND);
        assert_eq!(code_of(ResumeError::Unknown("x".into())), code::NOT_FOUND);
        assert_eq!(
            code_of(ResumeError::OtherChain("x".into())),
            code::INVALID_PARAMS
        );
        assert_eq!(
            code_of(ResumeError::Ahead("x".into())),
            code::INVALID_PARAMS
        );
    }
}
