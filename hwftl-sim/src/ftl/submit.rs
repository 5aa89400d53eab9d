//! Taking commands: the tag pool, checking each command against the append-only rule and
//! the tables, and preparing page programs (opening segments, mapping pages).

use super::*;
use crate::media::DirectRead;

/// The command's page buffer, if it has one (handed back with a refusal).
pub(super) fn buf_of(c: Command) -> Option<PageBuf> {
    match c {
        Command::Read { buf, .. } | Command::Write { buf, .. } | Command::Append { buf, .. } => {
            Some(buf)
        }
        Command::Trim { .. } | Command::Flush => None,
    }
}

impl Ftl {
    fn alloc_tag(&self, st: &mut State) -> Result<u32> {
        if !st.powered {
            return Err(DeviceError::PoweredOff);
        }
        st.free_tags.pop().ok_or(DeviceError::QueueFull {
            depth: self.config.queue_depth,
        })
    }

    /// `now` stamps the command for its latency (callers submitting many take one stamp:
    /// reading the clock per command cost ~13% of a queue-depth-32 read loop on this host).
    pub(super) fn submit_inner(
        &self,
        cmd: Command,
        awaited: bool,
        now: Instant,
    ) -> std::result::Result<Tag, Rejected> {
        // A write to a free segment opens it first, with the tables written outside `state`
        // (`ftl::open_ahead`, where the argument is). The check rides on the submission's
        // own lock: a write to an open segment takes `state` once, as before.
        let target = self.segment_written_by(&cmd);
        let mut st = loop {
            let st = self.state.lock();
            match target {
                Some(seg)
                    if st.powered
                        && (st.opening == Some(seg.0)
                            || st.tables.seg_state.get(seg.0 as usize)
                                == Some(&SegmentState::Free)) =>
                {
                    drop(st);
                    if let Err(e) = self.open_ahead(seg) {
                        return Err(reject(e, buf_of(cmd)));
                    }
                }
                _ => break st,
            }
        };
        self.admit(&mut st, cmd, awaited, now, false)
            .map(|(tag, _)| tag)
    }

