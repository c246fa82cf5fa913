//! The portable archive of `quintet export` and `quintet import`: its framing, version,
//! record kinds, the order records must come in, and the digests that prove a copy equal.
//!
//! Pure rules only; the exporter and importer that move records between the ports and a
//! byte stream live in the server. The format is documented for people in
//! `docs/archive.md`; this module is its one definition.
//!
//! An archive is the line `QUINTET-ARCHIVE <version>\n` followed by records. A record is a header
//! line `<kind> <length> <crc32>\n` (the kind's name, the payload's length in decimal, the
//! CRC-32 in 8 lowercase hex digits of the header text before the checksum followed by the
//! payload), then `length` payload bytes, then `\n`. The last record, `end`, carries the
//! number of records before it and the SHA-256 of every byte before it, and nothing may
//! follow it. A reader fed a truncated archive never reaches `end`; a flipped byte breaks a
//! record's CRC or the final SHA-256: either way the archive is refused.

use std::fmt;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::{Error, Result, ServiceType};

/// The first bytes of every archive, before the version number.
pub const MAGIC: &[u8] = b"QUINTET-ARCHIVE ";
/// The format version this build writes, and the newest it reads. Every older version
/// reads too: version 1 differs only in holding no ERROR jobs (a reader of version 1 would
/// import an ERROR job of version 2 as a READY one and deliver it again, so it must refuse
/// version 2).
pub const VERSION: u32 = 2;
/// Object bytes travel in `bytes` records of at most this many bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;
/// Largest payload of any record: a document's largest size plus room for its envelope.
pub const MAX_PAYLOAD: usize = crate::ports::data::MAX_DOC_BYTES + 64 * 1024;
/// Longest header line (kind, length, checksum), newline included.
const MAX_HEADER_LINE: usize = 64;
/// Longest first line (magic and version), newline included.
const MAX_MAGIC_LINE: usize = 32;

/// What a record holds. Its name is what the header line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The archive's [`Header`]; always the first record.
    Header,
    /// An account ([`AccountRecord`]); whole exports only.
    Account,
    /// An application ([`AppRecord`]); whole exports only.
    App,
    /// An access key ([`KeyRecord`]); whole exports only.
    Key,
    /// Opens an instance's section ([`InstanceRecord`]).
    Instance,
    /// A document's stored JSON text (data instances).
    Doc,
    /// A Mango index definition (data instances).
    Index,
    /// A cache entry ([`CacheRecord`]).
    Cache,
    /// A search document ([`SearchRecord`]).
    Search,
    /// A queue job not yet delivered ([`JobRecord`]).
    Job,
    /// An object's metadata ([`ObjectRecord`]), followed by its bytes.
    Object,
    /// Up to [`CHUNK_BYTES`] of the current object's bytes.
    Bytes,
    /// Closes an instance's section with its [`Tally`].
    InstanceEnd,
    /// The last record ([`End`]).
    End,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 14] = [
        Kind::Header,
        Kind::Account,
        Kind::App,
        Kind::Key,
        Kind::Instance,
        Kind::Doc,
        Kind::Index,
        Kind::Cache,
        Kind::Search,
        Kind::Job,
        Kind::Object,
        Kind::Bytes,
        Kind::InstanceEnd,
        Kind::End,
    ];

    /// The kind's name in a header line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Header => "header",
            Kind::Account => "account",
            Kind::App => "app",
            Kind::Key => "key",
            Kind::Instance => "instance",
            Kind::Doc => "doc",
            Kind::Index => "index",
            Kind::Cache => "cache",
            Kind::Search => "search",
            Kind::Job => "job",
            Kind::Object => "object",
            Kind::Bytes => "bytes",
            Kind::InstanceEnd => "instance-end",
            Kind::End => "end",
        }
    }

    fn parse(s: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str().as_bytes() == s)
    }

    /// The service type whose sections hold this kind; `None` for kinds outside sections.
    fn section(self) -> Option<ServiceType> {
        match self {
            Kind::Doc | Kind::Index => Some(ServiceType::Data),
            Kind::Cache => Some(ServiceType::Cache),
            Kind::Search => Some(ServiceType::Search),
            Kind::Job => Some(ServiceType::Queue),
            Kind::Object | Kind::Bytes => Some(ServiceType::Storage),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an archive holds: one application, or everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// The format version ([`VERSION`] when written by this build).
    pub format: u32,
    /// The exported application, or `None` for a whole export.
    pub app: Option<String>,
    /// Whether keys' secrets and queues' signing secrets are included.
    pub secrets: bool,
    /// When the export began, milliseconds since the epoch.
    pub created_ms: i64,
    /// The program that wrote it (`quintet <version>`).
    pub writer: String,
}

/// An account of a whole export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRecord {
    /// Its name.
    pub name: String,
    /// Its plan.
    pub plan: String,
}

