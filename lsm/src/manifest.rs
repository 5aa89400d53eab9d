//! The manifest: the engine's durable state (levels and their runs, value-log segments and
//! their garbage counts, the replay checkpoint), written as whole snapshots into two reserved
//! segments, alternating when one fills. The newest complete snapshot wins on open.
//!
//! Snapshot page: `crc32c u32 | magic u16 | len u16 | snapshot u64 | index u16 | count u16 |
//! 0 u32` then `len` bytes of the snapshot's encoding.

use hwftl_sim::{AppendDevice, Command, PageBuf, SegmentId, PAGE_SIZE};

use crate::error::{EngineError, Result};

/// Device segments reserved for the manifest.
pub const MANIFEST_SEGMENTS: [u32; 2] = [0, 1];
const MAGIC: u16 = 0x464d; // "MF"
const HEADER: usize = 24;
const PAYLOAD: usize = PAGE_SIZE - HEADER;
const FORMAT: u32 = 1;

/// A value-log segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSegMeta {
    /// Log segment number (order of opening).
    pub log_seg: u32,
    /// Device segment holding it.
    pub segment: u32,
    /// Pages that count: replay and GC stop here. `None` while it is being appended to.
    pub sealed_end: Option<u32>,
    /// Bytes written into it (pages).
    pub written: u64,
    /// Bytes known to be garbage.
    pub dead: u64,
}

/// A keytable run and where its pages are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMeta {
    /// Run id.
    pub id: u64,
    /// Level (0 = newest runs).
    pub level: u8,
    /// Position within L0 (higher = newer); 0 elsewhere.
    pub order: u64,
    /// Page extents: first LBA and page count.
    pub extents: Vec<(u64, u32)>,
}

/// Everything the engine persists besides values and keytable pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Snapshot number.
    pub seq: u64,
    /// Next record sequence number.
    pub next_seq: u64,
    /// Next run id.
    pub next_run: u64,
    /// Next log segment number.
    pub next_log_seg: u32,
    /// Next write-batch number.
    pub next_batch: u64,
    /// Replay starts here: (log segment, page).
    pub checkpoint: (u32, u32),
    /// Value-log segments in log order.
    pub log_segs: Vec<LogSegMeta>,
    /// Device segments holding keytable pages; the last is appended to.
    pub kt_segments: Vec<u32>,
    /// Runs.
    pub runs: Vec<RunMeta>,
}

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}
impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| EngineError::Unrecoverable("manifest snapshot is truncated".into()))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn count(&mut self) -> Result<usize> {
        let n = self.u32()? as usize;
        if n > self.b.len() {
            return Err(EngineError::Unrecoverable(
                "manifest count too large".into(),
            ));
        }
        Ok(n)
    }
}

impl Snapshot {
    /// Binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::new());
        w.u32(FORMAT);
        w.u64(self.seq);
        w.u64(self.next_seq);
        w.u64(self.next_run);
        w.u32(self.next_log_seg);
        w.u64(self.next_batch);
        w.u32(self.checkpoint.0);
        w.u32(self.checkpoint.1);
        w.u32(self.log_segs.len() as u32);
        for l in &self.log_segs {
            w.u32(l.log_seg);
            w.u32(l.segment);
            w.u8(u8::from(l.sealed_end.is_some()));
            w.u32(l.sealed_end.unwrap_or(0));
            w.u64(l.written);
            w.u64(l.dead);
        }
        w.u32(self.kt_segments.len() as u32);
        for s in &self.kt_segments {
            w.u32(*s);
        }
        w.u32(self.runs.len() as u32);
        for r in &self.runs {
            w.u64(r.id);
            w.u8(r.level);
            w.u64(r.order);
            w.u32(r.extents.len() as u32);
            for (lba, n) in &r.extents {
                w.u64(*lba);
                w.u32(*n);
            }
        }
        w.0
    }

    /// Decodes [`Snapshot::encode`]'s output.
    ///
    /// # Errors
    /// `Unrecoverable` on a malformed or foreign encoding.
    pub fn decode(b: &[u8]) -> Result<Snapshot> {
        let mut r = R { b, at: 0 };
        let format = r.u32()?;
        if format != FORMAT {
            return Err(EngineError::Unrecoverable(format!(
                "manifest format {format} (this build reads {FORMAT})"
            )));
        }
        let mut s = Snapshot {
            seq: r.u64()?,
            next_seq: r.u64()?,
            next_run: r.u64()?,
            next_log_seg: r.u32()?,
            next_batch: r.u64()?,
            checkpoint: (r.u32()?, r.u32()?),
            ..Snapshot::default()
        };
        for _ in 0..r.count()? {
            let log_seg = r.u32()?;
            let segment = r.u32()?;
            let sealed = r.u8()? != 0;
            let end = r.u32()?;
            s.log_segs.push(LogSegMeta {
                log_seg,
                segment,
                sealed_end: sealed.then_some(end),
                written: r.u64()?,
                dead: r.u64()?,
            });
        }
        for _ in 0..r.count()? {
            s.kt_segments.push(r.u32()?);
        }
        for _ in 0..r.count()? {
            let id = r.u64()?;
            let level = r.u8()?;
            let order = r.u64()?;
            let mut extents = Vec::new();
            for _ in 0..r.count()? {
                extents.push((r.u64()?, r.u32()?));
            }
            s.runs.push(RunMeta {
                id,
                level,
                order,
                extents,
            });
        }
        Ok(s)
    }
}

