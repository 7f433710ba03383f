//! What the launches sharing one cache root share: the lock around
//! keepwrap's own work on it, the markers of the launches running on it
//! now, and the statistics kept across launches.

pub mod lock;
pub mod running;
pub mod stats;