/// An application of a whole export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRecord {
    /// Its name.
    pub name: String,
    /// Its account.
    pub account: String,
}

/// An access key of a whole export; the secret only with `--include-secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRecord {
    /// Its application.
    pub app: String,
    /// The key id.
    pub key: String,
    /// The secret, when included.
    pub secret: Option<String>,
    /// Whether it was revoked.
    pub revoked: bool,
    /// When it was created, milliseconds since the epoch.
    pub created_ms: i64,
}

/// Opens an instance's section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    /// Its application (`_domain` for the domain form).
    pub app: String,
    /// Its service type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its configuration as stored (a queue's secret only with `--include-secrets`).
    pub config: Value,
}

impl InstanceRecord {
    /// The service type, checked.
    pub fn service(&self) -> Result<ServiceType> {
        self.kind.parse().map_err(|_| {
            corrupt(format!(
                "an instance has the unknown type \"{}\"",
                self.kind
            ))
        })
    }
}

/// A cache entry with its remaining time to live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheRecord {
    /// The key.
    pub key: String,
    /// The value's stored text.
    pub value: String,
    /// Milliseconds the entry had left when exported; `None`: it never expires.
    pub ttl_ms: Option<i64>,
}

/// A search document and its key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchRecord {
    /// The key.
    pub key: String,
    /// The document's JSON text, as indexed.
    pub doc: Box<serde_json::value::RawValue>,
}

/// A queue job not yet delivered: waiting (`READY`) or failed (`ERROR`, from version 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    /// `READY` or `ERROR`.
    pub status: String,
    /// The job's JSON text.
    pub job: Box<serde_json::value::RawValue>,
    /// Delivery attempts so far (since it was enqueued or last retried).
    pub attempts: u32,
    /// The error of the failure that made it ERROR, or of a READY job's last failed attempt.
    pub error: Option<String>,
    /// When it was enqueued, milliseconds since the epoch.
    pub created_ms: i64,
}

/// An object's metadata; its bytes follow in `bytes` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRecord {
    /// Its path.
    pub path: String,
    /// Its media type.
    pub content_type: String,
    /// Its length; the `bytes` records that follow add up to exactly this.
    pub size: u64,
    /// Its entity tag where it was exported (engines compute their own on import).
    pub etag: String,
}

/// What an instance's section held: the count of its items and their [`Digest`]. The
/// importer compares it with the same tally read back from where it imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Documents plus indexes, entries, search documents, jobs or objects.
    pub count: u64,
    /// The hex SHA-256 of the items ([`Digest`]).
    pub digest: String,
}

/// The last record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// Records before this one, the header included.
    pub records: u64,
    /// The hex SHA-256 of every byte before this record.
    pub sha256: String,
}

/// The checksum of an instance's contents, independent of the engine that holds them:
/// each item's parts are hashed with their lengths, in the order the exporter walks them
/// (documents by id, entries and search documents by key, jobs oldest first, objects by
/// path). Cache entries count their key and value, not their remaining time; jobs their
/// status and body, not their id; objects their path, media type and the SHA-256 of their
/// bytes, not their entity tag.
#[derive(Debug, Clone, Default)]
pub struct Digest {
    hash: Sha256,
    count: u64,
}

impl Digest {
    /// A digest of nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one item made of `parts`.
    pub fn item(&mut self, parts: &[&[u8]]) {
        self.count += 1;
        for part in parts {
            self.hash.update((part.len() as u64).to_le_bytes());
            self.hash.update(part);
        }
    }

    /// The tally so far.
    pub fn tally(&self) -> Tally {
        Tally {
            count: self.count,
            digest: hex::encode(self.hash.clone().finalize()),
        }
    }
}

/// The archive error for a damaged archive.
pub fn corrupt(what: impl fmt::Display) -> Error {
    Error::Invalid(format!(
        "the archive is damaged or not a quintet archive: {what}; nothing more was read"
    ))
}

