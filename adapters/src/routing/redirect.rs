//! Following a cluster's redirects: `-MOVED` (the router's map is stale: reread it, or
//! fetch the newest from a drive), and the `-ASK` / `-TRYAGAIN` of a slot being moved
//! between drives (docs/CLUSTER.md), including the writes the target's replicas must
//! see during such a move.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kvproto::cluster::{key_slot, ClusterMap};
use kvproto::Reply;

use super::{check, join_all, RouteError, Router};

/// A parsed `-MOVED slot host:port` (or `-ASK`) reply.
pub(super) fn parse_redirect(message: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(message).ok()?;
    let mut words = text.split_ascii_whitespace();
    let kind = words.next()?;
    if kind != "MOVED" && kind != "ASK" {
        return None;
    }
    let slot = words.next()?.parse().ok()?;
    let to = words.next()?.to_string();
    Some((slot, to))
}

/// A multi-key request as one request per key (MSET: per pair), for a slot whose keys are
/// split between two drives during a move; `None` for a command the router does not split.
fn split_per_key(req: &[Bytes]) -> Option<Vec<Vec<Bytes>>> {
    let (name, args) = req.split_first()?;
    let upper = name.to_ascii_uppercase();
    let step = match upper.as_slice() {
        b"MGET" | b"EXISTS" | b"DEL" | b"UNLINK" => 1,
        b"MSET" => 2,
        _ => return None,
    };
    Some(
        args.chunks(step)
            .map(|part| {
                let mut r = Vec::with_capacity(1 + step);
                r.push(name.clone());
                r.extend_from_slice(part);
                r
            })
            .collect(),
    )
}

/// The reply the whole request would have had, from its per-key replies
/// ([`split_per_key`]); the first error stands for the whole.
fn join_per_key(req: &[Bytes], parts: Vec<Reply>) -> Option<Reply> {
    if let Some(e) = parts.iter().find(|r| matches!(r, Reply::Error(_))) {
        return Some(e.clone());
    }
    let upper = req.first()?.to_ascii_uppercase();
    Some(match upper.as_slice() {
        b"MGET" => Reply::Array(
            parts
                .into_iter()
                .map(|r| match r {
                    Reply::Array(mut one) if one.len() == 1 => one.pop().unwrap_or(Reply::Null),
                    other => other,
                })
                .collect(),
        ),
        b"MSET" => parts.into_iter().next().unwrap_or(Reply::Null),
        _ => Reply::Integer(
            parts
                .iter()
                .map(|r| match r {
                    Reply::Integer(n) => *n,
                    _ => 0,
                })
                .sum(),
        ),
    })
}

impl Router {
    /// Follows the redirects of a slot being moved between drives (see
    /// docs/CLUSTER.md): every `-ASK` is followed ([`Router::follow_asks`]; `write`: the requests are
    /// writes, which the target's replicas get too); then a multi-key request refused with
    /// `-TRYAGAIN` is sent again from `source` one key at a time, following the ASKs, and
    /// its replies joined. `-TRYAGAIN` comes from the source when the request's keys are
    /// split between the two drives, and from the target when it was asked for a request
    /// whose keys it does not all hold yet (an MSET of new keys, an MGET of missing ones):
    /// one key at a time, neither can refuse.
    pub(super) async fn follow_redirects(
        &self,
        source: SocketAddr,
        requests: &[Vec<Bytes>],
        replies: Vec<Reply>,
        write: bool,
    ) -> Result<Vec<Reply>, RouteError> {
        let mut replies = self.follow_asks(requests, replies, write).await?;
        for (i, req) in requests.iter().enumerate() {
            let retry =
                matches!(replies.get(i), Some(Reply::Error(e)) if e.starts_with(b"TRYAGAIN"));
            let Some(parts) = retry.then(|| split_per_key(req)).flatten() else {
                continue;
            };
            let got = self.pool(source, false).exchange(&parts, &self.cfg).await?;
            let got = self.follow_asks(&parts, got, write).await?;
            if let (Some(joined), Some(slot)) = (join_per_key(req, got), replies.get_mut(i)) {
                *slot = joined;
            }
        }
        Ok(replies)
    }

    /// Follows `-ASK` replies (a slot being moved between drives, see
    /// docs/CLUSTER.md): each such request is sent again, after `ASKING`, to the drive the redirect
    /// names, and that reply takes the redirect's place. `-MOVED` and other errors are left
    /// for the caller. A `write` that the target accepted goes, asked the same way, to the
    /// target's replicas too ([`Router::write_asked_replicas`]).
    async fn follow_asks(
        &self,
        requests: &[Vec<Bytes>],
        mut replies: Vec<Reply>,
        write: bool,
    ) -> Result<Vec<Reply>, RouteError> {
        for (i, req) in requests.iter().enumerate() {
            let to = match replies.get(i) {
                Some(Reply::Error(e)) if e.starts_with(b"ASK ") => {
                    parse_redirect(e).and_then(|(_, to)| to.parse::<SocketAddr>().ok())
                }
                _ => None,
            };
            let Some(to) = to else {
                continue;
            };
            let asked = vec![vec![Bytes::from_static(b"ASKING")], req.clone()];
            let mut got = self.pool(to, false).exchange(&asked, &self.cfg).await?;
            if write && got.last().is_some_and(|r| !r.is_error()) {
                self.write_asked_replicas(to, &asked).await?;
            }
            if let (Some(r), Some(slot)) = (got.pop(), replies.get_mut(i)) {
                *slot = r;
            }
        }
        Ok(replies)
    }

