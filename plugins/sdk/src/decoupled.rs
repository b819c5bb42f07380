//! Decoupled models: a plugin that answers a request with any number of responses over time, as Triton's
//! decoupled models do. It implements [`DecoupledModel`] instead of [`Model`](crate::Model) and is exported
//! with [`export_decoupled!`](crate::export_decoupled); its config must say
//! `model_transaction_policy { decoupled: true }` (the default `auto_complete_config` declares it, so a
//! config that says `false` fails to load with the reason). Any plugin can read the many responses of a
//! decoupled model it calls with [`infer_stream`].

use crate::bindings::tessera::backend::streaming::{self, ResponseSender};
use crate::{Args, Request, Response};

/// A decoupled model plugin. One value lives in each instance, as for [`Model`](crate::Model).
pub trait DecoupledModel: Sized + 'static {
    /// Completes the configuration; the default declares the model decoupled.
    fn auto_complete_config(config_json: String) -> Result<String, String> {
        declare_decoupled(&config_json)
    }

    /// Builds one instance. An error fails the model's load with that message.
    fn initialize(args: &Args) -> Result<Self, String>;

    /// Answers one request through `sender`: any number of responses, then a final one or
    /// [`Sender::finish`]. The sender may be kept and used from a later call, until the request's execute
    /// timeout. An error ends the request with that message, unless it is already complete.
    fn execute(&mut self, request: Request, sender: Sender) -> Result<(), String>;

    /// Called once before the instance is dropped.
    fn finalize(&mut self) {}
}

/// Where one request's responses go.
pub struct Sender(ResponseSender);

impl Sender {
    /// The sender of the request at `index` of the running `execute` call.
    pub fn of_request(index: usize) -> Result<Self, String> {
        let index = u32::try_from(index).map_err(|_| format!("no request {index}"))?;
        streaming::sender(index).map(Sender)
    }

    /// Sends one response; more may follow.
    pub fn send(&self, response: Response) -> Result<(), String> {
        self.0.send(Some(response), false)
    }

    /// Sends the request's last response, completing it.
    pub fn send_final(&self, response: Response) -> Result<(), String> {
        self.0.send(Some(response), true)
    }

    /// Completes the request without another response.
    pub fn finish(&self) -> Result<(), String> {
        self.0.send(None, true)
    }

    /// Sends an error for the request; `last` completes it.
    pub fn send_error(&self, message: &str, last: bool) -> Result<(), String> {
        self.0.send_error(message, last)
    }

    /// Whether the client has gone away: nothing more will be delivered.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// Runs `request` on the newest ready version of `model`, as [`infer`](crate::infer) does, for a callee that
/// may be decoupled: its responses in order, each an error response as `Err` (one response from a model that
/// is not decoupled; a callee that ends with the final flag alone gives a last response with no outputs).
/// `Err` when the call cannot start.
pub fn infer_stream(model: &str, request: Request) -> Result<impl Iterator<Item = Result<Response, String>>, String> {
    let stream = streaming::infer_stream(model, "", request)?;
    Ok(std::iter::from_fn(move || stream.next()))
}

/// `config_json` with `model_transaction_policy.decoupled` set to true; an error if the config sets it false.
pub fn declare_decoupled(config_json: &str) -> Result<String, String> {
    let mut config: serde_json::Value =
        serde_json::from_str(config_json).map_err(|e| format!("the model configuration is not JSON: {e}"))?;
    let name = config.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
    let object = config.as_object_mut().ok_or("the model configuration is not a JSON object")?;
    let policy = object.entry("model_transaction_policy").or_insert_with(|| serde_json::json!({}));
    if policy.get("decoupled").and_then(|d| d.as_bool()) == Some(false) {
        return Err(format!(
            "model '{name}' is a decoupled model (it answers through response senders) but its configuration sets \
             model_transaction_policy {{ decoupled: false }}"
        ));
    }
    policy["decoupled"] = serde_json::Value::Bool(true);
    serde_json::to_string(&config).map_err(|e| e.to_string())
}
