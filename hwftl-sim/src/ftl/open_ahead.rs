//! Opening a segment with its tables written outside the state lock.
//!
//! A write to a free segment opens it: blocks are mapped on every chip and the tables are
//! written and made durable before the write is staged, so a segment's data never lands
//! before the tables that say where it is. On a disk whose cache flush is slow (15-20 ms on
//! the virtual disk this project is measured on), holding `state` through that flush froze
//! every command of the device: reads, other segments' writes and every completion. The
//! log opens a segment every few MiB, so that was most of the drive's p99.9.
//!
//! [`Ftl::open_ahead`] runs before a write takes `state` for its submission:
//! 1. under `state`: maps the blocks, marks the segment open and `opening`, encodes the
//!    tables;
//! 2. without `state`, under `tables_lock`: writes them ([`Media::write_meta`] is durable
//!    when it returns);
//! 3. under `state`: records the generation, writes again any table change made meanwhile
//!    (see below), and clears `opening`.
//!
//! The argument that nothing is lost or reordered:
//! - **No command reaches the segment before its tables are durable.** Only a write can
//!   reach a segment that was free. A write's submission checks, under the same `state`
//!   lock it then stages the write in, that its segment is neither free nor `opening`;
//!   otherwise it lets go and runs `open_ahead`, which takes `tables_lock` (held by the
//!   opener through step 3), and checks again ([`Ftl::submit_inner`]'s loop). So a write to
//!   the segment waits for the opener, and one to a segment freed again opens it again.
//! - **One writer of the tables at a time.** [`Ftl::persist`] (trim, block retirement, a
//!   segment turning read-only) runs under `state`. While `opening` is set it only marks the
//!   tables dirty, and the opener writes them in step 3. So no two writes of the tables
//!   overlap, and the generations reach the media in order. A deferred change is durable
//!   when the opener lets go, not when its own call returned. None of those callers needs
//!   more: a trim that is lost is redone at the engine's next open (a segment it does not
//!   account for is trimmed), and a retired block found good again fails again.
//! - **A failed write of the tables undoes the open in memory** (blocks free, segment free),
//!   as the open under `state` always did, and the next write of the tables goes to the
//!   same slot (the generation did not advance), so the other slot keeps the last good copy.
//! - **Lock order:** `tables_lock`, then `state`. `open_ahead` never waits for `tables_lock`
//!   while holding `state`, and nothing else takes `tables_lock`. [`Ftl::power_cut`] takes
//!   it first, so no table write lands after a cut.

use super::*;

impl Ftl {
    /// The segment a write or append goes to, if `cmd` is one that could open it: an append,
    /// or a write to a segment's first page (a free segment's write pointer; a write anywhere
    /// else is refused by the submission, and opens nothing, as before). `None` on a
    /// read-only device.
    pub(super) fn segment_written_by(&self, cmd: &Command) -> Option<SegmentId> {
        if self.read_only {
            return None;
        }
        match cmd {
            Command::Write { lba, .. } => self
                .geometry
                .locate(*lba)
                .ok()
                .filter(|&(_, off)| off == 0)
                .map(|(seg, _)| seg),
            Command::Append { segment, .. } => Some(*segment),
            Command::Read { .. } | Command::Trim { .. } | Command::Flush => None,
        }
    }

    /// Opens `seg` if it is free, writing the tables without holding `state` (module docs);
    /// waits for an open of `seg` in progress. `Ok` when there is nothing to open, or the
    /// device is off (the submission then says so).
    ///
    /// # Errors
    /// `NoSpareBlocks`, or the media's error writing the tables (the open is then undone).
    pub(super) fn open_ahead(&self, seg: SegmentId) -> Result<()> {
        let s = seg.0 as usize;
        let pending = |st: &State| {
            st.opening == Some(seg.0) || st.tables.seg_state.get(s) == Some(&SegmentState::Free)
        };
        if !pending(&self.state.lock()) {
            return Ok(());
        }
        let _tables = self.tables_lock.lock();
        let (next, bytes, taken) = {
            let mut st = self.state.lock();
            if !st.powered || st.tables.seg_state.get(s) != Some(&SegmentState::Free) {
                return Ok(());
            }
            let taken = self.map_blocks(&mut st, seg)?;
            st.tables.seg_state[s] = SegmentState::Open;
            st.tables.seg_wp[s] = 0;
            st.wp[s] = 0;
            st.opening = Some(seg.0);
            st.tables_dirty = false;
            let next = st.tables.generation + 1;
            (next, st.tables.encode_as(next), taken)
        };
        let written = self.write_tables(next, &bytes);
        let mut st = self.state.lock();
        match &written {
            Ok(()) => {
                st.tables.generation = next;
                st.counters.table_writes += 1;
            }
            Err(e) => {
                tracing::warn!("opening segment {seg}: the tables could not be written ({e})");
                self.unmap_blocks(&mut st, seg, &taken);
                st.tables.seg_state[s] = SegmentState::Free;
                st.tables.seg_wp[s] = 0;
                st.wp[s] = 0;
            }
        }
        // Changes `persist` left to us while the tables were out: written before any
        // command can reach the segment (`opening` is still set).
        while st.tables_dirty && st.powered {
            st.tables_dirty = false;
            let next = st.tables.generation + 1;
            let bytes = st.tables.encode_as(next);
            drop(st);
            let again = self.write_tables(next, &bytes);
            st = self.state.lock();
            match again {
                Ok(()) => {
                    st.tables.generation = next;
                    st.counters.table_writes += 1;
                }
                Err(e) => {
                    // Left dirty: the next write of the tables carries the change.
                    tracing::warn!("a deferred write of the tables failed ({e})");
                    st.tables_dirty = true;
                    break;
                }
            }
        }
        st.opening = None;
        written
    }

    /// Writes the tables as generation `generation` into its slot (durable on return).
    fn write_tables(&self, generation: u64, bytes: &[u8]) -> Result<()> {
        self.faults.table_write_pause();
        self.media
            .write_meta(slot_offset(&self.geometry, generation), bytes)
    }

    /// Maps the least-worn free block of every chip to `seg`; on `NoSpareBlocks` maps
    /// nothing. Returns the (chip, block) pairs mapped.
    pub(super) fn map_blocks(&self, st: &mut State, seg: SegmentId) -> Result<Vec<(u32, u32)>> {
        let chips = self.geometry.chips();
        let mut taken = Vec::with_capacity(chips as usize);
        for chip in 0..chips {
            let Some(block) = st.tables.least_worn_free(chip) else {
                self.unmap_blocks(st, seg, &taken);
                return Err(DeviceError::NoSpareBlocks { chip, segment: seg });
            };
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Used;
            st.tables.set_mapped(seg, chip, block);
            taken.push((chip, block));
        }
        Ok(taken)
    }

    /// Undoes [`Ftl::map_blocks`].
    pub(super) fn unmap_blocks(&self, st: &mut State, seg: SegmentId, taken: &[(u32, u32)]) {
        for &(chip, block) in taken {
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Free;
            st.tables.set_mapped(seg, chip, UNMAPPED);
        }
    }
}
