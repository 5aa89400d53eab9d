//! Giving device segments back once nothing can reach them: the *unlinked* list and its trim.
//!
//! Three paths retire whole device segments: garbage collection (a reclaimed victim's
//! segment, `gc::release_reclaimed`), compaction (keytable segments no run uses any more,
//! `compaction::release_keytable_segments`) and `clear` (every segment of the old store).
//! Each *unlinks* under the write lock: it writes a manifest that no longer lists the
//! segments and moves them onto [`Inner::unlinked`]. From then on no published state leads into them: garbage
//! collection's moves are in the memtable, a compaction's output replaced its inputs. But a
//! reader pinned before that may still be fetching from one (it resolved a pointer, or a
//! keytable page of the keytable-caching ablation, through the state it loaded).
//!
//! [`Core::trim_unlinked`] then runs **with the write lock free**: it waits for those
//! readers ([`crate::epoch::ReadEpochs::synchronize`]), trims each segment on the device,
//! and only then, under the write lock again, puts them on the free list and drops them
//! from the published segment map. Writers go on meanwhile; before this module they waited
//! on the write lock for the slowest read in flight and the trims.
//!
//! **Why this is safe.**
//! - *Readers.* An unlinked log segment stays in the published segment map
//!   (`Inner::publish_segs` lists `unlinked`) until after the wait, so a reader pinned
//!   before the unlink still resolves its pointers; a reader pinned after it reaches no
//!   pointer into the segment. The wait covers every reader pinned before the call, which
//!   includes every reader pinned before the unlink.
//! - *Writers.* An unlinked segment is on neither the free list nor any owner's list
//!   (`log_segs`, `gc_reclaimed`, `kt_segments`), so no layout, flush or compaction can
//!   claim it until the trim has erased it and it is put on the free list.
//! - *One trimmer.* Only the maintenance lock's holder unlinks (every caller of the three
//!   paths holds it: the `lsm-maint` thread's tasks, `Engine::flush`, `Engine::compact_all`,
//!   `Engine::clear` and `Engine::close`) and trims, so the list does not change under a trim except by
//!   that holder's own later unlinks, which the trim leaves on the list (it removes only
//!   what it trimmed). [`Engine::clear`] unlinks every segment of the old store the same
//!   way and trims them after it lets go of the write lock.
//! - *Crashes.* The manifest on the device no longer lists an unlinked segment, so a crash
//!   before its trim leaves a segment that the next open finds unaccounted for and trims
//!   (`recovery::rebuild_free_list`). A trim that fails leaves its segment off the free list
//!   until then too.

use super::*;

/// A device segment no manifest lists and no published state reaches, waiting for the
/// readers pinned before it was unlinked and then for its trim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unlinked {
    /// The device segment.
    pub(super) segment: u32,
    /// The log segment it held (a reclaimed victim), which stays in the published segment
    /// map until the trim; `None` for a keytable segment.
    pub(super) log_seg: Option<u32>,
}

/// Trims one device segment (erased, reads as never written).
///
/// # Errors
/// The device's refusal or failure of the trim.
pub(super) fn trim_segment(dev: &dyn AppendDevice, segment: u32) -> Result<()> {
    crate::io::execute_patiently(
        dev,
        Command::Trim {
            segment: SegmentId(segment),
        },
    )?
    .result?;
    Ok(())
}

impl Core {
    /// Trims the segments on [`Inner::unlinked`] with the write lock free (see the module
    /// docs), then frees them. The caller holds the maintenance lock and not the write lock.
    ///
    /// # Errors
    /// The first trim that failed (the others still go on; the failed segment stays off the
    /// free list until the next open).
    pub(super) fn trim_unlinked(&self) -> Result<()> {
        let (batch, dev, epochs) = {
            let g = self.inner.lock();
            if g.unlinked.is_empty() {
                return Ok(());
            }
            (g.unlinked.clone(), g.dev.clone(), g.side.epochs.clone())
        };
        epochs.synchronize();
        let mut trimmed = Vec::with_capacity(batch.len());
        let mut failed = None;
        for u in &batch {
            match trim_segment(dev.as_ref(), u.segment) {
                Ok(()) => trimmed.push(u.segment),
                Err(e) => {
                    tracing::warn!(segment = u.segment, error = %e, "trimming a released segment failed");
                    failed.get_or_insert(e);
                }
            }
        }
        let mut g = self.inner.lock();
        g.unlinked.retain(|u| !batch.contains(u));
        g.free.extend(trimmed);
        g.stats.released_segments += batch.len() as u64;
        g.publish_segs();
        drop(g);
        // Writers waiting for free segments.
        self.applied.notify_all();
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::time::{Duration, Instant};

    /// A compaction that releases keytable segments while a reader is pinned: the release
    /// waits for the reader with the write lock free, so a client write completes
    /// meanwhile; the segments become free only once the reader lets go.
    #[test]
    fn a_release_waits_for_readers_without_holding_up_writers() {
        let dev = crate::engine::test_device::small_ram_device(4);
        // No compaction until the test asks for one.
        let cfg = EngineConfig {
            l0_runs: 64,
            l0_stop_runs: 64,
            ..EngineConfig::default()
        };
        let db = Arc::new(Engine::open(dev, cfg).unwrap());
        let key = |i: u32| format!("key{i:05}").into_bytes();
        // Several runs over the same keys, spread over keytable segments.
        for round in 0..6u32 {
            for i in 0..3000u32 {
                db.put(&key(i), &[round as u8; 64]).unwrap();
            }
            db.flush().unwrap();
        }
        db.settle().unwrap();
        let pin = db.side.epochs.pin();
        let compactor = {
            let db = db.clone();
            std::thread::spawn(move || db.compact_all())
        };
        // The compaction unlinks the old runs' segments and waits for the pin.
        let since = Instant::now();
        while db.core.inner.lock().unlinked.is_empty() {
            assert!(
                !compactor.is_finished(),
                "the compaction released no segment: {:#?}",
                db.stats()
            );
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "no release began"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let free_before = db.stats().free_segments;
        // A writer is not held up by the release waiting for the reader.
        let writer = {
            let db = db.clone();
            std::thread::spawn(move || db.put(b"during", b"the release"))
        };
        let since = Instant::now();
        while !writer.is_finished() {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "a write waited for a release that waits for a reader"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        writer.join().unwrap().unwrap();
        assert_eq!(db.get(b"during").unwrap(), Some(b"the release".to_vec()));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !compactor.is_finished(),
            "the release did not wait for the reader"
        );
        assert!(!db.core.inner.lock().unlinked.is_empty());
        drop(pin);
        compactor.join().unwrap().unwrap();
        let s = db.stats();
        assert!(db.core.inner.lock().unlinked.is_empty());
        assert!(s.released_segments > 0, "{s:#?}");
        assert!(s.free_segments > free_before, "{s:#?}");
        for i in 0..3000u32 {
            assert_eq!(db.get(&key(i)).unwrap(), Some(vec![5u8; 64]), "key {i}");
        }
    }
}
