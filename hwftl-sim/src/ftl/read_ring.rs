//! A thread's own queue of page reads ([`AppendDevice::read_ring`]): started without
//! waiting, reaped by the same thread when it likes.
//!
//! Each read is admitted as `ftl::direct_read` admits one, under `state`: a tag (the queue
//! depth bounds it), the table checks, a count on its segment (a TRIM of that segment is
//! refused while it runs). Its page transfer then goes down the thread's own media ring
//! ([`Media::read_ring`]) instead of the shared one, so no other thread takes its
//! completion; [`ReadRing::reap`] marks it done and finishes it under `state`, as
//! `wait_for` finishes a command. A power cut meanwhile takes the command out of the table:
//! its read then completes with `PoweredOff` whatever the transfer returned, and its buffer
//! stays the media ring's until the kernel is done with it.

use std::os::fd::RawFd;
use std::sync::Arc;

use super::*;
use crate::device::ReadRing;
use crate::media::{MediaDone, MediaReadRing};

/// [`ReadRing`] of the FTL: admission and finishing under `state`, transfers on a
/// [`MediaReadRing`].
pub(super) struct FtlReadRing {
    ftl: Arc<Ftl>,
    media: Box<dyn MediaReadRing>,
    /// Tags finished at admission (an injected read fault): completed at the next reap.
    preset: Vec<u32>,
    /// Tags of the reads submitted and not yet reaped.
    out: std::collections::HashSet<u32>,
    dones: Vec<MediaDone>,
}

impl Ftl {
    /// [`AppendDevice::read_ring`]: only where awaited reads take the caller's own ring too
    /// (a media that has one, no NAND timing model, [`DeviceConfig::caller_ring_reads`]).
    pub(super) fn new_read_ring(self: Arc<Self>) -> Option<Box<dyn ReadRing>> {
        if !self.direct_reads {
            return None;
        }
        match self.media.read_ring()? {
            Ok(media) => Some(Box::new(FtlReadRing {
                ftl: self,
                media,
                preset: Vec::new(),
                out: std::collections::HashSet::new(),
                dones: Vec::new(),
            })),
            Err(e) => {
                tracing::warn!(
                    "no read ring of its own for a thread ({e}): it uses the shared one"
                );
                None
            }
        }
    }
}

/// The completion of a read a power cut took out of the table.
fn powered_off(tag: u32, buf: Option<PageBuf>) -> Completion {
    Completion {
        tag: Tag(tag),
        kind: CommandKind::Read,
        lba: None,
        segment: None,
        result: Err(DeviceError::PoweredOff),
        buf,
        latency_ns: 0,
    }
}

impl ReadRing for FtlReadRing {
    fn submit(&mut self, cmds: Vec<Command>) -> Vec<std::result::Result<Tag, Rejected>> {
        let mut results = Vec::with_capacity(cmds.len());
        let mut pages = Vec::with_capacity(cmds.len());
        {
            let now = Instant::now();
            let mut st = self.ftl.state.lock();
            for cmd in cmds {
                if !matches!(cmd, Command::Read { .. }) {
                    results.push(Err(reject(
                        DeviceError::NotARead,
                        super::submit::buf_of(cmd),
                    )));
                    continue;
                }
                match self.ftl.admit(&mut st, cmd, true, now, true) {
                    Ok((tag, page)) => {
                        self.out.insert(tag.0);
                        match page {
                            Some(p) => pages.push(p),
                            // Finished at admission (an injected read fault).
                            None => self.preset.push(tag.0),
                        }
                        results.push(Ok(tag));
                    }
                    Err(r) => results.push(Err(r)),
                }
            }
        }
        // Outside `state`: the system call builds and queues every page's I/O.
        self.media.start(pages);
        if !self.preset.is_empty() {
            // Finished at admission: no kernel completion will wake the owner for them.
            self.media.notify();
        }
        results
    }

    fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        self.media.reap(&mut self.dones);
        if self.dones.is_empty() && self.preset.is_empty() {
            return 0;
        }
        let stamp = Instant::now();
        let before = out.len();
        let mut st = self.ftl.state.lock();
        for d in self.dones.drain(..) {
            let tag = d.id;
            match st.cmds.get_mut(tag as usize).and_then(Option::as_mut) {
                Some(cmd) => {
                    cmd.done = Some(d);
                    out.push(self.ftl.finish(&mut st, tag, stamp));
                }
                // Taken out by a power cut: the handle is dead, its tags never reused.
                None => out.push(powered_off(tag, d.buf)),
            }
        }
        for tag in self.preset.drain(..) {
            if st.cmds.get(tag as usize).is_some_and(Option::is_some) {
                out.push(self.ftl.finish(&mut st, tag, stamp));
            } else {
                out.push(powered_off(tag, None));
            }
        }
        drop(st);
        for c in &out[before..] {
            self.out.remove(&c.tag.0);
        }
        out.len() - before
    }

    fn event_fd(&self) -> RawFd {
        self.media.event_fd()
    }

    fn in_flight(&self) -> usize {
        self.out.len()
    }

    fn broken(&self) -> bool {
        self.media.broken()
    }
}

impl Drop for FtlReadRing {
    /// Finishes every read still out (its tag and its segment's count given back), waiting
    /// up to [`DROP_PATIENCE`] for the media ring; their completions are dropped. A read
    /// still on the media then is finished as failed all the same (the media ring, dropped
    /// next, keeps its buffer from being freed under the kernel), so the device's close and
    /// a TRIM of its segment are not held up by a read no one will reap.
    fn drop(&mut self) {
        let deadline = Instant::now() + DROP_PATIENCE;
        let mut sink = Vec::new();
        while !self.out.is_empty() && Instant::now() < deadline {
            if self.reap(&mut sink) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
            sink.clear();
        }
        if self.out.is_empty() {
            return;
        }
        tracing::error!(
            "{} read(s) of a thread's read queue did not finish at close: failed",
            self.out.len()
        );
        let now = Instant::now();
        let mut st = self.ftl.state.lock();
        for tag in self.out.drain() {
            if let Some(cmd) = st.cmds.get_mut(tag as usize).and_then(Option::as_mut) {
                cmd.done = Some(MediaDone {
                    id: tag,
                    result: Err(DeviceError::io(
                        "read queue closed",
                        std::io::Error::other("the read did not finish"),
                    )),
                    buf: None,
                });
                drop(self.ftl.finish(&mut st, tag, now));
            }
        }
    }
}

/// How long dropping a read queue waits for its reads.
const DROP_PATIENCE: Duration = Duration::from_secs(10);
