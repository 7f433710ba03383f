//! Events of share.
