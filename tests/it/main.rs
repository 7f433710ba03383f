//! The black-box suite: one test binary, a module per promise. Filter by
//! module: `cargo test --test it store_crash::`.

mod common;
mod harden;

mod cli;
mod demo;
mod done_address;
mod durations;
mod entrypoint;
mod expert_parallel;
mod fake_engine;
mod fake_vllm;
mod faults;
mod fingerprint;
mod fingerprint_attack;
mod fingerprint_canonical;
mod fingerprint_e2e;
mod fingerprint_launch;
mod fingerprint_sglang_pairs;
mod fingerprint_shell_bash;
mod fingerprint_vllm;
mod keep;
mod kubernetes;
mod log_events;
mod malformed;
mod multi_node;
mod packaging;
mod peers;
mod policy;
mod progress;
mod scaling;
mod security;
mod signals;
mod stats;
mod status_saved;
mod store;
mod store_crash;
mod store_trash;
mod troubleshooting;
mod unify;
mod vllm_e2e;
mod watch_early;
