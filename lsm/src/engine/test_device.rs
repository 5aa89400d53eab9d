//! The engine's unit tests' device: a small RAM device, formatted fresh.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};

/// A fresh RAM device of 2 x 2 chips of 64 blocks of `pages_per_block` pages.
pub(super) fn small_ram_device(pages_per_block: u32) -> Arc<dyn AppendDevice> {
    let g = Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block,
        spare_blocks_per_chip: 2,
    };
    Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap())
}
