//! String writes: SET with its options, INCRBY, INCRBYFLOAT, GETEX, GETDEL, APPEND, SETRANGE,
//! MSETNX.

use bytes::Bytes;

use super::expiry::DeadlineChange;
use super::hash_more::float_text;
use super::{parse_i64, Result, StoreError, WriteGroup};
use crate::keyspace::{self as ks, STRING};

/// Longest string SETRANGE may make: Redis's `checkStringLength` limit (its default
/// `proto-max-bulk-len`, 512 MB, which is also the engine's default largest value).
pub const MAX_STRING_BYTES: u64 = 512 << 20;

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
        // KEEPTTL keeps the deadline of the key it overwrites, whatever its type (as Redis).
        let kept = if o.keep_ttl && kind.is_some() {
            self.deadline(key)
        } else {
            None
        };
        if kind.is_some_and(|k| k != STRING) {
            self.remove_any(key)?;
        }
        self.put(ks::top(STRING, key), value);
        match o.deadline.or(kept) {
            Some(d) => self.set_deadline(key, DeadlineChange::Set(d)),
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
            Some(d) if d <= self.clock() => {
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
    /// SETRANGE: the string's length after `value` is written at `offset` (zero bytes fill
    /// any gap). An empty `value` changes nothing (and creates no key); the deadline is kept.
    ///
    /// # Errors
    /// `WrongType`, a result longer than [`MAX_STRING_BYTES`], engine errors.
    pub fn set_range(&mut self, key: &[u8], offset: u64, value: &Bytes) -> Result<i64> {
        let old = self.string_value(key)?;
        if value.is_empty() {
            return Ok(old.map_or(0, |v| v.len() as i64));
        }
        let end = offset.saturating_add(value.len() as u64);
        if end > MAX_STRING_BYTES {
            return Err(StoreError::Refused(
                "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into(),
            ));
        }
        // Both fit in memory: at most MAX_STRING_BYTES.
        let (start, end) = (offset as usize, end as usize);
        let existed = old.is_some();
        let mut v = old.map(|o| o.to_vec()).unwrap_or_default();
        if v.len() < end {
            v.resize(end, 0);
        }
        v[start..end].copy_from_slice(value);
        let n = v.len() as i64;
        self.put(ks::top(STRING, key), Bytes::from(v));
        if !existed {
            // A new key: no deadline a removed one may have left.
            self.set_deadline(key, DeadlineChange::Clear);
        }
        Ok(n)
    }

    /// MSETNX: sets every pair (and returns `true`) only when none of the keys exists, of
    /// any type.
    ///
    /// # Errors
    /// Engine errors.
    pub fn mset_nx(&mut self, pairs: &[(Bytes, Bytes)]) -> Result<bool> {
        for (k, _) in pairs {
            if self.kind(k)?.is_some() {
                return Ok(false);
            }
        }
        for (k, v) in pairs {
            self.set(k, v.clone(), SetOptions::default())?;
        }
        Ok(true)
    }

    /// INCRBYFLOAT: the new value's text, as Redis writes it (see [`float_text`]); a missing
    /// key counts as 0, and the deadline is kept.
    ///
    /// # Errors
    /// `WrongType`; the value or the increment not a float; a result that is not finite;
    /// engine errors.
    pub fn incr_by_float(&mut self, key: &[u8], delta: &[u8]) -> Result<Bytes> {
        let old = self.string_value(key)?;
        let existed = old.is_some();
        let current = old.unwrap_or_else(|| Bytes::from_static(b"0"));
        let text = float_text::add_as(&current, delta, "ERR value is not a valid float")?;
        self.put(ks::top(STRING, key), text.clone());
        if !existed {
            self.set_deadline(key, DeadlineChange::Clear);
        }
        Ok(text)
    }
}
