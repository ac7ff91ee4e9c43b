//! Layout 2 (contract 0.2.0): batches that carry only the fields a component
//! declares. The host writes one per distinct field set; a component reads
//! it through views whose type names the fields it declared, so reading
//! any other fails to compile (`const` assertions, checked when the view
//! is used) instead of answering wrong. `wit/BATCH_LAYOUT.md` is the prose
//! version; the tests below keep the two in step.
//!
//! ```compile_fail,E0080
//! use chainsieve_filter_core::projection::{ProjectedBatch, tx_fields};
//!
//! // Declares `from` only, then reads `to`: this does not compile.
//! fn receivers(batch: &ProjectedBatch<'_, { tx_fields::FROM }>) -> usize {
//!     let transactions = batch.transactions().into_iter().flatten();
//!     transactions.filter(|tx| tx.to().is_some()).count()
//! }
//! # receivers(&ProjectedBatch::parse(&[]).unwrap());
//! ```
//!
//! A record starts with a flags byte (`removed`, and for transactions
//! whether `to` and a selector are present), then the declared fields in
//! the order of the WIT `flags` they are declared with, packed. Header
//! records are small and always whole (layout 1's).

use crate::layout::{
    Buffer, HeadFields, HeadView, LayoutError, LogFields, Parts, Source, TxFields, array,
    blob_field, get_u32, get_u64, head, header, put_u32, put_u64,
};

/// The layout version written in every layout-2 header.
pub const VERSION: u8 = 2;
/// Bytes before the first record: version, source, reserved, record count,
/// field set, record length.
pub const HEADER_LEN: usize = 16;

/// Transaction fields, as bits in the order of the WIT `transaction-fields`.
pub mod tx_fields {
    pub const HASH: u32 = 1 << 0;
    pub const FROM: u32 = 1 << 1;
    pub const TO: u32 = 1 << 2;
    pub const VALUE: u32 = 1 << 3;
    pub const NONCE: u32 = 1 << 4;
    pub const GAS: u32 = 1 << 5;
    pub const TRANSACTION_TYPE: u32 = 1 << 6;
    pub const BLOCK_NUMBER: u32 = 1 << 7;
    pub const INPUT: u32 = 1 << 8;
    pub const SELECTOR: u32 = 1 << 9;
    /// Every field.
    pub const ALL: u32 = (1 << 10) - 1;
    /// Bytes of each field in the record, by bit: `input` is an offset and
    /// a length into the blob.
    pub(crate) const SIZES: [usize; 10] = [32, 20, 20, 32, 8, 8, 1, 8, 8, 4];
    /// Flags byte: `to` present, removed, selector present.
    pub(crate) const HAS_TO: u8 = 1;
    pub(crate) const REMOVED: u8 = 2;
    pub(crate) const HAS_SELECTOR: u8 = 4;
}

/// Log fields, as bits in the order of the WIT `log-fields`.
pub mod log_fields {
    pub const ADDRESS: u32 = 1 << 0;
    pub const TOPICS: u32 = 1 << 1;
    pub const DATA: u32 = 1 << 2;
    pub const BLOCK_NUMBER: u32 = 1 << 3;
    pub const LOG_INDEX: u32 = 1 << 4;
    pub const TRANSACTION_INDEX: u32 = 1 << 5;
    pub const TRANSACTION_HASH: u32 = 1 << 6;
    /// Every field.
    pub const ALL: u32 = (1 << 7) - 1;
    /// `topics` is the count (one byte) and four 32-byte slots; `data` an
    /// offset and a length into the blob.
    pub(crate) const SIZES: [usize; 7] = [20, 129, 8, 8, 4, 4, 32];
    /// Flags byte: removed.
    pub(crate) const REMOVED: u8 = 1;
}

/// The source a layout-2 batch says it carries.
pub fn source_of(bytes: &[u8]) -> Result<Source, LayoutError> {
    match bytes {
        [VERSION, code, ..] => Source::from_code(*code).ok_or(LayoutError::UnknownSource(*code)),
        [version, ..] => Err(LayoutError::UnknownVersion(*version)),
        [] => Err(LayoutError::TooShort {
            len: 0,
            needed: HEADER_LEN,
        }),
    }
}

