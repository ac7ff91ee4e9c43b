//! The packed batch layout shared by the host (which writes batches) and the
//! guests (which read them). One buffer holds a header, fixed-size records and
//! a blob for variable-length fields, so handing a batch to a component costs
//! one copy and no allocation per event. `wit/BATCH_LAYOUT.md` is the prose
//! version of this module; the two are kept in step by the tests below.

use std::fmt;

/// The layout version written in every batch header.
pub const VERSION: u8 = 1;
/// Bytes before the first record: version, source, reserved, record count.
pub const HEADER_LEN: usize = 8;

/// The event stream a batch carries; mirrors the WIT `source` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    PendingTransactions,
    MinedTransactions,
    Heads,
    Logs,
    /// The turns of transactions' lives (contract 0.3): transaction
    /// records, each of the transaction a turn tells of (no call data:
    /// its selector only).
    Lifecycle,
}

impl Source {
    pub(crate) const fn code(self) -> u8 {
        match self {
            Source::PendingTransactions => 0,
            Source::MinedTransactions => 1,
            Source::Heads => 2,
            Source::Logs => 3,
            Source::Lifecycle => 4,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => Source::PendingTransactions,
            1 => Source::MinedTransactions,
            2 => Source::Heads,
            3 => Source::Logs,
            4 => Source::Lifecycle,
            _ => return None,
        })
    }

    /// The stream's name in the WIT `source` enum.
    pub const fn name(self) -> &'static str {
        match self {
            Source::PendingTransactions => "pending-transactions",
            Source::MinedTransactions => "mined-transactions",
            Source::Heads => "heads",
            Source::Logs => "logs",
            Source::Lifecycle => "lifecycle",
        }
    }

    /// Whether the stream's events are of blocks (mined transactions,
    /// heads, logs): what history, `fromBlock` and finality apply to.
    /// Pending transactions and lifecycle turns are in no block of their
    /// own.
    pub const fn in_blocks(self) -> bool {
        matches!(
            self,
            Source::MinedTransactions | Source::Heads | Source::Logs
        )
    }

    /// Whether batches of `other` hold the same kind of record (pending
    /// and mined transactions and lifecycle turns do).
    pub const fn same_kind(self, other: Source) -> bool {
        matches!(
            (self, other),
            (
                Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle,
                Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle
            ) | (Source::Heads, Source::Heads)
                | (Source::Logs, Source::Logs)
        )
    }

    /// `Ok` when a batch of `found` holds this stream's kind of record.
    pub(crate) fn check_kind(self, found: Source) -> Result<(), LayoutError> {
        if self.same_kind(found) {
            Ok(())
        } else {
            Err(LayoutError::WrongSource {
                expected: self,
                found,
            })
        }
    }

    /// Size of one record of this stream.
    pub const fn record_len(self) -> usize {
        match self {
            Source::PendingTransactions | Source::MinedTransactions | Source::Lifecycle => tx::LEN,
            Source::Heads => head::LEN,
            Source::Logs => log::LEN,
        }
    }
}

/// Field offsets of a transaction record.
mod tx {
    pub const HASH: usize = 0; // 32
    pub const FROM: usize = 32; // 20
    pub const TO: usize = 52; // 20, zero for a contract creation
    pub const FLAGS: usize = 72; // u8: HAS_TO | REMOVED
    pub const TX_TYPE: usize = 73; // u8, then 2 reserved
    pub const VALUE: usize = 76; // 32, big-endian
    pub const NONCE: usize = 108; // u64
    pub const GAS: usize = 116; // u64
    pub const BLOCK_NUMBER: usize = 124; // u64, 0 while pending
    pub const INPUT_OFFSET: usize = 132; // u32 into the blob
    pub const INPUT_LEN: usize = 136; // u32
    pub const LEN: usize = 140;
    pub const HAS_TO: u8 = 1;
    pub const REMOVED: u8 = 2;
}

