//! The glue [`export!`](crate::export) and [`export_decoupled!`](crate::export_decoupled) expand to: it keeps
//! the instance's one model value between calls. A component instance is single-threaded and never
//! re-entered, so a thread-local cell is all it needs.

use std::any::Any;
use std::cell::RefCell;

use crate::{DecoupledModel, Model, Request, Response, Sender};

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// What the exports call on the instance's model, whichever kind it is.
pub trait Served: 'static {
    fn execute_all(&mut self, requests: Vec<Request>) -> Vec<Result<Response, String>>;
    fn finalize(&mut self);
}

/// A [`Model`]: one response per request.
pub struct Plain<M>(pub M);

impl<M: Model> Served for Plain<M> {
    fn execute_all(&mut self, requests: Vec<Request>) -> Vec<Result<Response, String>> {
        self.0.execute_batch(requests)
    }

    fn finalize(&mut self) {
        self.0.finalize()
    }
}

/// A [`DecoupledModel`]: responses through each request's sender; the answer per request is only whether
/// `execute` failed.
pub struct Decoupled<M>(pub M);

impl<M: DecoupledModel> Served for Decoupled<M> {
    fn execute_all(&mut self, requests: Vec<Request>) -> Vec<Result<Response, String>> {
        let mut answers = Vec::with_capacity(requests.len());
        for (index, request) in requests.into_iter().enumerate() {
            let answer = Sender::of_request(index).and_then(|sender| self.0.execute(request, sender));
            answers.push(answer.map(|()| Response { outputs: Vec::new() }));
        }
        answers
    }

    fn finalize(&mut self) {
        self.0.finalize()
    }
}

pub fn initialize<S: Served>(model: Result<S, String>) -> Result<(), String> {
    let model = model?;
    INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(model)));
    Ok(())
}

pub fn execute<S: Served>(requests: Vec<Request>) -> Vec<Result<Response, String>> {
    INSTANCE.with(|slot| match slot.borrow_mut().as_mut().and_then(|model| model.downcast_mut::<S>()) {
        Some(model) => model.execute_all(requests),
        None => requests.iter().map(|_| Err("the plugin was not initialised".to_string())).collect(),
    })
}

pub fn finalize<S: Served>() {
    let model = INSTANCE.with(|slot| slot.borrow_mut().take());
    if let Some(mut model) = model.and_then(|model| model.downcast::<S>().ok()) {
        model.finalize();
    }
}
