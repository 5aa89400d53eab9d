//! Fuzz target `nbd`: the properties of `fuzz/checks/nbd.rs`, `check_nbd`.

#![no_main]

#[path = "../checks/nbd.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_nbd(data));
