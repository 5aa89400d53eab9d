//! String writes: SET with its options, INCRBY, GETEX, GETDEL, APPEND.

use bytes::Bytes;

use super::expiry::DeadlineChange;
use super::{now_ms, parse_i64, Result, StoreError, WriteGroup};
use crate::keyspace::{self as ks, STRING};

/// The SET command's options, resolved.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetOptions {
    /// Absolute deadline (unix ms).
    pub deadline: Option<u64>,
    /// Only if the key does not exist.
    pub nx: bool,
    /// Only if it exists.
    pub xx: bool,
    /// Keep the key's current deadline.
    pub keep_ttl: bool,
    /// Return the old value.
    pub get: bool,
}

/// Outcome of SET: whether it was applied, and the old value when asked for.
#[derive(Debug, Clone)]
pub struct SetOutcome {
    /// Whether the value was written (NX/XX).
    pub applied: bool,
    /// The previous string value (SET ... GET).
    pub old: Option<Bytes>,
}

impl WriteGroup<'_> {
    /// SET with its options.
    ///
    /// # Errors
    /// `WrongType` (only with GET), engine errors.
    pub fn set(&mut self, key: &[u8], value: Bytes, o: SetOptions) -> Result<SetOutcome> {
        let kind = self.kind(key)?;
        let old = if o.get {
            match kind {
                None => None,
                Some(STRING) => self.read(&ks::top(STRING, key))?,
                Some(_) => return Err(StoreError::WrongType),
            }
        } else {
            None
        };
        if (o.nx && kind.is_some()) || (o.xx && kind.is_none()) {
            return Ok(SetOutcome {
                applied: false,
                old,
            });
        }
        if kind.is_some_and(|k| k != STRING) {
            self.remove_any(key)?;
        }
        self.put(ks::top(STRING, key), value);
        match o.deadline {
            Some(d) => self.set_deadline(key, DeadlineChange::Set(d)),
            None if o.keep_ttl && kind == Some(STRING) => {}
            None => self.set_deadline(key, DeadlineChange::Clear),
        }
        Ok(SetOutcome { applied: true, old })
    }

    /// INCRBY: the new value.
    ///
    /// # Errors
    /// `WrongType`, `NotInteger`, `Overflow`, engine errors.
    pub fn incr_by(&mut self, key: &[u8], delta: i64) -> Result<i64> {
        let current = match self.kind(key)? {
            None => 0,
            Some(STRING) => {
                let v = self.read(&ks::top(STRING, key))?.unwrap_or_default();
                parse_i64(&v).ok_or(StoreError::NotInteger)?
            }
            Some(_) => return Err(StoreError::WrongType),
        };
        let next = current.checked_add(delta).ok_or(StoreError::Overflow)?;
        let was_string = self.kind(key)? == Some(STRING);
        self.put(ks::top(STRING, key), Bytes::from(next.to_string()));
        if !was_string {
            self.set_deadline(key, DeadlineChange::Clear);
        }
        Ok(next)
    }

    /// The live string value of `key` (`None`: no key), WRONGTYPE for another type.
    pub(super) fn string_value(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.kind(key)? {
            None => Ok(None),
            Some(STRING) => Ok(Some(self.read(&ks::top(STRING, key))?.unwrap_or_default())),
            Some(_) => Err(StoreError::WrongType),
        }
    }

    /// GETEX: the value; its deadline set to `deadline` (a deadline already past deletes the
    /// key) or removed (`persist`).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn get_ex(
        &mut self,
        key: &[u8],
        deadline: Option<u64>,
        persist: bool,
        expire_error: Option<&kvproto::CommandError>,
    ) -> Result<Option<Bytes>> {
        let Some(v) = self.string_value(key)? else {
            return Ok(None);
        };
        if let Some(e) = expire_error {
            return Err(StoreError::Refused(e.0.clone()));
        }
        match deadline {
            Some(d) if d <= now_ms() => {
                self.remove_any(key)?;
            }
            Some(d) => self.set_deadline(key, DeadlineChange::Set(d)),
            None if persist => self.set_deadline(key, DeadlineChange::Clear),
            None => {}
        }
        Ok(Some(v))
    }

    /// GETDEL: the value, and the key deleted.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn get_del(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        let v = self.string_value(key)?;
        if v.is_some() {
            self.remove_any(key)?;
        }
        Ok(v)
    }

    /// APPEND: the new length (a new key is created; the deadline is kept).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn append(&mut self, key: &[u8], value: &Bytes) -> Result<i64> {
        match self.string_value(key)? {
            None => {
                self.set(key, value.clone(), SetOptions::default())?;
                Ok(value.len() as i64)
            }
            Some(old) => {
                let mut joined = Vec::with_capacity(old.len() + value.len());
                joined.extend_from_slice(&old);
                joined.extend_from_slice(value);
                let n = joined.len() as i64;
                self.put(ks::top(STRING, key), Bytes::from(joined));
                Ok(n)
            }
        }
    }
}
