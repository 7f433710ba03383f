//! The child: spawn, signals, reaping, exit status.
