//! Ray launches: `--distributed-executor-backend ray` (the model's workers
//! are Ray actors) and `--data-parallel-backend ray` (`-dpb ray`: the
//! engine cores of data parallelism are Ray actors).
//!
//! Read from vLLM 0.33.0 (`vllm/v1/executor/ray_executor_v2.py`,
//! `ray_utils.py`, `ray_env_utils.py`, `vllm/config/parallel.py`): the
//! workers run in processes Ray's raylet starts, on whichever nodes the
//! placement group puts them (ranks sorted driver node first, `PACK`), and
//! each writes its rank file to its own node's cache root, computed from
//! its own environment: the raylet's (that is, `ray start`'s on that node),
//! with the driver's variables filled in only where the node has none
//! (`os.environ.setdefault`). So from the command line keepwrap can tell
//! neither which rank files land on this node nor under which settings they
//! were tuned, and the other nodes' files are written where no keepwrap is
//! in front of vLLM.

use std::ffi::OsString;

use super::recognise::option_value_any;

/// The argument that makes a launch run its workers under Ray, in its long
/// spelling (`--distributed-executor-backend ray`, `--data-parallel-backend
/// ray` for `-dpb ray`): the last occurrence of each flag wins, as in
/// argparse. `None`: not a Ray launch (as far as the command line says: a
/// launch started inside a Ray placement group picks Ray by itself, which
/// no argument shows).
pub fn ray_backend(args: &[OsString]) -> Option<String> {
    [
        &["--distributed-executor-backend"][..],
        &["--data-parallel-backend", "-dpb"][..],
    ]
    .into_iter()
    .find(|flags| option_value_any(args, flags).is_some_and(|v| v == "ray"))
    .map(|flags| format!("{} ray", flags[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_ray_backends_in_every_spelling() {
        for (a, want) in [
            (
                &["m", "-tp", "16", "--distributed-executor-backend", "ray"][..],
                "--distributed-executor-backend ray",
            ),
            (
                &["--distributed_executor_backend=ray", "-tp", "2"][..],
                "--distributed-executor-backend ray",
            ),
            (
                &["m", "-dp", "4", "-dpb", "ray"][..],
                "--data-parallel-backend ray",
            ),
            (
                &["m", "--data-parallel-backend=ray"][..],
                "--data-parallel-backend ray",
            ),
            // the last occurrence wins
            (
                &[
                    "--distributed-executor-backend",
                    "mp",
                    "--distributed-executor-backend",
                    "ray",
                ][..],
                "--distributed-executor-backend ray",
            ),
        ] {
            assert_eq!(ray_backend(&args(a)).as_deref(), Some(want), "{a:?}");
        }
    }

    #[test]
    fn other_backends_are_not_ray() {
        for a in [
            &["m", "-tp", "2"][..],
            &["m", "--distributed-executor-backend", "mp"][..],
            &["m", "--distributed-executor-backend=uni"][..],
            &[
                "--distributed-executor-backend",
                "ray",
                "--distributed-executor-backend",
                "mp",
            ][..],
            &["m", "-dpb", "mp"][..],
            &["m", "--distributed-executor-backend"][..],
            &["m", "--distributed-executor-backend", "Ray"][..],
            &["m", "--served-model-name", "ray"][..],
            &[][..],
        ] {
            assert_eq!(ray_backend(&args(a)), None, "{a:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_panic() {
        use std::os::unix::ffi::OsStringExt;
        let a = vec![
            OsString::from_vec(vec![0xff, b'=', 0xfe]),
            OsString::from("-dpb"),
            OsString::from_vec(vec![0xff]),
        ];
        assert_eq!(ray_backend(&a), None);
    }
}