/// Where `field` (one bit) starts in a record carrying `fields`: after the
/// flags byte and every declared field before it.
pub const fn offset(sizes: &[usize], fields: u32, field: u32) -> usize {
    let mut at = 1;
    let mut bit = 0;
    while bit < sizes.len() {
        if 1 << bit == field {
            return at;
        }
        if fields & (1 << bit) != 0 {
            at += sizes[bit];
        }
        bit += 1;
    }
    at
}

/// The sizes of `source`'s fields, by bit (heads: none to choose).
const fn sizes(source: Source) -> &'static [usize] {
    match source {
        Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle => {
            &tx_fields::SIZES
        }
        Source::Logs => &log_fields::SIZES,
        Source::Heads => &[],
    }
}

/// Bytes of one record of `source` carrying `fields`.
pub const fn record_len(source: Source, fields: u32) -> usize {
    if let Source::Heads = source {
        return head::LEN;
    }
    let sizes = sizes(source);
    offset(sizes, fields, 1 << sizes.len())
}

/// The fields of `source` there are (heads: none to choose).
pub const fn all_fields(source: Source) -> u32 {
    match source {
        Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle => {
            tx_fields::ALL
        }
        Source::Logs => log_fields::ALL,
        Source::Heads => 0,
    }
}

// ---------------------------------------------------------------- writing

/// Writes one layout-2 batch carrying `fields` of each event.
#[derive(Debug)]
pub struct ProjectedWriter {
    buffer: Buffer,
    fields: u32,
    /// Where field bit `i` sits in a record ([`offset`]), worked out once
    /// for the field set instead of per event.
    places: [usize; 10],
}

impl ProjectedWriter {
    /// A batch of `source` events carrying `fields` (only the fields the
    /// source has are kept; heads carry none to choose).
    pub fn new(source: Source, fields: u32, capacity: usize) -> Self {
        let fields = fields & all_fields(source);
        let record_len = record_len(source, fields);
        let mut header = [VERSION, source.code(), 0, 0, 0, 0, 0, 0].to_vec();
        header.extend_from_slice(&fields.to_le_bytes());
        header.extend_from_slice(&(record_len as u32).to_le_bytes());
        let places = std::array::from_fn(|bit| offset(sizes(source), fields, 1 << bit));
        Self {
            buffer: Buffer::new(source, &header, record_len, capacity),
            fields,
            places,
        }
    }

    /// The fields each record carries.
    pub fn fields(&self) -> u32 {
        self.fields
    }

    /// Appends a transaction's declared fields.
    pub fn push_tx(&mut self, tx: &TxFields<'_>) {
        use tx_fields::*;
        let is_tx = Source::MinedTransactions.same_kind(self.buffer.source());
        let fields = self.fields;
        let input = (fields & INPUT != 0).then(|| self.buffer.push_blob(tx.input));
        let r = self.buffer.record(is_tx);
        let selector = tx.input.first_chunk::<4>();
        r[0] = (u8::from(tx.to.is_some()) * HAS_TO)
            | (u8::from(tx.removed) * REMOVED)
            | (u8::from(selector.is_some()) * HAS_SELECTOR);
        let places = self.places;
        let place = |field: u32| places[field.trailing_zeros() as usize];
        let declared = |field| fields & field != 0;
        if declared(HASH) {
            r[place(HASH)..][..32].copy_from_slice(tx.hash);
        }
        if declared(FROM) {
            r[place(FROM)..][..20].copy_from_slice(tx.from);
        }
        if let (true, Some(to)) = (declared(TO), tx.to) {
            r[place(TO)..][..20].copy_from_slice(to);
        }
        if declared(VALUE) {
            r[place(VALUE)..][..32].copy_from_slice(tx.value);
        }
        if declared(NONCE) {
            put_u64(r, place(NONCE), tx.nonce);
        }
        if declared(GAS) {
            put_u64(r, place(GAS), tx.gas);
        }
        if declared(TRANSACTION_TYPE) {
            r[place(TRANSACTION_TYPE)] = tx.tx_type;
        }
        if declared(BLOCK_NUMBER) {
            put_u64(r, place(BLOCK_NUMBER), tx.block_number);
        }
        if let Some((input_offset, input_len)) = input {
            put_u32(r, place(INPUT), input_offset);
            put_u32(r, place(INPUT) + 4, input_len);
        }
        if let (true, Some(selector)) = (declared(SELECTOR), selector) {
            r[place(SELECTOR)..][..4].copy_from_slice(selector);
        }
    }

