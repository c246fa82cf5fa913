//! Group commit of single creates: concurrent creates of a node are gathered into one
//! statement, so one transaction (one WAL flush, one turn of the instance's change
//! counter) acknowledges many documents.
//!
//! **Why.** Every create used to be its own transaction. PostgreSQL flushes the WAL once
//! per commit, and the change counter of an instance (see `changes`) is held from a
//! commit's first change number to the end of its flush, so creates of one instance were
//! answered one flush after another, however many nodes sent them: two nodes created no
//! more than one. A group pays that flush once for all its documents.
//!
//! **How.** A create computes its index entries with the definitions it knows and queues
//! itself on its instance's queue. One task per instance with creates waiting takes the
//! first create queued and every create queued behind it (at most [`MAX_GROUP`], or
//! [`MAX_GROUP_BYTES`] of documents), and runs them as one statement, [`CREATE_GROUP`];
//! the creates that arrive meanwhile wait for the next group, and the task ends once its
//! queue is empty. A lone create under light load is thus sent at once; under load a group
//! holds the creates that arrived during the previous commit. One group at a time per
//! instance is enough: the groups of one instance could not commit side by side anyway,
//! as each waits for the change counter the previous one holds until its commit ends (a
//! second task gathering meanwhile measured no faster, with smaller groups). Instances
//! never wait for each other: a statement held up on one instance (its row locked while
//! an index is built) holds up only that instance's creates. Every create is answered only
//! after the statement (and with it its implicit transaction) committed.
//!
//! **One write never fails its neighbours.** A document whose id exists is not inserted
//! (`ON CONFLICT DO NOTHING`) and only its own create answers "exists". Any other failure
//! of the statement, a group whose instance changed its index definitions or is gone, and
//! the second create of an id already in the group are answered [`Grouped::Alone`]: each
//! such create then runs as before, in a transaction of its own, and meets its own error.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use crate::{database::PgDatabase, listen::lock};

/// The most creates in one group: enough to absorb the writes of hundreds of connections
/// arriving during one commit, small enough that one statement stays short.
pub(super) const MAX_GROUP: usize = 256;

/// A group stops growing once its documents take this many bytes, so that large documents
/// do not make one statement of hundreds of megabytes (it always takes at least one).
pub(super) const MAX_GROUP_BYTES: usize = 4 << 20;

/// Insert the documents `$3` (texts `$4`, `$5`: whether `jsonb` refuses the text) of
/// instance `$1` whose definitions are still at version `$2`, with their index entries
/// (`$6` numbers, `$7` keys, `$8` ids), skipping ids that exist, and record one change
/// per inserted document, in one statement. Answers whether the instance row matched and
/// the ids inserted.
///
/// The changes are recorded here rather than by the per-row trigger (which this statement
/// turns off for its own transaction with `set_config(…, true)`, before the trigger fires
/// at commit): one counter update for the group instead of one per document, taken last,
/// so the counter is held only for the commit.
pub(super) const CREATE_GROUP: &str = "
WITH cfg AS (
    SELECT set_config('quintet.feed', 'explicit', true)
), inst AS (
    SELECT instance FROM quintet_data_instances
    WHERE instance = $1 AND indexes = $2 FOR SHARE
), doc AS (
    INSERT INTO quintet_data_docs (instance, id, body, doc)
    SELECT inst.instance, u.id, u.body, CASE WHEN u.plain THEN NULL ELSE u.body::jsonb END
    FROM cfg, inst, unnest($3::text[], $4::text[], $5::bool[]) AS u(id, body, plain)
    ON CONFLICT (instance, id) DO NOTHING
    RETURNING id
), keys AS (
    INSERT INTO quintet_data_keys (instance, num, k, id)
    SELECT $1, u.num, u.k, u.id
    FROM unnest($6::int4[], $7::bytea[], $8::text[]) AS u(num, k, id)
    WHERE u.id IN (SELECT id FROM doc)
), made AS (
    SELECT id, row_number() OVER () AS ord, count(*) OVER () AS n FROM doc
), seq AS (
    UPDATE quintet_data_seq s SET seq = s.seq + m.n
    FROM (SELECT DISTINCT n FROM made) m
    WHERE s.instance = $1
    RETURNING s.seq, m.n
), rec AS (
    INSERT INTO quintet_data_changes (instance, seq, id, deleted, at_ms)
    SELECT $1, seq.seq - seq.n + made.ord, made.id, false,
           (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
    FROM seq, made
)
SELECT (SELECT count(*) FROM inst),
       ARRAY(SELECT id FROM made),
       (SELECT count(pg_notify('quintet_data_' || md5(current_schema()), $1::text)) FROM seq)";

/// One create waiting for its group.
#[derive(Debug)]
pub(super) struct Create {
    /// The instance's id.
    pub instance: i64,
    /// The version of the index definitions `entries` were computed with.
    pub version: i64,
    pub id: String,
    pub text: String,
    /// Whether `jsonb` refuses `text` (see `write::jsonb_refuses`).
    pub refused: bool,
    /// The document's index entries: (index number, key).
    pub entries: Vec<(i32, Vec<u8>)>,
}

/// How a create fared in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grouped {
    /// Inserted and committed.
    Created,
    /// Not inserted: a document with its id exists.
    Exists,
    /// Not written: the create must run alone (see the module docs).
    Alone,
}

