//! Drawing a live key at random from key ranges ([`Engine::sample_key`], for RANDOMKEY),
//! from DRAM only, in bounded work.
//!
//! A draw picks a *starting point*: one entry drawn uniformly among the keytable entries
//! inside the ranges (counted with two seeks per run, no walk) and the memtables' keys
//! inside them (each memtable's [`crate::memtable::MemTable::key_index`], a sorted snapshot of its keys,
//! searched the same way). From it the draw walks the live keys `accept` takes (the merge
//! of every memtable and run, the range taken as a ring: after its last key its first) and
//! answers one of the first [`SAMPLE_SPREAD`] it meets, picked uniformly. It visits at most
//! [`SAMPLE_STEPS`] entries, deleted and shadowed ones included; a draw that finds nothing
//! in that many is made again, up to [`SAMPLE_DRAWS`] times. Only then are the ranges
//! walked as rings from random points, answering the first accepted key met, at most
//! [`SAMPLE_WALK_LIMIT`] entries in all (a keyspace mostly deleted or rejected, e.g. just
//! after a mass expiry the sweep has not reached: O(entries) once in a while).
//!
//! So every live key can be drawn, and where each key has one entry (after compaction,
//! or keys written once) the draw is uniform. Deleted and overwritten entries still in the
//! keytables, and keys inserted into a memtable since its index was built (at most an
//! eighth of it), shift a little weight, smoothed over [`SAMPLE_SPREAD`] keys, to the keys
//! that follow them.

use super::*;

/// Entries a draw may step over before it is made again.
pub const SAMPLE_STEPS: usize = 4096;

/// Draws made before the ranges are walked whole.
pub const SAMPLE_DRAWS: usize = 8;

/// Entries the last-resort walk visits at most (a keyspace where over a million entries in
/// a row are deleted, or rejected by `accept`, answers `None`): the walk holds a read pin,
/// which a compaction or a GC step waits for before it releases space.
pub const SAMPLE_WALK_LIMIT: usize = 1 << 20;

/// A draw answers not the first live key from its starting point but one of the next this
/// many, picked uniformly: a run of deleted or overwritten entries would otherwise hand all
/// its draws to the one live key after it (from a uniform start, the pick stays uniform).
pub const SAMPLE_SPREAD: u64 = 64;

/// SplitMix64: the next value of a small, seeded generator.
fn split_mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number below `n` (> 0), by multiply-shift (bias below n / 2^64).
fn below(state: &mut u64, n: u64) -> u64 {
    ((u128::from(split_mix(state)) * u128::from(n)) >> 64) as u64
}

/// Entries of one source inside one range: (range, source, first index, how many).
type Span<S> = (usize, S, usize, u64);

