//! The `tessera` binary: parse the command line, run the server until SIGINT/SIGTERM.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let options = tessera::cli::Options::parse();
    tessera::server::init_logging(options.log_verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tessera::server::run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
