//! What both floors (`floor.rs`, `floor_grpc.rs`) answer from: their command line `PORT MODEL DIR` and the
//! answers recorded in DIR (`metadata`, `config`, `infer`). Standard library only, since `floor.rs` is built
//! with plain rustc.

use std::path::PathBuf;

/// The recorded answers to one model's metadata, config and inference requests.
pub struct Recorded {
    pub metadata: Vec<u8>,
    pub config: Vec<u8>,
    pub infer: Vec<u8>,
    pub model: String,
}

/// The port to listen on and the recorded answers, from the command line; exits with the usage line
/// `usage: PROGRAM PORT MODEL DIR` if it is not that.
pub fn from_command_line(program: &str) -> (u16, Recorded) {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: {program} PORT MODEL DIR");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[3]);
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{}/{name}: {e}", dir.display()));
    let recorded =
        Recorded { metadata: read("metadata"), config: read("config"), infer: read("infer"), model: args[2].clone() };
    (args[1].parse().expect("PORT"), recorded)
}