fn truncated(offset: u64) -> Error {
    Error::Invalid(format!(
        "the archive is truncated: it ends at byte {offset} before its end record; \
         export it again"
    ))
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize()
}

/// Writes records; the caller sends each returned chunk of bytes on.
#[derive(Debug, Clone)]
pub struct Encoder {
    hash: Sha256,
    records: u64,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// An encoder whose first output must be [`Encoder::start`].
    pub fn new() -> Self {
        Self {
            hash: Sha256::new(),
            records: 0,
        }
    }

    /// The magic line and the header record.
    pub fn start(&mut self, header: &Header) -> Result<Bytes> {
        let mut out = BytesMut::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(format!("{}\n", header.format).as_bytes());
        self.hash.update(&out);
        let rec = self.json(Kind::Header, header)?;
        out.extend_from_slice(&rec);
        Ok(out.freeze())
    }

    /// A record of `kind` whose payload is `value` as JSON.
    pub fn json<T: Serialize>(&mut self, kind: Kind, value: &T) -> Result<Bytes> {
        let payload = serde_json::to_vec(value)
            .map_err(|e| Error::internal(format!("writing an archive record: {e}")))?;
        self.record(kind, &payload)
    }

    /// A record of `kind` with `payload` as it is.
    pub fn record(&mut self, kind: Kind, payload: &[u8]) -> Result<Bytes> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::TooLarge(format!(
                "an archive {kind} record of {} bytes is over the limit of {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let head = format!("{kind} {} ", payload.len());
        let crc = checksum(head.as_bytes(), payload);
        let mut out = BytesMut::with_capacity(head.len() + 9 + payload.len() + 1);
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(format!("{crc:08x}\n").as_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\n");
        self.hash.update(&out);
        self.records += 1;
        Ok(out.freeze())
    }

    /// The `end` record; nothing may be written after it.
    pub fn finish(self) -> Result<Bytes> {
        let end = End {
            records: self.records,
            sha256: hex::encode(self.hash.clone().finalize()),
        };
        let mut this = self;
        this.json(Kind::End, &end)
    }
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its kind.
    pub kind: Kind,
    /// Its payload.
    pub payload: Bytes,
}

impl Record {
    /// The payload read as `T`.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload)
            .map_err(|e| corrupt(format!("a {} record does not parse: {e}", self.kind)))
    }

    /// The payload as text.
    pub fn text(&self) -> Result<&str> {
        std::str::from_utf8(&self.payload)
            .map_err(|_| corrupt(format!("a {} record is not UTF-8", self.kind)))
    }
}

/// Where the reader is in the order records must come in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// Before the magic line.
    Magic,
    /// Before the header record.
    Header,
    /// Between sections (accounts, apps, keys, instances, the end).
    Top,
    /// Inside an instance section of this type.
    Section(ServiceType),
    /// Inside an object: this many of its bytes still to come.
    Object(u64),
    /// After the end record.
    Done,
}

