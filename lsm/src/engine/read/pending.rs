//! Reads started by a caller that must never wait (the drive's network thread):
//! [`Engine::lookup_now`]'s [`PendingLookup`], its room in the read window
//! ([`PendingLookup::reserve`]), and their submission together
//! ([`Engine::submit_reads`]); and the waiting start that [`Engine::lookup_async`] uses.

use super::*;

/// What [`Engine::lookup_now`] found.
pub enum LookupNow {
    /// DRAM held everything: the lookup's result.
    Answered(Lookup),
    /// A value page must come from the device: start the reads, or drop it.
    Pending(PendingLookup),
}

/// What [`Engine::get_now`] found for one key.
pub enum GetNow {
    /// DRAM held the whole value.
    Hot(Bytes),
    /// The key is live and its value (or part of it) is on the device: its read, resolved,
    /// to start or drop.
    Cold(Box<PendingLookup>),
    /// No live value under the key (none, a deletion, or past its deadline), and whether
    /// one of the other keys asked about holds a live value, probed in the same view.
    NoValue {
        /// One of [`Engine::get_now`]'s `others` holds a live value.
        other_exists: bool,
    },
}

/// [`PendingLookup::reserve`] found no room in the window of asynchronous page reads
/// ([`crate::ASYNC_READ_WINDOW`]): nothing was queued and the lookup's pin is released. The
/// caller starts the read where waiting is allowed ([`Engine::lookup_async`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWindowFull;

/// A read with room in the read window and its callback bound ([`PendingLookup::reserve`]),
/// to be started by [`Engine::submit_reads`]. Dropped unstarted, it fails with
/// [`EngineError::Closed`] (its `done` is called) and gives its room back.
pub struct ReservedRead {
    side: Arc<ReadSide>,
    /// Indexes of the pages to read among the plan's.
    misses: Vec<usize>,
    pub(super) lbas: Vec<Lba>,
    /// `None` once submitted.
    pub(super) acc: Option<Arc<Mutex<AsyncRead>>>,
}

impl ReservedRead {
    /// The poller callback of this read's page `j`.
    pub(super) fn page_callback(&self, j: usize, acc: &Arc<Mutex<AsyncRead>>) -> crate::io::OnDone {
        page_done(
            self.misses[j],
            acc.clone(),
            self.side.window.clone(),
            self.side.read_copied.clone(),
            self.side.read_faults.clone(),
        )
    }

    /// Page `j` will not be read: it counts as read with `error`, and gives its room back.
    pub(super) fn fail_page(&self, j: usize, acc: &Mutex<AsyncRead>, error: EngineError) {
        let side = &self.side;
        finish_page(
            self.misses[j],
            acc,
            &side.window,
            (&side.read_copied, &side.read_faults),
            Err(error),
        );
    }
}

impl Drop for ReservedRead {
    fn drop(&mut self) {
        let Some(acc) = self.acc.take() else {
            return;
        };
        for j in 0..self.misses.len() {
            self.fail_page(j, &acc, EngineError::Closed);
        }
    }
}

/// A lookup resolved by [`Engine::lookup_now`] whose value pages are not all in DRAM. It
/// holds its view's read pin: the segments its pointers lead into are not
/// trimmed until its last page is read, or until it is dropped unstarted.
pub struct PendingLookup {
    pub(super) side: Arc<ReadSide>,
    pub(super) plan: ReadPlan,
    /// Per page of the plan: its copy from DRAM, or `None`: to read from the device.
    pub(super) cached: Vec<Option<Bytes>>,
    pub(super) shape: LookupShape,
    pub(super) pin: ReadPin,
}

impl PendingLookup {
    /// Page reads the lookup needs from the device.
    pub fn pages_to_read(&self) -> usize {
        self.cached.iter().filter(|c| c.is_none()).count()
    }

    /// Takes room in the window of asynchronous page reads for this lookup's pages, without
    /// waiting, and binds `done` to it: the read is then started by
    /// [`Engine::submit_reads`], with others, in one submission. `done` runs on the engine's
    /// poller thread once the last page is in.
    ///
    /// # Errors
    /// [`ReadWindowFull`]: the window has no room for these pages; nothing was taken, `done`
    /// is dropped uncalled, and the pin is released.
    pub fn reserve(self, done: OnLookup) -> std::result::Result<ReservedRead, ReadWindowFull> {
        if !self.side.window.try_acquire_pages(self.pages_to_read()) {
            return Err(ReadWindowFull);
        }
        Ok(self.into_async(done))
    }