    /// Appends a log's declared fields. Topics past the fourth are not
    /// representable in the EVM and are refused.
    pub fn push_log(&mut self, l: &LogFields<'_>) {
        use log_fields::*;
        assert!(l.topics.len() <= 4, "a log has at most 4 topics");
        let fields = self.fields;
        let data = (fields & DATA != 0).then(|| self.buffer.push_blob(l.data));
        let is_logs = self.buffer.source() == Source::Logs;
        let r = self.buffer.record(is_logs);
        r[0] = u8::from(l.removed) * REMOVED;
        let places = self.places;
        let place = |field: u32| places[field.trailing_zeros() as usize];
        let declared = |field| fields & field != 0;
        if declared(ADDRESS) {
            r[place(ADDRESS)..][..20].copy_from_slice(l.address);
        }
        if declared(TOPICS) {
            let at = place(TOPICS);
            r[at] = l.topics.len() as u8;
            for (i, topic) in l.topics.iter().enumerate() {
                r[at + 1 + 32 * i..][..32].copy_from_slice(topic);
            }
        }
        if let Some((data_offset, data_len)) = data {
            put_u32(r, place(DATA), data_offset);
            put_u32(r, place(DATA) + 4, data_len);
        }
        if declared(BLOCK_NUMBER) {
            put_u64(r, place(BLOCK_NUMBER), l.block_number);
        }
        if declared(LOG_INDEX) {
            put_u32(r, place(LOG_INDEX), l.log_index);
        }
        if declared(TRANSACTION_INDEX) {
            put_u32(r, place(TRANSACTION_INDEX), l.transaction_index);
        }
        if declared(TRANSACTION_HASH) {
            r[place(TRANSACTION_HASH)..][..32].copy_from_slice(l.transaction_hash);
        }
    }

    /// Appends a header (always whole).
    pub fn push_head(&mut self, h: &HeadFields<'_>) {
        self.buffer.push_head(h);
    }

    /// The finished buffer: header, records, blob.
    pub fn finish(self) -> Vec<u8> {
        self.buffer.finish()
    }
}

impl crate::layout::EventWriter for ProjectedWriter {
    fn push_tx(&mut self, tx: &TxFields<'_>) {
        ProjectedWriter::push_tx(self, tx)
    }
    fn push_head(&mut self, h: &HeadFields<'_>) {
        ProjectedWriter::push_head(self, h)
    }
    fn push_log(&mut self, l: &LogFields<'_>) {
        ProjectedWriter::push_log(self, l)
    }
    fn finish(self) -> Vec<u8> {
        ProjectedWriter::finish(self)
    }
}

// ---------------------------------------------------------------- reading

/// A layout-2 batch whose header is checked, carrying the fields `F` its
/// reader declared. As with layout 1, a variable field pointing outside
/// the blob reads as empty, so no view can panic.
#[derive(Clone, Copy, Debug)]
pub struct ProjectedBatch<'a, const F: u32> {
    source: Source,
    records: &'a [u8],
    blob: &'a [u8],
}

impl<'a, const F: u32> ProjectedBatch<'a, F> {
    /// Reads the header; a batch carrying other fields than `F` is refused.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LayoutError> {
        let Records {
            source,
            fields,
            records,
            blob,
            ..
        } = Records::parse(bytes)?;
        let declared = F & all_fields(source);
        if fields != declared {
            return Err(LayoutError::Fields {
                declared,
                carried: fields,
            });
        }
        Ok(Self {
            source,
            records,
            blob,
        })
    }

    fn of_kind(&self, expected: Source) -> Result<&'a [u8], LayoutError> {
        expected.check_kind(self.source)?;
        Ok(self.records)
    }

    /// The transactions of a pending or mined batch.
    pub fn transactions(
        &self,
    ) -> Result<impl Iterator<Item = ProjectedTx<'a, F>> + use<'a, F>, LayoutError> {
        let blob = self.blob;
        let records = self.of_kind(Source::MinedTransactions)?;
        let len = record_len(Source::MinedTransactions, F & tx_fields::ALL);
        Ok(records
            .chunks_exact(len)
            .map(move |r| ProjectedTx { r, blob }))
    }

    /// The headers of a heads batch.
    pub fn heads(&self) -> Result<impl Iterator<Item = HeadView<'a>> + use<'a, F>, LayoutError> {
        let (records, _) = self.of_kind(Source::Heads)?.as_chunks();
        Ok(records.iter().map(|r| HeadView { r }))
    }

    /// The logs of a logs batch.
    pub fn logs(
        &self,
    ) -> Result<impl Iterator<Item = ProjectedLog<'a, F>> + use<'a, F>, LayoutError> {
        let blob = self.blob;
        let records = self.of_kind(Source::Logs)?;
        let len = record_len(Source::Logs, F & log_fields::ALL);
        Ok(records
            .chunks_exact(len)
            .map(move |r| ProjectedLog { r, blob }))
    }
}

