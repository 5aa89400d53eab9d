//! Metadata-only compaction of keytable runs, and the release of keytable segments no run
//! uses.
//!
//! **What a compaction takes** ([`Inner::compaction_inputs`]). From L0: every L0 run (they
//! may overlap one another) and the L1 runs their key hull overlaps. From a deeper level
//! `n`: one run, the one whose overlap with level `n+1` is smallest for its size (RocksDB's
//! `kMinOverlappingRatio`), and the runs of `n+1` it overlaps. Never a whole level, except
//! in [`Inner::compact_all`]. The output is cut into runs of `keytable_bytes`
//! ([`crate::merge::compact`]); it lies inside the inputs' key hull, and no run of level
//! `n+1` left out overlaps that hull (it would overlap an input), so the level stays
//! partitioned (see [`super::levels`]).
//!
//! **Trivial moves.** When the runs taken overlap nothing in the next level (nor one
//! another), they move down as they are: the manifest changes, no keytable page is written.
//! Sequential loads compact this way only.

use std::collections::HashSet;

use super::gc::GC_BATCH_BYTES;
use super::layout::LaidOut;
use super::levels::{self, Level};
use super::*;
use crate::merge::{run_source, Expired, LevelCursor, OutputSpec, Source};

/// Which runs of the upper level a compaction takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pick {
    /// One run (all of L0): what the maintenance thread does.
    One,
    /// Every run of the level, as [`Inner::compact_all`] does.
    All,
}

/// A compaction's inputs and how its output is laid out.
#[derive(Debug)]
pub(super) struct Compaction {
    /// The level the upper runs come from, and the one the output goes to.
    pub(super) from: usize,
    pub(super) to: usize,
    /// Runs taken from `from`: L0's newest first, a deeper level's in key order.
    pub(super) upper: Vec<Arc<KeyTable>>,
    /// The runs of `to` the upper runs overlap, in key order.
    pub(super) lower: Vec<Arc<KeyTable>>,
    /// How the merged output is cut into runs (`ids` empty for a trivial move).
    pub(super) spec: OutputSpec,
    /// The upper runs move down as they are (see the module docs).
    pub(super) trivial_move: bool,
}

impl Compaction {
    /// The merge sources, newest first: each L0 run on its own, a deeper level's runs as
    /// one source (they do not overlap), then the lower runs as one source.
    pub(super) fn sources(&self) -> Vec<Source<'_>> {
        let mut sources: Vec<Source<'_>> = if self.from == 0 {
            self.upper.iter().map(|r| run_source(r, 0)).collect()
        } else {
            vec![Box::new(LevelCursor::new(&self.upper, b""))]
        };
        sources.push(Box::new(LevelCursor::new(&self.lower, b"")));
        sources
    }

    /// Every input run.
    fn inputs(&self) -> impl Iterator<Item = &Arc<KeyTable>> {
        self.upper.iter().chain(&self.lower)
    }
}

/// Keytable bytes of some runs.
fn bytes_of<'a>(runs: impl IntoIterator<Item = &'a Arc<KeyTable>>) -> usize {
    runs.into_iter().map(|r| r.data_bytes()).sum()
}

