//! libFuzzer target: `tessera::fuzzing::grpc_infer` (what the input is, and what counts as a defect, is said there).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::grpc_infer(data));