/// Reads an archive fed in pieces of any size, checking every record as it completes:
/// framing, checksums, the order of records, object sizes, and the end record. Holds at
/// most one record in memory.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    place: Place,
    hash: Sha256,
    records: u64,
    /// Bytes consumed so far (for messages).
    offset: u64,
    header: Option<Header>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder at the start of an archive.
    pub fn new() -> Self {
        Self {
            buf: BytesMut::new(),
            place: Place::Magic,
            hash: Sha256::new(),
            records: 0,
            offset: 0,
            header: None,
        }
    }

    /// Append the next bytes of the archive.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The archive's header, once read.
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// Whether the end record was read and checked.
    pub fn is_done(&self) -> bool {
        self.place == Place::Done
    }

    /// The next complete record, `Ok(None)` when more bytes are needed (or after the end).
    /// An error is final: the archive is refused.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if self.place == Place::Magic {
            let seen = self.buf.len().min(MAGIC.len());
            if self.buf[..seen] != MAGIC[..seen] {
                return Err(corrupt(
                    "it does not begin with \"QUINTET-ARCHIVE <version>\"",
                ));
            }
            let Some(line) = self.line(MAX_MAGIC_LINE, "its first line")? else {
                return Ok(None);
            };
            let version = line
                .strip_prefix(MAGIC)
                .and_then(|v| v.strip_suffix(b"\n"))
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| corrupt("it does not begin with \"QUINTET-ARCHIVE <version>\""))?;
            check_version(version)?;
            self.hash.update(&line);
            self.place = Place::Header;
        }
        if self.place == Place::Done {
            if !self.buf.is_empty() {
                return Err(corrupt("bytes follow its end record"));
            }
            return Ok(None);
        }
        // The header line.
        let Some(nl) = memchr::memchr(b'\n', &self.buf[..self.buf.len().min(MAX_HEADER_LINE)])
        else {
            if self.buf.len() >= MAX_HEADER_LINE {
                return Err(corrupt(format!(
                    "a record header at byte {} is malformed",
                    self.offset
                )));
            }
            return Ok(None);
        };
        let (kind, len, crc, head_len) = parse_header(&self.buf[..nl]).ok_or_else(|| {
            corrupt(format!(
                "a record header at byte {} is malformed",
                self.offset
            ))
        })?;
        let total = nl + 1 + len + 1;
        if self.buf.len() < total {
            return Ok(None);
        }
        let payload = &self.buf[nl + 1..nl + 1 + len];
        if self.buf[total - 1] != b'\n' || checksum(&self.buf[..head_len], payload) != crc {
            return Err(corrupt(format!(
                "the {kind} record at byte {} fails its checksum",
                self.offset
            )));
        }
        let at = self.offset;
        let bytes = self.buf.split_to(total).freeze();
        let payload = bytes.slice(nl + 1..nl + 1 + len);
        self.offset += total as u64;
        let record = Record { kind, payload };
        self.order(&record, at)?;
        if kind == Kind::End {
            let end: End = record.parse()?;
            let sha = hex::encode(self.hash.clone().finalize());
            if end.records != self.records || end.sha256 != sha {
                return Err(corrupt(
                    "its end record does not match its contents (bytes were changed)",
                ));
            }
            self.place = Place::Done;
            if !self.buf.is_empty() {
                return Err(corrupt("bytes follow its end record"));
            }
        } else {
            self.hash.update(&bytes);
            self.records += 1;
        }
        Ok(Some(record))
    }

    /// Call when the input ended: an error unless the end record was read.
    pub fn finish(&self) -> Result<()> {
        match self.place {
            Place::Done if self.buf.is_empty() => Ok(()),
            Place::Done => Err(corrupt("bytes follow its end record")),
            _ => Err(truncated(self.offset + self.buf.len() as u64)),
        }
    }

    /// The first line, once complete (at most `max` bytes).
    fn line(&mut self, max: usize, what: &str) -> Result<Option<Bytes>> {
        match memchr::memchr(b'\n', &self.buf[..self.buf.len().min(max)]) {
            Some(nl) => {
                let line = self.buf.split_to(nl + 1).freeze();
                self.offset += line.len() as u64;
                Ok(Some(line))
            }
            None if self.buf.len() >= max => Err(corrupt(format!("{what} is malformed"))),
            None => Ok(None),
        }
    }

    /// Check that `record` may come here, and move on.
    fn order(&mut self, record: &Record, at: u64) -> Result<()> {
        let kind = record.kind;
        let misplaced = || corrupt(format!("a {kind} record at byte {at} is out of place"));
        if let Place::Object(left) = self.place {
            if kind == Kind::Bytes {
                let n = record.payload.len() as u64;
                if n > left {
                    return Err(corrupt(format!(
                        "an object at byte {at} has more bytes than its size"
                    )));
                }
                self.place = Place::Object(left - n);
                return Ok(());
            }
            if left > 0 {
                return Err(corrupt(format!(
                    "an object before byte {at} has fewer bytes than its size"
                )));
            }
            self.place = Place::Section(ServiceType::Storage);
        }
        match (&self.place, kind) {
            (Place::Header, Kind::Header) => {
                let header: Header = record.parse()?;
                check_version(header.format)?;
                self.header = Some(header);
                self.place = Place::Top;
            }
            (Place::Header, _) => return Err(misplaced()),
            (Place::Top, Kind::Account | Kind::App | Kind::Key) => {}
            (Place::Top, Kind::Instance) => {
                let inst: InstanceRecord = record.parse()?;
                self.place = Place::Section(inst.service()?);
            }
            (Place::Top, Kind::End) => {}
            (Place::Section(_), Kind::InstanceEnd) => {
                let _: Tally = record.parse()?;
                self.place = Place::Top;
            }
            (Place::Section(ServiceType::Storage), Kind::Object) => {
                let object: ObjectRecord = record.parse()?;
                self.place = Place::Object(object.size);
            }
            (Place::Section(t), k) if k != Kind::Bytes && k.section() == Some(*t) => {}
            _ => return Err(misplaced()),
        }
        Ok(())
    }
}

