//! `tessera healthcheck`: asks a running server whether it is ready (or live), for container health checks
//! and Kubernetes exec probes in an image that has neither a shell nor curl. It exits 0 when the endpoint
//! answers 200 and 1 otherwise, saying why on standard error.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

#[derive(Debug, Parser)]
#[command(name = "tessera healthcheck", about = "Exit 0 if the server on this machine is ready (or live), 1 if not")]
pub struct Healthcheck {
    /// The server's HTTP address.
    #[arg(long, default_value = "127.0.0.1")]
    pub http_address: IpAddr,

    /// The server's HTTP port.
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,

    /// Ask `/v2/health/live` instead of `/v2/health/ready`.
    #[arg(long)]
    pub live: bool,

    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub timeout_secs: u64,
}

impl Healthcheck {
    /// Whether the command line names this subcommand (`tessera healthcheck …`).
    pub fn requested() -> bool {
        std::env::args_os().nth(1).is_some_and(|first| first == "healthcheck")
    }

    /// Parses `tessera healthcheck …`, asks the server, and says how it went.
    pub fn run_from_command_line() -> ExitCode {
        let check = Healthcheck::parse_from(std::env::args_os().skip(1));
        let path = if check.live { "/v2/health/live" } else { "/v2/health/ready" };
        let address = SocketAddr::new(check.http_address, check.http_port);
        let asked = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|runtime| {
                runtime.block_on(async {
                    match tokio::time::timeout(Duration::from_secs(check.timeout_secs), status_of(address, path)).await
                    {
                        Ok(status) => status,
                        Err(_) => Err(format!("no answer within {} s", check.timeout_secs)),
                    }
                })
            });
        match asked {
            Ok(200) => ExitCode::SUCCESS,
            Ok(status) => {
                eprintln!("http://{address}{path} answered {status}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("http://{address}{path}: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

/// The status code of a GET of `path` on the HTTP server at `address`.
async fn status_of(address: SocketAddr, path: &str) -> Result<u16, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, address.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    Ok(response.status().as_u16())
}
