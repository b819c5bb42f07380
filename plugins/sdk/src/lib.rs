//! The Rust SDK for Tessera model plugins. A plugin is a type that implements [`Model`]: `initialize`
//! builds it once per instance from the facts Triton would pass, `execute` answers one request at a time
//! (or a whole batch, if it overrides `execute_batch`), and [`export!`] turns it into the component that
//! `wit/backend.wit` describes. A decoupled model (many responses per request) implements
//! [`DecoupledModel`] and is exported with [`export_decoupled!`]. Tensors are read and made as typed slices ([`Tensor::values`],
//! [`Tensor::new`], [`Tensor::strings`] for BYTES); a large tensor the plugin only passes on (to its
//! response or to another model with [`infer`]) stays in the host and is never copied.
//!
//! ```ignore
//! use tessera_plugin::{Args, Model, Request, Response, Tensor};
//!
//! struct Double;
//!
//! impl Model for Double {
//!     fn initialize(_args: &Args) -> Result<Self, String> {
//!         Ok(Double)
//!     }
//!
//!     fn execute(&mut self, request: Request) -> Result<Response, String> {
//!         let x = request.input("X")?;
//!         let doubled: Vec<f32> = x.values::<f32>()?.iter().map(|v| v * 2.0).collect();
//!         Ok(Response::new(vec![Tensor::new("Y", x.shape.clone(), &doubled)]))
//!     }
//! }
//!
//! tessera_plugin::export!(Double);
//! ```

mod decoupled;
mod model;
mod request;
mod tensor;

#[doc(hidden)]
pub mod runtime;

/// The generated bindings of `wit/backend.wit`, for what the SDK does not wrap.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "backend",
        pub_export_macro: true,
        export_macro_name: "export_backend",
        default_bindings_module: "tessera_plugin::bindings",
    });
}

pub use bindings::tessera::backend::host::{log, model_ready};
pub use bindings::tessera::backend::types::{
    DataType, LogLevel, ParameterValue, Request, Response, Tensor, TensorBytes, TensorData,
};
pub use decoupled::{declare_decoupled, infer_stream, DecoupledModel, Sender};
pub use model::{Args, Model};
pub use request::infer;
pub use tensor::{Element, INLINE_MAX};

/// Exports a [`Model`] type as the plugin's component: `tessera_plugin::export!(MyModel);` once, at the
/// top level of the crate.
#[macro_export]
macro_rules! export {
    ($model:ty) => {
        $crate::__export_served!($model, $crate::Model, $crate::runtime::Plain<$model>, $crate::runtime::Plain);
    };
}

/// Exports a [`DecoupledModel`] type as the plugin's component: `tessera_plugin::export_decoupled!(MyModel);`.
#[macro_export]
macro_rules! export_decoupled {
    ($model:ty) => {
        $crate::__export_served!(
            $model,
            $crate::DecoupledModel,
            $crate::runtime::Decoupled<$model>,
            $crate::runtime::Decoupled
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_served {
    ($model:ty, $kind:path, $served:ty, $wrap:path) => {
        struct __TesseraPlugin;

        impl $crate::bindings::Guest for __TesseraPlugin {
            fn auto_complete_config(config_json: String) -> Result<String, String> {
                <$model as $kind>::auto_complete_config(config_json)
            }

            fn initialize(args: Vec<(String, String)>) -> Result<(), String> {
                $crate::runtime::initialize::<$served>(
                    <$model as $kind>::initialize(&$crate::Args::new(args)).map($wrap),
                )
            }

            fn execute(requests: Vec<$crate::Request>) -> Vec<Result<$crate::Response, String>> {
                $crate::runtime::execute::<$served>(requests)
            }

            fn finalize() {
                $crate::runtime::finalize::<$served>()
            }
        }

        $crate::bindings::export_backend!(__TesseraPlugin with_types_in $crate::bindings);
    };
}
