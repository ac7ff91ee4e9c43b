//! How far back a window reaches, as a block count or as a span of time,
//! and how often each known chain makes a block: a span of time keeps the
//! same reach on a chain of 12 s blocks and on one of 0.45 s blocks
//! (docs/src/configuration.md, Cadences).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How often a chain makes a block, as the chains run in 2026: Ethereum
/// every 12 s, BNB Chain every 0.45 s (since its Fermi upgrade), Polygon
/// PoS every 2 s. Another chain id is taken to run as Ethereum does.
pub fn cadence(chain_id: u64) -> Duration {
    match chain_id {
        56 => Duration::from_millis(450),
        137 => Duration::from_secs(2),
        _ => Duration::from_secs(12),
    }
}

/// A window's reach: `128` (blocks) or `"15m"` (a duration, in
/// [humantime](https://docs.rs/humantime)'s units: `"90s"`, `"1h 30m"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    Blocks(u64),
    Time(Duration),
}

/// The fewest blocks a duration holds, so a chain of long blocks (a devnet
/// stepped by hand, an hour a block) still rides out a reorg.
pub const MIN_TIME_SPAN_BLOCKS: u64 = 64;

impl Span {
    /// The blocks this span holds on a chain making one every `block_time`:
    /// a count as it is; a duration's blocks, its last part-block counted
    /// whole, at least [`MIN_TIME_SPAN_BLOCKS`].
    pub fn blocks(self, block_time: Duration) -> u64 {
        match self {
            Span::Blocks(blocks) => blocks,
            Span::Time(time) => {
                let per_block = block_time.as_nanos().max(1);
                u64::try_from(time.as_nanos().div_ceil(per_block))
                    .unwrap_or(u64::MAX)
                    .max(MIN_TIME_SPAN_BLOCKS)
            }
        }
    }
}

/// `duration` in its largest whole unit (`"1h"`, `"90m"`, `"450ms"`), as
/// a config would write it.
pub fn duration_text(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (duration.subsec_nanos(), seconds) {
        (0, s) if s > 0 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        (0, s) if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        (0, s) => format!("{s}s"),
        _ => format!("{}ms", duration.as_millis()),
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::Blocks(blocks) => write!(f, "{blocks}"),
            Span::Time(time) => write!(f, "\"{}\"", duration_text(*time)),
        }
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Span::Blocks(blocks) => s.serialize_u64(*blocks),
            Span::Time(time) => s.serialize_str(&duration_text(*time)),
        }
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Span;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of blocks or a duration such as \"15m\" or \"1h\"")
            }

            fn visit_u64<E: serde::de::Error>(self, blocks: u64) -> Result<Span, E> {
                Ok(Span::Blocks(blocks))
            }

            fn visit_i64<E: serde::de::Error>(self, blocks: i64) -> Result<Span, E> {
                u64::try_from(blocks).map(Span::Blocks).map_err(|_| {
                    E::custom(format!(
                        "a number of blocks cannot be negative, got {blocks}"
                    ))
                })
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Span, E> {
                humantime::parse_duration(text).map(Span::Time).map_err(|error| {
                    E::custom(format!(
                        "\"{text}\" is not a duration ({error}): write one such as \"15m\" or \"1h\", or a number of blocks"
                    ))
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Holder {
        span: Span,
    }

    fn read(toml: &str) -> Result<Span, String> {
        toml::from_str::<Holder>(toml)
            .map(|h| h.span)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn spans_read_as_blocks_or_durations_and_write_back_alike() {
        assert_eq!(read("span = 128"), Ok(Span::Blocks(128)));
        assert_eq!(
            read("span = \"1h 30m\""),
            Ok(Span::Time(Duration::from_secs(5_400)))
        );
        assert!(
            read("span = -1")
                .expect_err("refused")
                .contains("cannot be negative")
        );
        assert!(
            read("span = \"soon\"")
                .expect_err("refused")
                .contains("is not a duration")
        );
        assert!(
            read("span = true")
                .expect_err("refused")
                .contains("a number of blocks or a duration")
        );
        for span in [Span::Blocks(7), Span::Time(Duration::from_secs(900))] {
            let text = toml::to_string(&Holder { span }).expect("writes");
            assert_eq!(read(&text), Ok(span), "{text}");
        }
        assert_eq!(Span::Time(Duration::from_secs(900)).to_string(), "\"15m\"");
        assert_eq!(Span::Time(Duration::from_secs(7_200)).to_string(), "\"2h\"");
        assert_eq!(duration_text(Duration::from_millis(450)), "450ms");
        assert_eq!(duration_text(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn a_span_of_time_is_the_same_reach_on_every_cadence() {
        let hour = Span::Time(Duration::from_secs(3_600));
        assert_eq!(hour.blocks(cadence(1)), 300);
        assert_eq!(hour.blocks(cadence(137)), 1_800);
        assert_eq!(hour.blocks(cadence(56)), 8_000);
        assert_eq!(
            Span::Time(Duration::from_secs(3_601)).blocks(cadence(1)),
            301,
            "a part-block counts whole"
        );
        assert_eq!(
            Span::Time(Duration::from_secs(60)).blocks(Duration::from_secs(3_600)),
            MIN_TIME_SPAN_BLOCKS,
            "a duration holds a few blocks however long they are"
        );
        assert_eq!(Span::Blocks(64).blocks(cadence(56)), 64);
    }
}
