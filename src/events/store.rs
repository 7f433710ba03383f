//! Events of store.
