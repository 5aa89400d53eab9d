//! Flushing memtables to L0 keytable runs: rotating the active memtable out (it joins the
//! queue of frozen ones, still read by readers), building the oldest one's run, writing the run's pages and
//! installing it. The maintenance thread runs these steps with the write lock free while
//! building and writing ([`super::maintain`]); [`Inner::flush`] runs them all under the lock
//! (explicit flushes, close, garbage collection's fallback).

use super::levels;
use super::maintain::Frozen;
use super::*;
use crate::keytable::KeyHash;

/// A keytable run and where its pages go, planned under the write lock and written
/// without it.
pub(super) struct RunWrite {
    /// The run's encoded pages.
    pub(super) pages: Vec<Vec<u8>>,
    /// Device extents `(first lba, pages)` in order, covering `pages` exactly.
    pub(super) chunks: Vec<(Lba, u32)>,
}

/// Builds the L0 run of a frozen memtable and finds the garbage it makes: each flushed key
/// shadows the newest older version in `levels` (found in DRAM, bloom filter first). Pure:
/// runs without the write lock.
pub(super) fn build_flush_run(
    mem: &MemTable,
    levels: &[Level],
    id: u64,
    bloom_fp_rate: f64,
) -> (KeyTable, Vec<Invalidated>) {
    let mut b = KeyTableBuilder::new(id);
    let mut dead: Vec<Invalidated> = Vec::new();
    let mut c = mem.cursor();
    while let Some((k, s)) = c.current() {
        let h = KeyHash::of(k);
        let below = levels::runs_for_key(levels, k).find_map(|r| r.get_held_hashed(k, h));
        // A small value's copy: the memtable's, or, for a retime of a value flushed before
        // (the version points at the same value), the one its entry below holds.
        let held = c.held().or_else(|| match &below {
            Some((below_slot, held)) if below_slot.ptr() == s.ptr() => held.clone(),
            _ => None,
        });
        b.push(k, &s, held.as_deref());
        if let Some((Slot::Value(old, _), _)) = below {
            // A retime since points at the value: it stays live here (and is counted
            // inside the memtable if a later version there dropped it).
            if !mem.keeps_value(k, &s, &old) {
                dead.push((k.len(), old));
            }
        }
        c.advance();
    }
    drop(c);
    (b.finish(bloom_fp_rate), dead)
}

/// Writes a planned run's pages (no lock needed: only the maintenance lock's holder
/// writes keytable segments, and the segments were claimed under the write lock).
///
/// # Errors
/// Device errors.
pub(super) fn write_run_pages(poller: &Poller, w: RunWrite) -> Result<Vec<(u64, u32)>> {
    let mut pages = w.pages.into_iter();
    let mut cmds = Vec::new();
    for &(first, n) in &w.chunks {
        for j in 0..u64::from(n) {
            let Some(p) = pages.next() else {
                return Err(corrupt(
                    "a keytable write plan covers more pages than the run",
                ));
            };
            cmds.push(Command::Write {
                lba: Lba(first.0 + j),
                buf: PageBuf::from_slice(&p),
            });
        }
    }
    for c in poller.run(cmds, IO_WINDOW) {
        c?.result?;
    }
    let mut extents: Vec<(u64, u32)> = Vec::new();
    for &(first, n) in &w.chunks {
        match extents.last_mut() {
            Some((lba, cnt)) if *lba + u64::from(*cnt) == first.0 => *cnt += n,
            _ => extents.push((first.0, n)),
        }
    }
    Ok(extents)
}