/// Field offsets of a block header record.
pub(crate) mod head {
    pub const NUMBER: usize = 0; // u64
    pub const TIMESTAMP: usize = 8; // u64
    pub const HASH: usize = 16; // 32
    pub const PARENT_HASH: usize = 48; // 32
    pub const MINER: usize = 80; // 20, then 4 reserved
    pub const GAS_USED: usize = 104; // u64
    pub const GAS_LIMIT: usize = 112; // u64
    pub const BASE_FEE: usize = 120; // u64, 0 before London
    pub const LEN: usize = 128;
}

/// Field offsets of a log record.
mod log {
    pub const ADDRESS: usize = 0; // 20
    pub const TOPIC_COUNT: usize = 20; // u8, 0..=4
    pub const FLAGS: usize = 21; // u8: REMOVED, then 2 reserved
    pub const TOPICS: usize = 24; // 4 x 32, unused slots zero
    pub const DATA_OFFSET: usize = 152; // u32 into the blob
    pub const DATA_LEN: usize = 156; // u32
    pub const BLOCK_NUMBER: usize = 160; // u64
    pub const LOG_INDEX: usize = 168; // u32
    pub const TX_INDEX: usize = 172; // u32
    pub const TX_HASH: usize = 176; // 32
    pub const LEN: usize = 208;
    pub const REMOVED: u8 = 1;
}

/// Why a buffer is not a readable batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    TooShort {
        len: usize,
        needed: usize,
    },
    UnknownVersion(u8),
    UnknownSource(u8),
    WrongSource {
        expected: Source,
        found: Source,
    },
    /// A layout-2 batch carrying other fields than its reader declared.
    Fields {
        declared: u32,
        carried: u32,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::TooShort { len, needed } => {
                write!(
                    f,
                    "batch of {len} bytes is shorter than the {needed} its header announces"
                )
            }
            LayoutError::UnknownVersion(v) => {
                write!(
                    f,
                    "batch layout version {v} is not the one this component reads (1 for contract 0.1.0, 2 for 0.2.0)"
                )
            }
            LayoutError::UnknownSource(s) => write!(f, "batch source code {s} is unknown"),
            LayoutError::Fields { declared, carried } => write!(
                f,
                "batch carries fields {carried:#x} but this filter declared {declared:#x}"
            ),
            LayoutError::WrongSource { expected, found } => {
                write!(
                    f,
                    "batch carries {found:?} but this filter consumes {expected:?}"
                )
            }
        }
    }
}

impl std::error::Error for LayoutError {}

// ---------------------------------------------------------------- writing

/// A transaction as the layout stores it.
#[derive(Clone, Copy, Debug)]
pub struct TxFields<'a> {
    pub hash: &'a [u8; 32],
    pub from: &'a [u8; 20],
    pub to: Option<&'a [u8; 20]>,
    pub tx_type: u8,
    pub value: &'a [u8; 32],
    pub nonce: u64,
    pub gas: u64,
    pub block_number: u64,
    pub input: &'a [u8],
    pub removed: bool,
}

impl<'a> TxFields<'a> {
    /// A pending EIP-1559 transaction from `from` to `to` (`None`: a
    /// contract creation) with `input`, every other field zero (gas
    /// 21,000): all a test of rules reading sender, receiver and selector
    /// needs.
    pub const fn call(from: &'a [u8; 20], to: Option<&'a [u8; 20]>, input: &'a [u8]) -> Self {
        Self {
            hash: &[0; 32],
            from,
            to,
            tx_type: 2,
            value: &[0; 32],
            nonce: 0,
            gas: 21_000,
            block_number: 0,
            input,
            removed: false,
        }
    }
}

/// A block header as the layout stores it.
#[derive(Clone, Copy, Debug)]
pub struct HeadFields<'a> {
    pub number: u64,
    pub timestamp: u64,
    pub hash: &'a [u8; 32],
    pub parent_hash: &'a [u8; 32],
    pub miner: &'a [u8; 20],
    pub gas_used: u64,
    pub gas_limit: u64,
    pub base_fee: u64,
}

