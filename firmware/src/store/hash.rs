//! Hashes: a header `h`+key holding the field count and one `f` record per field
//! ([`crate::keyspace`]). HEXISTS from DRAM; HSET and HDEL keep the count exact.

use bytes::Bytes;

use super::{Result, Store, StoreError, WriteGroup};
use crate::keyspace::{self as ks, HASH, HASH_FIELD};

impl Store {
    /// HEXISTS, from DRAM only.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_exists(&self, key: &[u8], field: &[u8]) -> Result<bool> {
        match self.kind(key)? {
            None => Ok(false),
            Some(HASH) => {
                let k = ks::sub(HASH_FIELD, key, field);
                Ok(self.db.value_lens(&[&k])?[0].is_some())
            }
            Some(_) => Err(StoreError::WrongType),
        }
    }
}

impl WriteGroup<'_> {
    /// HSET: how many fields were new.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_set(&mut self, key: &[u8], pairs: &[(Bytes, Bytes)]) -> Result<i64> {
        let new_hash = match self.kind(key)? {
            None => true,
            Some(HASH) => false,
            Some(_) => return Err(StoreError::WrongType),
        };
        // A new hash has no fields in the engine (DEL removes them with the header): only
        // this group's own writes can hold one, so the engine is not asked per field.
        let mut added = 0u64;
        for (field, value) in pairs {
            let fk = ks::sub(HASH_FIELD, key, field);
            let present = if new_hash {
                self.overlay.get(&fk).is_some_and(Option::is_some)
            } else {
                self.present(&fk)?
            };
            if !present {
                added += 1;
            }
            self.put(fk, value.clone());
        }
        // Fields only overwritten leave the count as it was: the header is neither read nor
        // rewritten (an update of existing fields, YCSB's HMSET, costs no value read). A new
        // hash always adds a field. (The puts above wrote field records only, so the header
        // read here is the one before this command.)
        if added > 0 {
            let before = if new_hash {
                0
            } else {
                ks::decode_count(&self.read(&ks::top(HASH, key))?.unwrap_or_default())
            };
            self.write_count(HASH, key, before + added);
        }
        Ok(i64::try_from(added).unwrap_or(i64::MAX))
    }

    /// HDEL: how many fields were removed.
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_del(&mut self, key: &[u8], fields: &[Bytes]) -> Result<i64> {
        let mut count = match self.kind(key)? {
            None => return Ok(0),
            Some(HASH) => ks::decode_count(&self.read(&ks::top(HASH, key))?.unwrap_or_default()),
            Some(_) => return Err(StoreError::WrongType),
        };
        let mut removed = 0;
        for field in fields {
            let fk = ks::sub(HASH_FIELD, key, field);
            if self.present(&fk)? {
                self.del(fk);
                removed += 1;
                count = count.saturating_sub(1);
            }
        }
        // Nothing removed is no change (no WATCH abort, as Redis).
        if removed > 0 {
            self.write_count(HASH, key, count);
        }
        Ok(removed)
    }
}