    /// Starts the page reads from a thread that may wait: at most
    /// [`crate::ASYNC_READ_WINDOW`] pages of asynchronous reads are on the device at once,
    /// so a larger request goes a window at a time, this thread waiting for earlier pages;
    /// each window with one doorbell; pages refused for a full queue offered again after a
    /// pause. `done` runs on the engine's poller thread once the last page is in.
    pub(super) fn start_waiting(self, done: OnLookup) {
        let mut read = self.into_async(done);
        // This thread starts every page (or fails it): nothing is left for `Drop`.
        let Some(acc) = read.acc.take() else {
            return;
        };
        let (side, n) = (read.side.clone(), read.lbas.len());
        let mut cmds: Vec<Command> = read
            .lbas
            .iter()
            .map(|&lba| Command::Read {
                lba,
                buf: PageBuf::for_read(),
            })
            .collect();
        let mut callbacks: Vec<crate::io::OnDone> =
            (0..n).map(|j| read.page_callback(j, &acc)).collect();
        // Writes (and their flushes) always find free tags: reads keep to the window.
        let mut start = 0;
        while start < n {
            let len = (n - start).min(crate::ASYNC_READ_WINDOW);
            side.window.acquire_pages(len);
            let window_cmds: Vec<Command> = cmds.drain(..len).collect();
            let window_cbs: Vec<crate::io::OnDone> = callbacks.drain(..len).collect();
            let results = side.poller.submit_many(window_cmds, window_cbs);
            for (j, r) in results.into_iter().enumerate() {
                let Err(r) = r else {
                    continue;
                };
                let i = start + j;
                let mut buf = r.buf.unwrap_or_else(PageBuf::zeroed);
                let mut tries = 0u32;
                loop {
                    let cmd = Command::Read {
                        lba: read.lbas[i],
                        buf,
                    };
                    match side.poller.submit(cmd, read.page_callback(i, &acc)) {
                        Ok(()) => break,
                        Err(r)
                            if matches!(r.error, DeviceError::QueueFull { .. })
                                && tries < QUEUE_FULL_RETRIES =>
                        {
                            // Writes hold the device's tags: let some complete.
                            tries += 1;
                            buf = r.buf.unwrap_or_else(PageBuf::zeroed);
                            std::thread::sleep(QUEUE_FULL_BACKOFF);
                        }
                        Err(r) => {
                            read.fail_page(i, &acc, r.error.into());
                            break;
                        }
                    }
                }
            }
            start += len;
        }
    }

    /// The read of the pages DRAM lacks, bound to `done`: which plan pages (`misses`), their
    /// addresses, and the accumulator their callbacks fill. Its window room is the
    /// caller's to take.
    fn into_async(self, done: OnLookup) -> ReservedRead {
        let misses: Vec<usize> = (0..self.cached.len())
            .filter(|&i| self.cached[i].is_none())
            .collect();
        let lbas: Vec<Lba> = misses.iter().map(|&i| self.plan.lbas[i]).collect();
        let shape = self.shape;
        let done: OnValues = Box::new(move |r| done(r.map(|values| shape.finish(values))));
        let acc = Arc::new(Mutex::new(AsyncRead {
            remaining: misses.len(),
            pages: self.cached.into_iter().map(|c| c.map(Ok)).collect(),
            plan: Some(self.plan),
            done: Some(done),
            pin: Some(self.pin),
        }));
        ReservedRead {
            side: self.side,
            misses,
            lbas,
            acc: Some(acc),
        }
    }
}

impl Engine {
    /// Whether the window of asynchronous page reads ([`crate::ASYNC_READ_WINDOW`]) has room
    /// for `pages` more now: a hint for a caller that must not wait, to send a read that
    /// would not fit where waiting is allowed before resolving it ([`PendingLookup::reserve`]
    /// may still find the room taken).
    pub fn read_window_fits(&self, pages: usize) -> bool {
        self.side.window.fits(pages)
    }

    /// Starts reads reserved by [`PendingLookup::reserve`]: every page of all of them in one
    /// submission (one system call). Never waits: a page the device refuses for want of a
    /// free command tag is retried by the poller as tags free up; any other refusal fails
    /// its read through the read's `done`.
    pub fn submit_reads(&self, reads: Vec<ReservedRead>) {
        submit_on_shared_ring(&self.side, reads);
    }
}

/// The page reads of reserved reads, in order: a command and a callback per page, and per
/// command its read's index and its page's index in that read.
pub(super) struct PageReads {
    pub(super) cmds: Vec<Command>,
    pub(super) callbacks: Vec<crate::io::OnDone>,
    pub(super) owner: Vec<(usize, usize)>,
}

/// [`PageReads`] of the reads not yet submitted among `reads`.
pub(super) fn page_reads(reads: &[ReservedRead]) -> PageReads {
    let mut out = PageReads {
        cmds: Vec::new(),
        callbacks: Vec::new(),
        owner: Vec::new(),
    };
    for (r, read) in reads.iter().enumerate() {
        let Some(acc) = &read.acc else {
            continue;
        };
        for (j, &lba) in read.lbas.iter().enumerate() {
            out.cmds.push(Command::Read {
                lba,
                buf: PageBuf::for_read(),
            });
            out.callbacks.push(read.page_callback(j, acc));
            out.owner.push((r, j));
        }
    }
    out
}

/// [`Engine::submit_reads`]: the pages on the device's shared ring, their completions to the
/// poller.
pub(super) fn submit_on_shared_ring(side: &ReadSide, mut reads: Vec<ReservedRead>) {
    let PageReads {
        cmds,
        callbacks,
        owner,
    } = page_reads(&reads);
    if cmds.is_empty() {
        return;
    }
    let results = side.poller.queue_many(cmds, callbacks);
    for ((r, j), result) in owner.into_iter().zip(results) {
        let Err(rejected) = result else {
            continue;
        };
        let read = &reads[r];
        let Some(acc) = &read.acc else {
            continue;
        };
        if matches!(rejected.error, DeviceError::QueueFull { .. }) {
            let buf = rejected.buf.unwrap_or_else(PageBuf::zeroed);
            side.poller
                .defer_read(read.lbas[j], buf, read.page_callback(j, acc));
        } else {
            read.fail_page(j, acc, rejected.error.into());
        }
    }
    // Every page is registered with the poller now: nothing is left for `Drop`.
    for read in &mut reads {
        read.acc = None;
    }
    side.poller.doorbell();
}
