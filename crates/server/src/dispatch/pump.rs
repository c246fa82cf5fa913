//! The pump of one queue: claims due jobs, delivers each in its own task up to the queue's
//! concurrency, records the outcomes, and sleeps until something happens (an enqueue, a
//! delivery finishing, a retry falling due, or a change of mode).
//!
//! Claiming and recording run beside the deliveries, never in their way: a claim is its own
//! task (the pump goes on collecting finished deliveries meanwhile), and outcomes are
//! recorded by a task of their own, one batch at a time: outcomes that finish while a batch
//! is being written wait for the next, so one write records many deliveries.
//!
//! Each queue has its own pump and its own delivery slots, so a slow or dead worker only
//! ever occupies its own queue's slots.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use quintet_core::{
    Error, Instance, Result,
    ports::queue::{Claim, ClaimedJob, JobQueue, Outcome, Settlement},
};
use tokio::{
    sync::{Notify, watch},
    task::{JoinError, JoinHandle, JoinSet},
};

use super::deliver::Delivery;

/// What a pump should be doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Claim and deliver.
    Run,
    /// Claim nothing more; give back claimed jobs not yet sent, finish and record the
    /// deliveries in flight, then stop.
    Drain,
    /// Stop now, abandoning deliveries in flight (the queue was destroyed).
    Stop,
}

/// A lease outlives the delivery's timeout by this much, so that a lease only expires when
/// the node holding it is gone.
const LEASE_MARGIN_MS: i64 = 30_000;
/// Longest sleep before looking again when a job is due in the future: clocks move in
/// ways timers do not see (a test's manual clock, a stepped system clock).
const MAX_SLEEP_MS: i64 = 1_000;
/// Longest pause after the store failed, before trying again.
const MAX_ERROR_PAUSE_MS: i64 = 30_000;

type ClaimTask = JoinHandle<Result<Claim>>;

/// One queue's pump.
pub(super) struct Pump {
    pub port: Arc<dyn JobQueue>,
    pub instance: Arc<Instance>,
    pub delivery: Arc<Delivery>,
    pub concurrency: usize,
    pub wake: Arc<Notify>,
    pub mode: watch::Receiver<Mode>,
}

/// The pump's moving parts.
struct Work {
    /// Deliveries in flight.
    inflight: JoinSet<Settlement>,
    /// Claimed jobs waiting for a delivery slot (only between a claim and its start, or
    /// while draining).
    buffer: VecDeque<ClaimedJob>,
    /// The claim under way, if any, and how many jobs it asked for.
    claiming: Option<ClaimTask>,
    claim_max: usize,
    /// The batch of outcomes being recorded (at most one task).
    settling: JoinSet<()>,
    /// Outcomes waiting for the next batch.
    unsettled: Vec<Settlement>,
    /// Whether a claim may find something (after a wake, a due time, or a full claim).
    want_claim: bool,
    /// When the next job left in the store falls due.
    next_due: Option<i64>,
    /// Consecutive failures of the store, for the pause before trying again.
    store_failures: i64,
}

impl Work {
    fn abort(&mut self) {
        self.inflight.abort_all();
        self.settling.abort_all();
        if let Some(claim) = self.claiming.take() {
            claim.abort();
        }
    }
}

