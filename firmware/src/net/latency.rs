//! The latency monitor on `ls-net` (LATENCY LATEST / HISTORY / RESET), as Redis keeps it: with
//! `latency-monitor-threshold` at N milliseconds (0, the default: off), a command that took
//! at least N ms from dispatch to reply (see [`super::slowlog`] for what is timed) is a sample
//! of the event `command`, or `fast-command` for a command of the table's `fast` flag. Each
//! event keeps its latest sample, its maximum and a history of up to 160 samples, one per
//! second (the worst of that second).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kvproto::Reply;

use crate::info::CommandStats;

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const HISTORY_LEN: usize = 160;

/// One event's samples.
#[derive(Debug, Default)]
struct Event {
    /// (unix seconds, milliseconds), oldest first, one per second.
    history: VecDeque<(u64, u64)>,
    /// The worst sample since start or RESET.
    max_ms: u64,
}

/// The monitor's threshold and events (by name).
#[derive(Debug)]
pub(super) struct Latency {
    threshold_ms: u64,
    events: BTreeMap<&'static str, Event>,
}

fn int(v: u64) -> Reply {
    Reply::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

impl Latency {
    /// A monitor with `latency-monitor-threshold` = `threshold_ms` (0: off).
    pub(super) fn new(threshold_ms: u64) -> Latency {
        Latency {
            threshold_ms,
            events: BTreeMap::new(),
        }
    }

    /// Records a command (its commandstats row) that took `took`.
    pub(super) fn record(&mut self, row: usize, took: Duration) {
        if self.threshold_ms == 0 {
            return;
        }
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        if ms < self.threshold_ms {
            return;
        }
        let fast = CommandStats::is_fast(row);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let e = self
            .events
            .entry(if fast { "fast-command" } else { "command" })
            .or_default();
        e.max_ms = e.max_ms.max(ms);
        match e.history.back_mut() {
            Some((t, worst)) if *t == now => *worst = (*worst).max(ms),
            _ => {
                e.history.push_back((now, ms));
                if e.history.len() > HISTORY_LEN {
                    e.history.pop_front();
                }
            }
        }
    }

    /// LATENCY LATEST: `[event, time, latest ms, max ms]` per event.
    pub(super) fn latest(&self) -> Reply {
        Reply::Array(
            self.events
                .iter()
                .filter_map(|(name, e)| {
                    let (t, ms) = e.history.back()?;
                    Some(Reply::Array(vec![
                        Reply::text(name),
                        int(*t),
                        int(*ms),
                        int(e.max_ms),
                    ]))
                })
                .collect(),
        )
    }

    /// LATENCY HISTORY `event`: `[time, ms]` per sample, oldest first.
    pub(super) fn history(&self, event: &[u8]) -> Reply {
        let samples = self
            .events
            .iter()
            .find(|(name, _)| name.as_bytes() == event)
            .map(|(_, e)| {
                e.history
                    .iter()
                    .map(|(t, ms)| Reply::Array(vec![int(*t), int(*ms)]))
                    .collect()
            })
            .unwrap_or_default();
        Reply::Array(samples)
    }

    /// LATENCY RESET `events` (none: all); answers how many events were dropped.
    pub(super) fn reset(&mut self, events: &[Bytes]) -> Reply {
        let before = self.events.len();
        if events.is_empty() {
            self.events.clear();
        } else {
            self.events
                .retain(|name, _| !events.iter().any(|e| e.as_ref() == name.as_bytes()));
        }
        int((before - self.events.len()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_above_the_threshold_and_resets() {
        let mut off = Latency::new(0);
        let set = CommandStats::row_of(&[Bytes::from_static(b"set")]).unwrap_or(0);
        let get = CommandStats::row_of(&[Bytes::from_static(b"get")]).unwrap_or(0);
        off.record(set, Duration::from_secs(5));
        assert_eq!(off.latest(), Reply::Array(Vec::new()));
        let mut l = Latency::new(10);
        l.record(set, Duration::from_millis(9));
        assert_eq!(l.latest(), Reply::Array(Vec::new()));
        l.record(set, Duration::from_millis(30));
        l.record(set, Duration::from_millis(20));
        l.record(get, Duration::from_millis(11));
        let Reply::Array(latest) = l.latest() else {
            panic!("not an array");
        };
        assert_eq!(latest.len(), 2);
        let Reply::Array(history) = l.history(b"command") else {
            panic!("not an array");
        };
        // Both samples fell in the same second: one entry, the worst.
        assert!(history.len() <= 2);
        assert_eq!(
            l.reset(&[Bytes::from_static(b"fast-command")]),
            Reply::Integer(1)
        );
        assert_eq!(l.reset(&[]), Reply::Integer(1));
        assert_eq!(l.history(b"command"), Reply::Array(Vec::new()));
    }
}
