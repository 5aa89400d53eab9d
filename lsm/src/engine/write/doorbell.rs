//! The doorbell a batch acknowledged from DRAM leaves to its caller ([`Doorbell`]), so the
//! drive can answer before the submission's system call.

use std::sync::{Arc, Weak};

/// The doorbell a batch acknowledged from DRAM ([`EngineConfig::ack_from_dram`]) leaves to
/// its caller: its pages are queued on the device but not yet handed to the kernel.
/// [`Doorbell::ring`] hands them over (one system call; on a virtual disk, a VM exit) and
/// wakes the poller; dropping it rings too, so pages are never stranded. While the device
/// still runs a command handed over before, ringing leaves them to the poller's turn that
/// command's completion starts, with every batch queued until then (`Poller::doorbell_if_idle`).
///
/// Why a caller takes it ([`crate::PendingWrite::take_doorbell`]): such a batch is acknowledged as
/// soon as it is applied, so a caller that answers its clients first and rings after takes
/// the system call off the reply's path. Holding it delays only when the pages reach the
/// device; anyone else's doorbell hands them over too (the queue is shared), and so does
/// the poller's next wait (it parks at most 20 ms). A holder should not wait for the
/// pipeline before ringing: the pages it holds back would complete only that late.
///
/// [`EngineConfig::ack_from_dram`]: crate::EngineConfig::ack_from_dram
///
/// Ringing also seals the shared open page its batch may have records in (see the engine's
/// `open_page` module), without waiting for the write lock: if the lock is taken, the
/// maintenance thread seals it at once instead.
#[must_use = "dropping a doorbell rings it at once"]
pub struct Doorbell {
    poller: Arc<crate::io::Poller>,
    core: Weak<crate::engine::Core>,
}

impl Doorbell {
    pub(in crate::engine) fn new(
        poller: Arc<crate::io::Poller>,
        core: Weak<crate::engine::Core>,
    ) -> Doorbell {
        Doorbell { poller, core }
    }

    /// Hands the queued pages to the device and wakes the poller to collect them.
    pub fn ring(self) {
        drop(self);
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if let Some(core) = self.core.upgrade() {
            core.seal_open_page_soon();
        }
        self.poller.doorbell_if_idle();
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Doorbell")
    }
}