    /// Sends an asked write (`ASKING` and the request) to every replica of `to`, the drive
    /// taking a slot over, on replica connections; all must accept it. The drive handing the
    /// slot over copies each key it moves to those replicas first (MIGRATE's `REPLICA`
    /// option), so once a key has left the source the target's replicas hold it and see
    /// every later write of it here, as its primary does; a key that never existed is
    /// created on both the same way. The map lists `to` once the move began; a router whose
    /// map is older fetches the map from `to` first.
    async fn write_asked_replicas(
        &self,
        to: SocketAddr,
        asked: &[Vec<Bytes>],
    ) -> Result<(), RouteError> {
        let mut map = self.map();
        if !map.nodes().iter().any(|n| n.addr == to) {
            self.fetch_map(to).await;
            map = self.map();
        }
        let Some(target) = map.nodes().iter().find(|n| n.addr == to) else {
            return Err(RouteError::UnknownAskTarget {
                addr: to,
                version: map.version(),
            });
        };
        let replicas = map.replicas_of(&target.id);
        let version = map.version();
        let command = asked
            .last()
            .and_then(|r| r.first())
            .map_or(&b""[..], |c| &c[..]);
        let futures: Vec<_> = replicas
            .iter()
            .map(|r| async move {
                let pool = self.pool(r.addr, true);
                let mut replies = pool.exchange(asked, &self.cfg).await?;
                // A replica still importing refuses a multi-key write whose keys it does not
                // all hold yet (one the new drive took may be on its way here): one key at a
                // time, after ASKING each, it cannot refuse.
                let split =
                    matches!(replies.last(), Some(Reply::Error(e)) if e.starts_with(b"TRYAGAIN"))
                        .then(|| asked.last().and_then(|req| split_per_key(req)))
                        .flatten();
                if let Some(parts) = split {
                    let per_key: Vec<Vec<Bytes>> = parts
                        .into_iter()
                        .flat_map(|p| [vec![Bytes::from_static(b"ASKING")], p])
                        .collect();
                    replies = pool.exchange(&per_key, &self.cfg).await?;
                }
                for reply in &replies {
                    check(reply, r.addr, command, version)?;
                }
                Ok::<_, RouteError>(())
            })
            .collect();
        for (r, result) in replicas.iter().zip(join_all(futures).await) {
            result.map_err(|e| RouteError::WriteFailed {
                slot: asked
                    .last()
                    .and_then(|req| req.get(1))
                    .map_or(0, |k| key_slot(k)),
                addr: r.addr,
                replica: true,
                source: Box::new(e),
            })?;
        }
        Ok(())
    }

    /// Decides whether a failed attempt is retried: after `-MOVED`, when a newer map is
    /// found, first in the map file (reread), then on the drive the redirect names (the
    /// drives hold the map: `LS.CLUSTERMAP`), so a router follows a cluster that grew
    /// without anyone editing its file.
    pub(super) async fn retry_after(
        &self,
        err: RouteError,
        used: u64,
        attempt: usize,
    ) -> Result<(), RouteError> {
        let RouteError::Moved { addr, slot, to, .. } = err else {
            return Err(err);
        };
        // Another operation may have reloaded already.
        let mut newer = self.reload()? || self.map().version() > used;
        if !newer {
            if let Ok(drive) = to.parse::<SocketAddr>() {
                // Another operation's fetch of the same map may finish first and leave this
                // one nothing newer to adopt: what counts is the map in force afterwards.
                newer = self.fetch_map(drive).await || self.map().version() > used;
            }
        }
        if newer && attempt < self.cfg.max_redirects {
            return Ok(());
        }
        match &self.map_path {
            Some(path) => Err(RouteError::StaleMap {
                addr,
                slot,
                to,
                path: path.clone(),
                version: self.map().version(),
            }),
            None => Err(RouteError::Moved {
                addr,
                slot,
                to,
                version: used,
            }),
        }
    }

    /// Asks `drive` for the map it holds and adopts it if it is newer than the router's;
    /// returns whether it did. A drive that cannot answer, or answers something that is not
    /// a valid map, changes nothing.
    pub(super) async fn fetch_map(&self, drive: SocketAddr) -> bool {
        let request = [vec![Bytes::from_static(b"LS.CLUSTERMAP")]];
        let Ok(replies) = self.pool(drive, false).exchange(&request, &self.cfg).await else {
            return false;
        };
        let Some(Reply::Bulk(text) | Reply::Verbatim(text)) = replies.first() else {
            return false;
        };
        let Ok(fresh) = std::str::from_utf8(text)
            .map_err(|_| ())
            .and_then(|t| ClusterMap::from_toml(t).map_err(|_| ()))
        else {
            return false;
        };
        let mut current = self.map.write();
        if fresh.version() > current.version() {
            tracing::info!(
                from = current.version(),
                to = fresh.version(),
                %drive,
                "cluster map fetched from a drive"
            );
            *current = Arc::new(fresh);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_parse() {
        assert_eq!(
            parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
            Some((3999, "127.0.0.1:6381".to_string()))
        );
        assert_eq!(parse_redirect(b"ASK 1 h:2"), Some((1, "h:2".to_string())));
        assert_eq!(parse_redirect(b"ERR MOVED"), None);
        assert_eq!(parse_redirect(b"MOVED x y"), None);
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let moved = Reply::error("MOVED 5 127.0.0.1:2");
        assert!(matches!(
            check(&moved, addr, b"GET", 1),
            Err(RouteError::Moved { slot: 5, .. })
        ));
        assert!(matches!(
            check(&Reply::error("ERR nope"), addr, b"GET", 1),
            Err(RouteError::Server { .. })
        ));
    }
}