impl Engine {
    /// A live key drawn at random from `ranges` (each `start <= key < end`; `None`: to the
    /// last key) among those `accept` takes, or `None` when the ranges hold no such key;
    /// `seed` drives the draw. See the module header for how uniform it is and what it
    /// costs.
    ///
    /// # Errors
    /// `Closed`.
    pub fn sample_key(
        &self,
        ranges: &[(&[u8], Option<&[u8]>)],
        seed: u64,
        accept: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Vec<u8>>> {
        let view = self.side.view()?;
        let mut rng = seed;
        // The keytable entries inside each range: (range, run, first index, how many).
        let mut spans: Vec<Span<&KeyTable>> = Vec::new();
        for (r, (start, end)) in ranges.iter().enumerate() {
            for run in view.runs() {
                let lo = run.seek(start);
                let hi = end.map_or(run.len(), |e| run.seek(e));
                if hi > lo {
                    spans.push((r, run, lo, (hi - lo) as u64));
                }
            }
        }
        // The memtables' keys inside each range: (range, key index, first index, how many).
        let indexes: Vec<crate::memtable::KeyIndex> =
            view.mems().iter().map(|m| m.key_index()).collect();
        let mut mem_spans: Vec<Span<&[crate::memtable::MemKey]>> = Vec::new();
        for (r, (start, end)) in ranges.iter().enumerate() {
            for keys in &indexes {
                let lo = keys.partition_point(|k| **k < **start);
                let hi = end.map_or(keys.len(), |e| keys.partition_point(|k| **k < *e));
                if hi > lo {
                    mem_spans.push((r, keys.as_slice(), lo, (hi - lo) as u64));
                }
            }
        }
        let in_runs: u64 = spans.iter().map(|s| s.3).sum();
        let in_mems: u64 = mem_spans.iter().map(|s| s.3).sum();
        if in_runs + in_mems > 0 {
            for _ in 0..SAMPLE_DRAWS {
                let mut pick = below(&mut rng, in_runs + in_mems);
                let (r, from) = if pick < in_runs {
                    let Some((r, run, i)) = nth(spans.iter().map(|s| (s.0, s.1, s.2, s.3)), pick)
                    else {
                        continue;
                    };
                    (r, run.key(i).to_vec())
                } else {
                    pick -= in_runs;
                    let Some((r, keys, i)) = nth(mem_spans.iter().copied(), pick) else {
                        continue;
                    };
                    (r, keys[i].to_vec())
                };
                let skip = below(&mut rng, SAMPLE_SPREAD) as usize;
                let (found, _) = live_from(&view, ranges, r, &from, SAMPLE_STEPS, skip, accept);
                if let Some(k) = found {
                    return Ok(Some(k));
                }
            }
        }
        // Nothing found in bounded steps (or nothing counted): each range walked as a ring
        // from a random point of its own, at most SAMPLE_WALK_LIMIT entries in all.
        let mut left = SAMPLE_WALK_LIMIT;
        let first = below(&mut rng, ranges.len().max(1) as u64) as usize;
        for r in (first..ranges.len()).chain(0..first) {
            let (start, _) = ranges[r];
            let in_run: u64 = spans.iter().filter(|s| s.0 == r).map(|s| s.3).sum();
            let in_mem: u64 = mem_spans.iter().filter(|s| s.0 == r).map(|s| s.3).sum();
            let from = if in_run > 0 {
                let pick = below(&mut rng, in_run);
                nth(spans.iter().filter(|s| s.0 == r).copied(), pick)
                    .map(|(_, run, i)| run.key(i).to_vec())
            } else if in_mem > 0 {
                let pick = below(&mut rng, in_mem);
                nth(mem_spans.iter().filter(|s| s.0 == r).copied(), pick)
                    .map(|(_, keys, i)| keys[i].to_vec())
            } else {
                None
            }
            .unwrap_or_else(|| start.to_vec());
            let (found, used) = live_from(&view, ranges, r, &from, left, 0, accept);
            if found.is_some() {
                return Ok(found);
            }
            left = left.saturating_sub(used);
            if left == 0 {
                break;
            }
        }
        Ok(None)
    }
}

/// The entry `pick` counts to among spans of (range, source, first index, how many):
/// (range, source, index in it); `None` when `pick` is past them all.
fn nth<S>(
    spans: impl Iterator<Item = (usize, S, usize, u64)>,
    mut pick: u64,
) -> Option<(usize, S, usize)> {
    for (r, source, lo, n) in spans {
        if pick < n {
            return Some((r, source, lo + pick as usize));
        }
        pick -= n;
    }
    None
}

/// The live key `accept` takes that comes `skip + 1`-th from `from` on inside range `r`,
/// taken as a ring (after its last key comes its first), visiting at most `steps` entries.
/// When fewer than `skip + 1` such keys are met (a small range, or the step bound), the
/// `skip`-th modulo those met; `None` when none. Also returns how many entries it visited.
fn live_from(
    view: &super::version::ReadView,
    ranges: &[(&[u8], Option<&[u8]>)],
    r: usize,
    from: &[u8],
    steps: usize,
    skip: usize,
    accept: &mut dyn FnMut(&[u8]) -> bool,
) -> (Option<Vec<u8>>, usize) {
    let (start, end) = ranges[r];
    let mut left = steps;
    let mut met: Vec<Vec<u8>> = Vec::new();
    let mut clock = crate::expiry::LazyClock::new();
    // From `from` to the range's end, then from its start up to `from`.
    'walk: for (at, stop) in [(from, end), (start, Some(from))] {
        let mut merge = view.merge_from(at);
        while let Some((k, slot)) = merge.next() {
            if stop.is_some_and(|e| k >= e) {
                break;
            }
            if left == 0 {
                break 'walk;
            }
            left -= 1;
            if matches!(slot.visible(&mut clock), Slot::Value(..)) && accept(k) {
                met.push(k.to_vec());
                if met.len() > skip {
                    break 'walk;
                }
            }
        }
    }
    let n = met.len();
    ((n > 0).then(|| met.swap_remove(skip % n)), steps - left)
}

#[cfg(test)]
mod tests {
    use super::{below, split_mix};

    #[test]
    fn draws_below_n_cover_every_value() {
        let mut s = 7;
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[below(&mut s, 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        let mut a = 1;
        let mut b = 1;
        assert_eq!(split_mix(&mut a), split_mix(&mut b), "seeded: repeatable");
    }
}
