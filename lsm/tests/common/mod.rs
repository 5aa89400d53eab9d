//! Helpers shared by the engine's integration tests.

#![allow(dead_code)]

use std::sync::Arc;

use hwftl_sim::{
    AppendDevice, Command, Completion, DeviceStats, Ftl, Geometry, Rejected, SegmentId,
    SegmentInfo, Tag, Wait,
};

/// Decides, before each command reaches the device, whether the power goes first.
pub type CutBefore = Box<dyn Fn(&Command) -> bool + Send + Sync>;

/// A device that cuts its own power (everything not yet completed is lost) when `cut_before`
/// says so for the command about to be submitted; otherwise it passes commands through.
pub struct CutDevice {
    inner: Arc<Ftl>,
    cut_before: CutBefore,
}

impl CutDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<Ftl>, cut_before: CutBefore) -> Self {
        CutDevice { inner, cut_before }
    }

    fn check(&self, cmd: &Command) {
        if (self.cut_before)(cmd) {
            self.inner.power_cut();
        }
    }
}

impl AppendDevice for CutDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn submit(&self, cmd: Command) -> Result<Tag, Rejected> {
        self.check(&cmd);
        self.inner.submit(cmd)
    }
    fn submit_many(&self, cmds: Vec<Command>) -> Vec<Result<Tag, Rejected>> {
        cmds.into_iter().map(|c| self.submit(c)).collect()
    }
    fn submit_and_reap(
        &self,
        cmds: Vec<Command>,
        out: &mut Vec<Completion>,
        max: usize,
        wait: Wait,
    ) -> (Vec<Result<Tag, Rejected>>, hwftl_sim::Result<usize>) {
        let tags = self.submit_many(cmds);
        (tags, self.inner.reap(out, max, wait))
    }
    fn reap(&self, out: &mut Vec<Completion>, max: usize, wait: Wait) -> hwftl_sim::Result<usize> {
        self.inner.reap(out, max, wait)
    }
    fn execute(&self, cmd: Command) -> Result<Completion, Rejected> {
        self.check(&cmd);
        self.inner.execute(cmd)
    }
    fn segment_info(&self, segment: SegmentId) -> hwftl_sim::Result<SegmentInfo> {
        self.inner.segment_info(segment)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}
