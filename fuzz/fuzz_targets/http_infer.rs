//! libFuzzer target: `tessera::fuzzing::http_infer` (what the input is, and what counts as a defect, is said there).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::http_infer(data));
