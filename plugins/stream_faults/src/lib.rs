//! A decoupled plugin that misbehaves on request, for the tests of how the server copes. Input `MODE`
//! (INT32 `[1]`) picks what it does; each response carries `OUTPUT` (INT32 `[1]`) = the response's index:
//! - 0: sends two responses and never the final flag, keeping the sender (the request ends at the execute
//!   timeout with an error);
//! - 1: sends one response and the final flag, then sends again and logs the error it gets;
//! - 2: sends responses until the client goes away (up to a million), then logs how many it sent;
//! - 3: sends one response, then traps;
//! - 4: drops the sender without the final flag;
//! - 5: sends an error response, then a response and the final flag;
//! - 6: sends one response, then keeps the sender and returns;
//! - 7: completes every request kept by mode 6 (`OUTPUT` = 6, then the final flag), then its own.

use tessera_plugin::{log, Args, DecoupledModel, LogLevel, Request, Response, Sender, Tensor};

struct StreamFaults {
    /// Senders kept past their `execute` call (mode 0).
    kept: Vec<Sender>,
    /// Senders kept for a later call to complete (mode 6).
    waiting: Vec<Sender>,
}

fn numbered(index: i32) -> Response {
    Response::new(vec![Tensor::new("OUTPUT", [1], &[index])])
}

impl DecoupledModel for StreamFaults {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(StreamFaults { kept: Vec::new(), waiting: Vec::new() })
    }

    fn execute(&mut self, request: Request, sender: Sender) -> Result<(), String> {
        let mode = request.input("MODE")?.values::<i32>()?.first().copied().unwrap_or_default();
        match mode {
            0 => {
                sender.send(numbered(0))?;
                sender.send(numbered(1))?;
                self.kept.push(sender);
            }
            1 => {
                sender.send(numbered(0))?;
                sender.finish()?;
                if let Err(e) = sender.send(numbered(1)) {
                    log(LogLevel::Warn, &format!("send after final refused: {e}"));
                }
            }
            2 => {
                let mut sent = 0;
                while sent < 1_000_000 && !sender.is_cancelled() {
                    if sender.send(numbered(sent)).is_err() {
                        break;
                    }
                    sent += 1;
                }
                log(LogLevel::Warn, &format!("client went away after {sent} responses"));
            }
            3 => {
                sender.send(numbered(0))?;
                panic!("mode 3 traps after one response");
            }
            4 => sender.send(numbered(0))?,
            5 => {
                sender.send_error("the first response failed", false)?;
                sender.send_final(numbered(1))?;
            }
            6 => {
                sender.send(numbered(0))?;
                self.waiting.push(sender);
            }
            7 => {
                for kept in self.waiting.drain(..) {
                    kept.send_final(numbered(6))?;
                }
                sender.send_final(numbered(7))?;
            }
            other => return Err(format!("unknown MODE {other}")),
        }
        Ok(())
    }
}

tessera_plugin::export_decoupled!(StreamFaults);
