//! What is durable and how it is found again: manifest snapshots, loading runs, the free
//! list, and the replay of the value-log tail.

use super::levels;
use super::*;

impl Inner {
    pub(super) fn snapshot(&self) -> Snapshot {
        let mut runs: Vec<RunMeta> = self.runs.values().cloned().collect();
        runs.sort_by_key(|r| r.id);
        Snapshot {
            seq: self.snap_seq,
            next_seq: self.next_seq,
            next_run: self.next_run,
            next_log_seg: self.next_log_seg,
            next_batch: self.next_batch,
            checkpoint: self.checkpoint,
            // Garbage the replay of the tail counts again is left out (see `tail_dead`).
            log_segs: self
                .log_segs
                .values()
                .map(|m| LogSegMeta {
                    dead: m.dead.saturating_sub(self.tail_dead_of(m.log_seg)),
                    ..m.clone()
                })
                // Reclaimed victims stay listed until they are released (see `gc_reclaimed`).
                .chain(self.gc_reclaimed.iter().cloned())
                .collect(),
            kt_segments: self.kt_segments.clone(),
            runs,
        }
    }

    pub(super) fn persist(&mut self) -> Result<()> {
        // What the manifest points at (keytable pages, moved values) is durable before it,
        // and the manifest is durable before anything it released is trimmed.
        self.sync_device()?;
        self.snap_seq += 1;
        let snap = self.snapshot();
        self.manifest.write(self.dev.as_ref(), &snap)?;
        self.sync_device()
    }

    /// Empties the device's volatile write cache (fdatasync on the file backend).
    pub(super) fn sync_device(&self) -> Result<()> {
        let dev = self.dev.clone();
        self.flush_gate.flush(|| device_flush(dev.as_ref()))?;
        Ok(())
    }

    pub(super) fn load_runs(&mut self, runs: &[RunMeta]) -> Result<()> {
        let mut sorted: Vec<&RunMeta> = runs.iter().collect();
        // L0 oldest first, so inserting each at the front leaves the newest first.
        sorted.sort_by_key(|r| (r.level, r.order));
        for meta in sorted {
            let lbas: Vec<Lba> = meta
                .extents
                .iter()
                .flat_map(|(first, n)| (0..u64::from(*n)).map(move |i| Lba(first + i)))
                .collect();
            let pages = self.read_pages(&lbas)?;
            let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
            let t = KeyTable::decode_pages(meta.id, &refs, self.cfg.bloom_fp_rate)
                .map_err(EngineError::Corrupt)?;
            let level = usize::from(meta.level);
            if level > 0 && t.is_empty() {
                // An empty run below L0 (an older version wrote them): left out, so the
                // next manifest drops it and its pages are released.
                continue;
            }
            if self.cfg.uncached_keytables {
                self.kt_index.insert(meta.id, t.page_index());
            }
            self.next_l0_order = self.next_l0_order.max(meta.order + 1);
            while self.levels.len() <= level {
                self.levels.push(Vec::new());
            }
            if level == 0 {
                self.levels[0].insert(0, Arc::new(t));
            } else {
                self.levels[level].push(Arc::new(t));
            }
            self.runs.insert(meta.id, meta.clone());
        }
        // Below L0, a level's runs are partitioned by key: order them so, and refuse a
        // manifest whose runs overlap (a lookup would miss keys).
        for (l, level) in self.levels.iter_mut().enumerate().skip(1) {
            level.sort_by(|a, b| a.range().map(|r| r.0).cmp(&b.range().map(|r| r.0)));
            levels::check_partitioned(level)
                .map_err(|e| corrupt(format!("keytable level {l}: {e}")))?;
        }
        Ok(())
    }

    /// Every segment the manifest does not account for is free; leftovers are trimmed.
    pub(super) fn rebuild_free_list(&mut self) -> Result<()> {
        let mut used: BTreeSet<u32> = MANIFEST_SEGMENTS.into_iter().collect();
        used.extend(self.log_segs.values().map(|m| m.segment));
        used.extend(self.kt_segments.iter().copied());
        for s in 0..self.g.segments() {
            if used.contains(&s) {
                continue;
            }
            if self.dev.segment_info(SegmentId(s))?.state == SegmentState::Free {
                self.free.insert(s);
            } else {
                self.trim_to_free(s)?;
            }
        }
        Ok(())
    }