fn encode_pages(seq: u64, body: &[u8]) -> Vec<PageBuf> {
    let chunks: Vec<&[u8]> = if body.is_empty() {
        vec![&[][..]]
    } else {
        body.chunks(PAYLOAD).collect()
    };
    let count = chunks.len() as u16;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut p = PageBuf::zeroed();
            p[4..6].copy_from_slice(&MAGIC.to_le_bytes());
            p[6..8].copy_from_slice(&(c.len() as u16).to_le_bytes());
            p[8..16].copy_from_slice(&seq.to_le_bytes());
            p[16..18].copy_from_slice(&(i as u16).to_le_bytes());
            p[18..20].copy_from_slice(&count.to_le_bytes());
            p[HEADER..HEADER + c.len()].copy_from_slice(c);
            let crc = crc32c::crc32c(&p[4..]);
            p[0..4].copy_from_slice(&crc.to_le_bytes());
            p
        })
        .collect()
}

/// Header of a valid manifest page: (snapshot, index, count, payload).
fn check_page(p: &[u8]) -> Option<(u64, u16, u16, &[u8])> {
    let crc = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
    if crc32c::crc32c(&p[4..]) != crc || u16::from_le_bytes([p[4], p[5]]) != MAGIC {
        return None;
    }
    let len = usize::from(u16::from_le_bytes([p[6], p[7]]));
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&p[8..16]);
    let index = u16::from_le_bytes([p[16], p[17]]);
    let count = u16::from_le_bytes([p[18], p[19]]);
    let payload = p.get(HEADER..HEADER + len)?;
    (index < count).then_some((u64::from_le_bytes(seq), index, count, payload))
}

fn read_page(dev: &dyn AppendDevice, lba: hwftl_sim::Lba) -> Option<PageBuf> {
    crate::io::execute_patiently(
        dev,
        Command::Read {
            lba,
            buf: PageBuf::for_read(),
        },
    )
    .ok()?
    .into_buf()
    .ok()?
}

/// Reads and writes snapshots on the manifest segments.
#[derive(Debug)]
pub struct ManifestStore {
    /// Index into [`MANIFEST_SEGMENTS`] currently appended to.
    current: usize,
}

impl ManifestStore {
    /// Finds the newest complete snapshot, if any.
    ///
    /// # Errors
    /// `Device` errors other than reading unwritten pages; `Unrecoverable` for a snapshot
    /// that passes its checksums but does not decode.
    pub fn load(dev: &dyn AppendDevice) -> Result<(ManifestStore, Option<Snapshot>)> {
        let mut best: Option<(usize, Snapshot)> = None;
        for (i, &seg) in MANIFEST_SEGMENTS.iter().enumerate() {
            if let Some(s) = Self::newest_in(dev, SegmentId(seg))? {
                if best.as_ref().is_none_or(|(_, b)| s.seq > b.seq) {
                    best = Some((i, s));
                }
            }
        }
        Ok(match best {
            Some((i, s)) => (ManifestStore { current: i }, Some(s)),
            None => (ManifestStore { current: 0 }, None),
        })
    }

