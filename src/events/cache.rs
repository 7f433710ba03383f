//! Events of cache.
