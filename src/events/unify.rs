//! Events of unify.