struct Queued {
    create: Create,
    answer: oneshot::Sender<Grouped>,
}

/// The queues of creates, one per instance with creates waiting, each emptied by a task of
/// its own that commits them in groups.
#[derive(Debug)]
pub(super) struct Groups {
    db: PgDatabase,
    queues: Arc<Mutex<Queues>>,
}

type Queues = HashMap<i64, mpsc::UnboundedSender<Queued>>;

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("create", &self.create)
            .finish_non_exhaustive()
    }
}

impl Groups {
    /// Groups committed over `db`.
    pub(super) fn new(db: &PgDatabase) -> Self {
        Self {
            db: db.clone(),
            queues: Arc::default(),
        }
    }

    /// Queue `create` and wait for its group's commit. [`Grouped::Alone`] when its
    /// instance's task is gone (it panicked).
    pub(super) async fn create(&self, create: Create) -> Grouped {
        let (answer, answered) = oneshot::channel();
        let instance = create.instance;
        {
            // Sent under the lock a task ends under, so no create is left in a queue
            // whose task has ended.
            let mut queues = lock(&self.queues);
            let queue = queues.entry(instance).or_insert_with(|| {
                let (queue, rx) = mpsc::unbounded_channel();
                tokio::spawn(work(
                    self.db.clone(),
                    instance,
                    rx,
                    Arc::clone(&self.queues),
                ));
                queue
            });
            if queue.send(Queued { create, answer }).is_err() {
                queues.remove(&instance);
                return Grouped::Alone;
            }
        }
        answered.await.unwrap_or(Grouped::Alone)
    }
}

/// Commit the creates of `instance` queued on `rx` in groups until the queue is empty;
/// then forget the queue and end.
async fn work(
    db: PgDatabase,
    instance: i64,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    queues: Arc<Mutex<Queues>>,
) {
    loop {
        let mut group = Vec::new();
        let mut bytes = 0;
        while group.len() < MAX_GROUP && bytes < MAX_GROUP_BYTES {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.create.text.len();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        if group.is_empty() {
            let mut queues = lock(&queues);
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => {
                    queues.remove(&instance);
                    return;
                }
            }
        }
        commit(&db, group).await;
    }
}

/// The group's creates split into one statement's worth each: by instance and version
/// (an instance's creates may have been computed with two versions of its indexes), the
/// first create of each id, in id order; the later ones of an id go alone.
fn split(group: Vec<Queued>) -> (Vec<Vec<Queued>>, Vec<Queued>) {
    let mut parts: HashMap<(i64, i64), (Vec<Queued>, HashSet<String>)> = HashMap::new();
    let mut alone = Vec::new();
    for q in group {
        let (part, ids) = parts
            .entry((q.create.instance, q.create.version))
            .or_default();
        if ids.insert(q.create.id.clone()) {
            part.push(q);
        } else {
            alone.push(q);
        }
    }
    let parts = parts
        .into_values()
        .map(|(mut part, _)| {
            // Groups insert in id order, so two groups (of two nodes) sharing ids wait for
            // each other in one direction only, never in a deadlock.
            part.sort_unstable_by(|x, y| x.create.id.cmp(&y.create.id));
            part
        })
        .collect();
    (parts, alone)
}

