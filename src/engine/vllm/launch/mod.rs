//! What keepwrap knows about vLLM and its FlashInfer autotune cache, as pure
//! functions of what they are given (argv, environment pairs, file names,
//! the bytes of a model's `config.json`): no file system, no process.
//!
//! The facts were read from vLLM 0.24.0-0.33.0 and FlashInfer 0.6.18 /
//! 0.7.2.post1 (`vllm/model_executor/warmup/flashinfer_autotune_cache.py`,
//! `kernel_warmup.py`, `vllm/envs.py`, `vllm/engine/arg_utils.py`,
//! `vllm/utils/argparse_utils.py`, `vllm/entrypoints/common/cli_args.py`).
//!
//! A file each:
//!
//! - `recognise.rs`, [`recognise`]: is a command a vLLM server launch, and
//!   where its engine arguments start;
//! - `positional.rs`, [`model_positional`], with `table.rs` (how many
//!   arguments each option of vLLM 0.33.0 takes): where `vllm serve`'s
//!   parser takes the model;
//! - `roots.rs`, [`autotune_root`], [`managed_store_root`],
//!   [`arch_component`]: where vLLM and FlashInfer keep the tactics, from the
//!   child's environment;
//! - `files.rs`, [`Layout`], [`FileKind`]: which files each vLLM release
//!   writes;
//! - `args.rs`, [`arg_roles`], [`FRONT_END_ARGS`], [`PER_NODE_ARGS`], and
//!   `env.rs`, [`VOLATILE_ENV`]: what must not enter a vLLM launch's
//!   fingerprint;
//! - `parallel.rs`, [`ParallelSizes`]: the world, and which ranks' files a
//!   node writes;
//! - `moe.rs`, [`moe_from_config`], [`launch_moe`]: whether a launch runs MoE
//!   layers, decided conservatively;
//! - `ray.rs`, [`ray_backend`]: whether the workers run under Ray.

mod args;
mod env;
mod files;
pub mod fingerprint;
mod moe;
mod parallel;
mod positional;
mod ray;
mod recognise;
mod roots;
mod table;

pub use args::*;
pub use env::*;
pub use files::*;
pub use moe::*;
pub use parallel::*;
pub use positional::*;
pub use ray::*;
pub use recognise::*;
pub use roots::*;

#[cfg(test)]
mod tests;
