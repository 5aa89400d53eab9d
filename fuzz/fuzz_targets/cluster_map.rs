//! Fuzz target `cluster_map`: the properties of `fuzz/checks/cluster.rs`, `check_cluster_map`.

#![no_main]

#[path = "../checks/cluster.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_cluster_map(data));