/// A layout-2 batch read with whatever fields it carries: what the host
/// reads of a batch it narrows to the events some subscription can match
/// (`crate::reach`).
#[derive(Clone, Copy, Debug)]
pub struct Records<'a> {
    pub source: Source,
    /// The fields each record carries.
    pub fields: u32,
    /// Bytes of each record.
    pub record_len: usize,
    /// The records, end to end.
    pub records: &'a [u8],
    /// What the variable-length fields point into.
    pub blob: &'a [u8],
}

impl<'a> Records<'a> {
    /// Reads and checks the header.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LayoutError> {
        let (header, source) = header::<HEADER_LEN>(bytes, VERSION)?;
        let count = get_u32(header, 4);
        let fields = get_u32(header, 8);
        let record_len = record_len(source, fields);
        if get_u32(header, 12) as usize != record_len {
            return Err(LayoutError::TooShort {
                len: bytes.len(),
                needed: usize::MAX,
            });
        }
        let parts = Parts::split(bytes, HEADER_LEN, count, record_len)?;
        Ok(Self {
            source,
            fields,
            record_len,
            records: parts.records,
            blob: parts.blob,
        })
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.records.len() / self.record_len
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records, one slice each.
    #[inline]
    pub fn iter(&self) -> std::slice::ChunksExact<'a, u8> {
        self.records.chunks_exact(self.record_len)
    }

    /// Where `field` (one bit, carried) starts in each record.
    pub fn offset(&self, field: u32) -> usize {
        offset(sizes(self.source), self.fields, field)
    }

    /// The same batch holding only the records at `indices` (in that
    /// order): the same header but for the count, and a blob of only their
    /// variable-length field (input or data), its offsets rewritten, so a
    /// narrowed call copies no other event's bytes.
    pub fn subset(&self, indices: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + indices.len() * self.record_len);
        out.extend_from_slice(&[VERSION, self.source.code(), 0, 0]);
        out.extend_from_slice(&(indices.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.fields.to_le_bytes());
        out.extend_from_slice(&(self.record_len as u32).to_le_bytes());
        for &index in indices {
            let start = index as usize * self.record_len;
            out.extend_from_slice(&self.records[start..start + self.record_len]);
        }
        let variable = match self.source {
            Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle => {
                tx_fields::INPUT
            }
            Source::Logs => log_fields::DATA,
            Source::Heads => 0,
        };
        if self.fields & variable == 0 {
            return out;
        }
        let at = self.offset(variable);
        let mut blob = Vec::new();
        for record in out[HEADER_LEN..].chunks_exact_mut(self.record_len) {
            let bytes = blob_field(self.blob, get_u32(record, at), get_u32(record, at + 4));
            put_u32(record, at, blob.len() as u32);
            put_u32(record, at + 4, bytes.len() as u32);
            blob.extend_from_slice(bytes);
        }
        out.extend_from_slice(&blob);
        out
    }
}

/// Reads the fields [`crate::Key`]s are made of from the records of one
/// batch, whatever fields it carries: `None` where a record lacks the
/// value (a creation's receiver, a short input's selector, a missing
/// topic) or the batch the field.
#[derive(Clone, Copy, Debug)]
pub struct KeyFields {
    from: Option<usize>,
    to: Option<usize>,
    selector: Option<usize>,
    address: Option<usize>,
    topics: Option<usize>,
}

