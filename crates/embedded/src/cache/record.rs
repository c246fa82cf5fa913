//! The records of the cache log: how one write is laid out on disk, and how a run of bytes
//! is read back into records, stopping at the first one that is incomplete or damaged.
//!
//! ```text
//! crc32 u32 | kind u8 | instance i64 | expires_ms i64 | key_len u32 | value_len u32 | key | value
//! ```
//! Integers are little-endian; the checksum covers everything after it. `expires_ms` is
//! [`NEVER`] for an entry without expiry (and for records other than puts). The log is
//! zero-filled ahead of its end, and a header of zeros (kind 0) is no record: that is where
//! the log ends.

use quintet_core::{InstanceId, cache::key::MAX_KEY_BYTES};

/// Bytes of a record before its key.
pub(crate) const HEADER: usize = 29;

/// `expires_ms` of an entry that never expires.
const NEVER: i64 = i64::MIN;

/// Largest value a record may carry: far above the service's 10 MB limit, low enough that a
/// damaged length is not believed.
const MAX_VALUE_BYTES: usize = 256 << 20;

const KIND_PUT: u8 = 1;
const KIND_REMOVE: u8 = 2;
const KIND_DROP: u8 = 3;

/// One change to the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// `key` of `inst` now holds `value` (JSON text), expiring at `expires_ms`.
    Put {
        inst: InstanceId,
        key: &'a str,
        value: &'a [u8],
        expires_ms: Option<i64>,
    },
    /// `key` of `inst` is gone.
    Remove { inst: InstanceId, key: &'a str },
    /// Instance `inst` and all its entries are gone.
    Drop { inst: InstanceId },
}

impl Record<'_> {
    /// Bytes the record takes in the log.
    pub(crate) fn len(&self) -> usize {
        let (key, value) = self.parts();
        HEADER + key.len() + value.len()
    }

    fn parts(&self) -> (&str, &[u8]) {
        match self {
            Self::Put { key, value, .. } => (key, value),
            Self::Remove { key, .. } => (key, &[]),
            Self::Drop { .. } => ("", &[]),
        }
    }

    /// Append the record to `out`; returns where its value starts, relative to the record.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> usize {
        let (kind, inst, expires) = match self {
            Self::Put {
                inst, expires_ms, ..
            } => (KIND_PUT, inst, expires_ms.unwrap_or(NEVER)),
            Self::Remove { inst, .. } => (KIND_REMOVE, inst, NEVER),
            Self::Drop { inst } => (KIND_DROP, inst, NEVER),
        };
        let (key, value) = self.parts();
        let start = out.len();
        out.reserve(self.len());
        out.extend_from_slice(&[0; 4]);
        out.push(kind);
        out.extend_from_slice(&inst.0.to_le_bytes());
        out.extend_from_slice(&expires.to_le_bytes());
        // Lengths fit: keys are at most 512 bytes and values at most 10 MB.
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(value);
        let crc = crc32fast::hash(&out[start + 4..]);
        out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
        HEADER + key.len()
    }
}

/// What the bytes at some place of the log hold.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A whole, intact record of `len` bytes whose value starts `value_at` bytes in.
    Record {
        record: Record<'a>,
        len: usize,
        value_at: usize,
    },
    /// A header that announces `len` bytes, more than the bytes given.
    Short { len: usize },
    /// Zeros, or nothing: the end of the log.
    End,
    /// Bytes that are no record: a write torn by a crash, or damage.
    Damaged,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(a)
}

