//! Events of done.
