//! Batches of reads their caller waits for, read on the caller's own ring
//! ([`Media::read_direct`]; [`DeviceConfig::caller_ring_reads`]).
//!
//! Each read is admitted like any command, under `state`: it takes a tag (so the queue depth
//! bounds it), is checked against the tables, and counts on its segment (so a TRIM of that
//! segment is refused while it runs). Only its page transfer differs: instead of the shared
//! ring and its poller, the calling thread reads the batch's pages itself and marks them
//! done; then, under `state` again, each read is finished as `wait_for` finishes one. A power
//! cut meanwhile takes the commands out of the table: their reads then fail with
//! `PoweredOff` (whatever the page transfer returned), as on the shared ring.

use super::*;
use crate::media::DirectRead;

impl Ftl {
    /// [`AppendDevice::execute_many`] for a batch of reads only, on the caller's ring.
    pub(super) fn read_many_direct(
        &self,
        cmds: Vec<Command>,
    ) -> Vec<std::result::Result<Completion, Rejected>> {
        let n = cmds.len();
        let mut results: Vec<Option<std::result::Result<Completion, Rejected>>> =
            (0..n).map(|_| None).collect();
        let mut waiting: std::collections::VecDeque<(usize, Command)> =
            cmds.into_iter().enumerate().collect();
        while !waiting.is_empty() {
            // (index in the batch, tag) of the reads admitted in this round.
            let mut admitted: Vec<(usize, u32)> = Vec::with_capacity(waiting.len());
            let mut pages: Vec<DirectRead> = Vec::with_capacity(waiting.len());
            {
                let now = Instant::now();
                let mut st = self.state.lock();
                while let Some((i, cmd)) = waiting.pop_front() {
                    let shape = Shape::of(&cmd);
                    match self.admit(&mut st, cmd, true, now, true) {
                        Ok((tag, page)) => {
                            admitted.push((i, tag.0));
                            // None: finished at admission (an injected read fault).
                            pages.extend(page);
                        }
                        Err(r) if matches!(r.error, DeviceError::QueueFull { .. }) => {
                            // Every tag is in use: this round runs with what it has.
                            waiting.push_front((i, shape.rebuild(r.buf)));
                            break;
                        }
                        Err(r) => results[i] = Some(Err(r)),
                    }
                }
            }
            if admitted.is_empty() {
                // Other users hold every tag; they give them back as their commands finish.
                std::thread::yield_now();
                continue;
            }
            let dones = if pages.is_empty() {
                Vec::new()
            } else {
                self.media.read_direct(pages)
            };
            let stamp = Instant::now();
            let mut st = self.state.lock();
            for d in dones {
                if let Some(cmd) = st.cmds.get_mut(d.id as usize).and_then(Option::as_mut) {
                    cmd.done = Some(d);
                }
                // Else: taken out by a power cut.
            }
            for (i, tag) in admitted {
                let Some(cmd) = st.cmds[tag as usize].as_mut() else {
                    results[i] = Some(Err(reject(DeviceError::PoweredOff, None)));
                    continue;
                };
                if cmd.done.is_none() {
                    // Not reachable: the media reports every page it was given.
                    cmd.done = Some(MediaDone {
                        id: tag,
                        result: Err(DeviceError::io(
                            "direct read",
                            std::io::Error::other("the media reported no completion"),
                        )),
                        buf: None,
                    });
                }
                results[i] = Some(Ok(self.finish(&mut st, tag, stamp)));
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(reject(DeviceError::PoweredOff, None))))
            .collect()
    }
}
