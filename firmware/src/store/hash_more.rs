//! The hash commands beyond HSET/HGET/HDEL: HINCRBY, HINCRBYFLOAT (with Redis's float
//! text), HSETNX, and the reads over a [`View`] (HKEYS, HVALS, HSTRLEN, HRANDFIELD, and the
//! field walk of HSCAN). Field names are walked from the DRAM keytables; values are read
//! only where the reply carries them.

use bytes::Bytes;

use super::view::{count_of, holds, random_names, sub_names, View};
use super::{parse_i64, Result, StoreError, WriteGroup};
use crate::keyspace::{self as ks, HASH, HASH_FIELD};

/// Every field name of hash `key` in byte order (empty: no key).
///
/// # Errors
/// `WrongType`, engine errors.
pub fn fields<V: View + ?Sized>(v: &V, key: &[u8]) -> Result<Vec<Bytes>> {
    sub_names(v, key, HASH, HASH_FIELD)
}

/// The values of `names` in hash `key` (`None`: no such field).
///
/// # Errors
/// Engine errors.
pub fn values_of<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    names: &[Bytes],
) -> Result<Vec<Option<Bytes>>> {
    names
        .iter()
        .map(|f| v.value(&ks::sub(HASH_FIELD, key, f)))
        .collect()
}

/// HSTRLEN.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn field_len<V: View + ?Sized>(v: &V, key: &[u8], field: &[u8]) -> Result<i64> {
    if !holds(v, key, HASH)? {
        return Ok(0);
    }
    Ok(v.value_len(&ks::sub(HASH_FIELD, key, field))?
        .map_or(0, |n| n as i64))
}

/// HRANDFIELD with a count: field names (distinct for a positive count, `|count|` draws
/// with repeats for a negative one); `None`: no key.
///
/// # Errors
/// `WrongType`, engine errors.
pub fn random_fields<V: View + ?Sized>(
    v: &V,
    key: &[u8],
    count: i64,
) -> Result<Option<Vec<Bytes>>> {
    random_names(v, HASH, HASH_FIELD, key, count)
}

impl WriteGroup<'_> {
    /// The hash's field count and the field's current value (`WrongType` for another type).
    fn hash_field(&self, key: &[u8], field: &[u8]) -> Result<(u64, Option<Bytes>)> {
        if !holds(self, key, HASH)? {
            return Ok((0, None));
        }
        Ok((
            count_of(self, HASH, key)?,
            self.read(&ks::sub(HASH_FIELD, key, field))?,
        ))
    }

    /// Writes one field, counting it when it is new.
    fn put_field(&mut self, key: &[u8], field: &[u8], count: u64, new: bool, value: Bytes) {
        self.put(ks::sub(HASH_FIELD, key, field), value);
        if new {
            self.write_count(HASH, key, count + 1);
        }
    }

    /// HINCRBY: the new value.
    ///
    /// # Errors
    /// `WrongType`, the field not an integer, overflow, engine errors.
    pub fn hash_incr_by(&mut self, key: &[u8], field: &[u8], delta: i64) -> Result<i64> {
        let (count, old) = self.hash_field(key, field)?;
        let current = match &old {
            None => 0,
            Some(v) => parse_i64(v)
                .ok_or_else(|| StoreError::Refused("ERR hash value is not an integer".into()))?,
        };
        let next = current.checked_add(delta).ok_or(StoreError::Overflow)?;
        self.put_field(
            key,
            field,
            count,
            old.is_none(),
            Bytes::from(next.to_string()),
        );
        Ok(next)
    }

    /// HINCRBYFLOAT: the new value's text (as Redis writes it).
    ///
    /// # Errors
    /// `WrongType`, the field not a float, a result that is not finite, engine errors.
    pub fn hash_incr_by_float(&mut self, key: &[u8], field: &[u8], delta: &[u8]) -> Result<Bytes> {
        let (count, old) = self.hash_field(key, field)?;
        let current = old.clone().unwrap_or_else(|| Bytes::from_static(b"0"));
        let text = float_text::add(&current, delta)?;
        self.put_field(key, field, count, old.is_none(), text.clone());
        Ok(text)
    }

    /// HSETNX: whether the field was set (it did not exist).
    ///
    /// # Errors
    /// `WrongType`, engine errors.
    pub fn hash_set_nx(&mut self, key: &[u8], field: &[u8], value: &Bytes) -> Result<bool> {
        let (count, old) = self.hash_field(key, field)?;
        if old.is_some() {
            return Ok(false);
        }
        self.put_field(key, field, count, true, value.clone());
        Ok(true)
    }
}

/// INCRBYFLOAT-style addition on decimal text, as Redis does it with `long double` and
/// `%.17Lf` with trailing zeros cut.
///
/// Two decimal numbers with at most 17 fraction digits are added exactly (what `long
/// double`'s 64-bit mantissa gives for the magnitudes counters have); other inputs (more
/// digits, exponents far out) are added as `f64` and printed with 17 fraction digits.
pub mod float_text {
    use bytes::Bytes;