    fn newest_in(dev: &dyn AppendDevice, seg: SegmentId) -> Result<Option<Snapshot>> {
        let g = dev.geometry();
        let wp = dev.segment_info(seg)?.write_pointer;
        let mut end = wp;
        while end > 0 {
            // Find the last page of a snapshot at or before `end - 1`.
            let Some(last) = read_page(dev, g.lba(seg, end - 1)) else {
                end -= 1;
                continue;
            };
            let Some((seq, index, count, _)) = check_page(&last) else {
                end -= 1;
                continue;
            };
            if index + 1 != count || u32::from(index) >= end {
                end -= 1;
                continue;
            }
            let first = end - 1 - u32::from(index);
            let mut body = Vec::new();
            let mut ok = true;
            for (k, off) in (first..end).enumerate() {
                match read_page(dev, g.lba(seg, off))
                    .as_deref()
                    .and_then(check_page)
                {
                    Some((s, i, c, payload)) if s == seq && usize::from(i) == k && c == count => {
                        body.extend_from_slice(payload)
                    }
                    _ => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                return Snapshot::decode(&body).map(Some);
            }
            end = first;
        }
        Ok(None)
    }

    /// A store for a device with no manifest yet.
    pub fn fresh() -> ManifestStore {
        ManifestStore { current: 0 }
    }

    /// Writes a snapshot; returns once it is durable.
    ///
    /// # Errors
    /// `DeviceFull` when a snapshot no longer fits a whole segment; device errors.
    pub fn write(&mut self, dev: &dyn AppendDevice, snap: &Snapshot) -> Result<()> {
        let pages = encode_pages(snap.seq, &snap.encode());
        let pps = dev.geometry().pages_per_segment();
        if pages.len() > pps as usize {
            return Err(EngineError::DeviceFull {
                purpose: "the manifest",
            });
        }
        let mut seg = SegmentId(MANIFEST_SEGMENTS[self.current]);
        let wp = dev.segment_info(seg)?.write_pointer;
        if wp as usize + pages.len() > pps as usize {
            // Switch: the other segment is erased and takes the snapshot; the current one
            // keeps the previous snapshot until this one is complete.
            self.current = 1 - self.current;
            seg = SegmentId(MANIFEST_SEGMENTS[self.current]);
            crate::io::execute_patiently(dev, Command::Trim { segment: seg })?.result?;
        }
        let tags: Vec<_> = pages
            .into_iter()
            .map(|buf| Command::Append { segment: seg, buf })
            .collect();
        for cmd in tags {
            crate::io::execute_patiently(dev, cmd)?.result?;
        }
        crate::io::execute_patiently(dev, Command::Flush)?.result?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip() {
        let s = Snapshot {
            seq: 9,
            next_seq: 100,
            next_run: 7,
            next_log_seg: 4,
            next_batch: 55,
            checkpoint: (3, 12),
            log_segs: vec![
                LogSegMeta {
                    log_seg: 2,
                    segment: 5,
                    sealed_end: Some(30),
                    written: 1000,
                    dead: 10,
                },
                LogSegMeta {
                    log_seg: 3,
                    segment: 6,
                    sealed_end: None,
                    written: 10,
                    dead: 0,
                },
            ],
            kt_segments: vec![8, 9],
            runs: vec![RunMeta {
                id: 6,
                level: 1,
                order: 0,
                extents: vec![(1000, 3), (2000, 1)],
            }],
        };
        assert_eq!(Snapshot::decode(&s.encode()).ok(), Some(s.clone()));
        let big = Snapshot {
            kt_segments: (0..5000).collect(),
            ..s
        };
        let pages = encode_pages(1, &big.encode());
        assert_eq!(pages.len(), 3);
        assert!(pages.iter().all(|p| check_page(p).is_some()));
    }
}
