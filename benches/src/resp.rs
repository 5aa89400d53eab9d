//! The RESP access path of `bench all`: a server (the drive or `redis-server`) driven by the
//! same workloads as the in-process engines, through `kvproto`'s client. Each client thread
//! has its own connection and pipelines its batch (SETs or GETs) in one write, then reads the
//! replies; CPU, resident memory and bytes written are the server process's.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use bytes::Bytes;
use kvproto::{Client, Reply};

use crate::kv::{Key, KvSession, KvUnderTest};

/// A RESP server under test.
pub struct RespServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its process (for CPU, memory and bytes written).
    pub pid: u32,
}

struct Connection {
    rt: tokio::runtime::Runtime,
    client: Client,
    /// The value last sent, kept as `Bytes` so a pipeline of SETs shares it.
    value: Bytes,
}

impl KvUnderTest for RespServer {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = rt
            .block_on(Client::connect(self.addr))
            .with_context(|| format!("connecting to {}", self.addr))?;
        Ok(Box::new(Connection {
            rt,
            client,
            value: Bytes::new(),
        }))
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn engine_counters(&self) -> Option<crate::kv::EngineCounters> {
        // redis-server has no `lsm` section: no counters.
        let text = info_text(self.addr, "lsm").ok()?;
        crate::kv::ENGINE_COUNTERS
            .iter()
            .map(|&(name, _)| Some((name.to_string(), parse_info_field(&text, name).ok()?)))
            .collect()
    }
}

impl KvSession for Connection {
    fn put(&mut self, keys: &[Key], value: &[u8]) -> anyhow::Result<()> {
        if self.value[..] != *value {
            self.value = Bytes::copy_from_slice(value);
        }
        let requests: Vec<Vec<&[u8]>> = keys
            .iter()
            .map(|k| vec![&b"SET"[..], &k[..], &self.value[..]])
            .collect();
        let replies = self.rt.block_on(self.client.pipeline(&requests))?;
        for r in replies {
            if let Reply::Error(e) = r {
                bail!("SET failed: {}", String::from_utf8_lossy(&e));
            }
        }
        Ok(())
    }

    fn noop(&mut self) -> anyhow::Result<()> {
        match self.rt.block_on(self.client.call(&[&b"PING"[..]]))? {
            Reply::Error(e) => bail!("PING failed: {}", String::from_utf8_lossy(&e)),
            _ => Ok(()),
        }
    }

    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let requests: Vec<Vec<&[u8]>> = keys.iter().map(|k| vec![&b"GET"[..], &k[..]]).collect();
        let replies = self.rt.block_on(self.client.pipeline(&requests))?;
        for r in replies {
            match r {
                Reply::Bulk(_) => {}
                Reply::Null => bail!("a loaded key is missing"),
                Reply::Error(e) => bail!("GET failed: {}", String::from_utf8_lossy(&e)),
                other => bail!("unexpected reply to GET: {other:?}"),
            }
        }
        Ok(())
    }
}

/// A numeric field of the server's `INFO section` reply (e.g. the drive's `value_bytes_copied`
/// in `stats`), over a connection of its own.
///
/// # Errors
/// When the server cannot be reached or has no such field.
pub fn info_field(addr: SocketAddr, section: &str, field: &str) -> anyhow::Result<u64> {
    parse_info_field(&info_text(addr, section)?, field)
}

/// The text of `INFO section` from the server at `addr`.
fn info_text(addr: SocketAddr, section: &str) -> anyhow::Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let reply = rt.block_on(async {
        let mut c = Client::connect(addr).await?;
        c.call(&[&b"INFO"[..], section.as_bytes()]).await
    })?;
    match reply {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(&b).to_string()),
        other => bail!("unexpected reply to INFO: {other:?}"),
    }
}

fn parse_info_field(text: &str, field: &str) -> anyhow::Result<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .with_context(|| format!("no `{field}` in INFO"))?
        .trim()
        .parse()
        .with_context(|| format!("bad `{field}` in INFO"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_info_field() {
        let text = "# Stats\r\nvalue_bytes_copied:8192\r\nvalue_bytes_moved:3\r\n";
        assert_eq!(
            parse_info_field(text, "value_bytes_copied").ok(),
            Some(8192)
        );
        assert!(parse_info_field(text, "value_bytes").is_err());
    }
}
