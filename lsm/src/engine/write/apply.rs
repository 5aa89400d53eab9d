//! A claimed batch's memtable insert ([`ApplyJob`]), run by whichever thread claimed it, and
//! its completion flag ([`Insertion`]) (see the parent module's docs).

use super::super::*;

/// A batch's memtable insert, run by whichever thread claimed it (see
/// [`Inner::claim_ready`]), with or without the write lock.
#[derive(Debug, Default)]
pub(in crate::engine) struct Insertion {
    /// Set (release) once every update of the batch is in the memtable and the values they
    /// shadowed are in `shadowed`.
    pub(super) done: AtomicBool,
    /// Values the batch's updates shadowed, counted as garbage when it settles.
    pub(super) shadowed: Mutex<Vec<Invalidated>>,
}

impl Insertion {
    /// An insertion with nothing to insert (a failed batch's).
    pub(super) fn finished() -> Arc<Insertion> {
        let i = Insertion::default();
        i.done.store(true, Ordering::Release);
        Arc::new(i)
    }
}

/// A claimed batch's updates and cache pages, to be inserted by the thread that claimed them
/// (see [`Inner::claim_ready`]).
pub(in crate::engine) struct ApplyJob {
    pub(super) updates: Vec<(MemKey, u64, Slot)>,
    pub(super) held: Vec<(ValuePtr, Bytes)>,
    /// A batch of garbage collection's moves (see [`MemTable::note_moved_from_below`]).
    pub(super) moves: bool,
    pub(super) cache_fill: Vec<(PageAddr, Bytes)>,
    pub(super) insertion: Arc<Insertion>,
    /// Inserts that must be done before this one starts. Inserts of different batches may
    /// otherwise run in any order, and the memtable's garbage count is exact for that
    /// (`NewestIndex::record`) except where a retime and the versions around it trade
    /// places; so every batch waits for the last earlier batch with a retime, and a batch
    /// with a retime waits for every earlier insert still running:
    /// - a retime overtaken by a later version of its key: that version would report the
    ///   retimed value as shadowed, and the retime, arriving second, would report it again;
    /// - a retime that overtakes the version whose value it retimes (taken from a batch not
    ///   yet inserted, `Inner::pending_slot`): a later version reports the value as
    ///   shadowed through the retime, and the overtaken version, arriving last, reports its
    ///   own value (the same) again.
    pub(super) after: Vec<Arc<Insertion>>,
}

impl ApplyJob {
    /// Inserts the batch's updates into `mem` and its pages into the value cache, then marks
    /// the insertion done. Needs no lock: inserts of different batches may run at once (see
    /// the memtable's module docs); the batch is visible only once it settles.
    pub(in crate::engine) fn run(self, mem: &MemTable, cache: Option<&ValueCache>) {
        for before in &self.after {
            // That insert needs no lock to finish (its thread holds none while it runs), and
            // waits only for inserts of batches before its own: no cycle.
            while !before.done.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
        // The copies first: a reader that sees a version finds its copy.
        for (ptr, v) in self.held {
            mem.hold(ptr, v);
        }
        let mut shadowed = Vec::new();
        for (k, seq, slot) in self.updates {
            let len = k.len();
            match mem.insert_key(&k, seq, slot) {
                Some(Slot::Value(old, _)) => shadowed.push((len, old)),
                // A move of a key the table had no version of: its old copy lies below.
                None if self.moves => {
                    if let Some(p) = slot.ptr() {
                        mem.note_moved_from_below(stored_record_bytes(len, p.len as usize));
                    }
                }
                _ => {}
            }
        }
        if let Some(cache) = cache {
            for (addr, page) in self.cache_fill {
                cache.insert(addr, page);
            }
        }
        *self.insertion.shadowed.lock() = shadowed;
        self.insertion.done.store(true, Ordering::Release);
    }
}
