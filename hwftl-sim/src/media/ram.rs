//! RAM media: pages kept in process memory. The store outlives a device handle, so tests can
//! power-cut a device and open it again on what the "flash" kept.
//!
//! A program lands in the store when it is started, and a power cut undoes, through
//! `revert_program`, the programs it loses: those not yet delivered and, when the device
//! models a volatile write cache ([`crate::DeviceConfig::volatile_cache`]), those delivered
//! but not covered by a delivered FLUSH. The FTL keeps that account; an undone page is erased
//! (`None`), exactly like a page never programmed. Metadata writes (superblock and tables) are
//! durable at once.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{Media, MediaDone, MediaLayout, MediaOp, StartError};
use crate::error::{DeviceError, Result};
use crate::geometry::{Ppa, PAGE_SIZE};

/// The contents of a RAM device. Cheap to clone (shared); keep a clone to reopen the device
/// after [`crate::Ftl::power_cut`].
#[derive(Clone, Default)]
pub struct RamStore {
    inner: Arc<Mutex<RamInner>>,
}

#[derive(Default)]
struct RamInner {
    meta: Vec<u8>,
    /// `None` = erased. Allocated on program, freed on erase.
    pages: Vec<Option<Box<[u8]>>>,
}

impl RamStore {
    /// An empty, unformatted store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of page data currently held.
    pub fn resident_bytes(&self) -> u64 {
        let g = self.inner.lock();
        g.pages.iter().filter(|p| p.is_some()).count() as u64 * PAGE_SIZE as u64
    }
}

pub(crate) struct RamMedia {
    store: RamStore,
    done: Mutex<Vec<MediaDone>>,
}

impl RamMedia {
    pub(crate) fn new(store: RamStore) -> Self {
        RamMedia {
            store,
            done: Mutex::new(Vec::new()),
        }
    }
}

fn page_index(ppa: Ppa, len: usize) -> Result<usize> {
    usize::try_from(ppa)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| DeviceError::io("ram media", std::io::Error::other("page past the end")))
}

impl Media for RamMedia {
    fn prepare(&mut self, layout: MediaLayout, format: bool) -> Result<()> {
        let mut g = self.store.inner.lock();
        let pages = usize::try_from(layout.physical_pages)
            .map_err(|_| DeviceError::InvalidGeometry("too many pages for RAM".into()))?;
        let meta = usize::try_from(layout.meta_bytes)
            .map_err(|_| DeviceError::InvalidGeometry("metadata too large for RAM".into()))?;
        if format {
            g.meta = vec![0; meta];
            g.pages = (0..pages).map(|_| None).collect();
        } else if g.meta.len() != meta || g.pages.len() != pages {
            return Err(DeviceError::WrongSize {
                path: "<ram>".into(),
                expected: layout.total_bytes(),
                actual: g.meta.len() as u64 + g.pages.len() as u64 * PAGE_SIZE as u64,
            });
        }
        Ok(())
    }

    fn read_meta(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let g = self.store.inner.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok(g.meta
            .get(start..start.saturating_add(len))
            .map(<[u8]>::to_vec)
            .unwrap_or_default())
    }

    fn write_meta(&self, offset: u64, data: &[u8]) -> Result<()> {
        let mut g = self.store.inner.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(data.len());
        if end > g.meta.len() {
            g.meta.resize(end, 0);
        }
        g.meta[start..end].copy_from_slice(data);
        Ok(())
    }

    fn start(&self, id: u32, op: MediaOp) -> std::result::Result<(), StartError> {
        let mut g = self.store.inner.lock();
        let len = g.pages.len();
        let done = match op {
            MediaOp::Read { ppa, mut buf } => {
                let i = match page_index(ppa, len) {
                    Ok(i) => i,
                    Err(e) => return Err((e, Some(buf))),
                };
                match &g.pages[i] {
                    Some(p) => buf.copy_from_slice(p),
                    None => buf.fill(0),
                }
                MediaDone {
                    id,
                    result: Ok(()),
                    buf: Some(buf),
                }
            }
            MediaOp::Program { ppa, buf } => {
                let i = match page_index(ppa, len) {
                    Ok(i) => i,
                    Err(e) => return Err((e, Some(buf))),
                };
                g.pages[i] = Some(Box::from(&buf[..]));
                MediaDone {
                    id,
                    result: Ok(()),
                    buf: Some(buf),
                }
            }
            MediaOp::Flush => MediaDone {
                id,
                result: Ok(()),
                buf: None,
            },
        };
        drop(g);
        self.done.lock().push(done);
        Ok(())
    }

    fn doorbell(&self) -> Result<()> {
        Ok(())
    }

    fn poll(&self, out: &mut Vec<MediaDone>, _block: bool) -> Result<()> {
        out.append(&mut self.done.lock());
        Ok(())
    }

    fn erase(&self, ppas: &[Ppa]) -> Result<()> {
        let mut g = self.store.inner.lock();
        let len = g.pages.len();
        for &p in ppas {
            let i = page_index(p, len)?;
            g.pages[i] = None;
        }
        Ok(())
    }

    fn is_programmed(&self, ppa: Ppa) -> Result<bool> {
        let g = self.store.inner.lock();
        let i = page_index(ppa, g.pages.len())?;
        Ok(g.pages[i].is_some())
    }

    fn revert_program(&self, ppa: Ppa) {
        let mut g = self.store.inner.lock();
        if let Ok(i) = page_index(ppa, g.pages.len()) {
            g.pages[i] = None;
        }
    }

    fn simulates_write_cache(&self) -> bool {
        true
    }

    fn corrupt(&self, ppa: Ppa, byte: usize) -> Result<()> {
        let mut g = self.store.inner.lock();
        let i = page_index(ppa, g.pages.len())?;
        if let Some(p) = g.pages[i].as_mut() {
            p[byte % PAGE_SIZE] ^= 0x01;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        "ram".into()
    }
}
