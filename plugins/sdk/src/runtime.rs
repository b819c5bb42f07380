//! The glue [`export!`](crate::export) expands to: it keeps the instance's one `Model` value between calls.
//! A component instance is single-threaded and never re-entered, so a thread-local cell is all it needs.

use std::any::Any;
use std::cell::RefCell;

use crate::{Args, Model, Request, Response};

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

pub fn initialize<M: Model>(args: Vec<(String, String)>) -> Result<(), String> {
    let model = M::initialize(&Args::new(args))?;
    INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(model)));
    Ok(())
}

pub fn execute<M: Model>(requests: Vec<Request>) -> Vec<Result<Response, String>> {
    INSTANCE.with(|slot| match slot.borrow_mut().as_mut().and_then(|model| model.downcast_mut::<M>()) {
        Some(model) => model.execute_batch(requests),
        None => requests.iter().map(|_| Err("the plugin was not initialised".to_string())).collect(),
    })
}

pub fn finalize<M: Model>() {
    let model = INSTANCE.with(|slot| slot.borrow_mut().take());
    if let Some(mut model) = model.and_then(|model| model.downcast::<M>().ok()) {
        model.finalize();
    }
}
