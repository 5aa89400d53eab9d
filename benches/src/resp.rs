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
