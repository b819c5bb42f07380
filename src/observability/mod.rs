//! What the server tells its operators about itself: the log (levels, destination) now, and the statistics,
//! metrics and traces that requests record below the scheduler. Frontends only serve what this records.

pub mod logging;