impl Inner {
    /// Claims room for `n` keytable pages: the rest of the current keytable segment, then
    /// fresh segments. Returns the chunks `(first lba, pages)` in write order.
    ///
    /// # Errors
    /// `DeviceFull` when no segment is free.
    pub(super) fn plan_run_pages(&mut self, n: usize) -> Result<Vec<(Lba, u32)>> {
        self.check_not_lost()?;
        let mut chunks = Vec::new();
        let mut left = n;
        // The current segment's write pointer as of the plan (nothing else writes it).
        let mut wp_of_current: Option<(u32, u32)> = None;
        while left > 0 {
            let cur = self.kt_segments.last().copied();
            let (seg, wp, room) = match cur {
                Some(s) => {
                    let info = self.dev.segment_info(SegmentId(s))?;
                    let wp = match wp_of_current {
                        Some((ws, wp)) if ws == s => wp,
                        _ => info.write_pointer,
                    };
                    let room = if info.state == SegmentState::Full
                        || info.state == SegmentState::ReadOnly
                    {
                        0
                    } else {
                        info.pages.saturating_sub(wp)
                    };
                    (s, wp, room)
                }
                None => (0, 0, 0),
            };
            if room == 0 {
                let s = self.alloc_segment("keytables", 0)?;
                self.kt_segments.push(s);
                self.kt_pending_segments += 1;
                wp_of_current = Some((s, 0));
                continue;
            }
            let take = (room as usize).min(left) as u32;
            chunks.push((self.g.lba(SegmentId(seg), wp), take));
            wp_of_current = Some((seg, wp + take));
            left -= take as usize;
        }
        Ok(chunks)
    }

    /// Writes a run's pages into keytable segments (under the write lock); returns its
    /// extents.
    pub(super) fn write_run(&mut self, t: &KeyTable) -> Result<Vec<(u64, u32)>> {
        let pages = t.encode_pages();
        let chunks = self.plan_run_pages(pages.len())?;
        write_run_pages(&self.poller, RunWrite { pages, chunks })
    }

    /// The next run id.
    pub(super) fn take_run_id(&mut self) -> u64 {
        let id = self.next_run;
        self.next_run += 1;
        id
    }

    /// Whether the active memtable must be rotated out: it is full, or the log written
    /// since its generation began passed the replay budget.
    pub(super) fn mem_full(&self) -> bool {
        self.mem.bytes() >= self.cfg.memtable_bytes
            || self.active_pages() >= self.replay_budget_pages()
    }

    /// Value-log pages written since the active memtable's generation began (since the
    /// newest frozen memtable's end, or the checkpoint).
    pub(super) fn active_pages(&self) -> u64 {
        self.pages_since_checkpoint
            .saturating_sub(self.frozen.back().map_or(0, |f| f.pages))
    }

    /// Whether a full active memtable may be rotated out now: fewer than
    /// `max_frozen_memtables` wait for their flush.
    pub(super) fn may_rotate(&self) -> bool {
        self.frozen.len() < self.cfg.max_frozen_memtables.max(1)
    }

    /// Whether a hole a failed batch left is after the replay checkpoint (client batches
    /// wait until a flush moves the checkpoint past it).
    pub(super) fn hole_pending(&self) -> bool {
        self.needs_checkpoint || self.frozen.iter().any(|f| f.hole)
    }

    /// Freezes the active memtable (it stays readable in the published version) and starts
    /// a fresh one. The frozen generation ends at the head: every record before it is in
    /// this memtable, an older frozen one or a run, because the pipeline is empty (no batch
    /// laid out before the head is still waiting to be applied) and batches are applied in
    /// layout order. Its garbage counts and hole go with it. Callers check
    /// [`Inner::may_rotate`] (a full flush flushes every frozen memtable first).
    pub(super) fn rotate(&mut self) {
        debug_assert!(self.pipeline.is_empty(), "rotation with batches in flight");
        debug_assert!(self.may_rotate(), "rotation with every frozen slot taken");
        let mem = std::mem::replace(
            &mut self.mem,
            Arc::new(MemTable::with_budget(self.cfg.memtable_bytes)),
        );
        self.frozen.push_back(Frozen {
            mem,
            end: self.head_position(),
            pages: self.pages_since_checkpoint,
            tail_dead: std::mem::take(&mut self.tail_dead),
            hole: std::mem::take(&mut self.needs_checkpoint),
        });
        self.publish_version();
    }

