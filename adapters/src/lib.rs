//! Client-side adapters: Redis Cluster routing, the NBD block adapter and the YCSB binding.
//!
//! Empty until the adapters issue lands; see `docs/ARCHITECTURE.md`.
