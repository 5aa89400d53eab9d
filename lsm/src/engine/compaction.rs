//! Metadata-only compaction of keytable runs, and the release of keytable segments no run
//! uses.

use super::gc::GC_BATCH_BYTES;
use super::*;

impl Inner {
    pub(super) fn level_target(&self, level: usize) -> usize {
        let mut t = self.cfg.l1_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.cfg.level_ratio);
        }
        t
    }

    pub(super) fn level_bytes(&self, level: usize) -> usize {
        self.levels
            .get(level)
            .map_or(0, |l| l.iter().map(|r| r.data_bytes()).sum())
    }

    pub(super) fn deepest_nonempty(&self) -> usize {
        (0..self.levels.len())
            .rev()
            .find(|&l| !self.levels[l].is_empty())
            .unwrap_or(0)
    }

    pub(super) fn maybe_compact(&mut self) -> Result<()> {
        if self.levels[0].len() >= self.cfg.l0_runs.max(1) {
            self.compact_into(0, 1)?;
        }
        let mut level = 1;
        while level < self.levels.len() {
            if self.level_bytes(level) > self.level_target(level) {
                self.compact_into(level, level + 1)?;
            }
            level += 1;
        }
        Ok(())
    }

    pub(super) fn compact_all(&mut self) -> Result<()> {
        let deepest = self.deepest_nonempty().max(1);
        for level in 0..deepest {
            if !self.levels[level].is_empty() {
                self.compact_into(level, level + 1)?;
            }
        }
        Ok(())
    }

    /// The runs a merge of level `from` into `to` takes (newest first), whether `to` is the
    /// bottom level (tombstones can go), and the output's run id; `None` with both empty.
    pub(super) fn compaction_inputs(
        &mut self,
        from: usize,
        to: usize,
    ) -> Option<(Vec<Arc<KeyTable>>, bool, u64)> {
        while self.levels.len() <= to {
            self.levels.push(Vec::new());
        }
        let mut inputs: Vec<Arc<KeyTable>> = self.levels[from].clone();
        inputs.extend(self.levels[to].iter().cloned());
        if inputs.is_empty() {
            return None;
        }
        let bottom = self.deepest_nonempty() <= to;
        Some((inputs, bottom, self.take_run_id()))
    }

    /// Merges level `from` into level `to` (metadata only: values stay where they are).
    pub(super) fn compact_into(&mut self, from: usize, to: usize) -> Result<()> {
        let Some((inputs, bottom, id)) = self.compaction_inputs(from, to) else {
            return Ok(());
        };
        let (mut t, dead) = compact(&inputs, id, bottom, self.cfg.bloom_fp_rate);
        // The ablation: values move with their keys, as in an LSM without key-value
        // separation. Only with an empty memtable (right after a flush): the moved records
        // then hold the newest versions, and the checkpoint moves past them below.
        let mut moved = self.cfg.compaction_moves_values
            && self.mem.is_empty()
            && self.frozen.is_none()
            && !self.in_gc;
        if moved {
            // Every value is rewritten before the inputs' garbage can be reclaimed: an LSM
            // without key-value separation needs free space for its largest compaction. With
            // too little free, this compaction keeps the values where they are (counted).
            // (A value spanning segments takes them whole, and one more for what follows.)
            let (mut bytes, mut spanning) = (0u64, 0usize);
            for j in 0..t.len() {
                if let Slot::Value(p) = t.slot(j) {
                    let klen = t.key(j).len();
                    if p.spans(self.g.pages_per_segment()) {
                        spanning += self.spanning_segments(klen, p.len as usize) + 1;
                    } else {
                        bytes += p.record_bytes(klen);
                    }
                }
            }
            let need =
                bytes.div_ceil(self.g.segment_bytes()) as usize + spanning + self.gc_low_water();
            if self.free.len() < need {
                moved = false;
                self.stats.compactions_without_room_to_move += 1;
            }
        }
        if moved {
            t = self.move_run_values(&t)?;
        }
        let extents = self.write_run(&t)?;
        if moved {
            // Everything written so far is in the runs: nothing before the head needs replay
            // (the manifest the install writes says so).
            self.move_checkpoint();
        }
        self.install_compaction(&inputs, from, to, t, extents, dead.len() as u64)
    }

    /// Installs a compaction's output in place of its inputs (levels `from` and `to`, as
    /// they were when it started: only the maintenance lock's holder changes levels),
    /// writes the manifest and releases keytable segments no run uses any more.
    ///
    /// # Errors
    /// `Corrupt` if the levels changed under the compaction; writing the manifest; trims.
    pub(super) fn install_compaction(
        &mut self,
        inputs: &[Arc<KeyTable>],
        from: usize,
        to: usize,
        t: KeyTable,
        extents: Vec<(u64, u32)>,
        invalidated: u64,
    ) -> Result<()> {
        let current = self.levels[from].iter().chain(self.levels[to].iter());
        if !current.map(|r| r.id()).eq(inputs.iter().map(|r| r.id())) {
            return Err(corrupt(format!(
                "levels {from} and {to} changed during their compaction"
            )));
        }
        for r in inputs {
            self.runs.remove(&r.id());
            self.kt_index.remove(&r.id());
        }
        self.levels[from].clear();
        self.levels[to].clear();
        self.add_run(t, to, extents);
        // The merged run replaces its inputs for readers in one swap.
        self.publish_version();
        // Already counted as garbage when their successors were flushed.
        self.stats.compaction_invalidated += invalidated;
        self.persist()?;
        self.stats.compactions += 1;
        self.release_keytable_segments()
    }

    /// The ablation of metadata-only compaction (`EngineConfig::compaction_moves_values`):
    /// reads every value `t` points to and writes it again at the head, ~1 MiB at a time;
    /// returns the run with the new pointers. The old copies become garbage.
    pub(super) fn move_run_values(&mut self, t: &KeyTable) -> Result<KeyTable> {
        let mut out = KeyTableBuilder::new(t.id());
        let mut i = 0;
        while i < t.len() {
            let mut end = i;
            let mut bytes = 0usize;
            while end < t.len() && (end == i || bytes < GC_BATCH_BYTES) {
                if let Slot::Value(p) = t.slot(end) {
                    bytes += p.len as usize + t.key(end).len();
                }
                end += 1;
            }
            let ptrs: Vec<Option<ValuePtr>> = (i..end)
                .map(|j| match t.slot(j) {
                    Slot::Value(p) => Some(p),
                    Slot::Tombstone => None,
                })
                .collect();
            let plan = self.plan_reads(&ptrs)?;
            let pages = plan.fetch(self.dev.as_ref());
            let values = plan.assemble(&pages, &AtomicU64::new(0))?;
            let keys: Vec<Vec<u8>> = (i..end).map(|j| t.key(j).to_vec()).collect();
            let ops: Vec<WriteOp<'_>> = keys
                .iter()
                .zip(&values)
                .filter_map(|(k, v)| v.as_ref().map(|v| WriteOp::Put(k, v)))
                .collect();
            let mut new_slots: HashMap<Vec<u8>, Slot> = HashMap::new();
            if !ops.is_empty() {
                let (pages, updates) = self.build_batch(&ops, 0)?;
                let n = pages.len() as u64;
                if let Err(e) = self.write_pages(pages) {
                    self.abandon_head_after_failure();
                    return Err(e);
                }
                self.pages_since_checkpoint += n;
                new_slots = updates
                    .into_iter()
                    .map(|(k, _, s)| (k.to_vec(), s))
                    .collect();
            }
            for (j, key) in (i..end).zip(&keys) {
                let slot = match (t.slot(j), new_slots.get(key)) {
                    (Slot::Value(old), Some(&new)) => {
                        self.count_dead(key.len(), &old);
                        new
                    }
                    (slot, _) => slot,
                };
                out.push(key, &slot);
            }
            i = end;
        }
        Ok(out.finish(self.cfg.bloom_fp_rate))
    }

    /// Trims keytable segments no run uses any more (never the one being appended to).
    pub(super) fn release_keytable_segments(&mut self) -> Result<()> {
        let pps = u64::from(self.g.pages_per_segment());
        let used: BTreeSet<u32> = self
            .runs
            .values()
            // An extent may run on from the end of one segment into the next (write_run
            // merges chunks whose LBAs touch): every segment it covers is in use.
            .flat_map(|r| {
                r.extents.iter().flat_map(move |&(lba, n)| {
                    let last = lba + u64::from(n.max(1)) - 1;
                    (lba / pps..=last / pps).map(|s| s as u32)
                })
            })
            .collect();
        let current = self.kt_segments.last().copied();
        let (keep, drop): (Vec<u32>, Vec<u32>) = self
            .kt_segments
            .iter()
            .partition(|s| used.contains(s) || Some(**s) == current);
        if drop.is_empty() {
            return Ok(());
        }
        self.kt_segments = keep;
        self.persist()?;
        // A read may still be reading a keytable page of an input run (the keytable-caching
        // ablation reads them from the device): wait for reads that began before the swap.
        self.side.epochs.synchronize();
        for s in drop {
            self.trim_to_free(s)?;
        }
        Ok(())
    }

    /// Segments a compaction of every run may need for its output.
    pub(super) fn keytable_headroom(&self) -> usize {
        let bytes: usize = self.levels.iter().flatten().map(|r| r.data_bytes()).sum();
        let per_segment = self.g.pages_per_segment() as usize * (PAGE_SIZE - 64);
        bytes.div_ceil(per_segment.max(1)) + 1
    }
}
