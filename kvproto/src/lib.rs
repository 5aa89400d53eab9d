//! RESP wire codec, the typed `Command` enum, reply encoding and an async RESP client.
//!
//! Empty until the firmware issue lands; see `docs/ARCHITECTURE.md`.
