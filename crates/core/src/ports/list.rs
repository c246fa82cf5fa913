//! Walking a data instance's documents by id, page by page: what every [`DocStore`]
//! shares in [`DocStore::list`].
//!
//! An adapter answers two questions, [`ListPages::by_ids`] and [`ListPages::page`];
//! [`list_stream`] turns them into the [`DocStream`] the port returns. The first page is
//! read before answering, so a failure is still a status; the next one when the client has
//! read the previous one. Each page continues after the last id sent, so pages need no
//! open transaction, and `limit` is honoured across pages.
//!
//! [`DocStore`]: super::data::DocStore
//! [`DocStore::list`]: super::data::DocStore::list

use std::collections::VecDeque;

use async_trait::async_trait;

use super::data::{DocStream, ListQuery, RawJson};
use crate::Result;

/// One page of a walk over ids in byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page<'a> {
    /// Lowest id included, if any.
    pub low: Option<&'a str>,
    /// Highest id included, if any.
    pub high: Option<&'a str>,
    /// The last id sent: the page continues after it (below it, when descending).
    pub after: Option<&'a str>,
    /// Walk from high ids to low ones.
    pub descending: bool,
    /// At most this many documents.
    pub size: usize,
}

/// Where a data adapter reads the pages of a list.
#[async_trait]
pub trait ListPages: Send + Sync + 'static {
    /// The documents of `ids` that exist, in the order asked (an id asked twice is
    /// answered twice), at most `limit`.
    async fn by_ids(&self, ids: &[String], limit: usize) -> Result<Vec<RawJson>>;

    /// The documents of `page` with their ids, in the walk's order.
    async fn page(&self, page: Page<'_>) -> Result<Vec<(String, RawJson)>>;
}

/// The answer of [`DocStore::list`](super::data::DocStore::list) for `query`, read from
/// `source` in pages of at most `page_size` documents.
pub async fn list_stream<S: ListPages>(
    source: S,
    query: ListQuery,
    page_size: usize,
) -> Result<DocStream> {
    let mut walk = Walk {
        source,
        query,
        page_size: page_size.max(1),
        cursor: None,
        sent: 0,
        buf: VecDeque::new(),
        done: false,
    };
    walk.fetch().await?;
    Ok(Box::pin(futures_util::stream::unfold(
        walk,
        |mut w| async move {
            loop {
                if let Some(doc) = w.buf.pop_front() {
                    return Some((Ok(doc), w));
                }
                if w.done {
                    return None;
                }
                if let Err(e) = w.fetch().await {
                    w.done = true;
                    return Some((Err(e), w));
                }
            }
        },
    )))
}

/// The state of a streaming list: the next page is read when the buffer runs dry.
struct Walk<S> {
    source: S,
    query: ListQuery,
    page_size: usize,
    cursor: Option<String>,
    sent: usize,
    buf: VecDeque<RawJson>,
    done: bool,
}

impl<S: ListPages> Walk<S> {
    async fn fetch(&mut self) -> Result<()> {
        let remaining = self
            .query
            .limit
            .map_or(usize::MAX, |l| l - self.sent.min(l));
        if remaining == 0 {
            self.done = true;
            return Ok(());
        }
        if let Some(ids) = &self.query.keys {
            self.buf.extend(self.source.by_ids(ids, remaining).await?);
            self.done = true;
            return Ok(());
        }
        let size = remaining.min(self.page_size);
        let q = &self.query;
        let (low, high) = if q.descending {
            (&q.end_key, &q.start_key)
        } else {
            (&q.start_key, &q.end_key)
        };
        let page = Page {
            low: low.as_deref(),
            high: high.as_deref(),
            after: self.cursor.as_deref(),
            descending: q.descending,
            size,
        };
        let rows = self.source.page(page).await?;
        if rows.len() < size {
            self.done = true;
        }
        self.sent += rows.len();
        for (id, doc) in rows {
            self.buf.push_back(doc);
            self.cursor = Some(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeMap,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use futures_util::StreamExt;

    use super::*;
    use crate::ports::data::stored_raw;

    /// Ids `d00`..`d09`, walked in memory, counting the pages read.
    struct Ten(Arc<AtomicUsize>);

    #[async_trait]
    impl ListPages for Ten {
        async fn by_ids(&self, ids: &[String], limit: usize) -> Result<Vec<RawJson>> {
            let all = docs();
            Ok(ids
                .iter()
                .filter_map(|id| all.get(id).cloned())
                .take(limit)
                .map(|t| stored_raw(t).unwrap())
                .collect())
        }

        async fn page(&self, page: Page<'_>) -> Result<Vec<(String, RawJson)>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            let all = docs();
            let within = |id: &String| {
                page.low.is_none_or(|l| id.as_str() >= l)
                    && page.high.is_none_or(|h| id.as_str() <= h)
                    && page.after.is_none_or(|a| {
                        if page.descending {
                            id.as_str() < a
                        } else {
                            id.as_str() > a
                        }
                    })
            };
            let picked: Vec<_> = if page.descending {
                all.into_iter().rev().filter(|(id, _)| within(id)).collect()
            } else {
                all.into_iter().filter(|(id, _)| within(id)).collect()
            };
            Ok(picked
                .into_iter()
                .take(page.size)
                .map(|(id, t)| (id, stored_raw(t).unwrap()))
                .collect())
        }
    }

    fn docs() -> BTreeMap<String, String> {
        (0..10)
            .map(|n| (format!("d{n:02}"), format!("{{\"_id\":\"d{n:02}\"}}")))
            .collect()
    }

    async fn walk(params: &[(&str, &str)], page_size: usize) -> (Vec<String>, usize) {
        let pages = Arc::new(AtomicUsize::new(0));
        let query = ListQuery::from_params(params.iter().copied()).unwrap();
        let stream = list_stream(Ten(Arc::clone(&pages)), query, page_size)
            .await
            .unwrap();
        let ids = stream
            .map(|d| {
                let v: serde_json::Value = serde_json::from_str(d.unwrap().get()).unwrap();
                v["_id"].as_str().unwrap().to_owned()
            })
            .collect::<Vec<_>>()
            .await;
        (ids, pages.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn pages_chain_on_the_last_id_and_honour_limit() {
        let (ids, pages) = walk(&[], 3).await;
        assert_eq!(ids.len(), 10);
        assert_eq!(pages, 4, "3 + 3 + 3 + 1");
        let (ids, _) = walk(&[("limit", "4")], 3).await;
        assert_eq!(ids, ["d00", "d01", "d02", "d03"]);
        let (ids, _) = walk(
            &[
                ("descending", "true"),
                ("startkey", "d07"),
                ("endkey", "d02"),
            ],
            2,
        )
        .await;
        assert_eq!(ids, ["d07", "d06", "d05", "d04", "d03", "d02"]);
        let (ids, pages) = walk(&[("keys", "d05,zz,d01,d05"), ("limit", "2")], 3).await;
        assert_eq!((ids, pages), (vec!["d05".into(), "d01".into()], 0));
    }
}