impl KeyFields {
    /// Where `records`' key fields sit.
    pub fn of(records: &Records<'_>) -> Self {
        let at = |kind: Source, field: u32| {
            (kind.same_kind(records.source) && records.fields & field != 0)
                .then(|| records.offset(field))
        };
        let tx = Source::MinedTransactions;
        Self {
            from: at(tx, tx_fields::FROM),
            to: at(tx, tx_fields::TO),
            selector: at(tx, tx_fields::SELECTOR),
            address: at(Source::Logs, log_fields::ADDRESS),
            topics: at(Source::Logs, log_fields::TOPICS),
        }
    }

    /// A transaction's sender.
    #[inline]
    pub fn sender<'r>(&self, record: &'r [u8]) -> Option<&'r [u8; 20]> {
        self.from.map(|at| array(record, at))
    }

    /// A transaction's receiver; `None` for a contract creation.
    #[inline]
    pub fn receiver<'r>(&self, record: &'r [u8]) -> Option<&'r [u8; 20]> {
        self.to
            .filter(|_| record[0] & tx_fields::HAS_TO != 0)
            .map(|at| array(record, at))
    }

    /// A transaction's selector; `None` when its input is shorter.
    #[inline]
    pub fn selector<'r>(&self, record: &'r [u8]) -> Option<&'r [u8; 4]> {
        self.selector
            .filter(|_| record[0] & tx_fields::HAS_SELECTOR != 0)
            .map(|at| array(record, at))
    }

    /// The contract that emitted a log.
    #[inline]
    pub fn emitter<'r>(&self, record: &'r [u8]) -> Option<&'r [u8; 20]> {
        self.address.map(|at| array(record, at))
    }

    /// Topic `i`, if the log has that many.
    #[inline]
    pub fn topic<'r>(&self, record: &'r [u8], i: usize) -> Option<&'r [u8; 32]> {
        self.topics
            .filter(|&at| i < usize::from(record[at]).min(4))
            .map(|at| array(record, at + 1 + 32 * i))
    }
}

/// Fails to compile where a view reads a field its type does not declare.
macro_rules! declared {
    ($fields:ident, $field:path, $name:literal) => {
        const {
            assert!(
                $fields & $field != 0,
                concat!(
                    "this filter reads `",
                    $name,
                    "`, which its view type does not declare: add it to the fields"
                )
            )
        }
    };
}

/// A transaction in a layout-2 batch, carrying the fields `F`; the same
/// methods as layout 1's `TxView`.
#[derive(Clone, Copy, Debug)]
pub struct ProjectedTx<'a, const F: u32> {
    r: &'a [u8],
    blob: &'a [u8],
}

impl<'a, const F: u32> ProjectedTx<'a, F> {
    const fn at(field: u32) -> usize {
        offset(&tx_fields::SIZES, F, field)
    }
    pub fn hash(&self) -> &'a [u8; 32] {
        declared!(F, tx_fields::HASH, "hash");
        array(self.r, Self::at(tx_fields::HASH))
    }
    #[inline(always)]
    pub fn from(&self) -> &'a [u8; 20] {
        declared!(F, tx_fields::FROM, "from");
        array(self.r, Self::at(tx_fields::FROM))
    }
    /// The receiver; `None` for a contract creation.
    #[inline(always)]
    pub fn to(&self) -> Option<&'a [u8; 20]> {
        declared!(F, tx_fields::TO, "to");
        (self.r[0] & tx_fields::HAS_TO != 0).then(|| array(self.r, Self::at(tx_fields::TO)))
    }
    /// True for a transaction of an orphaned block, re-sent after a reorg.
    pub fn removed(&self) -> bool {
        self.r[0] & tx_fields::REMOVED != 0
    }
    pub fn tx_type(&self) -> u8 {
        declared!(F, tx_fields::TRANSACTION_TYPE, "transaction-type");
        self.r[Self::at(tx_fields::TRANSACTION_TYPE)]
    }
    /// The value in wei, big-endian.
    pub fn value(&self) -> &'a [u8; 32] {
        declared!(F, tx_fields::VALUE, "value");
        array(self.r, Self::at(tx_fields::VALUE))
    }
    pub fn nonce(&self) -> u64 {
        declared!(F, tx_fields::NONCE, "nonce");
        get_u64(self.r, Self::at(tx_fields::NONCE))
    }
    pub fn gas(&self) -> u64 {
        declared!(F, tx_fields::GAS, "gas");
        get_u64(self.r, Self::at(tx_fields::GAS))
    }
    /// The block number, 0 while pending.
    pub fn block_number(&self) -> u64 {
        declared!(F, tx_fields::BLOCK_NUMBER, "block-number");
        get_u64(self.r, Self::at(tx_fields::BLOCK_NUMBER))
    }
    pub fn input(&self) -> &'a [u8] {
        declared!(F, tx_fields::INPUT, "input");
        let at = Self::at(tx_fields::INPUT);
        blob_field(self.blob, get_u32(self.r, at), get_u32(self.r, at + 4))
    }
    /// The 4-byte method selector, if the input has one.
    #[inline(always)]
    pub fn selector(&self) -> Option<[u8; 4]> {
        declared!(F, tx_fields::SELECTOR, "selector");
        (self.r[0] & tx_fields::HAS_SELECTOR != 0)
            .then(|| *array(self.r, Self::at(tx_fields::SELECTOR)))
    }
}

