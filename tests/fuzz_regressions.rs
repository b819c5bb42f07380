//! Replays every input in `fuzz/regressions/<target>/` through the fuzz target of that name
//! (`tessera::fuzzing`), so that what the fuzzers found, and the hostile inputs written by hand beside it,
//! stay fixed without a fuzzer: a panic here is the defect coming back.

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 6] = [
    ("model_config", tessera::fuzzing::model_config),
    ("http_infer", tessera::fuzzing::http_infer),
    ("grpc_infer", tessera::fuzzing::grpc_infer),
    ("repository_load", tessera::fuzzing::repository_load),
    ("bytes_tensor", tessera::fuzzing::bytes_tensor),
    ("wit_tensor_data", tessera::fuzzing::wit_tensor_data),
];

#[test]
fn every_regression_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    for (name, target) in TARGETS {
        let folder = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
            .map(|entry| entry.expect("a readable entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{} holds no inputs", folder.display());
        for input in inputs {
            let data = std::fs::read(&input).expect("a readable input");
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                panic!("{name} panicked on {}", input.display());
            }
        }
    }
}
