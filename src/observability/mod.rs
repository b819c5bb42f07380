//! What the server tells its operators about itself: the log (levels, destination), the statistics and
//! Prometheus metrics that the scheduler records for every request, and the traces of sampled requests. The frontends only serve what this
//! module records; nothing here knows about a protocol.

pub mod logging;
pub mod metrics;
pub(crate) mod stats;
pub mod trace;
