//! Reads that walk the keyspace across drives: ordered range reads (`LS.RANGE`) and key
//! scans (`SCAN`), each drive contributing only keys of slots it serves in the router's map.

use std::net::SocketAddr;

use bytes::Bytes;
use kvproto::cluster::{key_slot, ClusterMap};
use kvproto::Reply;

use super::{check, join_all, unexpected, unspecified, RouteError, Router, RANGE_MAX_COUNT};

impl Router {
    /// Every string key matching the glob `pattern` on the drives: `SCAN 0 MATCH pattern
    /// COUNT n` until the cursor returns to 0, on every primary at once (keys only, from
    /// the drives' key tables), each drive contributing only keys of slots it serves in the
    /// router's map. A key written or deleted during the scan may or may not be listed.
    ///
    /// # Errors
    /// As [`Router::get`]; a cursor lost because the drive restarted mid-scan is a
    /// [`RouteError::Server`] error (scan again).
    pub async fn scan_keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>, RouteError> {
        let map = self.map();
        let targets: Vec<(usize, u16)> = if self.single {
            vec![(0, 0)]
        } else {
            map.nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.is_none() && !n.slots.is_empty())
                .map(|(i, n)| (i, map.slot_ranges(&n.id).first().map_or(0, |r| r.0)))
                .collect()
        };
        let futures: Vec<_> = targets
            .iter()
            .map(|&(node, slot)| {
                let map = &map;
                async move {
                    let addr = map.nodes().get(node).map_or(unspecified(), |n| n.addr);
                    let mut cursor = Bytes::from_static(b"0");
                    let mut keys = Vec::new();
                    loop {
                        let request = vec![vec![
                            Bytes::from_static(b"SCAN"),
                            cursor.clone(),
                            Bytes::from_static(b"MATCH"),
                            Bytes::copy_from_slice(pattern),
                            Bytes::from_static(b"COUNT"),
                            Bytes::from_static(b"10000"),
                        ]];
                        let reply = self
                            .read_from(map, node, slot, &request)
                            .await?
                            .into_iter()
                            .next()
                            .unwrap_or(Reply::Null);
                        check(&reply, addr, b"SCAN", map.version())?;
                        let Reply::Array(mut parts) = reply else {
                            return Err(unexpected(addr, "SCAN", &reply));
                        };
                        let (Some(Reply::Array(page)), Some(Reply::Bulk(next))) =
                            (parts.pop(), parts.pop())
                        else {
                            return Err(unexpected(addr, "SCAN", &Reply::Array(parts)));
                        };
                        for k in page {
                            match k {
                                Reply::Bulk(k) => keys.push(k),
                                other => return Err(unexpected(addr, "SCAN", &other)),
                            }
                        }
                        if &next[..] == b"0" {
                            break;
                        }
                        cursor = next;
                    }
                    Ok::<_, RouteError>((node, keys))
                }
            })
            .collect();
        let mut out = Vec::new();
        for result in join_all(futures).await {
            let (node, keys) = result?;
            match map.nodes().get(node) {
                Some(n) if !self.single => out.extend(
                    keys.into_iter()
                        .filter(|k| map.owner(key_slot(k)).is_some_and(|o| o.id == n.id)),
                ),
                _ => out.extend(keys),
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Ordered range read (`LS.RANGE`): string keys `k` with `start <= k < end` in byte
    /// order (`end` empty: no upper bound) with their values, at most `count` pairs. When
    /// `start` and `end` begin with the same `{hash tag}` (so every key between them has
    /// it), or there is one drive, one drive answers; otherwise every primary is asked and
    /// the answers merged, each drive contributing only keys of slots it serves in the
    /// router's map (drives do not redirect range reads). A reply may hold fewer than
    /// `count` pairs while more exist (a drive caps a reply's bytes): continue from the last
    /// key plus a zero byte; an empty reply means no key is left in the range.
    ///
    /// # Errors
    /// [`RouteError::Invalid`] for a count of 0 or above [`RANGE_MAX_COUNT`]; otherwise as
    /// [`Router::get`].
    pub async fn range(
        &self,
        start: &[u8],
        end: &[u8],
        count: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
        if count == 0 || count > RANGE_MAX_COUNT {
            return Err(RouteError::Invalid(format!(
                "range count {count} is not within 1..={RANGE_MAX_COUNT}"
            )));
        }
        let mut attempt = 0;
        loop {
            let map = self.map();
            match self.range_once(&map, start, end, count).await {
                Err(e) => self.retry_after(e, map.version(), attempt).await?,
                ok => return ok,
            }
            attempt += 1;
        }
    }

    async fn range_once(
        &self,
        map: &ClusterMap,
        start: &[u8],
        end: &[u8],
        count: u32,
    ) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
        let targets: Vec<(usize, u16)> = match one_slot_range(start, end) {
            Some(slot) if !self.single => {
                let owner = map.owner(slot).ok_or(RouteError::NoOwner {
                    slot,
                    version: map.version(),
                })?;
                let node = map
                    .nodes()
                    .iter()
                    .position(|n| n.id == owner.id)
                    .unwrap_or_default();
                vec![(node, slot)]
            }
            _ if self.single => vec![(0, 0)],
            _ => map
                .nodes()
                .iter()
                .enumerate()
                .filter(|(_, n)| n.replica_of.is_none() && !n.slots.is_empty())
                .map(|(i, n)| {
                    let slot = map.slot_ranges(&n.id).first().map_or(0, |r| r.0);
                    (i, slot)
                })
                .collect(),
        };
        let mut from = Bytes::copy_from_slice(start);
        loop {
            let request = vec![vec![
                Bytes::from_static(b"LS.RANGE"),
                from.clone(),
                Bytes::copy_from_slice(end),
                Bytes::from_static(b"COUNT"),
                Bytes::from(count.to_string()),
            ]];
            let futures: Vec<_> = targets
                .iter()
                .map(|&(node, slot)| {
                    let request = &request;
                    async move { self.read_from(map, node, slot, request).await }
                })
                .collect();
            let mut runs: Vec<Vec<(Bytes, Bytes)>> = Vec::new();
            // Keys past the smallest last key a drive returned may be missing from that
            // drive's page (it may have been cut short), so the merge stops there.
            let mut cut: Option<Bytes> = None;
            for (&(node, _), result) in targets.iter().zip(join_all(futures).await) {
                let spec = map.nodes().get(node);
                let addr = spec.map_or(unspecified(), |n| n.addr);
                let reply = result?.into_iter().next().unwrap_or(Reply::Null);
                let pairs = range_pairs(reply, addr, map.version())?;
                if let Some((last, _)) = pairs.last() {
                    if cut.as_ref().is_none_or(|c| last < c) {
                        cut = Some(last.clone());
                    }
                }
                // LS.RANGE is not redirected: a drive returns what it stores, which after a
                // map change may include slots it no longer serves. Keep what it owns.
                let owned: Vec<(Bytes, Bytes)> = match spec {
                    Some(n) if !self.single => pairs
                        .into_iter()
                        .filter(|(k, _)| map.owner(key_slot(k)).is_some_and(|o| o.id == n.id))
                        .collect(),
                    _ => pairs,
                };
                runs.push(owned);
            }
            let Some(cut) = cut else {
                return Ok(Vec::new());
            };
            let mut merged: Vec<(Bytes, Bytes)> = runs.into_iter().flatten().collect();
            merged.sort_by(|a, b| a.0.cmp(&b.0));
            merged.retain(|(k, _)| *k <= cut);
            merged.truncate(usize::try_from(count).unwrap_or(usize::MAX));
            if !merged.is_empty() {
                return Ok(merged);
            }
            // Everything up to the cut was filtered out: go on after it, so an empty
            // answer keeps meaning "nothing left".
            let mut next = cut.to_vec();
            next.push(0);
            from = Bytes::from(next);
        }
    }
}

/// The slot of every key in `[start, end)` when they all share one hash tag: both bounds
/// begin with the same bytes up to and including a `{tag}`, so every key between them does.
fn one_slot_range(start: &[u8], end: &[u8]) -> Option<u16> {
    let open = start.iter().position(|&b| b == b'{')?;
    let len = start[open + 1..].iter().position(|&b| b == b'}')?;
    if len == 0 {
        return None;
    }
    let prefix = &start[..open + len + 2];
    end.starts_with(prefix).then(|| key_slot(start))
}

/// The pairs of an `LS.RANGE` reply.
fn range_pairs(
    reply: Reply,
    addr: SocketAddr,
    version: u64,
) -> Result<Vec<(Bytes, Bytes)>, RouteError> {
    check(&reply, addr, b"LS.RANGE", version)?;
    let Reply::Array(items) = reply else {
        return Err(unexpected(addr, "LS.RANGE", &reply));
    };
    if items.len() % 2 != 0 {
        return Err(unexpected(addr, "LS.RANGE", &Reply::Array(items)));
    }
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match (k, v) {
            (Reply::Bulk(k), Reply::Bulk(v)) => pairs.push((k, v)),
            (k, _) => return Err(unexpected(addr, "LS.RANGE", &k)),
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_ranges() {
        assert_eq!(
            one_slot_range(b"{v:a:01}\x00", b"{v:a:01}\xff"),
            Some(key_slot(b"v:a:01"))
        );
        assert_eq!(one_slot_range(b"x{t}1", b"x{t}"), Some(key_slot(b"t")));
        // Keys between "a{t}" and "b{t}" (e.g. "aa") need not carry the tag.
        assert_eq!(one_slot_range(b"a{t}", b"b{t}"), None);
        assert_eq!(one_slot_range(b"{t}1", b""), None);
        assert_eq!(one_slot_range(b"{}1", b"{}2"), None);
        assert_eq!(one_slot_range(b"abc", b"abd"), None);
    }
}
