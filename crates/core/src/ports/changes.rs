//! The change feed of data instances: what every adapter records with each write, and the
//! rules of the sequences clients hold.
//!
//! Every document write appends one entry per changed document to the instance's change
//! log, in the same transaction as the write: an acknowledged write is always in the log,
//! and nothing that was not committed ever is. Entries are numbered 1, 2, 3, … per
//! instance in commit order, so a reader that has seen every entry up to `n` never meets a
//! later commit with a number at or below `n` (how each engine guarantees it: its
//! adapter's documentation). Old entries are removed by [`super::data::DocStore::compact_changes`];
//! a client whose position was removed is told to read everything again ([`Error::Gone`]).
//!
//! Clients see a position as an opaque text ([`Seq`]): the number and the instance's id,
//! so a position from an instance that was destroyed and created again under the same name
//! is refused instead of silently skipping or repeating changes.

use std::{fmt, str::FromStr};

use crate::{Error, Instance, InstanceId, Result};

/// Most entries one [`super::data::DocStore::changes`] call answers.
pub const MAX_CHANGES_PAGE: usize = 10_000;

/// One entry of a change log: document `id` was written (or removed) by the commit
/// numbered `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The entry's number in its instance's log.
    pub seq: u64,
    /// The document's id.
    pub id: String,
    /// Whether the write removed the document.
    pub deleted: bool,
}

/// Entries after a position, in order, and the position to resume from: of a data
/// instance's change log ([`Change`]) or of a queue's event log
/// ([`super::queue::JobEvent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesPage<C = Change> {
    /// The entries, by increasing `seq`, with no gap.
    pub changes: Vec<C>,
    /// The last entry answered; without entries, the log's head (the position asked for
    /// when nothing followed it).
    pub last_seq: u64,
}

impl<C> Default for ChangesPage<C> {
    fn default() -> Self {
        Self {
            changes: Vec::new(),
            last_seq: 0,
        }
    }
}

/// An entry of a log: it carries its number.
pub trait Numbered {
    /// The entry's number in its log.
    fn seq(&self) -> u64;
}

impl Numbered for Change {
    fn seq(&self) -> u64 {
        self.seq
    }
}

impl<C: Numbered> ChangesPage<C> {
    /// A page of `changes` read after `since`.
    pub fn after(since: u64, changes: Vec<C>) -> Self {
        let last_seq = changes.last().map_or(since, Numbered::seq);
        Self { changes, last_seq }
    }
}

/// Told by an adapter when an instance's log may have grown (a data instance's change
/// log, a queue's or a bucket's event log: instance ids are unique across services).
///
/// # Contract
/// - `changed` is called after the commit is visible to readers, for every instance a
///   commit wrote to, on every node that subscribed (on a shared engine, also for commits
///   made through other nodes).
/// - `resync` is called when the adapter may have missed commits of other nodes (a lost
///   notification connection, restored): every instance may have changed.
/// - Both are cheap and never block: they run on writer threads and notification tasks.
pub trait FeedListener: Send + Sync + 'static {
    /// Instance `instance`'s log may hold new entries.
    fn changed(&self, instance: InstanceId);
    /// Any instance's log may hold new entries.
    fn resync(&self);
}

/// Where a client reads from, as it asked with `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// From the beginning of the log (`0`).
    Start,
    /// From the log's head when the request arrives: only later changes (`now`).
    Now,
    /// After this entry (a [`Seq`] the server handed out earlier).
    After(u64),
}

impl Since {
    /// Parse `since` of data instance `instance`: `0`, `now`, or a sequence this instance
    /// handed out. A sequence of another instance (one destroyed and created again under
    /// the same name) is [`Error::Gone`]; anything else [`Error::Invalid`].
    pub fn parse(text: &str, instance: &Instance) -> Result<Self> {
        match text {
            "0" | "" => return Ok(Self::Start),
            "now" => return Ok(Self::Now),
            _ => {}
        }
        let seq: Seq = text.parse()?;
        if seq.instance != instance.id {
            return Err(Error::Gone(format!(
                "since {text:?} is a position in an earlier {} instance named \"{}\", \
                 which was destroyed; read the changes again from since=0",
                instance.kind(),
                instance.name
            )));
        }
        Ok(if seq.n == 0 {
            Self::Start
        } else {
            Self::After(seq.n)
        })
    }

    /// The entry number to read after, given the log's current `head` for [`Since::Now`].
    pub fn after(self, head: u64) -> u64 {
        match self {
            Self::Start => 0,
            Self::Now => head,
            Self::After(n) => n,
        }
    }
}

/// A position as clients see it: `<n>-<instance id>`. Clients treat it as opaque text;
/// it is only ever handed back as `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seq {
    /// The entry number.
    pub n: u64,
    /// The instance whose log it numbers.
    pub instance: InstanceId,
}

