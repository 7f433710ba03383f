//! inotify over the cache tree.
