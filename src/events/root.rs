//! Events of root.
