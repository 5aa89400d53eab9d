//! Fuzz target `command`: the properties of `fuzz/checks/resp.rs`, `check_command`.

#![no_main]

#[path = "../checks/resp.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_command(data));