/// A log in a layout-2 batch, carrying the fields `F`; the same methods as
/// layout 1's `LogView`.
#[derive(Clone, Copy, Debug)]
pub struct ProjectedLog<'a, const F: u32> {
    r: &'a [u8],
    blob: &'a [u8],
}

impl<'a, const F: u32> ProjectedLog<'a, F> {
    const fn at(field: u32) -> usize {
        offset(&log_fields::SIZES, F, field)
    }
    #[inline(always)]
    pub fn address(&self) -> &'a [u8; 20] {
        declared!(F, log_fields::ADDRESS, "address");
        array(self.r, Self::at(log_fields::ADDRESS))
    }
    #[inline(always)]
    pub fn topic_count(&self) -> usize {
        declared!(F, log_fields::TOPICS, "topics");
        usize::from(self.r[Self::at(log_fields::TOPICS)]).min(4)
    }
    /// Topic `i`, if the log has that many.
    #[inline(always)]
    pub fn topic(&self, i: usize) -> Option<&'a [u8; 32]> {
        (i < self.topic_count()).then(|| array(self.r, Self::at(log_fields::TOPICS) + 1 + 32 * i))
    }
    pub fn topics(&self) -> impl Iterator<Item = &'a [u8; 32]> + 'a {
        let (r, at) = (self.r, Self::at(log_fields::TOPICS));
        (0..self.topic_count()).map(move |i| array(r, at + 1 + 32 * i))
    }
    pub fn data(&self) -> &'a [u8] {
        declared!(F, log_fields::DATA, "data");
        let at = Self::at(log_fields::DATA);
        blob_field(self.blob, get_u32(self.r, at), get_u32(self.r, at + 4))
    }
    /// True for a log of an orphaned block, re-sent after a reorg.
    pub fn removed(&self) -> bool {
        self.r[0] & log_fields::REMOVED != 0
    }
    pub fn block_number(&self) -> u64 {
        declared!(F, log_fields::BLOCK_NUMBER, "block-number");
        get_u64(self.r, Self::at(log_fields::BLOCK_NUMBER))
    }
    pub fn log_index(&self) -> u32 {
        declared!(F, log_fields::LOG_INDEX, "log-index");
        get_u32(self.r, Self::at(log_fields::LOG_INDEX))
    }
    pub fn transaction_index(&self) -> u32 {
        declared!(F, log_fields::TRANSACTION_INDEX, "transaction-index");
        get_u32(self.r, Self::at(log_fields::TRANSACTION_INDEX))
    }
    pub fn transaction_hash(&self) -> &'a [u8; 32] {
        declared!(F, log_fields::TRANSACTION_HASH, "transaction-hash");
        array(self.r, Self::at(log_fields::TRANSACTION_HASH))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Batch, TxView};

    const SOME: u32 = tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR | tx_fields::VALUE;

    fn sample_tx<'a>(input: &'a [u8], to: Option<&'a [u8; 20]>) -> TxFields<'a> {
        TxFields {
            hash: &[7; 32],
            from: &[1; 20],
            to,
            tx_type: 2,
            value: &[9; 32],
            nonce: 5,
            gas: 21_000,
            block_number: 42,
            input,
            removed: true,
        }
    }

    /// Every field written with all declared reads back as layout 1 reads
    /// it; with some declared, the record holds only those.
    #[test]
    fn transactions_read_back_as_in_layout_1() {
        let txs = [
            sample_tx(&[0xa9, 0x05, 0x9c, 0xbb, 1, 2], Some(&[3; 20])),
            sample_tx(&[1, 2], None),
        ];
        let mut whole = ProjectedWriter::new(Source::MinedTransactions, tx_fields::ALL, 2);
        let mut old = crate::layout::BatchWriter::new(Source::MinedTransactions, 2);
        for tx in &txs {
            whole.push_tx(tx);
            old.push_tx(tx);
        }
        let (whole, old) = (whole.finish(), old.finish());
        let whole = ProjectedBatch::<{ tx_fields::ALL }>::parse(&whole).expect("parses");
        let old = Batch::parse(&old).expect("parses");
        let new: Vec<_> = whole.transactions().expect("transactions").collect();
        let old: Vec<_> = old.transactions().expect("transactions").collect();
        assert_eq!((new.len(), old.len()), (2, 2), "both read every record");
        for (new, old) in new.into_iter().zip(old) {
            let old: TxView<'_> = old;
            assert_eq!(new.hash(), old.hash());
            assert_eq!(new.from(), old.from());
            assert_eq!(new.to(), old.to());
            assert_eq!(new.removed(), old.removed());
            assert_eq!(new.tx_type(), old.tx_type());
            assert_eq!(new.value(), old.value());
            assert_eq!(
                (new.nonce(), new.gas(), new.block_number()),
                (old.nonce(), old.gas(), old.block_number())
            );
            assert_eq!(new.input(), old.input());
            assert_eq!(new.selector(), old.selector());
        }

        let mut some = ProjectedWriter::new(Source::PendingTransactions, SOME, 2);
        txs.iter().for_each(|tx| some.push_tx(tx));
        let bytes = some.finish();
        // The flags byte, from, to, value, selector; no blob (no input).
        assert_eq!(bytes.len(), HEADER_LEN + 2 * (1 + 20 + 20 + 32 + 4));
        let batch = ProjectedBatch::<SOME>::parse(&bytes).expect("parses");
        let read: Vec<_> = batch
            .transactions()
            .expect("transactions")
            .map(|tx| {
                (
                    tx.from()[0],
                    tx.to().map(|to| to[0]),
                    tx.selector(),
                    tx.value()[0],
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                (1, Some(3), Some([0xa9, 0x05, 0x9c, 0xbb]), 9),
                (1, None, None, 9)
            ]
        );
    }

    #[test]
    fn logs_carry_their_declared_fields() {
        const READ: u32 = log_fields::ADDRESS | log_fields::TOPICS | log_fields::DATA;
        let topics = [[4; 32], [5; 32]];
        let log = LogFields {
            address: &[6; 20],
            topics: &topics,
            data: &[1, 2, 3],
            block_number: 7,
            log_index: 8,
            transaction_index: 9,
            transaction_hash: &[10; 32],
            removed: false,
        };
        let mut writer = ProjectedWriter::new(Source::Logs, READ, 1);
        writer.push_log(&log);
        let bytes = writer.finish();
        assert_eq!(bytes.len(), HEADER_LEN + 1 + 20 + 129 + 8 + 3);
        let batch = ProjectedBatch::<READ>::parse(&bytes).expect("parses");
        let read = batch.logs().expect("logs").next().expect("one log");
        assert_eq!(read.address(), &[6; 20]);
        assert_eq!(read.topics().collect::<Vec<_>>(), [&[4; 32], &[5; 32]]);
        assert_eq!(read.topic(2), None);
        assert_eq!(read.data(), [1, 2, 3]);
        assert!(!read.removed());
    }

    /// A subset of a batch reads as the chosen events, in the given order,
    /// variable-length fields included (and no other event's); key fields
    /// read from any field set.
    #[test]
    fn a_subset_reads_as_the_chosen_events() {
        const READ: u32 = log_fields::ADDRESS | log_fields::TOPICS | log_fields::DATA;
        let mut writer = ProjectedWriter::new(Source::Logs, READ, 3);
        for i in 0..3u8 {
            writer.push_log(&LogFields {
                address: &[i; 20],
                topics: &[[i; 32]; 5][..usize::from(i)],
                data: &[i; 4][..usize::from(i) + 1],
                block_number: 7,
                log_index: u32::from(i),
                transaction_index: 0,
                transaction_hash: &[0; 32],
                removed: false,
            });
        }
        let bytes = writer.finish();
        let records = Records::parse(&bytes).expect("parses");
        assert_eq!(records.len(), 3);
        let subset = records.subset(&[2, 0]);
        // Only the chosen logs' data is carried: 3 bytes and 1.
        assert_eq!(subset.len(), HEADER_LEN + 2 * records.record_len + 3 + 1);
        let batch = ProjectedBatch::<READ>::parse(&subset).expect("a batch");
        let read: Vec<_> = batch
            .logs()
            .expect("logs")
            .map(|log| (*log.address(), log.topic_count(), log.data().to_vec()))
            .collect();
        assert_eq!(read, [([2; 20], 2, vec![2; 3]), ([0; 20], 0, vec![0])]);
        let keys = KeyFields::of(&records);
        let first = records.iter().nth(2).expect("a third record");
        assert_eq!(keys.emitter(first), Some(&[2; 20]));
        assert_eq!(keys.topic(first, 1), Some(&[2; 32]));
        assert_eq!(keys.topic(first, 2), None);
        assert_eq!(keys.sender(first), None, "a log has no sender");
    }

    /// A reader refuses a batch carrying other fields than it declared,
    /// another layout, or fewer bytes than its header announces.
    #[test]
    fn a_batch_of_other_fields_is_refused() {
        let mut writer = ProjectedWriter::new(Source::MinedTransactions, SOME, 1);
        writer.push_tx(&sample_tx(&[], None));
        let bytes = writer.finish();
        assert_eq!(
            ProjectedBatch::<{ tx_fields::FROM }>::parse(&bytes).map(|_| ()),
            Err(LayoutError::Fields {
                declared: tx_fields::FROM,
                carried: SOME
            })
        );
        let old = crate::layout::BatchWriter::new(Source::Heads, 0).finish();
        assert!(matches!(
            ProjectedBatch::<0>::parse(&old),
            Err(LayoutError::UnknownVersion(1) | LayoutError::TooShort { .. })
        ));
        assert!(matches!(
            ProjectedBatch::<SOME>::parse(&bytes[..bytes.len() - 1]),
            Err(LayoutError::TooShort { .. })
        ));
    }

    #[test]
    fn heads_are_whole() {
        let head = HeadFields {
            number: 1,
            timestamp: 2,
            hash: &[3; 32],
            parent_hash: &[4; 32],
            miner: &[5; 20],
            gas_used: 6,
            gas_limit: 7,
            base_fee: 8,
        };
        let mut writer = ProjectedWriter::new(Source::Heads, tx_fields::ALL, 1);
        writer.push_head(&head);
        assert_eq!(writer.fields(), 0, "heads have no fields to choose");
        let bytes = writer.finish();
        let batch = ProjectedBatch::<0>::parse(&bytes).expect("parses");
        let read = batch.heads().expect("heads").next().expect("one head");
        assert_eq!((read.number(), read.base_fee()), (1, 8));
        assert_eq!(read.miner(), &[5; 20]);
    }

    /// The record sizes and offsets `wit/BATCH_LAYOUT.md` documents.
    #[test]
    fn offsets_match_the_documented_layout() {
        let doc = include_str!("../../../wit/BATCH_LAYOUT.md");
        assert!(doc.contains("# Layout version 2"));
        // The sizes as the document states them, read from it.
        let all_declared =
            |source, fields| format!("All declared: 1 + {} bytes", record_len(source, fields) - 1);
        for stated in [
            all_declared(Source::MinedTransactions, tx_fields::ALL),
            all_declared(Source::Logs, log_fields::ALL),
        ] {
            assert!(
                doc.contains(&stated),
                "BATCH_LAYOUT.md does not say {stated:?}"
            );
        }
        assert_eq!(
            record_len(Source::MinedTransactions, tx_fields::ALL),
            1 + 141
        );
        assert_eq!(record_len(Source::Logs, log_fields::ALL), 1 + 205);
        assert_eq!(record_len(Source::PendingTransactions, 0), 1);
        assert_eq!(
            offset(&tx_fields::SIZES, SOME, tx_fields::SELECTOR),
            1 + 20 + 20 + 32
        );
    }
}