fn check_version(version: u32) -> Result<()> {
    if version > VERSION {
        return Err(Error::Invalid(format!(
            "the archive is of format version {version}; this quintet reads versions up to \
             {VERSION}: import it with a newer quintet"
        )));
    }
    if version == 0 {
        return Err(corrupt("its format version is 0"));
    }
    Ok(())
}

/// `<kind> <len> <crc>` → (kind, len, crc, length of `<kind> <len> `).
fn parse_header(line: &[u8]) -> Option<(Kind, usize, u32, usize)> {
    let mut parts = line.splitn(3, |b| *b == b' ');
    let kind = Kind::parse(parts.next()?)?;
    let len_text = parts.next()?;
    let crc_text = parts.next()?;
    if len_text.is_empty()
        || len_text.len() > 10
        || !len_text.iter().all(u8::is_ascii_digit)
        || (len_text.len() > 1 && len_text[0] == b'0')
        || crc_text.len() != 8
        || !crc_text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let len: usize = std::str::from_utf8(len_text).ok()?.parse().ok()?;
    if len > MAX_PAYLOAD || (kind == Kind::Bytes && len > CHUNK_BYTES) {
        return None;
    }
    let crc = u32::from_str_radix(std::str::from_utf8(crc_text).ok()?, 16).ok()?;
    Some((kind, len, crc, kind.as_str().len() + 1 + len_text.len() + 1))
}