/// The record at the start of `b` (a header needs [`HEADER`] bytes: fewer are `Short`).
pub(crate) fn decode(b: &[u8]) -> Decoded<'_> {
    if b.is_empty() {
        return Decoded::End;
    }
    if b.len() < HEADER {
        return if b.iter().all(|&x| x == 0) {
            Decoded::End
        } else {
            Decoded::Short { len: HEADER }
        };
    }
    if b[..HEADER].iter().all(|&x| x == 0) {
        return Decoded::End;
    }
    let kind = b[4];
    let key_len = u32_at(b, 21) as usize;
    let value_len = u32_at(b, 25) as usize;
    let shape_ok = match kind {
        KIND_PUT => key_len > 0 && value_len > 0,
        KIND_REMOVE => key_len > 0 && value_len == 0,
        KIND_DROP => key_len == 0 && value_len == 0,
        _ => false,
    };
    if !shape_ok || key_len > MAX_KEY_BYTES || value_len > MAX_VALUE_BYTES {
        return Decoded::Damaged;
    }
    let len = HEADER + key_len + value_len;
    if b.len() < len {
        return Decoded::Short { len };
    }
    if crc32fast::hash(&b[4..len]) != u32_at(b, 0) {
        return Decoded::Damaged;
    }
    let Ok(key) = std::str::from_utf8(&b[HEADER..HEADER + key_len]) else {
        return Decoded::Damaged;
    };
    let inst = InstanceId(i64_at(b, 5));
    let expires = i64_at(b, 13);
    let record = match kind {
        KIND_PUT => Record::Put {
            inst,
            key,
            value: &b[HEADER + key_len..len],
            expires_ms: (expires != NEVER).then_some(expires),
        },
        KIND_REMOVE => Record::Remove { inst, key },
        _ => Record::Drop { inst },
    };
    Decoded::Record {
        record,
        len,
        value_at: HEADER + key_len,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn put<'a>(key: &'a str, value: &'a [u8], expires_ms: Option<i64>) -> Record<'a> {
        Record::Put {
            inst: InstanceId(7),
            key,
            value,
            expires_ms,
        }
    }

    #[test]
    fn each_kind_reads_back_as_written() {
        let records = [
            put("k", br#"{"a":1}"#, Some(1_700_000_000_000)),
            put("k2", b"{}", None),
            Record::Remove {
                inst: InstanceId(-3),
                key: "gone",
            },
            Record::Drop {
                inst: InstanceId(i64::MAX),
            },
        ];
        let mut log = Vec::new();
        let mut starts = Vec::new();
        for r in &records {
            starts.push((log.len(), r.encode(&mut log)));
        }
        for (r, (start, value_at)) in records.iter().zip(starts) {
            let Decoded::Record {
                record,
                len,
                value_at: v,
            } = decode(&log[start..])
            else {
                panic!("no record at {start}");
            };
            assert_eq!(&record, r);
            assert_eq!(len, r.len());
            assert_eq!(v, value_at);
        }
        let end = records.iter().map(Record::len).sum::<usize>();
        assert_eq!(decode(&log[end..]), Decoded::End);
    }

    #[test]
    fn zeros_end_the_log() {
        assert_eq!(decode(&[0; 100]), Decoded::End);
        assert_eq!(decode(&[0; 3]), Decoded::End);
        assert_eq!(decode(&[]), Decoded::End);
    }

    #[test]
    fn an_unknown_kind_or_a_wrong_shape_is_damage() {
        let mut b = Vec::new();
        Record::Drop {
            inst: InstanceId(1),
        }
        .encode(&mut b);
        b[4] = 9;
        assert_eq!(decode(&b), Decoded::Damaged);
        let mut b = Vec::new();
        Record::Remove {
            inst: InstanceId(1),
            key: "k",
        }
        .encode(&mut b);
        b[25] = 1; // a remove with a value
        assert_eq!(decode(&b), Decoded::Damaged);
    }

    proptest! {
        /// A record cut short, or with any one bit flipped, is never read as a record.
        #[test]
        fn torn_or_flipped_records_are_never_believed(
            key in "[a-z][a-z0-9_]{0,40}",
            value in proptest::collection::vec(any::<u8>(), 1..300),
            expires in proptest::option::of(any::<i64>().prop_filter("not NEVER", |e| *e != NEVER)),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let r = put(&key, &value, expires);
            let mut b = Vec::new();
            r.encode(&mut b);
            let cut = cut.index(b.len());
            let torn = matches!(decode(&b[..cut]), Decoded::Record { .. });
            prop_assert!(!torn, "a record cut at {} was read", cut);
            let at = flip.index(b.len());
            b[at] ^= 1 << bit;
            let flipped = matches!(decode(&b), Decoded::Record { .. });
            prop_assert!(!flipped, "a flip at byte {} was not noticed", at);
        }
    }
}
