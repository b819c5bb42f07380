//! libFuzzer target: `tessera::fuzzing::bytes_tensor` (what the input is, and what counts as a defect, is said there).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::bytes_tensor(data));
