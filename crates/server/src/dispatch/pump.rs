//! The pump of one queue: claims due jobs up to the queue's concurrency, delivers each in
//! its own task, settles what finished, and sleeps until something happens (an enqueue, a
//! delivery finishing, a retry falling due, or a change of mode).
//!
//! Each queue has its own pump and its own delivery slots, so a slow or dead worker only
//! ever occupies its own queue's slots.

use std::{sync::Arc, time::Duration};

use quintet_core::{
    Error, Instance,
    ports::queue::{JobQueue, Outcome, Settlement},
};
use tokio::{
    sync::{Notify, watch},
    task::{JoinError, JoinSet},
};

use super::deliver::Delivery;

/// What a pump should be doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Claim and deliver.
    Run,
    /// Claim nothing more; finish and settle the deliveries in flight, then stop.
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

/// One queue's pump.
pub(super) struct Pump {
    pub port: Arc<dyn JobQueue>,
    pub instance: Arc<Instance>,
    pub delivery: Arc<Delivery>,
    pub concurrency: usize,
    pub wake: Arc<Notify>,
    pub mode: watch::Receiver<Mode>,
}

impl Pump {
    /// Run until told to stop, drained, or the queue's storage is gone.
    pub async fn run(mut self) {
        let lease_ms = i64::try_from(self.delivery.timeout.as_millis())
            .unwrap_or(i64::MAX / 2)
            .saturating_add(LEASE_MARGIN_MS);
        let clock = Arc::clone(&self.delivery.clock);
        let mut inflight: JoinSet<Settlement> = JoinSet::new();
        let mut finished: Vec<Settlement> = Vec::new();
        let mut want_claim = true;
        let mut next_due: Option<i64> = None;
        let mut store_failures: i64 = 0;
        loop {
            let mode = *self.mode.borrow_and_update();
            if mode == Mode::Stop {
                inflight.abort_all();
                return;
            }
            while let Some(done) = inflight.try_join_next() {
                self.collect(done, &mut finished);
            }
            if !finished.is_empty() {
                // A job released for a retry is due again later: look then.
                for s in &finished {
                    if let Outcome::RetryAt { due_ms, .. } = s.outcome {
                        next_due = Some(next_due.map_or(due_ms, |d| d.min(due_ms)));
                    }
                }
                self.settle(clock.now_ms(), std::mem::take(&mut finished))
                    .await;
            }
            if mode == Mode::Drain && inflight.is_empty() {
                return;
            }
            let now = clock.now_ms();
            if next_due.is_some_and(|due| due <= now) {
                want_claim = true;
            }
            let free = self.concurrency.saturating_sub(inflight.len());
            if mode == Mode::Run && want_claim && free > 0 {
                match self
                    .port
                    .claim(&self.instance, now, now + lease_ms, free)
                    .await
                {
                    Ok(claim) => {
                        store_failures = 0;
                        want_claim = claim.jobs.len() == free;
                        next_due = claim.next_due_ms;
                        for job in claim.jobs {
                            let delivery = Arc::clone(&self.delivery);
                            inflight.spawn(async move { delivery.deliver(job).await });
                        }
                    }
                    Err(Error::NotFound(_)) => {
                        tracing::debug!(queue = %self.instance.name, "queue storage gone; pump stops");
                        inflight.abort_all();
                        return;
                    }
                    Err(e) => {
                        store_failures += 1;
                        let pause = (1_000 * store_failures).min(MAX_ERROR_PAUSE_MS);
                        tracing::error!(queue = %self.instance.name, error = %e, pause_ms = pause,
                            "claiming jobs failed");
                        want_claim = false;
                        next_due = Some(now + pause);
                    }
                }
            }
            let free = self.concurrency.saturating_sub(inflight.len());
            let sleep_ms = next_due
                .filter(|_| mode == Mode::Run && free > 0)
                .map(|due| (due - clock.now_ms()).clamp(0, MAX_SLEEP_MS));
            let sleep = tokio::time::sleep(Duration::from_millis(
                sleep_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
            ));
            tokio::select! {
                biased;
                changed = self.mode.changed() => {
                    if changed.is_err() {
                        // The dispatcher is gone: nobody can stop or drain us any more.
                        inflight.abort_all();
                        return;
                    }
                }
                Some(done) = inflight.join_next(), if !inflight.is_empty() => {
                    self.collect(done, &mut finished);
                }
                () = self.wake.notified() => want_claim = true,
                () = sleep, if sleep_ms.is_some() => want_claim = true,
            }
        }
    }

    fn collect(&self, done: Result<Settlement, JoinError>, finished: &mut Vec<Settlement>) {
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

    async fn settle(&self, now_ms: i64, settlements: Vec<Settlement>) {
        let n = settlements.len();
        if let Err(e) = self.port.settle(&self.instance, now_ms, settlements).await {
            // The jobs keep their leases: they are delivered again after a restart or when
            // the leases expire (at-least-once).
            tracing::error!(queue = %self.instance.name, error = %e, jobs = n,
                "recording delivery outcomes failed");
        }
    }
}
