//! The LightStore LSM engine: key-value separation, DRAM-resident keytables,
//! metadata-only compaction, value-space reclamation and recovery, over `hwftl-sim`.
//!
//! Empty until the engine issue lands; see `docs/ARCHITECTURE.md`.