/// Read a whole archive held in memory (tests and small archives): every record, or the
/// error that refuses it.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Record>> {
    let mut d = Decoder::new();
    d.feed(bytes);
    let mut out = Vec::new();
    while let Some(r) = d.next_record()? {
        out.push(r);
    }
    d.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn sample() -> Vec<u8> {
        let mut e = Encoder::new();
        let mut out = Vec::new();
        let header = Header {
            format: VERSION,
            app: Some("shop".into()),
            secrets: false,
            created_ms: 1,
            writer: "test".into(),
        };
        out.extend_from_slice(&e.start(&header).unwrap());
        let inst = InstanceRecord {
            app: "shop".into(),
            kind: "data".into(),
            name: "movies".into(),
            config: json!({}),
        };
        out.extend_from_slice(&e.json(Kind::Instance, &inst).unwrap());
        for i in 0..5 {
            let doc = format!("{{\"_id\":\"d{i}\",\"n\":{i}}}");
            out.extend_from_slice(&e.record(Kind::Doc, doc.as_bytes()).unwrap());
        }
        let tally = Tally {
            count: 5,
            digest: "x".into(),
        };
        out.extend_from_slice(&e.json(Kind::InstanceEnd, &tally).unwrap());
        let inst = InstanceRecord {
            app: "shop".into(),
            kind: "storage".into(),
            name: "files".into(),
            config: json!({}),
        };
        out.extend_from_slice(&e.json(Kind::Instance, &inst).unwrap());
        let obj = ObjectRecord {
            path: "a/b".into(),
            content_type: "text/plain".into(),
            size: 7,
            etag: "e".into(),
        };
        out.extend_from_slice(&e.json(Kind::Object, &obj).unwrap());
        out.extend_from_slice(&e.record(Kind::Bytes, b"hel").unwrap());
        out.extend_from_slice(&e.record(Kind::Bytes, b"lo!\n").unwrap());
        out.extend_from_slice(&e.json(Kind::InstanceEnd, &tally).unwrap());
        out.extend_from_slice(&e.finish().unwrap());
        out
    }

    #[test]
    fn a_written_archive_reads_back_record_by_record() {
        let bytes = sample();
        assert!(bytes.starts_with(b"QUINTET-ARCHIVE 2\nheader "));
        let records = decode_all(&bytes).unwrap();
        let kinds: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "header",
                "instance",
                "doc",
                "doc",
                "doc",
                "doc",
                "doc",
                "instance-end",
                "instance",
                "object",
                "bytes",
                "bytes",
                "instance-end",
                "end"
            ]
        );
        assert_eq!(&records[2].payload[..], br#"{"_id":"d0","n":0}"#);
        // Fed one byte at a time, it reads the same.
        let mut d = Decoder::new();
        let mut n = 0;
        for b in &bytes {
            d.feed(std::slice::from_ref(b));
            while d.next_record().unwrap().is_some() {
                n += 1;
            }
        }
        d.finish().unwrap();
        assert_eq!(n, records.len());
        assert_eq!(d.header().unwrap().app.as_deref(), Some("shop"));
    }

    #[test]
    fn a_newer_version_is_refused_by_name() {
        let mut bytes = sample();
        bytes[16] = b'3';
        let Err(Error::Invalid(msg)) = decode_all(&bytes) else {
            panic!("accepted");
        };
        assert!(msg.contains("format version 3"), "{msg}");
        assert!(msg.contains("newer quintet"), "{msg}");
    }

    #[test]
    fn an_archive_of_version_1_still_reads() {
        let mut e = Encoder::new();
        let header = Header {
            format: 1,
            app: None,
            secrets: false,
            created_ms: 1,
            writer: "quintet 0.1".into(),
        };
        let mut out = e.start(&header).unwrap().to_vec();
        out.extend_from_slice(&e.finish().unwrap());
        assert!(out.starts_with(b"QUINTET-ARCHIVE 1\nheader "));
        let records = decode_all(&out).unwrap();
        assert_eq!(records.len(), 2);
        let header: Header = records[0].parse().unwrap();
        assert_eq!(header.format, 1);
    }

    #[test]
    fn misplaced_records_and_wrong_object_sizes_are_refused() {
        let mut e = Encoder::new();
        let header = Header {
            format: VERSION,
            app: None,
            secrets: false,
            created_ms: 1,
            writer: "t".into(),
        };
        let mut out = e.start(&header).unwrap().to_vec();
        out.extend_from_slice(&e.record(Kind::Doc, b"{}").unwrap());
        out.extend_from_slice(&e.finish().unwrap());
        let Err(Error::Invalid(msg)) = decode_all(&out) else {
            panic!("accepted");
        };
        assert!(msg.contains("out of place"), "{msg}");
    }

    #[test]
    fn an_empty_or_foreign_input_is_refused() {
        assert!(decode_all(b"").is_err());
        assert!(decode_all(b"PK\x03\x04 not an archive at all\n").is_err());
        let mut d = Decoder::new();
        d.feed(b"PK\x03\x04");
        let Err(Error::Invalid(msg)) = d.next_record() else {
            panic!("a foreign start waits for more");
        };
        assert!(msg.contains("not a quintet archive"), "{msg}");
        assert!(decode_all(&[b'x'; 100]).is_err());
    }

    #[test]
    fn digests_depend_on_parts_and_their_boundaries() {
        let mut a = Digest::new();
        a.item(&[b"ab", b"c"]);
        let mut b = Digest::new();
        b.item(&[b"a", b"bc"]);
        assert_ne!(a.tally(), b.tally());
        assert_eq!(a.tally().count, 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_cut_archive_is_always_refused(cut in 0usize..10_000) {
            let bytes = sample();
            let cut = cut % bytes.len();
            prop_assert!(decode_all(&bytes[..cut]).is_err());
        }

        #[test]
        fn a_flipped_byte_is_always_refused(at in 0usize..10_000, xor in 1u8..=255) {
            let mut bytes = sample();
            let at = at % bytes.len();
            bytes[at] ^= xor;
            prop_assert!(decode_all(&bytes).is_err());
        }

        #[test]
        fn several_flips_and_a_cut_are_always_refused(
            flips in proptest::collection::vec((0usize..10_000, 1u8..=255), 1..8),
            cut in proptest::option::of(0usize..10_000),
        ) {
            let mut bytes = sample();
            for (at, xor) in flips {
                let at = at % bytes.len();
                bytes[at] ^= xor;
            }
            let original = sample();
            if let Some(cut) = cut {
                bytes.truncate(cut % bytes.len());
            }
            prop_assume!(bytes != original);
            prop_assert!(decode_all(&bytes).is_err());
        }
    }
}
