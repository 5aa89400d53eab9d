//! The GETs and MGETs of a connection's pipeline that `ls-net` gathers and resolves together
//! (`exec::GetBatch`): which requests may join, and the resolution itself. The order
//! argument: a batch takes its view when it is resolved, and it is resolved before any later
//! request of its connection runs (`Net::run_backlog_in_order` resolves an open batch before
//! a request that does not join it), while every request in it joined without resolving; so
//! no read of a pipeline sees an older state than one before it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::route::Route;
use super::Net;
use crate::exec::{self, GetBatchStart};
use crate::queue::TrySendError;

impl Net {
    /// Resolves the open batch of GETs ([`exec::start_get_batch`]): replies delivered when
    /// DRAM answered them all (then `true`: the connection may go on), page reads queued
    /// for this turn's submission, or, when the read window is full, the GETs handed to the
    /// engine thread in order (as jobs; a full queue stalls the connection as for any job).
    pub(super) fn flush_gets(&mut self) -> bool {
        let Some(batch) = self.gets.take() else {
            return false;
        };
        let id = batch.conn();
        let Some(proto) = self.conns.get(&id).map(|c| c.proto) else {
            return false;
        };
        let (store, sink) = (&self.store, &self.sink);
        match exec::start_get_batch(store, &self.metrics, batch, proto, sink, &mut self.reads) {
            GetBatchStart::Answered(done) => {
                self.metrics
                    .reads_answered_inline
                    .fetch_add(done.len() as u64, Ordering::Relaxed);
                let mut touched = Vec::new();
                for d in done {
                    self.deliver(d, &mut touched);
                }
                true
            }
            GetBatchStart::Started(n) => {
                self.metrics
                    .reads_started_inline
                    .fetch_add(n as u64, Ordering::Relaxed);
                false
            }
            GetBatchStart::Elsewhere(jobs) => {
                let Some(c) = self.conns.get_mut(&id) else {
                    return false;
                };
                // Later reads of the connection wait for these (`resolves_in_order_here`).
                c.last_job = jobs.last().map(|j| j.seq).or(c.last_job);
                let mut newly_stalled = false;
                let mut jobs = VecDeque::from(jobs);
                while let Some(job) = jobs.pop_front() {
                    if let Some((_, held)) = &mut c.stalled {
                        held.push_back(job);
                        continue;
                    }
                    match self.engine_tx.try_send(job) {
                        Ok(()) => {}
                        Err(TrySendError::Full(job)) => {
                            c.stalled = Some((Route::Engine, VecDeque::from([job])));
                            newly_stalled = true;
                        }
                        Err(TrySendError::Disconnected(_)) => {
                            // Shutting down: nothing will answer these (as `retry_stalled`).
                            let gone = jobs.len() + 1;
                            c.in_flight = c.in_flight.saturating_sub(gone);
                            for _ in 0..gone {
                                c.inflight_meta.pop_back();
                            }
                            c.closing = true;
                            return false;
                        }
                    }
                }
                if newly_stalled {
                    self.stall(id);
                }
                false
            }
        }
    }
}

/// How many keys a request reads if it is a `GET key` or an `MGET key...`, which may join
/// its connection's batch of GETs (its command is checked as any other's when it runs).
pub(super) fn keys_read(args: &[bytes::Bytes]) -> Option<usize> {
    match args.first() {
        Some(name) if name.eq_ignore_ascii_case(b"GET") && args.len() == 2 => Some(1),
        Some(name) if name.eq_ignore_ascii_case(b"MGET") && args.len() >= 2 => Some(args.len() - 1),
        _ => None,
    }
}