impl Seq {
    /// Entry `n` of `instance`'s log.
    pub fn new(instance: &Instance, n: u64) -> Self {
        Self {
            n,
            instance: instance.id,
        }
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.n, self.instance.0)
    }
}

impl FromStr for Seq {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            let mut shown = s.to_owned();
            if shown.len() > 64 {
                shown.truncate(shown.floor_char_boundary(64));
                shown.push('…');
            }
            Error::invalid(format!(
                "since {shown:?} is not a sequence: send 0, now, or a seq or last_seq this \
                 feed answered"
            ))
        };
        let (n, inst) = s.split_once('-').ok_or_else(bad)?;
        let digits =
            |t: &str| !t.is_empty() && t.len() <= 19 && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(n) || !digits(inst) {
            return Err(bad());
        }
        Ok(Self {
            n: n.parse().map_err(|_| bad())?,
            instance: InstanceId(inst.parse().map_err(|_| bad())?),
        })
    }
}

/// The answer for a position older than the oldest entry `instance` still keeps
/// (`oldest` is the first kept entry's number).
pub fn compacted(instance: &Instance, since: u64, oldest: u64) -> Error {
    Error::Gone(format!(
        "the changes of {} instance \"{}\" after {} were compacted away (the oldest kept \
         is {}): read the instance again (since=0 lists every entry still kept) and \
         follow its changes from the last_seq of that answer",
        instance.kind(),
        instance.name,
        Seq::new(instance, since),
        Seq::new(instance, oldest)
    ))
}

/// The answer for a position beyond the log's `head` (a sequence from a restored backup's
/// future, or made up).
pub fn ahead(instance: &Instance, since: u64, head: u64) -> Error {
    Error::Gone(format!(
        "since {} is ahead of {} instance \"{}\", whose latest change is {}: read the \
         changes again from since=0",
        Seq::new(instance, since),
        instance.kind(),
        instance.name,
        Seq::new(instance, head)
    ))
}

/// Check a read after entry `since` of a log whose head is `head` and whose oldest kept
/// entry is `oldest` (`None`: the log keeps no entry). Entries are numbered without gaps
/// from 1, so a read is whole exactly when it starts at or after the entry before the
/// oldest kept one.
pub fn check_since(instance: &Instance, since: u64, head: u64, oldest: Option<u64>) -> Result<()> {
    if since > head {
        return Err(ahead(instance, since, head));
    }
    let first_kept = oldest.unwrap_or(head + 1);
    if since + 1 < first_kept {
        return Err(compacted(instance, since, first_kept));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AppName, InstanceConfig};

    fn inst(id: i64) -> Instance {
        Instance {
            id: InstanceId(id),
            app: AppName::domain(),
            name: "m".parse().unwrap(),
            config: InstanceConfig::Data,
            created_ms: 0,
        }
    }

    #[test]
    fn positions_round_trip_and_name_their_instance() {
        let i = inst(7);
        let s = Seq::new(&i, 42);
        assert_eq!(s.to_string(), "42-7");
        assert_eq!(Since::parse("42-7", &i).unwrap(), Since::After(42));
        assert_eq!(Since::parse("0", &i).unwrap(), Since::Start);
        assert_eq!(Since::parse("0-7", &i).unwrap(), Since::Start);
        assert_eq!(Since::parse("now", &i).unwrap(), Since::Now);
        assert!(matches!(Since::parse("42-8", &i), Err(Error::Gone(_))));
        for bad in [
            "x",
            "1",
            "-7",
            "1-",
            "1-a",
            "99999999999999999999-7",
            "1-2-3",
        ] {
            assert!(
                matches!(Since::parse(bad, &i), Err(Error::Invalid(_))),
                "{bad}"
            );
        }
        assert_eq!(Since::Now.after(9), 9);
        assert_eq!(Since::Start.after(9), 0);
    }

    #[test]
    fn reads_start_where_entries_are_kept() {
        let i = inst(1);
        // Nothing compacted: entries 1..=10 kept.
        assert!(check_since(&i, 0, 10, Some(1)).is_ok());
        assert!(check_since(&i, 10, 10, Some(1)).is_ok());
        assert!(matches!(
            check_since(&i, 11, 10, Some(1)),
            Err(Error::Gone(_))
        ));
        // 1..=4 compacted.
        assert!(check_since(&i, 4, 10, Some(5)).is_ok());
        assert!(matches!(
            check_since(&i, 3, 10, Some(5)),
            Err(Error::Gone(_))
        ));
        // Everything compacted: only the head itself is a whole position.
        assert!(check_since(&i, 10, 10, None).is_ok());
        assert!(matches!(check_since(&i, 9, 10, None), Err(Error::Gone(_))));
        // An empty log.
        assert!(check_since(&i, 0, 0, None).is_ok());
    }
}