impl HeadFields<'static> {
    /// Header `number` with every other field zero: all a test of a filter
    /// that reads no header field needs.
    pub const fn numbered(number: u64) -> Self {
        Self {
            number,
            timestamp: 0,
            hash: &[0; 32],
            parent_hash: &[0; 32],
            miner: &[0; 20],
            gas_used: 0,
            gas_limit: 0,
            base_fee: 0,
        }
    }
}

/// A log as the layout stores it.
#[derive(Clone, Copy, Debug)]
pub struct LogFields<'a> {
    pub address: &'a [u8; 20],
    pub topics: &'a [[u8; 32]],
    pub data: &'a [u8],
    pub block_number: u64,
    pub log_index: u32,
    pub transaction_index: u32,
    pub transaction_hash: &'a [u8; 32],
    pub removed: bool,
}

impl<'a> LogFields<'a> {
    /// A log of block 1 that `address` emitted with `topics`, no data and
    /// every other field zero: all a test of rules reading address and
    /// topics needs.
    pub const fn emitted(address: &'a [u8; 20], topics: &'a [[u8; 32]]) -> Self {
        Self {
            address,
            topics,
            data: &[],
            block_number: 1,
            log_index: 0,
            transaction_index: 0,
            transaction_hash: &[0; 32],
            removed: false,
        }
    }
}

