//! tritonserver's flags that have no counterpart in Tessera, so that a launch script, Helm chart or
//! Kubernetes manifest written for tritonserver starts Tessera unchanged. Each is accepted under
//! tritonserver's help heading and, when given, says once in the log why it changes nothing. A flag whose
//! silent absence would surprise the user (TLS that would not be there, an endpoint that would not be
//! served) is refused with a message saying so instead.
//!
//! The flags are a table rather than fields of `Options`: nothing reads their values beyond this check.

use clap::{Arg, ArgAction, ArgMatches, Command};

/// What giving a flag does.
enum Effect {
    /// Accepted; the reason it changes nothing is logged.
    Ignored(&'static str),
    /// Refused, with the reason, when its value is true (it asks for something Tessera does not do);
    /// otherwise accepted silently (e.g. `--allow-sagemaker=false`).
    RefusedWhenTrue(&'static str),
}

struct Flag {
    name: &'static str,
    heading: &'static str,
    effect: Effect,
}

const fn ignored(name: &'static str, heading: &'static str, why: &'static str) -> Flag {
    Flag { name, heading, effect: Effect::Ignored(why) }
}

const fn refused_when_true(name: &'static str, heading: &'static str, why: &'static str) -> Flag {
    Flag { name, heading, effect: Effect::RefusedWhenTrue(why) }
}

/// tritonserver's spellings of true (`ParseOption<bool>`).
fn is_true(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "true" | "1" | "on" | "yes")
}

const NO_THREAD_POOLS: &str =
    "every endpoint is served by one runtime whose threads match the machine's cores, not by pools per protocol";
const NO_GPU: &str = "Tessera runs models on the CPU; there is no GPU memory or device to manage";
const KEEP_ALIVE: &str = "Tessera pings a gRPC connection that is quiet for 60 s and closes it when the ping is not \
                          answered within 20 s; connections have no maximum age";
const NO_SAGEMAKER: &str = "Tessera has no SageMaker endpoint; serve KServe v2 over --http-port instead";
const NO_VERTEX: &str = "Tessera has no Vertex AI endpoint; serve KServe v2 over --http-port instead";
const NO_TLS: &str =
    "Tessera's gRPC endpoint does not terminate TLS; put a TLS proxy (or a service mesh) in front of it";

const FLAGS: &[Flag] = &[
    ignored(
        "model-load-retry-count",
        "Model Repository",
        "a model that fails to load is reported at once, with its reason",
    ),
    refused_when_true(
        "model-namespacing",
        "Model Repository",
        "Tessera does not namespace models by repository: a name found in two repositories is an error",
    ),
    ignored("enable-peer-access", "Model Repository", NO_GPU),
    ignored("reuse-http-port", "HTTP", "the HTTP port is bound by this process alone"),
    ignored("http-header-forward-pattern", "HTTP", "request headers are not forwarded to models"),
    ignored("http-thread-count", "HTTP", NO_THREAD_POOLS),
    ignored("reuse-grpc-port", "GRPC", "the gRPC port is bound by this process alone"),
    ignored("grpc-header-forward-pattern", "GRPC", "request metadata is not forwarded to models"),
    ignored("grpc-infer-thread-count", "GRPC", NO_THREAD_POOLS),
    ignored("grpc-infer-allocation-pool-size", "GRPC", "gRPC requests are not drawn from a pool"),
    ignored("grpc-max-response-pool-size", "GRPC", "gRPC responses are not drawn from a pool"),
    refused_when_true("grpc-use-ssl", "GRPC", NO_TLS),
    refused_when_true("grpc-use-ssl-mutual", "GRPC", NO_TLS),
    ignored("grpc-server-cert", "GRPC", NO_TLS),
    ignored("grpc-server-key", "GRPC", NO_TLS),
    ignored("grpc-root-cert", "GRPC", NO_TLS),
    ignored("grpc-infer-response-compression-level", "GRPC", "gRPC responses are sent uncompressed"),
    ignored("grpc-keepalive-time", "GRPC", KEEP_ALIVE),
    ignored("grpc-keepalive-timeout", "GRPC", KEEP_ALIVE),
    ignored("grpc-keepalive-permit-without-calls", "GRPC", KEEP_ALIVE),
    ignored("grpc-http2-max-pings-without-data", "GRPC", KEEP_ALIVE),
    ignored("grpc-http2-min-recv-ping-interval-without-data", "GRPC", KEEP_ALIVE),
    ignored("grpc-http2-max-ping-strikes", "GRPC", KEEP_ALIVE),
    ignored("grpc-max-connection-age", "GRPC", KEEP_ALIVE),
    ignored("grpc-max-connection-age-grace", "GRPC", KEEP_ALIVE),
    refused_when_true("allow-sagemaker", "Sagemaker", NO_SAGEMAKER),
    ignored("sagemaker-port", "Sagemaker", NO_SAGEMAKER),
    ignored("sagemaker-safe-port-range", "Sagemaker", NO_SAGEMAKER),
    ignored("sagemaker-thread-count", "Sagemaker", NO_SAGEMAKER),
    refused_when_true("allow-vertex-ai", "Vertex", NO_VERTEX),
    ignored("vertex-ai-port", "Vertex", NO_VERTEX),
    ignored("vertex-ai-thread-count", "Vertex", NO_VERTEX),
    ignored("vertex-ai-default-model", "Vertex", NO_VERTEX),
    ignored("allow-gpu-metrics", "Metrics", NO_GPU),
    ignored("allow-cpu-metrics", "Metrics", "Tessera exports no CPU utilisation metrics"),
    ignored("metrics-interval-ms", "Metrics", "metrics are read when /metrics is scraped, not on an interval"),
    ignored("metrics-config", "Metrics", "Tessera's latency metrics are fixed histograms and counters"),
    ignored("cache-directory", "Response Cache", "the local cache keeps answers in memory only"),
    ignored("backend-directory", "Backend", "Tessera's backends (wasm, python, onnxruntime) are built in"),
    ignored("repoagent-directory", "Repository Agent", "Tessera has no repository agents"),
    ignored("rate-limit", "Rate Limiter", "each model instance runs a batch as soon as it is free"),
    ignored("rate-limit-resource", "Rate Limiter", "each model instance runs a batch as soon as it is free"),
    ignored("pinned-memory-pool-byte-size", "Memory/Device Management", NO_GPU),
    ignored("cuda-memory-pool-byte-size", "Memory/Device Management", NO_GPU),
    ignored("cuda-virtual-address-size", "Memory/Device Management", NO_GPU),
    ignored("min-supported-compute-capability", "Memory/Device Management", NO_GPU),
    ignored(
        "buffer-manager-thread-count",
        "Memory/Device Management",
        "tensors are copied by the request's own thread",
    ),
    ignored("host-policy", "Memory/Device Management", "Tessera has no host policies"),
    ignored("model-load-gpu-limit", "Memory/Device Management", NO_GPU),
];

/// tritonserver's help headings, in its order.
const HEADINGS: [&str; 17] = [
    "Server",
    "Logging",
    "Model Repository",
    "HTTP",
    "GRPC",
    "Sagemaker",
    "Vertex",
    "Metrics",
    "Tracing",
    "Backend",
    "Repository Agent",
    "Response Cache",
    "Rate Limiter",
    "Memory/Device Management",
    "Shared Memory",
    "DEPRECATED",
    "Tessera",
];

/// `command` with every flag of the table, each taking a value (a bare flag means `true`) and repeatable,
/// and every flag under tritonserver's headings in its order (clap lists headings in the order their first
/// flag was added, so the flags are added again sorted by heading).
pub fn add_to(command: Command) -> Command {
    let command = command.args(FLAGS.iter().map(table_arg));
    let rank = |arg: &Arg| {
        let heading = arg.get_help_heading().unwrap_or_default();
        HEADINGS.iter().position(|h| *h == heading).unwrap_or(HEADINGS.len())
    };
    let mut args: Vec<Arg> = command.get_arguments().cloned().collect();
    args.sort_by_key(rank);
    // A flag given twice takes its last value, as tritonserver (getopt) does: KServe appends an
    // InferenceService's args to its runtime's, so a user overrides a runtime's flag by repeating it.
    let mut sorted = Command::new(command.get_name().to_string()).args_override_self(true);
    if let Some(version) = command.get_version() {
        sorted = sorted.version(version.to_string());
    }
    if let Some(about) = command.get_about() {
        sorted = sorted.about(about.clone());
    }
    sorted.args(args)
}

fn table_arg(flag: &Flag) -> Arg {
    {
        let help = match flag.effect {
            Effect::Ignored(why) => format!("Accepted for tritonserver's command lines; no effect: {why}."),
            Effect::RefusedWhenTrue(why) => {
                format!("Accepted for tritonserver's command lines where it asks for nothing: {why}.")
            }
        };
        Arg::new(flag.name)
            .long(flag.name)
            .help_heading(flag.heading)
            .help(help)
            .value_name("VALUE")
            .num_args(0..=1)
            .default_missing_value("true")
            .action(ArgAction::Append)
    }
}

/// The log lines the given table flags call for, one per flag; or the refusal of one that asks for
/// something Tessera does not do.
pub fn notices(matches: &ArgMatches) -> Result<Vec<String>, String> {
    let mut notices = Vec::new();
    for flag in FLAGS {
        let Some(values) = matches.get_many::<String>(flag.name) else { continue };
        let values: Vec<&String> = values.collect();
        match flag.effect {
            Effect::Ignored(why) => notices.push(format!("--{} has no effect in Tessera: {why}", flag.name)),
            Effect::RefusedWhenTrue(why) => {
                if let Some(value) = values.iter().find(|value| is_true(value)) {
                    return Err(format!("--{}={value}: {why}", flag.name));
                }
            }
        }
    }
    Ok(notices)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Result<Vec<String>, String> {
        let command = add_to(Command::new("tessera"));
        notices(&command.try_get_matches_from(std::iter::once(&"tessera").chain(args)).expect("the flags parse"))
    }

    #[test]
    fn ignored_flags_say_so_once_and_refused_ones_only_when_they_ask_for_something() {
        let said = check(&["--http-thread-count=8", "--pinned-memory-pool-byte-size", "0", "--allow-sagemaker=false"]);
        let said = said.expect("nothing here is refused");
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with("--http-thread-count has no effect"), "{said:?}");
        assert!(check(&["--allow-sagemaker"]).unwrap_err().contains("SageMaker"));
        assert!(check(&["--grpc-use-ssl=1"]).unwrap_err().contains("TLS"));
    }
}
