//! The raw device behind the harness's own clients ([`DeviceReads`]): a read batch is one
//! page read per key, all in flight at once through [`AppendDevice::execute_many`] (as the
//! engine's `multi_get` reads the pages its lookups found), and the batch returns when its
//! last page is in. Run by the workloads' closed-loop clients just before the engine's
//! R-GET on the engine's own device, it is the read ceiling measured beside the row: the
//! run's ceiling is measured once, before every system, and this host's disk drifts by
//! large factors over the minutes between (`Row::device_reads_beside`).

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Command, Lba, PageBuf, SegmentId};

use crate::kv::{Key, KvSession, KvUnderTest};

/// Reads of the pages written on a device: each key reads one of them.
pub struct DeviceReads {
    dev: Arc<dyn AppendDevice>,
    /// `(first lba, pages)` of each segment's written part, in LBA order.
    extents: Vec<(u64, u64)>,
    /// Pages over all extents.
    pages: u64,
}

impl DeviceReads {
    /// Reads of every page written on `dev` as of now: each segment up to its write
    /// pointer. The owner of the device must not trim any of them while the reads run (an
    /// engine settled after its writes: nothing is due, so nothing is trimmed).
    ///
    /// # Errors
    /// When the device cannot say a segment's state, or nothing is written.
    pub fn written(dev: Arc<dyn AppendDevice>) -> anyhow::Result<DeviceReads> {
        let g = dev.geometry();
        let mut extents = Vec::new();
        for s in 0..g.segments() {
            let info = dev.segment_info(SegmentId(s))?;
            if info.write_pointer > 0 {
                extents.push((
                    g.segment_start(SegmentId(s)).0,
                    u64::from(info.write_pointer),
                ));
            }
        }
        let pages = extents.iter().map(|e| e.1).sum();
        anyhow::ensure!(pages > 0, "no page is written on the device");
        Ok(DeviceReads {
            dev,
            extents,
            pages,
        })
    }

    /// The page key `k` reads: its number (the digits of [`crate::kv::key`]) scattered over
    /// the written pages by a multiplicative hash, so that keys drawn uniformly read pages
    /// drawn uniformly, and keys in order do not read pages in order.
    fn lba_of(&self, k: &Key) -> Lba {
        let n = k.iter().filter(|b| b.is_ascii_digit()).fold(0u64, |n, &b| {
            n.wrapping_mul(10).wrapping_add(u64::from(b - b'0'))
        });
        let mut i = n.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) % self.pages;
        for &(first, len) in &self.extents {
            if i < len {
                return Lba(first + i);
            }
            i -= len;
        }
        // `i < pages`, the extents' sum: not reached.
        Lba(self.extents.first().map_or(0, |e| e.0))
    }
}

struct DeviceSession<'a>(&'a DeviceReads);

impl KvSession for DeviceSession<'_> {
    fn put(&mut self, _keys: &[Key], _value: &[u8]) -> anyhow::Result<()> {
        anyhow::bail!("the raw device's reads take no writes")
    }

    fn get(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let cmds = keys
            .iter()
            .map(|k| Command::Read {
                lba: self.0.lba_of(k),
                buf: PageBuf::for_read(),
            })
            .collect();
        for r in self.0.dev.execute_many(cmds) {
            let c = r.map_err(|r| anyhow::anyhow!("a device read was refused: {}", r.error))?;
            c.result?;
        }
        Ok(())
    }
}

impl KvUnderTest for DeviceReads {
    fn session(&self) -> anyhow::Result<Box<dyn KvSession + '_>> {
        Ok(Box::new(DeviceSession(self)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::key;
    use crate::workloads::{self, Shape, Workload};
    use hwftl_sim::loadgen;
    use hwftl_sim::{Backend, DeviceConfig, Ftl, Geometry, RamStore};

    fn device() -> Arc<Ftl> {
        let g = Geometry {
            channels: 2,
            ways: 2,
            blocks_per_chip: 8,
            pages_per_block: 4,
            spare_blocks_per_chip: 1,
        };
        let dev = Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap();
        Arc::new(dev)
    }

    #[test]
    fn keys_read_only_written_pages_and_all_of_them() {
        let dev = device();
        let g = dev.geometry();
        // Two whole segments and three pages of a third, not adjacent to them.
        loadgen::prefill(dev.as_ref(), 0, 2, 8).unwrap();
        for _ in 0..3 {
            let c = dev
                .execute(Command::Append {
                    segment: SegmentId(4),
                    buf: PageBuf::zeroed(),
                })
                .unwrap();
            c.result.unwrap();
        }
        let r = DeviceReads::written(dev.clone()).unwrap();
        let pps = u64::from(g.pages_per_segment());
        assert_eq!(r.pages, 2 * pps + 3);
        let written = |lba: u64| {
            lba < 2 * pps
                || (g.segment_start(SegmentId(4)).0..g.segment_start(SegmentId(4)).0 + 3)
                    .contains(&lba)
        };
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..10_000 {
            let lba = r.lba_of(&key(i)).0;
            assert!(written(lba), "key {i} reads page {lba}, never written");
            seen.insert(lba);
        }
        assert_eq!(seen.len() as u64, r.pages, "every written page is read");
    }

    #[test]
    fn the_clients_read_every_batch_from_the_device() {
        let dev = device();
        loadgen::prefill(dev.as_ref(), 0, 2, 8).unwrap();
        let reads_before = dev.stats().reads;
        let kv = DeviceReads::written(dev.clone()).unwrap();
        let shape = Shape {
            clients: 2,
            read_batch: 8,
            write_batch: 8,
            seed: 0,
        };
        let m = workloads::run(&kv, Workload::RGet, 64, 256, &[0u8; 8192], shape).unwrap();
        assert!(m.ops_per_sec > 0.0);
        assert_eq!(dev.stats().reads - reads_before, 256);
        assert!(kv.session().unwrap().put(&[key(0)], b"v").is_err());
        // Nothing written: nothing to measure.
        assert!(DeviceReads::written(device()).is_err());
    }
}
