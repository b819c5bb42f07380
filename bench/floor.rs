//! The floor: a KServe v2 HTTP server that does no work, so that perf_analyzer against it measures what the
//! client and loopback cost on their own. It answers every request from answers captured from a real server
//! (bench/batching.py captures them from Tessera), keeps its connections alive, and counts the inferences it
//! served so that the statistics perf_analyzer reads before and after a window add up.
//!
//! Standard library only, one thread per connection and the least HTTP/1.1 that perf_analyzer speaks
//! (request line, Content-Length, keep-alive): the floor must cost less than any real server, and the
//! harness builds it with plain `rustc -O`, without crate downloads. It is a measuring stick, never a server.
//! Like Tessera by default (src/busy_poll.rs), it spins for up to `SPIN` before it sleeps, so that a request
//! arriving meanwhile does not pay for waking it. A floor that slept at once would pay that wake-up, which
//! Tessera does not, and would stop being a floor. Like Tessera it yields its core between polls: with one
//! spinning thread per connection, a floor that kept its core would, at concurrency 4 on 2 cores, starve
//! the client it measures (perf_analyzer then never settled against it).
//!
//!   floor PORT MODEL DIR    DIR holds `metadata`, `config` (JSON bodies) and `infer` (a whole HTTP response,
//!                     headers included, because binary outputs need their Inference-Header-Content-Length)

#[path = "floor_answers.rs"]
mod floor_answers;

use std::borrow::Cow;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection's thread spins for the next request before it sleeps: Tessera's default.
const SPIN: Duration = Duration::from_micros(100);

struct Answers {
    recorded: floor_answers::Recorded,
    served: AtomicU64,
}

fn main() {
    let (port, recorded) = floor_answers::from_command_line("floor");
    let answers = Arc::new(Answers { recorded, served: AtomicU64::new(0) });
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    for stream in listener.incoming().flatten() {
        let answers = answers.clone();
        std::thread::spawn(move || serve(stream, &answers));
    }
}

/// One connection: requests one after another until the client closes it.
fn serve(stream: TcpStream, answers: &Answers) {
    let _ = stream.set_nodelay(true);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(writer) = stream.try_clone() else { return };
    let (mut writer, mut reader) = (Spinning(writer), BufReader::new(Spinning(stream)));
    let mut body = Vec::new();
    while let Some(path) = read_request(&mut reader, &mut body) {
        let answer = answer(&path, answers);
        if writer.write_all(&answer).is_err() {
            return;
        }
    }
}

/// A non-blocking socket read by spinning for up to `SPIN`, then by sleeping until data comes. Both ends of
/// a connection share the non-blocking flag, so a write that finds the send buffer full sleeps too.
struct Spinning(TcpStream);

impl Spinning {
    fn blocking<T>(&mut self, io: impl FnOnce(&mut TcpStream) -> std::io::Result<T>) -> std::io::Result<T> {
        self.0.set_nonblocking(false)?;
        let result = io(&mut self.0);
        self.0.set_nonblocking(true)?;
        result
    }
}

impl Read for Spinning {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let start = Instant::now();
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock && start.elapsed() < SPIN => std::thread::yield_now(),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return self.blocking(|s| s.read(buf)),
                other => return other,
            }
        }
    }
}

impl Write for Spinning {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.write(buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => self.blocking(|s| s.write(buf)),
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads one request (line, headers, body) and returns its path; None when the connection ended. The body
/// goes to `body`, a buffer the connection keeps, so a large one is not allocated anew each time.
fn read_request(reader: &mut impl BufRead, body: &mut Vec<u8>) -> Option<String> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        if header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    body.resize(length, 0);
    reader.read_exact(body).ok()?;
    Some(path)
}

/// The answer to `path`; an inference's is the recorded one itself, not a copy (it can be megabytes).
fn answer<'a>(path: &str, answers: &'a Answers) -> Cow<'a, [u8]> {
    if path.ends_with("/infer") {
        answers.served.fetch_add(1, Ordering::Relaxed);
        return Cow::Borrowed(&answers.recorded.infer);
    }
    let body = if path.ends_with("/stats") {
        statistics(&answers.recorded.model, answers.served.load(Ordering::Relaxed))
    } else if path.ends_with("/config") {
        answers.recorded.config.clone()
    } else if path.starts_with("/v2/models/") {
        answers.recorded.metadata.clone()
    } else if path == "/v2" {
        br#"{"name":"floor","version":"0","extensions":["statistics"]}"#.to_vec()
    } else {
        Vec::new() // health
    };
    let mut response =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len())
            .into_bytes();
    response.extend_from_slice(&body);
    Cow::Owned(response)
}

/// Statistics in which every served inference succeeded in one execution of 1 µs.
fn statistics(model: &str, served: u64) -> Vec<u8> {
    let duration = format!(r#"{{"count":{served},"ns":{}}}"#, served * 1000);
    let none = r#"{"count":0,"ns":0}"#;
    format!(
        r#"{{"model_stats":[{{"name":"{model}","version":"1","last_inference":0,"inference_count":{served},"execution_count":{served},"inference_stats":{{"success":{d},"fail":{none},"queue":{d},"compute_input":{d},"compute_infer":{d},"compute_output":{d},"cache_hit":{none},"cache_miss":{none}}},"batch_stats":[{{"batch_size":1,"compute_input":{d},"compute_infer":{d},"compute_output":{d}}}],"memory_usage":[]}}]}}"#,
        d = duration
    )
    .into_bytes()
}
