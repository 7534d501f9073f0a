//! The front's side of the jobs' leases (bucket `gradless-leases`): the expiry claim a
//! front writes before it declares a queued job expired, and the sweep that ends the jobs
//! whose worker stopped renewing their lease, whether or not anyone follows them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use protocol::{Event, FailureKind, RunFailure};

use super::Front;
use crate::bus::{self, Body, Message};
use crate::metrics;

impl Front {
    /// Claims job `id`'s lease key for its expiry ([`bus::Bus::claim`]): `true` when the
    /// job may be declared expired (this front's claim, or another front's, holds the key),
    /// `false` when worker `worker` took the job first.
    pub(super) async fn claim_expiry(&self, id: &str, worker: &str) -> Result<bool> {
        let claim = bus::Lease {
            worker: worker.to_string(),
            process_started_ms: 0,
            renewed_ms: bus::now_ms(),
            ttl_ms: self.heartbeat_ttl.as_millis() as u64,
            expired_by: Some(self.name.clone()),
        };
        Ok(match self.bus.claim(id, &claim).await? {
            None => true,
            Some(held) => held.expired_by.is_some(),
        })
    }

    /// Ends the jobs whose worker is gone although nobody follows them, until the process
    /// ends: every half lease TTL, `unfinished` lists the jobs the record store holds as
    /// running, and each one that has no end yet is ended here when
    /// - its lease lapsed (its worker stopped renewing it: killed, or cut off from NATS):
    ///   "worker NAME went away during the run" (the recorder marks it interrupted);
    /// - or it has no event at all (its front died between writing its row and handing it
    ///   over) for longer than the run timeout since this front first saw it: expired
    ///   without running. A queued job is left to its front's relay and its worker, which
    ///   expire it after the submitting front's own limit.
    ///
    /// The lease is read before the end, so a job whose worker finished it and released
    /// its lease in between is found ended, never declared gone.
    pub async fn sweep_leases<F, Fut>(self: Arc<Self>, unfinished: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<String>>>,
    {
        let mut first_seen: std::collections::HashMap<String, Instant> = Default::default();
        let mut tick = tokio::time::interval((self.heartbeat_ttl / 2).max(Duration::from_millis(250)));
        loop {
            tick.tick().await;
            // Within a TTL of this front's own trouble with NATS (a restart), every lease has
            // lapsed for want of a store, not of a worker: as with the worker list, an
            // absence proves nothing yet.
            let now = Instant::now();
            let trusted = self
                .workers
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .absence_proves_from
                .is_some_and(|from| now >= from)
                && self.bus.connected_since().is_some_and(|since| now >= since + self.heartbeat_ttl);
            if !trusted {
                continue;
            }
            let jobs = match unfinished().await {
                Ok(jobs) => jobs,
                Err(e) => {
                    tracing::debug!("the lease sweep could not list the unfinished jobs: {e:#}");
                    continue;
                }
            };
            first_seen.retain(|job, _| jobs.contains(job));
            for job in jobs {
                let seen = *first_seen.entry(job.clone()).or_insert_with(Instant::now);
                match self.sweep_one(&job, seen).await {
                    Ok(Some(kind)) => tracing::warn!(job = %job, "ended by the lease sweep: {kind:?}"),
                    Ok(None) => {}
                    Err(e) => tracing::debug!(job = %job, "the lease sweep: {e:#}"),
                }
            }
        }
    }

    /// One job of [`Front::sweep_leases`]: the failure it published, if any.
    async fn sweep_one(&self, job: &str, first_seen: Instant) -> Result<Option<FailureKind>> {
        let lease = self.bus.lease(job).await?;
        if self.bus.has_ended(job).await? {
            return Ok(None);
        }
        let now = bus::now_ms();
        let last = self.bus.last_event(job).await?;
        let (kind, worker, text) = match (&lease, &last) {
            (Some(l), _) if l.is_current(now) => return Ok(None),
            // A front's expiry claim whose end never followed (that front stopped between
            // the two): the end it meant to publish.
            (Some(l), _) if l.expired_by.is_some() => (
                FailureKind::Timeout,
                l.worker.clone(),
                format!(
                    "it waited for worker {} longer than the run time limit ({} s): expired without running",
                    l.worker,
                    self.run_timeout.as_secs()
                ),
            ),
            (Some(l), _) => (
                FailureKind::WorkerGone,
                l.worker.clone(),
                format!("worker {} went away during the run", l.worker),
            ),
            // Its worker spoke for it, and its lease is gone without an end: long lapsed.
            (None, Some(m)) if m.process_started_ms.is_some() => (
                FailureKind::WorkerGone,
                m.worker.clone(),
                format!("worker {} went away during the run", m.worker),
            ),
            // Queued: its front (or a viewer's) expires it after that front's own limit, or
            // its worker when it pulls it; this front's limit is not the submitter's.
            (None, Some(_)) => return Ok(None),
            // Never handed over (its front died between writing its row and publishing it):
            // no worker will ever see it.
            (None, None) => {
                let waited = first_seen.elapsed();
                if waited <= self.run_timeout {
                    return Ok(None);
                }
                let text = format!(
                    "it was never handed to a worker (the front that accepted it stopped first), and {} s passed, longer than the run time limit ({} s): expired without running",
                    waited.as_secs(),
                    self.run_timeout.as_secs()
                );
                (FailureKind::Timeout, String::new(), text)
            }
        };
        metrics::global().count_failure(if kind == FailureKind::Timeout { "timeout" } else { "worker_gone" });
        let message = Message {
            worker,
            process_started_ms: None,
            emitted_us: bus::now_us(),
            measured: None,
            body: Body::Event { event: Event::Failed { failure: RunFailure { kind, message: text } } },
        };
        self.bus.publish_event(job, &message, Some(&format!("{job}-end"))).await?;
        Ok(Some(kind))
    }
}