async fn commit(db: &PgDatabase, group: Vec<Queued>) {
    let (parts, alone) = split(group);
    for q in alone {
        let _ = q.answer.send(Grouped::Alone);
    }
    let outcomes = join_all(parts.iter().map(|part| run(db, part))).await;
    for (part, outcome) in parts.into_iter().zip(outcomes) {
        for q in part {
            let answer = match &outcome {
                Some(inserted) if inserted.contains(&q.create.id) => Grouped::Created,
                Some(_) => Grouped::Exists,
                None => Grouped::Alone,
            };
            // The create may have been cancelled (its client went away): its document is
            // committed all the same, as a lone create's would be.
            let _ = q.answer.send(answer);
        }
    }
}

/// Run one part as [`CREATE_GROUP`]: the ids inserted, or `None` when every create of
/// the part must run alone.
async fn run(db: &PgDatabase, part: &[Queued]) -> Option<HashSet<String>> {
    let first = &part.first()?.create;
    let (instance, version) = (first.instance, first.version);
    let (mut ids, mut texts, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    let (mut nums, mut keys, mut key_ids) = (Vec::new(), Vec::new(), Vec::new());
    for q in part {
        let c = &q.create;
        ids.push(c.id.as_str());
        texts.push(c.text.as_str());
        refused.push(c.refused);
        for (num, key) in &c.entries {
            nums.push(*num);
            keys.push(key.as_slice());
            key_ids.push(c.id.as_str());
        }
    }
    let result = async {
        let client = db.client().await.map_err(|e| e.to_string())?;
        let stmt = client
            .prepare_cached(CREATE_GROUP)
            .await
            .map_err(|e| crate::error::detail(&e))?;
        let params: [&(dyn ToSql + Sync); 8] = [
            &instance, &version, &ids, &texts, &refused, &nums, &keys, &key_ids,
        ];
        client
            .query_one(&stmt, &params)
            .await
            .map_err(|e| crate::error::detail(&e))
    }
    .await;
    match result {
        Ok(row) => {
            let matched: i64 = row.get(0);
            let inserted: Vec<String> = row.get(1);
            (matched == 1).then(|| inserted.into_iter().collect())
        }
        Err(error) => {
            tracing::debug!(%error, creates = part.len(), "a group of creates runs alone");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(instance: i64, version: i64, id: &str) -> Queued {
        let (answer, _) = oneshot::channel();
        Queued {
            create: Create {
                instance,
                version,
                id: id.to_owned(),
                text: "{}".to_owned(),
                refused: false,
                entries: Vec::new(),
            },
            answer,
        }
    }

    fn ids(part: &[Queued]) -> Vec<(i64, i64, &str)> {
        part.iter()
            .map(|q| (q.create.instance, q.create.version, q.create.id.as_str()))
            .collect()
    }

    #[test]
    fn a_group_splits_by_instance_and_version_and_sends_repeated_ids_alone() {
        let group = vec![
            queued(1, 0, "a"),
            queued(2, 0, "a"),
            queued(1, 0, "b"),
            queued(1, 0, "a"),
            queued(1, 1, "c"),
            queued(2, 0, "b"),
            queued(2, 0, "0"),
        ];
        let (parts, alone) = split(group);
        let mut parts: Vec<_> = parts.iter().map(|p| ids(p)).collect();
        parts.sort();
        assert_eq!(
            parts,
            vec![
                vec![(1, 0, "a"), (1, 0, "b")],
                vec![(1, 1, "c")],
                vec![(2, 0, "0"), (2, 0, "a"), (2, 0, "b")],
            ]
        );
        assert_eq!(ids(&alone), vec![(1, 0, "a")]);
    }
}