    use crate::store::{Result, StoreError};

    /// Most fraction digits Redis prints.
    const DIGITS: u32 = 17;

    /// A decimal `mantissa * 10^-scale`.
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Decimal {
        mantissa: i128,
        scale: u32,
    }

    /// Parses `[-+]digits[.digits][e[-+]digits]` exactly, when it fits.
    fn decimal(s: &[u8]) -> Option<Decimal> {
        let s = std::str::from_utf8(s).ok()?;
        let (num, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
            None => (s, 0),
        };
        let (neg, num) = match num.as_bytes().first() {
            Some(b'-') => (true, &num[1..]),
            Some(b'+') => (false, &num[1..]),
            _ => (false, num),
        };
        let (int_part, frac) = num.split_once('.').unwrap_or((num, ""));
        if (int_part.is_empty() && frac.is_empty())
            || !int_part
                .bytes()
                .chain(frac.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let digits = format!("{int_part}{frac}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 36 {
            return None;
        }
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let mut scale = i64::try_from(frac.len()).ok()? - i64::from(exp);
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        let mut scale = u32::try_from(scale).ok()?;
        while scale > 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            scale -= 1;
        }
        if scale > DIGITS {
            return None;
        }
        Some(Decimal {
            mantissa: if neg { -mantissa } else { mantissa },
            scale,
        })
    }

    fn sum(a: Decimal, b: Decimal) -> Option<Decimal> {
        let scale = a.scale.max(b.scale);
        let up = |d: Decimal| d.mantissa.checked_mul(10i128.checked_pow(scale - d.scale)?);
        let m = up(a)?.checked_add(up(b)?)?;
        (m.unsigned_abs() < 10u128.pow(36)).then_some(Decimal { mantissa: m, scale })
    }

    fn render(d: Decimal) -> String {
        let digits = d.mantissa.unsigned_abs().to_string();
        let scale = d.scale as usize;
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (int_part, frac) = padded.split_at(padded.len() - scale);
        let frac = frac.trim_end_matches('0');
        let sign = if d.mantissa < 0 { "-" } else { "" };
        if frac.is_empty() {
            format!("{sign}{int_part}")
        } else {
            format!("{sign}{int_part}.{frac}")
        }
    }

    /// `%.17f` with trailing zeros (and a bare point) cut, `-0` as `0`.
    fn render_f64(v: f64) -> String {
        let s = format!("{v:.17}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
        if s == "-0" {
            "0".into()
        } else {
            s
        }
    }

    /// A float as Redis reads one with `strtold` (no spaces, not NaN).
    fn float(s: &[u8]) -> Option<f64> {
        let t = std::str::from_utf8(s).ok()?;
        if t.is_empty() || t.trim() != t {
            return None;
        }
        let v: f64 = t.parse().ok()?;
        (!v.is_nan()).then_some(v)
    }

    /// `current + delta` as Redis's HINCRBYFLOAT writes it.
    ///
    /// # Errors
    /// `current` not a float; a result that is NaN or infinite.
    pub fn add(current: &[u8], delta: &[u8]) -> Result<Bytes> {
        add_as(current, delta, "ERR hash value is not a float")
    }

    /// As [`add`], with `not_float` the error for a value or increment that is not a float
    /// (INCRBYFLOAT's text differs from HINCRBYFLOAT's).
    ///
    /// # Errors
    /// `current` or `delta` not a float; a result that is NaN or infinite.
    pub fn add_as(current: &[u8], delta: &[u8], not_float: &str) -> Result<Bytes> {
        let not_float = || StoreError::Refused(not_float.into());
        let cur = float(current).ok_or_else(not_float)?;
        let inc = float(delta).ok_or_else(not_float)?;
        if let Some(d) = decimal(current)
            .zip(decimal(delta))
            .and_then(|(a, b)| sum(a, b))
        {
            return Ok(Bytes::from(render(d)));
        }
        let v = cur + inc;
        if !v.is_finite() {
            return Err(StoreError::Refused(
                "ERR increment would produce NaN or Infinity".into(),
            ));
        }
        Ok(Bytes::from(render_f64(v)))
    }

    #[cfg(test)]
    mod tests {
        use super::add;

        fn text(a: &str, b: &str) -> String {
            add(a.as_bytes(), b.as_bytes())
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_else(|e| e.to_string())
        }

        #[test]
        fn adds_as_redis_prints() {
            assert_eq!(text("10.50", "0.1"), "10.6");
            assert_eq!(text("10.6", "-5"), "5.6");
            assert_eq!(text("5.0e3", "2.0e2"), "5200");
            assert_eq!(text("0.1", "0.2"), "0.3");
            assert_eq!(text("0", "-0"), "0");
            assert_eq!(text("1", "-1.5"), "-0.5");
            assert_eq!(text("3", "1e-3"), "3.001");
            assert_eq!(text("abc", "1"), "ERR hash value is not a float");
            assert_eq!(
                text("1e308", "1e308"),
                "ERR increment would produce NaN or Infinity"
            );
        }
    }
}
