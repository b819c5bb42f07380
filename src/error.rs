//! The one error type every layer returns, and its mapping onto each protocol. The mapping lives here, once,
//! so that HTTP and gRPC always agree on what a failure means. Status codes follow what Triton answers.

use axum::http::StatusCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a model, or one of its versions, did not load: the message that the repository index, the log and a
/// failed load request show, naming the file (and line) at fault where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(String);

pub type LoadResult<T> = std::result::Result<T, LoadError>;

/// The message, to read as text.
impl std::ops::Deref for LoadError {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for LoadError {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<String> for LoadError {
    fn from(message: String) -> Self {
        LoadError(message)
    }
}

impl From<&str> for LoadError {
    fn from(message: &str) -> Self {
        LoadError(message.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The client sent something malformed or inconsistent with the model (400 / INVALID_ARGUMENT).
    #[error("{0}")]
    InvalidArgument(String),
    /// The named model or version does not exist (404 / NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// What the request would create exists already, e.g. a shared memory region (400 / ALREADY_EXISTS).
    #[error("{0}")]
    AlreadyExists(String),
    /// The model exists but cannot serve right now, e.g. it failed to load (400 / UNAVAILABLE, as Triton).
    #[error("{0}")]
    NotReady(String),
    /// The server is shutting down or overloaded (503 / UNAVAILABLE).
    #[error("{0}")]
    Unavailable(String),
    /// The feature is not built yet (501 / UNIMPLEMENTED).
    #[error("{0}")]
    Unimplemented(String),
    /// Something went wrong on the server side, e.g. a plugin trapped (500 / INTERNAL).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    /// The same kind of error, its message preceded by `context` and a colon.
    pub fn context(self, context: &str) -> Self {
        let prefixed = |message: String| format!("{context}: {message}");
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(prefixed(m)),
            Error::NotFound(m) => Error::NotFound(prefixed(m)),
            Error::NotReady(m) => Error::NotReady(prefixed(m)),
            Error::AlreadyExists(m) => Error::AlreadyExists(prefixed(m)),
            Error::Unavailable(m) => Error::Unavailable(prefixed(m)),
            Error::Unimplemented(m) => Error::Unimplemented(prefixed(m)),
            Error::Internal(m) => Error::Internal(prefixed(m)),
        }
    }

    pub fn http_status(&self) -> StatusCode {
        match self {
            Error::InvalidArgument(_) | Error::NotReady(_) | Error::AlreadyExists(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Unimplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            Error::InvalidArgument(_) => tonic::Code::InvalidArgument,
            Error::NotFound(_) => tonic::Code::NotFound,
            Error::AlreadyExists(_) => tonic::Code::AlreadyExists,
            Error::NotReady(_) | Error::Unavailable(_) => tonic::Code::Unavailable,
            Error::Unimplemented(_) => tonic::Code::Unimplemented,
            Error::Internal(_) => tonic::Code::Internal,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(error: Error) -> Self {
        tonic::Status::new(error.grpc_code(), error.to_string())
    }
}
