//! Flushing the memtable to an L0 keytable run.

use super::*;

impl Inner {
    /// Writes a run's pages into keytable segments; returns its extents.
    pub(super) fn write_run(&mut self, t: &KeyTable) -> Result<Vec<(u64, u32)>> {
        let pages = t.encode_pages();
        let mut extents: Vec<(u64, u32)> = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            let cur = self.kt_segments.last().copied();
            let room = match cur {
                Some(s) => {
                    let info = self.dev.segment_info(SegmentId(s))?;
                    if info.state == SegmentState::Full || info.state == SegmentState::ReadOnly {
                        0
                    } else {
                        info.pages - info.write_pointer
                    }
                }
                None => 0,
            };
            if room == 0 {
                let s = self.alloc_segment("keytables", 0)?;
                self.kt_segments.push(s);
                continue;
            }
            let Some(seg) = cur else { continue };
            let n = (room as usize).min(pages.len() - i);
            let wp = self.dev.segment_info(SegmentId(seg))?.write_pointer;
            let chunk: Vec<(Lba, PageBuf)> = (0..n)
                .map(|j| {
                    (
                        self.g.lba(SegmentId(seg), wp + j as u32),
                        PageBuf::from_slice(&pages[i + j]),
                    )
                })
                .collect();
            let first = chunk[0].0;
            self.write_pages(chunk)?;
            match extents.last_mut() {
                Some((lba, cnt)) if *lba + u64::from(*cnt) == first.0 => *cnt += n as u32,
                _ => extents.push((first.0, n as u32)),
            }
            i += n;
        }
        Ok(extents)
    }

    pub(super) fn add_run(&mut self, t: KeyTable, level: usize, extents: Vec<(u64, u32)>) {
        if self.cfg.uncached_keytables {
            self.kt_index.insert(t.id(), t.page_index());
        }
        let order = if level == 0 {
            let o = self.next_l0_order;
            self.next_l0_order += 1;
            o
        } else {
            0
        };
        self.runs.insert(
            t.id(),
            RunMeta {
                id: t.id(),
                level: level as u8,
                order,
                extents,
            },
        );
        while self.levels.len() <= level {
            self.levels.push(Vec::new());
        }
        if level == 0 {
            self.levels[0].insert(0, Arc::new(t));
        } else {
            self.levels[level] = vec![Arc::new(t)];
        }
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        if self.mem.is_empty() {
            if self.pages_since_checkpoint > 0 {
                self.move_checkpoint();
                self.persist()?;
            }
            return Ok(());
        }
        let id = self.next_run;
        self.next_run += 1;
        let mut b = KeyTableBuilder::new(id);
        // Garbage is counted here, exactly once per version: each flushed key shadows the
        // newest older version in the runs (found in DRAM, bloom filter first).
        let mut dead: Vec<Invalidated> = Vec::new();
        let mut c = self.mem.cursor();
        while let Some((k, s)) = c.current() {
            b.push(k, &s);
            if let Some(Slot::Value(old)) = self.levels.iter().flatten().find_map(|r| r.get(k)) {
                dead.push((k.len(), old));
            }
            c.advance();
        }
        drop(c);
        let t = b.finish(self.cfg.bloom_fp_rate);
        let extents = self.write_run(&t)?;
        self.add_run(t, 0, extents);
        // Readers switch to the run and a fresh memtable in one swap; those still holding the
        // old version keep its memtable until they let go.
        self.mem = Arc::new(MemTable::new());
        self.publish_version();
        // Counted once, for good: the flush is never replayed (the versions shadowed are in
        // runs, so before the checkpoint).
        for (klen, old) in &dead {
            self.count_dead(*klen, old);
        }
        // Everything in the memtable was written before the head's next page.
        self.move_checkpoint();
        self.persist()?;
        self.stats.flushes += 1;
        self.maybe_compact()
    }
}