/// The result of the claim under way, or never when there is none.
async fn claim_done(
    claiming: &mut Option<ClaimTask>,
) -> std::result::Result<Result<Claim>, JoinError> {
    match claiming {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

impl Pump {
    /// Run until told to stop, drained, or the queue's storage is gone.
    pub async fn run(mut self) {
        let clock = Arc::clone(&self.delivery.clock);
        let mut w = Work {
            inflight: JoinSet::new(),
            buffer: VecDeque::new(),
            claiming: None,
            claim_max: 0,
            settling: JoinSet::new(),
            unsettled: Vec::new(),
            want_claim: true,
            next_due: None,
            store_failures: 0,
        };
        loop {
            let mode = *self.mode.borrow_and_update();
            if mode == Mode::Stop {
                w.abort();
                return;
            }
            let mut finished = Vec::new();
            while let Some(done) = w.inflight.try_join_next() {
                self.collect(done, &mut finished);
            }
            self.record(&mut w, finished);
            while w.settling.try_join_next().is_some() {}
            self.flush(&mut w);

            if mode == Mode::Drain {
                if let Some(claim) = w.claiming.take()
                    && let Ok(Ok(claim)) = claim.await
                {
                    w.buffer.extend(claim.jobs);
                }
                let unsent: Vec<Settlement> = w
                    .buffer
                    .drain(..)
                    .map(|job| Settlement {
                        id: job.id,
                        lease: job.lease,
                        outcome: Outcome::Released,
                    })
                    .collect();
                self.record(&mut w, unsent);
                if w.inflight.is_empty() {
                    while w.settling.join_next().await.is_some() {}
                    self.flush(&mut w);
                    while w.settling.join_next().await.is_some() {}
                    return;
                }
            } else {
                self.start_deliveries(&mut w);
                let now = clock.now_ms();
                if w.next_due.is_some_and(|due| due <= now) {
                    w.want_claim = true;
                }
                let room = self.room(&w);
                if w.claiming.is_none() && w.want_claim && room > 0 {
                    w.want_claim = false;
                    w.claim_max = room;
                    w.claiming = Some(self.claim(now, room));
                }
            }

            let idle_with_room = mode == Mode::Run && w.claiming.is_none() && self.room(&w) > 0;
            let sleep_ms = w
                .next_due
                .map(|due| (due - clock.now_ms()).clamp(0, MAX_SLEEP_MS))
                .filter(|_| idle_with_room);
            let sleep = tokio::time::sleep(Duration::from_millis(
                sleep_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
            ));
            tokio::select! {
                biased;
                changed = self.mode.changed() => {
                    if changed.is_err() {
                        // The dispatcher is gone: nobody can stop or drain us any more.
                        w.abort();
                        return;
                    }
                }
                claimed = claim_done(&mut w.claiming) => {
                    w.claiming = None;
                    if !self.claimed(&mut w, claimed, clock.now_ms()) {
                        w.abort();
                        return;
                    }
                }
                Some(done) = w.inflight.join_next(), if !w.inflight.is_empty() => {
                    let mut finished = Vec::new();
                    self.collect(done, &mut finished);
                    self.record(&mut w, finished);
                }
                Some(_) = w.settling.join_next(), if !w.settling.is_empty() => self.flush(&mut w),
                () = self.wake.notified() => w.want_claim = true,
                () = sleep, if sleep_ms.is_some() => w.want_claim = true,
            }
        }
    }

    /// How many more jobs a claim may take: one per free delivery slot. Jobs are not
    /// claimed ahead of a free slot, so a job cancelled while others are being delivered is
    /// never sent afterwards.
    fn room(&self, w: &Work) -> usize {
        self.concurrency
            .saturating_sub(w.inflight.len() + w.buffer.len())
    }

    fn start_deliveries(&self, w: &mut Work) {
        while w.inflight.len() < self.concurrency {
            let Some(job) = w.buffer.pop_front() else {
                break;
            };
            let delivery = Arc::clone(&self.delivery);
            w.inflight.spawn(async move { delivery.deliver(job).await });
        }
    }

    fn claim(&self, now_ms: i64, max: usize) -> ClaimTask {
        let lease_ms = i64::try_from(self.delivery.timeout.as_millis())
            .unwrap_or(i64::MAX / 2)
            .saturating_add(LEASE_MARGIN_MS);
        let (port, instance) = (Arc::clone(&self.port), Arc::clone(&self.instance));
        tokio::spawn(async move {
            port.claim(&instance, now_ms, now_ms.saturating_add(lease_ms), max)
                .await
        })
    }

    /// Take in what a claim found; false when the queue's storage is gone.
    fn claimed(
        &self,
        w: &mut Work,
        claimed: std::result::Result<Result<Claim>, JoinError>,
        now_ms: i64,
    ) -> bool {
        match claimed {
            Ok(Ok(claim)) => {
                w.store_failures = 0;
                // A full claim may have left more due jobs behind.
                w.want_claim = w.want_claim || claim.jobs.len() >= w.claim_max;
                w.next_due = claim.next_due_ms;
                w.buffer.extend(claim.jobs);
                self.start_deliveries(w);
                true
            }
            Ok(Err(Error::NotFound(_))) => {
                tracing::debug!(queue = %self.instance.name, "queue storage gone; pump stops");
                false
            }
            Ok(Err(e)) => {
                w.store_failures += 1;
                let pause = (1_000 * w.store_failures).min(MAX_ERROR_PAUSE_MS);
                tracing::error!(queue = %self.instance.name, error = %e, pause_ms = pause,
                    "claiming jobs failed");
                w.next_due = Some(now_ms + pause);
                true
            }
            Err(e) => {
                tracing::error!(queue = %self.instance.name, error = %e, "a claim task failed");
                w.next_due = Some(now_ms + MAX_SLEEP_MS);
                true
            }
        }
    }

    fn collect(
        &self,
        done: std::result::Result<Settlement, JoinError>,
        finished: &mut Vec<Settlement>,
    ) {
        match done {
            Ok(settlement) => finished.push(settlement),
            // A delivery that panicked keeps its lease; the job is delivered again once the
            // lease expires or the node restarts.
            Err(e) if e.is_panic() => {
                tracing::error!(queue = %self.instance.name, "a delivery task panicked");
            }
            Err(_) => {}
        }
    }

    /// Queue `settlements` for recording; note when released retries fall due.
    fn record(&self, w: &mut Work, settlements: Vec<Settlement>) {
        use crate::metrics::DeliveryOutcome;
        for s in &settlements {
            let counted = match s.outcome {
                Outcome::Delivered => Some(DeliveryOutcome::Delivered),
                Outcome::Failed { .. } => Some(DeliveryOutcome::Failed),
                Outcome::RetryAt { .. } => Some(DeliveryOutcome::Retry),
                Outcome::Released => None,
            };
            if let Some(outcome) = counted {
                self.delivery
                    .metrics
                    .delivery(&self.delivery.label, outcome);
            }
            if let Outcome::RetryAt { due_ms, .. } = s.outcome {
                w.next_due = Some(w.next_due.map_or(due_ms, |d| d.min(due_ms)));
            }
            if let Outcome::Failed { error } = &s.outcome {
                tracing::debug!(queue = %self.instance.name, job = %s.id, %error, "job failed");
            }
        }
        w.unsettled.extend(settlements);
        self.flush(w);
    }

    /// Start recording the waiting outcomes, unless a batch is being recorded already.
    fn flush(&self, w: &mut Work) {
        if w.unsettled.is_empty() || !w.settling.is_empty() {
            return;
        }
        let settlements = std::mem::take(&mut w.unsettled);
        let (port, instance) = (Arc::clone(&self.port), Arc::clone(&self.instance));
        let now_ms = self.delivery.clock.now_ms();
        w.settling.spawn(async move {
            let n = settlements.len();
            match port.settle(&instance, now_ms, settlements).await {
                Ok(_) => {}
                // Destroyed meanwhile: there is nothing left to record.
                Err(Error::NotFound(_)) => {}
                // The jobs keep their leases: they are delivered again after a restart or
                // when the leases expire (at-least-once).
                Err(e) => tracing::error!(queue = %instance.name, error = %e, jobs = n,
                    "recording delivery outcomes failed"),
            }
        });
    }
}
