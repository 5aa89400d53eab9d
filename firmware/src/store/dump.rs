//! DUMP and RESTORE: a key's records as a Redis payload ([`crate::rdb`]) and back, on the
//! writer thread inside a write group (so DUMP sees the group's own writes, as COPY does).

use bytes::Bytes;

use super::expiry::DeadlineChange;
use super::{Result, StoreError, WriteGroup};
use crate::keyspace::{
    self as ks, HASH, HASH_FIELD, LIST, LIST_ITEM, SET, SET_MEMBER, STRING, ZSET, ZSET_MEMBER,
};
use crate::rdb::{self, DumpValue};

/// Redis's reply to RESTORE over an existing key without REPLACE.
const BUSYKEY: &str = "BUSYKEY Target key name already exists.";

impl WriteGroup<'_> {
    /// DUMP: the key's value as a Redis payload; `None` for a missing or expired key.
    ///
    /// # Errors
    /// Engine errors.
    pub fn dump(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(kind) = self.kind(key)? else {
            return Ok(None);
        };
        let under = |g: &Self, tag: u8| -> Result<Vec<(Vec<u8>, Bytes)>> {
            let prefix = ks::sub_prefix(tag, key);
            Ok(g.records_under(&prefix)?
                .into_iter()
                .map(|(k, v)| (k[prefix.len()..].to_vec(), v))
                .collect())
        };
        let value = match kind {
            STRING => DumpValue::String(
                self.read(&ks::top(STRING, key))?
                    .unwrap_or_default()
                    .to_vec(),
            ),
            HASH => DumpValue::Hash(
                under(self, HASH_FIELD)?
                    .into_iter()
                    .map(|(f, v)| (f, v.to_vec()))
                    .collect(),
            ),
            ZSET => DumpValue::ZSet(
                under(self, ZSET_MEMBER)?
                    .into_iter()
                    .map(|(m, v)| (m, ks::decode_score(&v).unwrap_or(0.0)))
                    .collect(),
            ),
            SET => DumpValue::Set(
                under(self, SET_MEMBER)?
                    .into_iter()
                    .map(|(m, _)| m)
                    .collect(),
            ),
            LIST => DumpValue::List(
                // Positions sort as the list's order.
                under(self, LIST_ITEM)?
                    .into_iter()
                    .map(|(_, v)| v.to_vec())
                    .collect(),
            ),
            _ => return Ok(None),
        };
        Ok(Some(rdb::encode(&value)))
    }

    /// The key's payload and its time to live in milliseconds (0: none), for MIGRATE;
    /// `None` for a missing or expired key.
    ///
    /// # Errors
    /// Engine errors.
    pub fn dump_with_ttl(&mut self, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let Some(payload) = self.dump(key)? else {
            return Ok(None);
        };
        let now = self.clock();
        let ttl = self
            .deadline(key)
            .map_or(0, |d| d.saturating_sub(now).max(1));
        Ok(Some((payload, ttl)))
    }

    /// RESTORE key ttl payload \[REPLACE\] \[ABSTTL\]: creates the key from a payload, with
    /// Redis's checks in Redis's order (an existing key, then the TTL, then the payload's
    /// footer, then its contents). A deadline already past creates nothing (the old key is
    /// still removed with REPLACE), as in Redis.
    ///
    /// # Errors
    /// `Refused` with Redis's text (BUSYKEY, a negative TTL, a bad payload), `NotInteger`,
    /// engine errors.
    pub fn restore(
        &mut self,
        key: &[u8],
        ttl: &[u8],
        payload: &[u8],
        replace: bool,
        absttl: bool,
    ) -> Result<()> {
        if !replace && self.kind(key)?.is_some() {
            return Err(StoreError::Refused(BUSYKEY.into()));
        }
        let ttl: i64 = std::str::from_utf8(ttl)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or(StoreError::NotInteger)?;
        if ttl < 0 {
            return Err(StoreError::Refused(
                "ERR Invalid TTL value, must be >= 0".into(),
            ));
        }
        let value = rdb::decode(payload).map_err(|e| StoreError::Refused(e.to_string()))?;
        let empty = match &value {
            DumpValue::String(_) => false,
            DumpValue::List(v) | DumpValue::Set(v) => v.is_empty(),
            DumpValue::Hash(v) => v.is_empty(),
            DumpValue::ZSet(v) => v.is_empty(),
        };
        if empty {
            // Redis loads no empty collection.
            return Err(StoreError::Refused(rdb::RdbError::BadFormat.to_string()));
        }
        let now = self.clock();
        let deadline = match (ttl, absttl) {
            (0, _) => None,
            (t, true) => Some(t as u64),
            (t, false) => Some(now.saturating_add(t as u64)),
        };
        // The old key (REPLACE), or an expired key's records.
        self.remove_any(key)?;
        if deadline.is_some_and(|d| d <= now) {
            return Ok(());
        }
        let bytes = |v: Vec<Vec<u8>>| v.into_iter().map(Bytes::from).collect::<Vec<Bytes>>();
        match value {
            DumpValue::String(s) => {
                self.put(ks::top(STRING, key), Bytes::from(s));
            }
            DumpValue::Hash(fields) => {
                let pairs: Vec<(Bytes, Bytes)> = fields
                    .into_iter()
                    .map(|(f, v)| (Bytes::from(f), Bytes::from(v)))
                    .collect();
                self.hash_set(key, &pairs)?;
            }
            DumpValue::ZSet(members) => {
                let members: Vec<(f64, Bytes)> = members
                    .into_iter()
                    .map(|(m, s)| (s, Bytes::from(m)))
                    .collect();
                self.zadd(key, &kvproto::ZAddOptions::default(), &members)?;
            }
            DumpValue::Set(members) => {
                self.set_add(key, &bytes(members))?;
            }
            DumpValue::List(items) => {
                self.list_push(key, &bytes(items), false, false)?;
            }
        }
        let change = match deadline {
            Some(d) => DeadlineChange::Set(d),
            None => DeadlineChange::Clear,
        };
        self.set_deadline(key, change);
        Ok(())
    }
}
