//! The engine's unit tests' device: a small RAM device, formatted fresh.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, RamStore};

/// 2 x 2 chips of 64 blocks of `pages_per_block` pages (2 spares per chip).
pub(super) fn small_geometry(pages_per_block: u32) -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        blocks_per_chip: 64,
        pages_per_block,
        spare_blocks_per_chip: 2,
    }
}

/// A fresh RAM device of [`small_geometry`].
pub(super) fn small_ram_device(pages_per_block: u32) -> Arc<dyn AppendDevice> {
    let g = small_geometry(pages_per_block);
    Arc::new(Ftl::format(&Backend::Ram(RamStore::new()), DeviceConfig::new(g)).unwrap())
}