/// What writes a batch, in either layout: the host encodes its events once
/// per layout (and field set) its components read.
pub trait EventWriter {
    fn push_tx(&mut self, tx: &TxFields<'_>);
    fn push_head(&mut self, h: &HeadFields<'_>);
    fn push_log(&mut self, l: &LogFields<'_>);
    /// The finished buffer: header, records, blob.
    fn finish(self) -> Vec<u8>;
}

impl EventWriter for BatchWriter {
    fn push_tx(&mut self, tx: &TxFields<'_>) {
        BatchWriter::push_tx(self, tx)
    }
    fn push_head(&mut self, h: &HeadFields<'_>) {
        BatchWriter::push_head(self, h)
    }
    fn push_log(&mut self, l: &LogFields<'_>) {
        BatchWriter::push_log(self, l)
    }
    fn finish(self) -> Vec<u8> {
        BatchWriter::finish(self)
    }
}

/// What a writer of either layout builds: the header, fixed-size records
/// and a blob for variable-length fields, joined by [`Buffer::finish`].
/// Offsets in records are relative to the blob start.
#[derive(Debug)]
pub(crate) struct Buffer {
    source: Source,
    record_len: usize,
    count: u32,
    /// The header, then the records.
    records: Vec<u8>,
    blob: Vec<u8>,
}

impl Buffer {
    /// A buffer for `capacity` records of `record_len` bytes after
    /// `header`, whose bytes 4-7 `finish` fills with the record count.
    pub(crate) fn new(source: Source, header: &[u8], record_len: usize, capacity: usize) -> Self {
        let mut records = Vec::with_capacity(header.len() + capacity * record_len);
        records.extend_from_slice(header);
        Self {
            source,
            record_len,
            count: 0,
            records,
            blob: Vec::new(),
        }
    }

    pub(crate) fn source(&self) -> Source {
        self.source
    }

    /// A new zeroed record, of a kind `source_ok` says the batch holds.
    pub(crate) fn record(&mut self, source_ok: bool) -> &mut [u8] {
        assert!(
            source_ok,
            "record kind does not match the batch source {:?}",
            self.source
        );
        let start = self.records.len();
        self.records.resize(start + self.record_len, 0);
        self.count += 1;
        &mut self.records[start..]
    }

    /// Appends a variable-length field; its offset and length.
    pub(crate) fn push_blob(&mut self, bytes: &[u8]) -> (u32, u32) {
        let offset = u32::try_from(self.blob.len()).expect("batch blob exceeds 4 GiB");
        let len = u32::try_from(bytes.len()).expect("field exceeds 4 GiB");
        self.blob.extend_from_slice(bytes);
        (offset, len)
    }

    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    /// The finished buffer: header, records, blob.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.records[4..8].copy_from_slice(&self.count.to_le_bytes());
        self.records.extend_from_slice(&self.blob);
        self.records
    }

    /// Appends a header, the same in every layout.
    pub(crate) fn push_head(&mut self, h: &HeadFields<'_>) {
        let is_heads = self.source == Source::Heads;
        write_head(self.record(is_heads), h);
    }
}

/// Writes one batch in layout 1.
#[derive(Debug)]
pub struct BatchWriter {
    buffer: Buffer,
}

impl BatchWriter {
    pub fn new(source: Source, capacity: usize) -> Self {
        let header = [VERSION, source.code(), 0, 0, 0, 0, 0, 0];
        Self {
            buffer: Buffer::new(source, &header, source.record_len(), capacity),
        }
    }

    pub fn source(&self) -> Source {
        self.buffer.source()
    }

    /// Appends a transaction; the batch must be a transaction batch.
    pub fn push_tx(&mut self, tx: &TxFields<'_>) {
        let is_tx = Source::MinedTransactions.same_kind(self.buffer.source());
        let (input_offset, input_len) = self.buffer.push_blob(tx.input);
        let r = self.buffer.record(is_tx);
        r[tx::HASH..tx::HASH + 32].copy_from_slice(tx.hash);
        r[tx::FROM..tx::FROM + 20].copy_from_slice(tx.from);
        let mut flags = 0;
        if let Some(to) = tx.to {
            r[tx::TO..tx::TO + 20].copy_from_slice(to);
            flags |= tx::HAS_TO;
        }
        if tx.removed {
            flags |= tx::REMOVED;
        }
        r[tx::FLAGS] = flags;
        r[tx::TX_TYPE] = tx.tx_type;
        r[tx::VALUE..tx::VALUE + 32].copy_from_slice(tx.value);
        put_u64(r, tx::NONCE, tx.nonce);
        put_u64(r, tx::GAS, tx.gas);
        put_u64(r, tx::BLOCK_NUMBER, tx.block_number);
        put_u32(r, tx::INPUT_OFFSET, input_offset);
        put_u32(r, tx::INPUT_LEN, input_len);
    }

    /// Appends a header; the batch must be a heads batch.
    pub fn push_head(&mut self, h: &HeadFields<'_>) {
        self.buffer.push_head(h);
    }

    /// Appends a log; the batch must be a logs batch. Topics past the fourth
    /// are not representable in the EVM and are refused.
    pub fn push_log(&mut self, l: &LogFields<'_>) {
        assert!(l.topics.len() <= 4, "a log has at most 4 topics");
        let (data_offset, data_len) = self.buffer.push_blob(l.data);
        let is_logs = self.buffer.source() == Source::Logs;
        let r = self.buffer.record(is_logs);
        r[log::ADDRESS..log::ADDRESS + 20].copy_from_slice(l.address);
        r[log::TOPIC_COUNT] = l.topics.len() as u8;
        r[log::FLAGS] = if l.removed { log::REMOVED } else { 0 };
        for (i, topic) in l.topics.iter().enumerate() {
            let start = log::TOPICS + 32 * i;
            r[start..start + 32].copy_from_slice(topic);
        }
        put_u32(r, log::DATA_OFFSET, data_offset);
        put_u32(r, log::DATA_LEN, data_len);
        put_u64(r, log::BLOCK_NUMBER, l.block_number);
        put_u32(r, log::LOG_INDEX, l.log_index);
        put_u32(r, log::TX_INDEX, l.transaction_index);
        r[log::TX_HASH..log::TX_HASH + 32].copy_from_slice(l.transaction_hash);
    }

    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The finished buffer: header, records, blob.
    pub fn finish(self) -> Vec<u8> {
        self.buffer.finish()
    }
}

/// A batch's record area and blob, cut at the length its header announces,
/// in either layout.
pub(crate) struct Parts<'a> {
    pub records: &'a [u8],
    pub blob: &'a [u8],
}

impl<'a> Parts<'a> {
    /// Cuts `bytes` after a header of `header_len` bytes into `count`
    /// records of `record_len` bytes and the blob; refused if shorter.
    pub(crate) fn split(
        bytes: &'a [u8],
        header_len: usize,
        count: u32,
        record_len: usize,
    ) -> Result<Self, LayoutError> {
        let too_short = |needed| LayoutError::TooShort {
            len: bytes.len(),
            needed,
        };
        let needed = (count as usize)
            .checked_mul(record_len)
            .and_then(|n| n.checked_add(header_len))
            .ok_or(too_short(usize::MAX))?;
        if bytes.len() < needed {
            return Err(too_short(needed));
        }
        Ok(Self {
            records: &bytes[header_len..needed],
            blob: &bytes[needed..],
        })
    }
}

/// A header record (the same in every layout version).
fn write_head(r: &mut [u8], h: &HeadFields<'_>) {
    put_u64(r, head::NUMBER, h.number);
    put_u64(r, head::TIMESTAMP, h.timestamp);
    r[head::HASH..head::HASH + 32].copy_from_slice(h.hash);
    r[head::PARENT_HASH..head::PARENT_HASH + 32].copy_from_slice(h.parent_hash);
    r[head::MINER..head::MINER + 20].copy_from_slice(h.miner);
    put_u64(r, head::GAS_USED, h.gas_used);
    put_u64(r, head::GAS_LIMIT, h.gas_limit);
    put_u64(r, head::BASE_FEE, h.base_fee);
}

pub(crate) fn put_u64(r: &mut [u8], at: usize, v: u64) {
    r[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(r: &mut [u8], at: usize, v: u32) {
    r[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

// ---------------------------------------------------------------- reading

/// A batch whose header and record area are checked. Parsing is O(1): the
/// records are read in the one pass that matches them, and a variable field
/// pointing outside the blob (which a correct host never writes) reads as
/// empty rather than failing, so no view can panic.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    source: Source,
    records: &'a [u8],
    blob: &'a [u8],
}

/// The `N`-byte header of a batch of layout `version` (every layout starts
/// with its version and source), and the source it names.
pub(crate) fn header<const N: usize>(
    bytes: &[u8],
    version: u8,
) -> Result<(&[u8; N], Source), LayoutError> {
    let header: &[u8; N] = bytes.first_chunk().ok_or(LayoutError::TooShort {
        len: bytes.len(),
        needed: N,
    })?;
    if header[0] != version {
        return Err(LayoutError::UnknownVersion(header[0]));
    }
    let source = Source::from_code(header[1]).ok_or(LayoutError::UnknownSource(header[1]))?;
    Ok((header, source))
}

impl<'a> Batch<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LayoutError> {
        let (header, source) = header::<HEADER_LEN>(bytes, VERSION)?;
        let parts = Parts::split(bytes, HEADER_LEN, get_u32(header, 4), source.record_len())?;
        Ok(Batch {
            source,
            records: parts.records,
            blob: parts.blob,
        })
    }

    pub fn source(&self) -> Source {
        self.source
    }

    pub fn len(&self) -> usize {
        self.records.len() / self.source.record_len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record area, once the batch is known to carry `expected`'s kind.
    fn records(&self, expected: Source) -> Result<&'a [u8], LayoutError> {
        expected.check_kind(self.source)?;
        Ok(self.records)
    }

    /// The transactions of a pending or mined batch.
    pub fn transactions(&self) -> Result<impl Iterator<Item = TxView<'a>> + 'a, LayoutError> {
        let blob = self.blob;
        // Fixed-size records: field reads compile to constant offsets with
        // no bounds checks (`parse` checked the area is whole records).
        let (records, _) = self.records(Source::MinedTransactions)?.as_chunks();
        Ok(records.iter().map(move |r| TxView { r, blob }))
    }

    /// The headers of a heads batch.
    pub fn heads(&self) -> Result<impl Iterator<Item = HeadView<'a>> + 'a, LayoutError> {
        let (records, _) = self.records(Source::Heads)?.as_chunks();
        Ok(records.iter().map(|r| HeadView { r }))
    }

    /// The logs of a logs batch.
    pub fn logs(&self) -> Result<impl Iterator<Item = LogView<'a>> + 'a, LayoutError> {
        let blob = self.blob;
        let (records, _) = self.records(Source::Logs)?.as_chunks();
        Ok(records.iter().map(move |r| LogView { r, blob }))
    }
}

#[inline(always)]
pub(crate) fn get_u64(r: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&r[at..at + 8]);
    u64::from_le_bytes(b)
}

#[inline(always)]
pub(crate) fn get_u32(r: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&r[at..at + 4]);
    u32::from_le_bytes(b)
}

