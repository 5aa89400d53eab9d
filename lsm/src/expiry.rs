//! Deadlines carried by keytable entries: when an entry stops being visible, the clock
//! reads judge it by, and the policy that lets compaction drop what has expired.
//!
//! An entry written with [`crate::WriteOp::PutUntil`] (or given one by
//! [`crate::WriteOp::Retime`]) carries a [`Deadline`]: a unix time in milliseconds. Once
//! the clock is past it (`now > deadline`, Redis's rule: at the deadline itself the key is
//! still there) every public read treats the key as absent — the lazy check, one comparison
//! on the slot a read already holds, no extra lookup. The entry itself stays until a
//! compaction meets it with nothing older of its key below (see
//! [`crate::merge::OutputSpec::expiry`]): where [`ExpiryPolicy::may_drop`] allows, and its
//! deadline is [`crate::merge::EXPIRY_GRACE_MS`] behind, it is then dropped, and its value
//! becomes garbage that garbage collection takes back. So keys that expire cost no
//! background sweep and no DRAM beyond their entry.
//!
//! The engine's own bookkeeping (garbage collection's liveness check, a retime's target,
//! recovery) sees expired entries as they are: an expired value is moved by garbage
//! collection like any other until compaction drops its entry.

use std::num::NonZeroU64;
use std::time::{SystemTime, UNIX_EPOCH};

/// When an entry stops being visible: unix milliseconds; `None`: never.
pub type Deadline = Option<NonZeroU64>;

/// Unix time in milliseconds (0 if the system clock reads before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Whether an entry with `deadline` has expired at `now`.
#[inline]
pub fn expired(deadline: Deadline, now: u64) -> bool {
    deadline.is_some_and(|d| d.get() < now)
}

/// A clock read at most once per call that needs it: reads of entries without a deadline
/// (nearly all of them) never look at the time.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LazyClock(Option<u64>);

impl LazyClock {
    /// A clock that reads the system time when first asked.
    pub(crate) fn new() -> Self {
        LazyClock(None)
    }

    /// A clock stopped at `now`.
    pub(crate) fn at(now: u64) -> Self {
        LazyClock(Some(now))
    }

    /// Whether `deadline` has passed, reading the time once if it must.
    #[inline]
    pub(crate) fn expired(&mut self, deadline: Deadline) -> bool {
        match deadline {
            None => false,
            Some(d) => d.get() < *self.0.get_or_insert_with(now_ms),
        }
    }
}

/// Which expired entries compaction may remove. An application whose keys own other
/// records (a hash header and its fields) keeps such an entry until it has removed the
/// rest itself; one whose keys stand alone lets compaction take them.
pub trait ExpiryPolicy: Send + Sync + std::fmt::Debug {
    /// Whether compaction may remove `key`'s entry once its deadline has passed.
    fn may_drop(&self, key: &[u8]) -> bool;
}

/// The default policy: every expired entry may go.
#[derive(Debug, Default, Clone, Copy)]
pub struct DropExpired;

impl ExpiryPolicy for DropExpired {
    fn may_drop(&self, _key: &[u8]) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_expires_after_its_millisecond_not_at_it() {
        let d = NonZeroU64::new(1000);
        assert!(!expired(d, 999));
        assert!(!expired(d, 1000));
        assert!(expired(d, 1001));
        assert!(!expired(None, u64::MAX));
        let mut c = LazyClock(Some(1001));
        assert!(c.expired(d) && !c.expired(None));
    }
}
