//! String deadlines: the DRAM index of `x` records ([`Store::deadline`]), TTL and its
//! family, EXPIRE/PERSIST in a group, and the sweep that removes expired strings.

use super::{now_ms, Result, Store, StoreError, WriteGroup};
use crate::keyspace::{self as ks, STRING};

impl Store {
    /// The deadline (unix ms) of string `key`, if it has one.
    pub fn deadline(&self, key: &[u8]) -> Option<u64> {
        self.expiries.read().get(key).copied()
    }

    /// TTL, PTTL, EXPIRETIME and PEXPIRETIME, from DRAM only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn ttl(&self, key: &[u8], kind: kvproto::TtlKind) -> Result<i64> {
        let found = self.kind(key)?;
        Ok(ttl_reply(found, self.deadline(key), kind, now_ms()))
    }

    /// Keys with a deadline.
    pub fn expiring_keys(&self) -> usize {
        self.expiries.read().len()
    }

    /// Keys whose deadline has passed, at most `limit`.
    pub fn due_expiries(&self, limit: usize) -> Vec<Vec<u8>> {
        let now = now_ms();
        self.expiries
            .read()
            .iter()
            .filter(|(_, &d)| d <= now)
            .take(limit)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// What a write command decided about one string key's deadline.
#[derive(Debug, Clone, Copy)]
pub(super) enum DeadlineChange {
    Set(u64),
    Clear,
}

/// The reply of TTL, PTTL, EXPIRETIME or PEXPIRETIME for a key of type `found` with
/// `deadline`: -2 no key, -1 no deadline; TTL rounds to the nearest second as Redis does.
pub fn ttl_reply(
    found: Option<u8>,
    deadline: Option<u64>,
    kind: kvproto::TtlKind,
    now: u64,
) -> i64 {
    use kvproto::TtlKind;
    const MS: i64 = kvproto::command::MS_PER_SECOND;
    let Some(found) = found else {
        return -2;
    };
    let Some(d) = deadline.filter(|_| found == STRING) else {
        return -1;
    };
    let d = i64::try_from(d).unwrap_or(i64::MAX);
    let left = d
        .saturating_sub(i64::try_from(now).unwrap_or(i64::MAX))
        .max(0);
    match kind {
        TtlKind::Ttl => (left + MS / 2) / MS,
        TtlKind::Pttl => left,
        TtlKind::ExpireTime => d / MS,
        TtlKind::PExpireTime => d,
    }
}

impl WriteGroup<'_> {
    /// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT: `when` in ms (from now unless `absolute`).
    /// Whether the deadline was set (or the key deleted, for a deadline already past).
    ///
    /// # Errors
    /// `InvalidExpire` (overflow), `ExpiryUnsupported` (a hash or sorted set), engine errors.
    pub fn expire_key(
        &mut self,
        key: &[u8],
        when: i64,
        absolute: bool,
        condition: Option<kvproto::ExpireCondition>,
        name: &'static str,
    ) -> Result<bool> {
        use kvproto::ExpireCondition as C;
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        let when = if absolute {
            when
        } else {
            when.checked_add(now)
                .ok_or(StoreError::InvalidExpire(name))?
        };
        match self.kind(key)? {
            None => return Ok(false),
            Some(STRING) => {}
            Some(_) => return Err(StoreError::ExpiryUnsupported),
        }
        let current = self
            .deadline(key)
            .map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        let allowed = match condition {
            None => true,
            Some(C::Nx) => current.is_none(),
            Some(C::Xx) => current.is_some(),
            Some(C::Gt) => current.is_some_and(|c| when > c),
            Some(C::Lt) => current.is_none_or(|c| when < c),
        };
        if !allowed {
            return Ok(false);
        }
        if when <= now {
            self.remove_any(key)?;
        } else {
            let d = u64::try_from(when).map_err(|_| StoreError::InvalidExpire(name))?;
            self.set_deadline(key, DeadlineChange::Set(d));
        }
        Ok(true)
    }

    /// PERSIST: whether a deadline was removed.
    ///
    /// # Errors
    /// Engine errors.
    pub fn persist(&mut self, key: &[u8]) -> Result<bool> {
        if self.kind(key)? != Some(STRING) || self.deadline(key).is_none() {
            return Ok(false);
        }
        self.set_deadline(key, DeadlineChange::Clear);
        Ok(true)
    }

    /// Removes string keys whose deadline passed (the expiry sweep).
    ///
    /// # Errors
    /// Engine errors.
    pub fn expire(&mut self, keys: &[Vec<u8>]) -> Result<u64> {
        let now = now_ms();
        let mut n = 0;
        for key in keys {
            if self.deadline(key).is_some_and(|d| d <= now) {
                self.del(ks::top(STRING, key));
                self.set_deadline(key, DeadlineChange::Clear);
                n += 1;
            }
        }
        Ok(n)
    }
}