/// `len` bytes at `offset` of the blob; empty if that is out of bounds.
pub(crate) fn blob_field(blob: &[u8], offset: u32, len: u32) -> &[u8] {
    let start = offset as usize;
    start
        .checked_add(len as usize)
        .and_then(|end| blob.get(start..end))
        .unwrap_or_default()
}

#[inline(always)]
pub(crate) fn array<const N: usize>(r: &[u8], at: usize) -> &[u8; N] {
    r[at..at + N]
        .try_into()
        .expect("record fields are fixed-size")
}

/// A transaction in a batch; borrowing, no copies.
#[derive(Clone, Copy, Debug)]
pub struct TxView<'a> {
    r: &'a [u8; tx::LEN],
    blob: &'a [u8],
}

impl<'a> TxView<'a> {
    pub fn hash(&self) -> &'a [u8; 32] {
        array(self.r, tx::HASH)
    }
    #[inline(always)]
    pub fn from(&self) -> &'a [u8; 20] {
        array(self.r, tx::FROM)
    }
    /// The receiver; `None` for a contract creation.
    #[inline(always)]
    pub fn to(&self) -> Option<&'a [u8; 20]> {
        (self.r[tx::FLAGS] & tx::HAS_TO != 0).then(|| array(self.r, tx::TO))
    }
    /// True for a transaction of an orphaned block, re-sent after a reorg.
    pub fn removed(&self) -> bool {
        self.r[tx::FLAGS] & tx::REMOVED != 0
    }
    pub fn tx_type(&self) -> u8 {
        self.r[tx::TX_TYPE]
    }
    /// The value in wei, big-endian.
    pub fn value(&self) -> &'a [u8; 32] {
        array(self.r, tx::VALUE)
    }
    pub fn nonce(&self) -> u64 {
        get_u64(self.r, tx::NONCE)
    }
    pub fn gas(&self) -> u64 {
        get_u64(self.r, tx::GAS)
    }
    /// The block number, 0 while pending.
    pub fn block_number(&self) -> u64 {
        get_u64(self.r, tx::BLOCK_NUMBER)
    }
    pub fn input(&self) -> &'a [u8] {
        blob_field(
            self.blob,
            get_u32(self.r, tx::INPUT_OFFSET),
            get_u32(self.r, tx::INPUT_LEN),
        )
    }
    /// The 4-byte method selector, if the input has one.
    #[inline(always)]
    pub fn selector(&self) -> Option<[u8; 4]> {
        self.input().first_chunk::<4>().copied()
    }
}