    /// Takes a command under `state`: its tag, its checks and accounting, and its media
    /// operation. With `direct`, a read's page is not started on the media but handed back,
    /// for the caller to read on its own thread ([`Media::read_direct`], `ftl::direct_read`)
    /// and then mark done; the command counts as on the media meanwhile.
    pub(super) fn admit(
        &self,
        st: &mut State,
        cmd: Command,
        awaited: bool,
        now: Instant,
        direct: bool,
    ) -> std::result::Result<(Tag, Option<DirectRead>), Rejected> {
        let g = self.geometry;
        let tag = match self.alloc_tag(st) {
            Ok(t) => t,
            Err(e) => return Err(reject(e, buf_of(cmd))),
        };
        let start = self.now(st);
        st.seq += 1;
        let mut inflight = InFlight {
            kind: CommandKind::Flush,
            lba: None,
            segment: None,
            program_ppa: None,
            start,
            due: start,
            seq: st.seq,
            submitted: now,
            preset: None,
            done: None,
            awaited,
            on_media: false,
            flush_covers: st.programs_delivered,
        };
        let mut media_op = None;
        let mut spare_buf = None;
        let outcome: Result<()> = (|| {
            if self.read_only {
                let refused = match &cmd {
                    Command::Write { .. } => Some("WRITE"),
                    Command::Append { .. } => Some("APPEND"),
                    Command::Trim { .. } => Some("TRIM"),
                    Command::Read { .. } | Command::Flush => None,
                };
                if let Some(command) = refused {
                    spare_buf = buf_of(cmd);
                    return Err(DeviceError::ReadOnlyDevice { command });
                }
            }
            match cmd {
                Command::Read { lba, buf } => {
                    inflight.kind = CommandKind::Read;
                    inflight.lba = Some(lba);
                    let ppa = match self.readable_ppa(st, lba) {
                        Ok(p) => p,
                        Err(e) => {
                            spare_buf = Some(buf);
                            return Err(e);
                        }
                    };
                    let (seg, off) = g.locate(lba)?;
                    inflight.segment = Some(seg);
                    let chip = g.stripe(off).0;
                    if let Some(s) = st.sched.as_mut() {
                        inflight.due = s.read(start, chip);
                    }
                    if self.faults.take_read(lba, seg) {
                        inflight.preset = Some(Err(DeviceError::ReadFailed { lba }));
                        spare_buf = Some(buf);
                    } else {
                        media_op = Some(MediaOp::Read { ppa, buf });
                    }
                }
                Command::Write { lba, buf } => {
                    let (seg, off) = match g.locate(lba) {
                        Ok(x) => x,
                        Err(e) => {
                            spare_buf = Some(buf);
                            return Err(e);
                        }
                    };
                    self.prepare_write(
                        st,
                        &mut inflight,
                        seg,
                        Some(off),
                        buf,
                        &mut media_op,
                        &mut spare_buf,
                    )?;
                }
                Command::Append { segment, buf } => {
                    if let Err(e) = g.check_segment(segment) {
                        spare_buf = Some(buf);
                        return Err(e);
                    }
                    self.prepare_write(
                        st,
                        &mut inflight,
                        segment,
                        None,
                        buf,
                        &mut media_op,
                        &mut spare_buf,
                    )?;
                }
                Command::Trim { segment } => {
                    inflight.kind = CommandKind::Trim;
                    inflight.segment = Some(segment);
                    g.check_segment(segment)?;
                    let busy = st.seg_busy[segment.0 as usize];
                    if busy > 0 {
                        return Err(DeviceError::SegmentBusy {
                            segment,
                            in_flight: busy,
                        });
                    }
                    inflight.preset = Some(self.trim(st, segment, start, &mut inflight.due));
                }
                Command::Flush => {
                    inflight.kind = CommandKind::Flush;
                    media_op = Some(MediaOp::Flush);
                }
            }
            Ok(())
        })();
        if let Err(e) = outcome {
            st.free_tags.push(tag);
            return Err(reject(e, spare_buf));
        }
        if let Some(seg) = inflight.segment {
            if inflight.kind != CommandKind::Trim {
                st.seg_busy[seg.0 as usize] += 1;
            }
        }
        let mut handed_back = None;
        match media_op {
            Some(MediaOp::Read { ppa, buf }) if direct => {
                inflight.on_media = true;
                handed_back = Some(DirectRead { id: tag, ppa, buf });
            }
            Some(op) => {
                inflight.on_media = true;
                if let Err((e, buf)) = self.media.start(tag, op) {
                    // Undo: the command never reached the media.
                    if let Some(seg) = inflight.segment {
                        st.seg_busy[seg.0 as usize] -= 1;
                        if inflight.kind == CommandKind::Write {
                            st.wp[seg.0 as usize] -= 1;
                        }
                    }
                    st.free_tags.push(tag);
                    return Err(reject(e, buf));
                }
            }
            None => {
                // Finished at submission (fault or TRIM): ready at its due time.
                inflight.done = Some(MediaDone {
                    id: tag,
                    result: Ok(()),
                    buf: spare_buf,
                });
                if !inflight.awaited {
                    st.ready.push(Reverse((inflight.due, inflight.seq, tag)));
                }
            }
        }
        if !inflight.awaited {
            st.reapable += 1;
        }
        st.cmds[tag as usize] = Some(inflight);
        Ok((Tag(tag), handed_back))
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare_write(
        &self,
        st: &mut State,
        inflight: &mut InFlight,
        seg: SegmentId,
        at: Option<u32>,
        buf: PageBuf,
        media_op: &mut Option<MediaOp>,
        spare_buf: &mut Option<PageBuf>,
    ) -> Result<()> {
        let g = self.geometry;
        inflight.kind = CommandKind::Write;
        inflight.segment = Some(seg);
        let s = seg.0 as usize;
        let check = (|| {
            match st.tables.seg_state[s] {
                SegmentState::ReadOnly => {
                    return Err(DeviceError::SegmentReadOnly { segment: seg })
                }
                SegmentState::Full => return Err(DeviceError::SegmentFull { segment: seg }),
                SegmentState::Free | SegmentState::Open => {}
            }
            let wp = st.wp[s];
            if wp >= g.pages_per_segment() {
                return Err(DeviceError::SegmentFull { segment: seg });
            }
            if let Some(off) = at {
                if off != wp {
                    return Err(DeviceError::NotAtWritePointer {
                        lba: g.lba(seg, off),
                        segment: seg,
                        write_pointer: wp,
                    });
                }
            }
            if st.tables.seg_state[s] == SegmentState::Free {
                self.open_segment(st, seg)?;
            }
            Ok(wp)
        })();
        let off = match check {
            Ok(o) => o,
            Err(e) => {
                *spare_buf = Some(buf);
                return Err(e);
            }
        };
        let lba = g.lba(seg, off);
        inflight.lba = Some(lba);
        let (chip, page) = g.stripe(off);
        let block = st.tables.mapped(seg, chip);
        if let Some(sched) = st.sched.as_mut() {
            inflight.due = sched.program(inflight.start, chip);
        }
        if self.faults.take_program(lba, seg) {
            let i = st.tables.block_index(chip, block);
            st.tables.block_state[i] = BlockState::Bad;
            st.tables.seg_state[s] = SegmentState::ReadOnly;
            st.tables.seg_wp[s] = off;
            st.wp[s] = off;
            tracing::warn!(
                "program failure: retired block {block} of chip {chip}; segment {seg} read-only"
            );
            inflight.preset = Some(match self.persist(st) {
                Ok(()) => Err(DeviceError::ProgramFailed {
                    lba,
                    segment: seg,
                    chip,
                    block,
                }),
                Err(e) => Err(e),
            });
            *spare_buf = Some(buf);
            return Ok(());
        }
        st.wp[s] = off + 1;
        let ppa = g.ppa(chip, block, page);
        inflight.program_ppa = Some(ppa);
        *media_op = Some(MediaOp::Program { ppa, buf });
        Ok(())
    }
}
