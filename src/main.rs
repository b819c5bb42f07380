//! The `tessera` binary: parse the command line, run the server until SIGINT/SIGTERM (or, as `tessera
//! healthcheck`, ask a running server whether it is ready).

use tessera::observability::logging::Log;

/// mimalloc instead of glibc's malloc: every request allocates (headers, tensors, responses) and frees on
/// another thread as often as not. Measured with bench/ab.py (4 paired trials, simple): HTTP c=4 1.21x and
/// gRPC c=4 1.14x the throughput of glibc malloc, c=1 unchanged.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    if tessera::cli::Healthcheck::requested() {
        return tessera::cli::Healthcheck::run_from_command_line();
    }
    let options = tessera::cli::Options::parse_command_line();
    // While the process has one thread: the TensorFlow backend's library is found through the environment.
    let tensorflow_dir = options.backend_setting("tensorflow", "library-dir").map(std::path::PathBuf::from);
    tessera::backends::tensorflow::point_at_library(tensorflow_dir);
    let log = match Log::start(options.log_levels(), options.log_format, options.log_file.as_deref()) {
        Ok(log) => std::sync::Arc::new(log),
        Err(e) => {
            eprintln!("cannot open the log file {:?}: {e}", options.log_file.as_deref().unwrap_or_default());
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = match tessera::executor::runtime(std::time::Duration::from_micros(options.busy_poll_us)) {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    for notice in &options.notices {
        tracing::info!("{notice}");
    }
    let outcome = runtime.block_on(tessera::server::run(options, log));
    // What the exit timeout cut short (a connection, a plugin call, a build) is abandoned, not waited for.
    runtime.shutdown_background();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