/// A block header in a batch.
#[derive(Clone, Copy, Debug)]
pub struct HeadView<'a> {
    pub(crate) r: &'a [u8; head::LEN],
}

impl<'a> HeadView<'a> {
    pub fn number(&self) -> u64 {
        get_u64(self.r, head::NUMBER)
    }
    pub fn timestamp(&self) -> u64 {
        get_u64(self.r, head::TIMESTAMP)
    }
    pub fn hash(&self) -> &'a [u8; 32] {
        array(self.r, head::HASH)
    }
    pub fn parent_hash(&self) -> &'a [u8; 32] {
        array(self.r, head::PARENT_HASH)
    }
    pub fn miner(&self) -> &'a [u8; 20] {
        array(self.r, head::MINER)
    }
    pub fn gas_used(&self) -> u64 {
        get_u64(self.r, head::GAS_USED)
    }
    pub fn gas_limit(&self) -> u64 {
        get_u64(self.r, head::GAS_LIMIT)
    }
    pub fn base_fee(&self) -> u64 {
        get_u64(self.r, head::BASE_FEE)
    }
}

/// A log in a batch.
#[derive(Clone, Copy, Debug)]
pub struct LogView<'a> {
    r: &'a [u8; log::LEN],
    blob: &'a [u8],
}