    /// Replays complete write batches from the checkpoint into the memtable; the value log
    /// ends at the first page or batch that did not fully reach the device. The garbage the
    /// replayed records make is counted as when they were first written (the manifest's
    /// counts leave it out). Returns the device segments of the log segments it dropped: the
    /// caller persists the manifest, then trims them with
    /// [`Inner::release_log_segments`].
    pub(super) fn replay(&mut self) -> Result<Vec<u32>> {
        let start = self.checkpoint;
        let metas: Vec<LogSegMeta> = self
            .log_segs
            .values()
            .filter(|m| m.log_seg >= start.0)
            .cloned()
            .collect();
        // Records of the batch being collected, with their log segment (a batch may span two).
        let mut pending: Vec<(Vec<u8>, Slot, u64, u64, u32)> = Vec::new();
        // Unused bytes of the batch's packed pages, by log segment.
        let mut pending_waste: Vec<(u32, u64)> = Vec::new();
        let mut pending_batch: Option<u64> = None;
        // Where the batch being collected began: the log ends there if it never completes.
        let mut batch_start: (u32, u32) = start;
        let mut stop: Option<(u32, u32)> = None;
        let mut max_seq = 0;
        let mut max_batch = 0;
        let mut replayed = 0u64;
        'segs: for m in &metas {
            let seg = SegmentId(m.segment);
            let end = match m.sealed_end {
                Some(e) => e,
                None => self.dev.segment_info(seg)?.write_pointer,
            };
            let mut page = if m.log_seg == start.0 { start.1 } else { 0 };
            while page < end {
                let buf = match self.read_pages(&[self.g.lba(seg, page)]) {
                    Ok(mut v) => v.pop(),
                    Err(_) => None,
                };
                let parsed = buf.as_ref().and_then(|b| {
                    let info = check_page(b, m.log_seg, page).ok()?;
                    let recs = parse_records(b, &info).ok()?;
                    Some((info, recs))
                });
                if pending_batch.is_none() {
                    batch_start = (m.log_seg, page);
                }
                let Some((info, recs)) = parsed else {
                    stop = Some(batch_start);
                    break 'segs;
                };
                if pending_batch.is_some_and(|b| b != info.batch) {
                    // The previous batch never finished.
                    stop = Some(batch_start);
                    break 'segs;
                }
                pending_batch = Some(info.batch);
                let mut raw_ok = true;
                for r in &recs {
                    let key = match r.long_key {
                        None => r.key.clone(),
                        Some(lk) => {
                            // The key's raw pages must have reached the device whole.
                            let key = lk
                                .first_page
                                .checked_add(lk.pages())
                                .filter(|&last| last <= end)
                                .and_then(|last| {
                                    let lbas: Vec<Lba> =
                                        (lk.first_page..last).map(|p| self.g.lba(seg, p)).collect();
                                    let pages = self.read_pages(&lbas).ok()?;
                                    lk.assemble(pages.iter().map(|p| &p[..]))
                                });
                            match key {
                                Some(k) => k,
                                None => {
                                    raw_ok = false;
                                    break;
                                }
                            }
                        }
                    };
                    let slot = match r.kind {
                        RecordKind::Put => Slot::Value(ValuePtr {
                            log_seg: m.log_seg,
                            loc: ValueLoc::Inline {
                                page,
                                offset: r.payload_offset,
                            },
                            len: r.value_len,
                        }),
                        RecordKind::Indirect | RecordKind::LongPut => {
                            let (first, crc) = r.raw.unwrap_or((0, 0));
                            let p = ValuePtr {
                                log_seg: m.log_seg,
                                loc: ValueLoc::Raw { page: first, crc },
                                len: r.value_len,
                            };
                            let pps = self.g.pages_per_segment();
                            let within = if p.spans(pps) {
                                // Its other segments must be in the log (the read checks the
                                // pages and the checksum).
                                p.runs(pps)
                                    .iter()
                                    .all(|run| self.log_segs.contains_key(&run.log_seg))
                            } else {
                                first + raw_pages(u64::from(r.value_len)) as u32 <= end
                            };
                            if !within || self.read_values(&[Some(p)]).is_err() {
                                raw_ok = false;
                                break;
                            }
                            Slot::Value(p)
                        }
                        RecordKind::Delete | RecordKind::LongDelete => Slot::Tombstone,
                        // The head record carries the value.
                        RecordKind::Continued => continue,
                    };
                    pending.push((key, slot, r.seq, info.batch, m.log_seg));
                }
                if !raw_ok {
                    stop = Some(batch_start);
                    break 'segs;
                }
                pending_waste.push((m.log_seg, unused_bytes(usize::from(info.used))));
                if info.last_in_batch {
                    // Counted as the write path counts it: unused page bytes and tombstones
                    // at once, replaced values as the memtable drops them (`apply`).
                    for (log_seg, waste) in pending_waste.drain(..) {
                        self.count_tail_dead(log_seg, waste);
                    }
                    for (k, slot, seq, batch, log_seg) in pending.drain(..) {
                        max_seq = max_seq.max(seq);
                        max_batch = max_batch.max(batch);
                        if slot == Slot::Tombstone {
                            self.count_tail_dead(log_seg, delete_record_bytes(k.len()));
                        }
                        self.apply(&k, seq, slot);
                        replayed += 1;
                    }
                    pending_batch = None;
                }
                page += 1 + info.raw_after;
                self.pages_since_checkpoint += 1 + u64::from(info.raw_after);
            }
        }
        if stop.is_none() && pending_batch.is_some() {
            // The log ended inside a batch.
            stop = Some(batch_start);
        }
        self.next_seq = self.next_seq.max(max_seq + 1);
        self.next_batch = self.next_batch.max(max_batch + 1);
        self.stats.replayed_records = replayed;
        // Seal where the log ends; drop log segments after the end (they hold only
        // unacknowledged data). New writes go to a fresh log segment.
        let mut to_trim = Vec::new();
        for m in metas.iter() {
            let Some(meta) = self.log_segs.get_mut(&m.log_seg) else {
                continue;
            };
            match stop {
                Some((s, p)) if m.log_seg == s => {
                    meta.sealed_end = Some(p);
                    meta.written = u64::from(p) * PAGE_SIZE as u64;
                }
                Some((s, _)) if m.log_seg > s => to_trim.push(m.log_seg),
                _ => {
                    if meta.sealed_end.is_none() {
                        let wp = self.dev.segment_info(SegmentId(m.segment))?.write_pointer;
                        meta.sealed_end = Some(wp);
                        meta.written = u64::from(wp) * PAGE_SIZE as u64;
                    }
                }
            }
        }
        // A log segment that ends at page 0 holds nothing: it was opened (and recorded in the
        // manifest) but none of its pages reached the device before the cut, or all were
        // lost from the volatile write cache. No pointer can lead into it and replay reads
        // nothing from it, so it is released now; kept, it would be sealed empty and wait
        // for garbage collection, which only takes segments before the checkpoint, and each
        // such cut would cost a segment until the next flush.
        let empty: Vec<u32> = self
            .log_segs
            .values()
            .filter(|m| m.sealed_end == Some(0) && !to_trim.contains(&m.log_seg))
            .map(|m| m.log_seg)
            .collect();
        to_trim.extend(empty);
        let mut released = Vec::new();
        for log_seg in to_trim {
            if let Some(meta) = self.log_segs.remove(&log_seg) {
                self.tail_dead.remove(&log_seg);
                released.push(meta.segment);
            }
        }
        Ok(released)
    }

    /// Trims device segments that held log segments the manifest no longer lists (it must
    /// already be persisted without them) and returns them to the free list.
    pub(super) fn release_log_segments(&mut self, segments: &[u32]) -> Result<()> {
        if segments.is_empty() {
            return Ok(());
        }
        self.side.epochs.synchronize();
        for &segment in segments {
            self.trim_to_free(segment)?;
        }
        Ok(())
    }
}
