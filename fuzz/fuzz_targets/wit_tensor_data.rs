//! libFuzzer target: `tessera::fuzzing::wit_tensor_data` (what the input is, and what counts as a defect, is said there).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::wit_tensor_data(data));
