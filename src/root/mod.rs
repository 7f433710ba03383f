//! The cache root: where it is ([`place`]), and what the launches sharing
//! one root share: the lock around keepwrap's own work on it, the markers
//! of the launches running on it now, and the statistics kept across
//! launches.

pub mod lock;
pub mod place;
pub mod running;
pub mod stats;
