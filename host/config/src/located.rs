//! Where in the file a configuration error is: the checks after the TOML
//! is read ([`super::Config::validate`]) name the offending key as an
//! [`Invalid`] (`chains.eth.nodes[1].url`), and [`locate`] finds the line
//! that writes it, or the nearest table above it that is written (a key
//! left out is reported at its table's header).

use std::path::Path;

use toml::de::{DeTable, DeValue};

/// A value the checks refuse: the key it is at, and why.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// Dotted, with `[n]` for an array's entries: `chains.eth.nodes[1].url`.
    pub key: String,
    pub message: String,
}

/// The error for `key`, refused for `message` (which names the key, as
/// every message the checks give does).
pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Invalid {
        key: key.into(),
        message: message.into(),
    })
}

/// `error`, with the file and line of the key it names when it is an
/// [`Invalid`] (else the file alone).
pub fn locate(error: anyhow::Error, path: &Path, text: &str) -> anyhow::Error {
    let line = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Invalid>())
        .and_then(|invalid| Some((line_of(text, &invalid.key)?, invalid.key.clone())));
    match line {
        Some((line, key)) => error.context(format!("in config {}:{line} ({key})", path.display())),
        None => error.context(format!("in config {}", path.display())),
    }
}

/// One step of a key's path.
#[derive(Debug, PartialEq, Eq)]
enum Part<'k> {
    Key(&'k str),
    Index(usize),
}

/// `chains.eth.nodes[1].url` as its steps.
fn parts(key: &str) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    for dotted in key.split('.') {
        let (name, indexes) = dotted
            .split_once('[')
            .map_or((dotted, ""), |(name, rest)| (name, rest));
        if !name.is_empty() {
            parts.push(Part::Key(name));
        }
        for index in indexes.split('[') {
            if let Some(Ok(index)) = index.strip_suffix(']').map(str::parse) {
                parts.push(Part::Index(index));
            }
        }
    }
    parts
}

/// The 1-based line of the deepest step of `key` that `text` writes.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let mut at: Option<&DeValue<'_>> = None;
    let mut table = Some(root.get_ref());
    let mut start = None;
    for part in parts(key) {
        let found = match (part, table, at) {
            (Part::Key(name), Some(table), _) => table
                .iter()
                .find(|(held, _)| held.get_ref().as_ref() == name)
                .map(|(held, value)| (held.span().start, value)),
            (Part::Index(index), _, Some(DeValue::Array(array))) => {
                array.get(index).map(|value| (value.span().start, value))
            }
            _ => None,
        };
        let Some((position, value)) = found else {
            break;
        };
        start = Some(position);
        at = Some(value.get_ref());
        table = value.get_ref().as_table();
    }
    Some(text[..start?].matches('\n').count() + 1)
}

/// `value` of `key`, refused unless within `low..=high`.
pub(crate) fn in_range(key: &str, value: u64, low: u64, high: u64) -> anyhow::Result<()> {
    if (low..=high).contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("{key} must be between {low} and {high}, got {value}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "listen = \"127.0.0.1:8080\"\n\n[chains.base]\nagreement = \"quorum\"\nquorum = 3\n\n[[chains.base.nodes]]\nurl = \"ws://a:8545\"\n\n[[chains.base.nodes]]\nname = \"b\"\n";

    #[test]
    fn a_key_is_found_at_its_line_or_its_table_s() {
        assert_eq!(
            parts("chains.base.nodes[1].url"),
            [
                Part::Key("chains"),
                Part::Key("base"),
                Part::Key("nodes"),
                Part::Index(1),
                Part::Key("url")
            ]
        );
        assert_eq!(line_of(TEXT, "listen"), Some(1));
        assert_eq!(line_of(TEXT, "chains.base.quorum"), Some(5));
        assert_eq!(line_of(TEXT, "chains.base.nodes[0].url"), Some(8));
        // Left out: the entry that lacks it.
        assert_eq!(line_of(TEXT, "chains.base.nodes[1].url"), Some(10));
        assert_eq!(line_of(TEXT, "chains.base.chain_id"), Some(3));
        assert_eq!(line_of(TEXT, "webhooks.queue"), None);
    }

    #[test]
    fn an_invalid_key_s_error_names_the_file_and_line() {
        let path = Path::new("chainsieve.toml");
        let error = invalid(
            "chains.base.quorum",
            "chains.base.quorum must be between 1 and 2, got 3",
        );
        let located = format!("{:#}", locate(error, path, TEXT));
        assert_eq!(
            located,
            "in config chainsieve.toml:5 (chains.base.quorum): chains.base.quorum must be between 1 and 2, got 3"
        );
        let other = format!(
            "{:#}",
            locate(anyhow::anyhow!("no chains configured"), path, TEXT)
        );
        assert_eq!(other, "in config chainsieve.toml: no chains configured");
    }
}