impl Inner {
    pub(super) fn level_target(&self, level: usize) -> usize {
        let mut t = self.cfg.l1_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.cfg.level_ratio);
        }
        t
    }

    pub(super) fn level_bytes(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, bytes_of)
    }

    pub(super) fn deepest_nonempty(&self) -> usize {
        (0..self.levels.len())
            .rev()
            .find(|&l| !self.levels[l].is_empty())
            .unwrap_or(0)
    }

    /// The compaction due now, if any: of L0 (at `l0_runs` runs) and every deeper level
    /// over its target, the one with the highest score (runs over `l0_runs`, bytes over
    /// target), as RocksDB picks.
    pub(super) fn compaction_due(&self) -> Option<(usize, usize)> {
        let l0 = self.levels[0].len() as f64 / self.cfg.l0_runs.max(1) as f64;
        std::iter::once((0, l0))
            .chain((1..self.levels.len()).map(|l| {
                (
                    l,
                    self.level_bytes(l) as f64 / self.level_target(l).max(1) as f64,
                )
            }))
            .filter(|&(l, score)| if l == 0 { score >= 1.0 } else { score > 1.0 })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(l, _)| (l, l + 1))
    }

    /// Keytable bytes compaction still owes: L0 at its trigger, and every deeper level's
    /// bytes over its target.
    pub(super) fn compaction_debt(&self) -> u64 {
        let l0 = if self.levels[0].len() >= self.cfg.l0_runs.max(1) {
            self.level_bytes(0)
        } else {
            0
        };
        let deeper: usize = (1..self.levels.len())
            .map(|l| self.level_bytes(l).saturating_sub(self.level_target(l)))
            .sum();
        (l0 + deeper) as u64
    }

    /// Merges every level into the next, top down, until all runs are in the deepest level.
    pub(super) fn compact_all(&mut self) -> Result<()> {
        let deepest = self.deepest_nonempty().max(1);
        for level in 0..deepest {
            if !self.levels[level].is_empty() {
                self.compact_into(level, level + 1, Pick::All)?;
            }
        }
        Ok(())
    }

    /// Reserves `n` run ids.
    fn take_run_ids(&mut self, n: usize) -> std::ops::Range<u64> {
        let start = self.next_run;
        self.next_run += n as u64;
        start..self.next_run
    }

    /// The run of deeper level `from` a compaction takes: the one with the fewest bytes
    /// of level `from + 1` per byte of its own.
    fn pick_run(&self, from: usize) -> Option<Arc<KeyTable>> {
        let next: &[Arc<KeyTable>] = self.levels.get(from + 1).map_or(&[], |l| l.as_slice());
        let score = |r: &Arc<KeyTable>| {
            let overlap = r.range().map_or(0, |(lo, hi)| {
                bytes_of(&next[levels::overlapping(next, lo, hi)])
            });
            overlap as f64 / r.data_bytes().max(1) as f64
        };
        self.levels[from]
            .iter()
            .map(|r| (score(r), r))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, r)| r.clone())
    }

    /// What a compaction of level `from` into `to` takes (see the module docs); `None`
    /// when `from` has nothing to give.
    pub(super) fn compaction_inputs(
        &mut self,
        from: usize,
        to: usize,
        pick: Pick,
    ) -> Option<Compaction> {
        while self.levels.len() <= to {
            self.levels.push(Vec::new());
        }
        let upper: Level = if from == 0 || pick == Pick::All {
            self.levels[from].clone()
        } else {
            vec![self.pick_run(from)?]
        };
        if upper.is_empty() {
            return None;
        }
        let lower: Level = match levels::hull(&upper) {
            Some((lo, hi)) => {
                self.levels[to][levels::overlapping(&self.levels[to], &lo, &hi)].to_vec()
            }
            None => Vec::new(),
        };
        // Tombstones can go when no deeper level holds a key in the range of *all* inputs
        // (the lower runs may reach beyond the upper ones: their tombstones count too).
        let bottom = levels::hull(upper.iter().chain(&lower)).is_none_or(|(lo, hi)| {
            self.levels[to + 1..]
                .iter()
                .all(|l| levels::overlapping(l, &lo, &hi).is_empty())
        });
        // Runs that overlap nothing below them (nor one another) move as they are; a full
        // compaction (`Pick::All`) always merges, so that it drops tombstones.
        let disjoint = from > 0
            || (upper.iter().all(|r| !r.is_empty())
                && upper
                    .iter()
                    .enumerate()
                    .all(|(i, a)| upper[i + 1..].iter().all(|b| !levels::ranges_overlap(a, b))));
        let trivial_move = pick == Pick::One && lower.is_empty() && disjoint;
        let target = self.cfg.keytable_bytes.max(1);
        let ids = if trivial_move {
            0..0
        } else {
            self.take_run_ids(bytes_of(upper.iter().chain(&lower)) / target + 2)
        };
        Some(Compaction {
            from,
            to,
            upper,
            lower,
            spec: OutputSpec {
                ids,
                target_bytes: target,
                bottom,
                fp_rate: self.cfg.bloom_fp_rate,
                expiry: Some(crate::merge::ExpiryDrop {
                    now: crate::expiry::now_ms(),
                    policy: self.cfg.expiry_policy.clone(),
                    // Only maintenance changes the levels below, and it is running this.
                    below: self.levels[to + 1..].iter().flatten().cloned().collect(),
                }),
            },
            trivial_move,
        })
    }

    /// Merges level `from` into level `to` under the write lock (metadata only: values stay
    /// where they are, but for the ablation below).
    pub(super) fn compact_into(&mut self, from: usize, to: usize, pick: Pick) -> Result<()> {
        let Some(c) = self.compaction_inputs(from, to, pick) else {
            return Ok(());
        };
        if c.trivial_move {
            return self.install_move(&c);
        }
        let (outputs, dead, expired) = compact(c.sources(), &c.spec);
        // The ablation: values move with their keys, as in an LSM without key-value
        // separation. Only with an empty memtable (right after a flush): the moved records
        // then hold the newest versions, and the checkpoint moves past them below.
        let mut moved = self.cfg.compaction_moves_values
            && self.mem.is_empty()
            && self.frozen.is_empty()
            && !self.in_gc;
        if moved {
            // Every value is rewritten before the inputs' garbage can be reclaimed: an LSM
            // without key-value separation needs free space for its largest compaction. With
            // too little free, this compaction keeps the values where they are (counted).
            // (A value spanning segments takes them whole, and one more for what follows.)
            let (mut bytes, mut spanning) = (0u64, 0usize);
            for t in &outputs {
                for j in 0..t.len() {
                    if let Slot::Value(p, _) = t.slot(j) {
                        let klen = t.key(j).len();
                        if p.spans(self.g.pages_per_segment()) {
                            spanning += self.spanning_segments(klen, p.len as usize) + 1;
                        } else {
                            bytes += p.record_bytes(klen);
                        }
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
        let mut written = Vec::with_capacity(outputs.len());
        for t in outputs {
            let t = if moved { self.move_run_values(&t)? } else { t };
            let extents = self.write_run(&t)?;
            written.push((t, extents));
        }
        if moved {
            // Everything written so far is in the runs: nothing before the head needs replay
            // (the manifest the install writes says so).
            self.move_checkpoint();
        }
        self.install_compaction(&c, written, dead.len() as u64, expired)
    }

    /// Checks that every input of `c` is still where it was taken from (only the
    /// maintenance lock's holder changes levels, so this holds unless there is a bug).
    fn check_inputs(&self, c: &Compaction) -> Result<()> {
        let present = |level: usize, r: &Arc<KeyTable>| {
            self.levels
                .get(level)
                .is_some_and(|l| l.iter().any(|x| x.id() == r.id()))
        };
        if c.upper.iter().all(|r| present(c.from, r)) && c.lower.iter().all(|r| present(c.to, r)) {
            Ok(())
        } else {
            Err(corrupt(format!(
                "levels {} and {} changed during their compaction",
                c.from, c.to
            )))
        }
    }

    /// Installs a compaction's output runs in place of its inputs, writes the manifest and
    /// releases keytable segments no run uses any more.
    ///
    /// # Errors
    /// `Corrupt` if the inputs are no longer in their levels; writing the manifest; trims.
    pub(super) fn install_compaction(
        &mut self,
        c: &Compaction,
        outputs: Vec<(KeyTable, Vec<(u64, u32)>)>,
        invalidated: u64,
        expired: Expired,
    ) -> Result<()> {
        self.check_inputs(c)?;
        let gone: HashSet<u64> = c.inputs().map(|r| r.id()).collect();
        for level in [c.from, c.to] {
            self.levels[level].retain(|r| !gone.contains(&r.id()));
        }
        for id in &gone {
            self.runs.remove(id);
            self.kt_index.remove(id);
        }
        let (upper_bytes, lower_bytes) = (bytes_of(&c.upper), bytes_of(&c.lower));
        let written: usize = outputs.iter().map(|(t, _)| t.data_bytes()).sum();
        for (t, extents) in outputs {
            self.add_run(t, c.to, extents);
        }
        let ls = self.level_stats_mut(c.to);
        ls.bytes_in += upper_bytes as u64;
        ls.bytes_rewritten += lower_bytes as u64;
        ls.bytes_written += written as u64;
        ls.compactions += 1;
        // The merged runs replace their inputs for readers in one swap.
        self.publish_version();
        // Already counted as garbage when their successors were flushed.
        self.stats.compaction_invalidated += invalidated;
        self.count_expired_drops(expired);
        self.persist()?;
        self.stats.compactions += 1;
        self.release_keytable_segments()
    }

    /// Counts the values of entries a compaction dropped because they expired (the new
    /// levels installed). The version right above a dropped entry decides: one in a level
    /// counted the value as garbage when it was flushed (it found the entry below it),
    /// one not yet flushed (in a memtable, or in a batch still on the device: see
    /// `oldest_unflushed`) has not yet and no longer will (its flush will not find the
    /// entry), and one pointing at the same value (a retime since) keeps it live.
    fn count_expired_drops(&mut self, expired: Expired) {
        for (key, p) in expired {
            let in_levels = levels::runs_for_key(&self.levels, &key).find_map(|r| r.get(&key));
            let above = match in_levels {
                Some(s) => Some((s, true)),
                None => self.oldest_unflushed(&key).map(|s| (s, false)),
            };
            match above {
                Some((s, _)) if s.ptr() == Some(p) => {}
                Some((_, true)) => {}
                // For good: no replay finds this drop again.
                _ => self.count_dead(key.len(), &p),
            }
            self.stats.expired_dropped += 1;
        }
    }

    /// Moves the upper runs of `c` down to `c.to` as they are (a trivial move): readers
    /// see them in the new level in one swap; the manifest records their new level.
    ///
    /// # Errors
    /// `Corrupt` if the inputs are no longer in their levels; writing the manifest.
    pub(super) fn install_move(&mut self, c: &Compaction) -> Result<()> {
        self.check_inputs(c)?;
        let moving: HashSet<u64> = c.upper.iter().map(|r| r.id()).collect();
        self.levels[c.from].retain(|r| !moving.contains(&r.id()));
        for r in &c.upper {
            let at = levels::insert_position(&self.levels[c.to], r);
            self.levels[c.to].insert(at, r.clone());
            if let Some(meta) = self.runs.get_mut(&r.id()) {
                meta.level = c.to as u8;
                meta.order = 0;
            }
        }
        let ls = self.level_stats_mut(c.to);
        ls.bytes_in += bytes_of(&c.upper) as u64;
        ls.trivial_moves += 1;
        self.publish_version();
        self.persist()
    }

    /// The counters of `level` (grown on demand).
    pub(super) fn level_stats_mut(&mut self, level: usize) -> &mut LevelStats {
        while self.stats.levels.len() <= level {
            self.stats.levels.push(LevelStats::default());
        }
        &mut self.stats.levels[level]
    }

    /// The ablation of metadata-only compaction (`EngineConfig::compaction_moves_values`):
    /// reads every value `t` points to and writes it again at the head, [`GC_BATCH_BYTES`] at a time;
    /// returns the run with the new pointers. The old copies become garbage.
    pub(super) fn move_run_values(&mut self, t: &KeyTable) -> Result<KeyTable> {
        let mut out = KeyTableBuilder::new(t.id());
        let mut i = 0;
        while i < t.len() {
            let mut end = i;
            let mut bytes = 0usize;
            while end < t.len() && (end == i || bytes < GC_BATCH_BYTES) {
                if let Slot::Value(p, _) = t.slot(end) {
                    bytes += p.len as usize + t.key(end).len();
                }
                end += 1;
            }
            let ptrs: Vec<Option<ValuePtr>> = (i..end).map(|j| t.slot(j).ptr()).collect();
            let mut plan = self.plan_reads(&ptrs)?;
            let pages = plan.fetch(self.dev.as_ref());
            let values = plan.assemble(&pages, &AtomicU64::new(0), &self.side.read_faults)?;
            let keys: Vec<Vec<u8>> = (i..end).map(|j| t.key(j).to_vec()).collect();
            // A moved value keeps its deadline (a put and a retime, as `WriteOp::expand`).
            let ops: Vec<WriteOp<'_>> = keys
                .iter()
                .zip(&values)
                .zip(i..end)
                .filter_map(|((k, v), j)| v.as_ref().map(|v| (k, v, t.slot(j).deadline())))
                .flat_map(|(k, v, d)| {
                    std::iter::once(WriteOp::Put(k, v))
                        .chain(d.is_some().then_some(WriteOp::Retime(k, d)))
                })
                .collect();
            let mut new_slots: HashMap<Vec<u8>, Slot> = HashMap::new();
            if !ops.is_empty() {
                let LaidOut { pages, updates, .. } =
                    self.build_batch(&ops, 0, false, &mut super::write::Prepared::none())?;
                // The moved values are the same bytes: the new run's entries hold what the
                // old ones held.
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
                    (Slot::Value(old, _), Some(&new)) => {
                        self.count_dead(key.len(), &old);
                        new
                    }
                    (slot, _) => slot,
                };
                out.push(key, &slot, t.held(j).as_deref());
            }
            i = end;
        }
        Ok(out.finish(self.cfg.bloom_fp_rate))
    }

    /// Releases keytable segments no run uses any more (never the one being appended to):
    /// a manifest without them, then onto the unlinked list for their trim (`trim`).
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
        let all = std::mem::replace(&mut self.kt_segments, keep);
        if let Err(e) = self.persist() {
            // The manifest on the device may still list them: so must the next one.
            self.kt_segments = all;
            return Err(e);
        }
        // A read may still be reading a keytable page of an input run (the keytable-caching
        // ablation reads them from the device): their trim waits for the reads that began
        // before the swap (`Core::trim_unlinked`, with the write lock free).
        self.unlinked
            .extend(drop.into_iter().map(|segment| Unlinked {
                segment,
                log_seg: None,
            }));
        Ok(())
    }

    /// Segments a compaction of every run may need for its output.
    pub(super) fn keytable_headroom(&self) -> usize {
        let bytes: usize = self.levels.iter().flatten().map(|r| r.data_bytes()).sum();
        let per_segment = self.g.pages_per_segment() as usize * (PAGE_SIZE - 64);
        bytes.div_ceil(per_segment.max(1)) + 1
    }
}