impl<'a> LogView<'a> {
    #[inline(always)]
    pub fn address(&self) -> &'a [u8; 20] {
        array(self.r, log::ADDRESS)
    }
    #[inline(always)]
    pub fn topic_count(&self) -> usize {
        usize::from(self.r[log::TOPIC_COUNT]).min(4)
    }
    /// Topic `i`, if the log has that many.
    #[inline(always)]
    pub fn topic(&self, i: usize) -> Option<&'a [u8; 32]> {
        (i < self.topic_count()).then(|| array(self.r, log::TOPICS + 32 * i))
    }
    pub fn topics(&self) -> impl Iterator<Item = &'a [u8; 32]> + 'a {
        let r = self.r;
        (0..self.topic_count()).map(move |i| array(r, log::TOPICS + 32 * i))
    }
    pub fn data(&self) -> &'a [u8] {
        blob_field(
            self.blob,
            get_u32(self.r, log::DATA_OFFSET),
            get_u32(self.r, log::DATA_LEN),
        )
    }
    /// True for a log of an orphaned block, re-sent after a reorg.
    pub fn removed(&self) -> bool {
        self.r[log::FLAGS] & log::REMOVED != 0
    }
    pub fn block_number(&self) -> u64 {
        get_u64(self.r, log::BLOCK_NUMBER)
    }
    pub fn log_index(&self) -> u32 {
        get_u32(self.r, log::LOG_INDEX)
    }
    pub fn transaction_index(&self) -> u32 {
        get_u32(self.r, log::TX_INDEX)
    }
    pub fn transaction_hash(&self) -> &'a [u8; 32] {
        array(self.r, log::TX_HASH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_tx<'a>(input: &'a [u8], to: Option<&'a [u8; 20]>) -> TxFields<'a> {
        TxFields {
            hash: &[7; 32],
            from: &[1; 20],
            to,
            tx_type: 2,
            value: &[9; 32],
            nonce: 42,
            gas: 21_000,
            block_number: 0,
            input,
            removed: false,
        }
    }

    #[test]
    fn transactions_round_trip() {
        let mut w = BatchWriter::new(Source::PendingTransactions, 2);
        w.push_tx(&sample_tx(&[0xa9, 0x05, 0x9c, 0xbb, 1, 2], Some(&[2; 20])));
        w.push_tx(&TxFields {
            removed: true,
            ..sample_tx(&[], None)
        });
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("valid batch");
        assert_eq!(batch.len(), 2);
        let txs: Vec<_> = batch.transactions().expect("tx batch").collect();
        assert_eq!(txs[0].from(), &[1; 20]);
        assert_eq!(txs[0].to(), Some(&[2; 20]));
        assert_eq!(txs[0].selector(), Some([0xa9, 0x05, 0x9c, 0xbb]));
        assert_eq!(txs[0].input(), &[0xa9, 0x05, 0x9c, 0xbb, 1, 2]);
        assert_eq!(
            (txs[0].nonce(), txs[0].gas(), txs[0].tx_type()),
            (42, 21_000, 2)
        );
        assert!(!txs[0].removed());
        assert_eq!(txs[1].to(), None);
        assert_eq!(txs[1].selector(), None);
        assert!(txs[1].removed());
    }

    #[test]
    fn logs_round_trip() {
        let topics = [[1; 32], [2; 32], [3; 32]];
        let mut w = BatchWriter::new(Source::Logs, 1);
        w.push_log(&LogFields {
            address: &[5; 20],
            topics: &topics,
            data: b"hello",
            block_number: 10,
            log_index: 3,
            transaction_index: 1,
            transaction_hash: &[8; 32],
            removed: true,
        });
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("valid batch");
        let log = batch.logs().expect("logs").next().expect("one log");
        assert_eq!(log.address(), &[5; 20]);
        assert_eq!(
            log.topics().collect::<Vec<_>>(),
            vec![&[1; 32], &[2; 32], &[3; 32]]
        );
        assert_eq!(log.topic(3), None);
        assert_eq!(log.data(), b"hello");
        assert_eq!(
            (log.block_number(), log.log_index(), log.transaction_index()),
            (10, 3, 1)
        );
        assert!(log.removed());
    }

    #[test]
    fn heads_round_trip() {
        let mut w = BatchWriter::new(Source::Heads, 1);
        w.push_head(&HeadFields {
            number: 5,
            timestamp: 1_700_000_000,
            hash: &[1; 32],
            parent_hash: &[2; 32],
            miner: &[3; 20],
            gas_used: 100,
            gas_limit: 30_000_000,
            base_fee: 7,
        });
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("valid batch");
        let h = batch.heads().expect("heads").next().expect("one head");
        assert_eq!(
            (h.number(), h.timestamp(), h.base_fee()),
            (5, 1_700_000_000, 7)
        );
        assert_eq!(
            (h.hash(), h.parent_hash(), h.miner()),
            (&[1; 32], &[2; 32], &[3; 20])
        );
        assert_eq!((h.gas_used(), h.gas_limit()), (100, 30_000_000));
    }

    #[test]
    fn malformed_batches_are_refused() {
        assert!(matches!(
            Batch::parse(&[1, 0, 0]),
            Err(LayoutError::TooShort { .. })
        ));
        assert_eq!(
            Batch::parse(&[9, 0, 0, 0, 0, 0, 0, 0]).err(),
            Some(LayoutError::UnknownVersion(9))
        );
        assert_eq!(
            Batch::parse(&[1, 7, 0, 0, 0, 0, 0, 0]).err(),
            Some(LayoutError::UnknownSource(7))
        );
        // Announces one record but carries none.
        assert!(matches!(
            Batch::parse(&[1, 2, 0, 0, 1, 0, 0, 0]),
            Err(LayoutError::TooShort { .. })
        ));
        // A record whose input points past the blob reads as empty input.
        let mut w = BatchWriter::new(Source::PendingTransactions, 1);
        w.push_tx(&sample_tx(&[1, 2, 3, 4], None));
        let mut bytes = w.finish();
        bytes.truncate(bytes.len() - 1);
        let batch = Batch::parse(&bytes).expect("header and records are intact");
        let tx = batch
            .transactions()
            .expect("tx batch")
            .next()
            .expect("one record");
        assert_eq!((tx.input(), tx.selector()), (&[][..], None));
    }

    #[test]
    fn reading_the_wrong_stream_is_an_error() {
        let bytes = BatchWriter::new(Source::Heads, 0).finish();
        let batch = Batch::parse(&bytes).expect("empty heads batch");
        assert!(batch.is_empty());
        assert!(matches!(batch.logs(), Err(LayoutError::WrongSource { .. })));
        assert!(batch.heads().is_ok());
    }

    #[test]
    fn record_sizes_match_the_documented_layout() {
        let doc = include_str!("../../../wit/BATCH_LAYOUT.md");
        for (name, len) in [
            ("transaction", tx::LEN),
            ("header", head::LEN),
            ("log", log::LEN),
        ] {
            let line = format!("{name} record: {len} bytes");
            assert!(doc.contains(&line), "BATCH_LAYOUT.md must say `{line}`");
        }
    }
}