    /// Installs the oldest frozen memtable's run: readers switch from that memtable to the
    /// run in one swap, the garbage it shadows is counted for good, and the replay
    /// checkpoint moves to its generation's end (with the manifest). Younger frozen
    /// memtables stay; the pages they count since the checkpoint shrink by the flushed
    /// generation's.
    ///
    /// # Errors
    /// Writing the manifest.
    pub(super) fn install_flush(
        &mut self,
        t: KeyTable,
        extents: Vec<(u64, u32)>,
        dead: Vec<Invalidated>,
    ) -> Result<()> {
        let Some(f) = self.frozen.pop_front() else {
            return Err(corrupt("a flushed run without a frozen memtable"));
        };
        let bytes = t.data_bytes() as u64;
        self.add_run(t, 0, extents);
        let ls = self.level_stats_mut(0);
        ls.bytes_in += bytes;
        ls.bytes_written += bytes;
        self.publish_version();
        // Counted once, for good: the flush is never replayed (the versions shadowed are in
        // runs, so before the checkpoint).
        for (klen, old) in &dead {
            self.count_dead(*klen, old);
        }
        // Everything in the frozen memtable was written before its end; the garbage its
        // generation's records made is final from now on (it was left out of the manifest
        // while a replay would have counted it again).
        self.checkpoint = f.end;
        self.pages_since_checkpoint = self.pages_since_checkpoint.saturating_sub(f.pages);
        for younger in &mut self.frozen {
            younger.pages = younger.pages.saturating_sub(f.pages);
        }
        self.persist()?;
        self.stats.flushes += 1;
        self.maint.gc_idle = false;
        Ok(())
    }

    /// Flushes every frozen memtable, oldest first, with the write lock held throughout.
    pub(super) fn flush_frozen_locked(&mut self) -> Result<()> {
        while let Some(mem) = self.frozen.front().map(|f| f.mem.clone()) {
            let id = self.take_run_id();
            let (t, dead) = build_flush_run(&mem, &self.levels, id, self.cfg.bloom_fp_rate);
            let extents = self.write_run(&t)?;
            self.install_flush(t, extents, dead)?;
        }
        Ok(())
    }

    /// Adds a written run to `level` (the keytable segments claimed for it are in use from
    /// now on).
    pub(super) fn add_run(&mut self, t: KeyTable, level: usize, extents: Vec<(u64, u32)>) {
        self.kt_pending_segments = 0;
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
            // Partitioned: in key order (compaction never writes an empty run below L0).
            let at = levels::insert_position(&self.levels[level], &t);
            self.levels[level].insert(at, Arc::new(t));
        }
    }

    /// Flushes every memtable (the frozen ones, then the active one) with the write lock
    /// held and moves the checkpoint to the head. The caller holds the maintenance lock and
    /// the pipeline is empty.
    ///
    /// It compacts nothing: compactions are the maintenance thread's, one per task, each
    /// followed by the trim that returns its inputs' segments to the free list. Compactions
    /// chained here, under one hold of the lock, would each claim segments for their output
    /// while the segments of the runs they replaced wait for a trim that needs the lock
    /// free: a chain could take more segments than the keytable headroom
    /// (`Inner::keytable_headroom`) keeps free and fail a flush with `DeviceFull` on a
    /// device with room (it did, in `tests/long_keys.rs`, when the thread was behind).
    ///
    /// # Errors
    /// `DeviceFull`, device errors.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.check_not_lost()?;
        self.flush_frozen_locked()?;
        if self.mem.is_empty() {
            if self.pages_since_checkpoint > 0 || self.needs_checkpoint {
                self.move_checkpoint();
                self.persist()?;
            }
        } else {
            self.rotate();
            self.flush_frozen_locked()?;
        }
        Ok(())
    }
}
