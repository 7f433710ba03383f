//! When a vLLM launch's tuning is done (`--done auto`): the first 200 of
//! `/health` on the API node; for a headless node, the head's `/health`
//! when the launch names the head and its port, else this node's rank
//! files landed and quiet; never its exit 0.

use crate::done::endpoint::Endpoint;
use crate::done::{Done, DoneError};
use crate::engine::vllm::launch::fingerprint::VllmLaunch;
use crate::engine::vllm::launch::{self as facts};

/// vLLM's default API port.
const DEFAULT_PORT: u16 = 8000;

/// `--done auto` for a vLLM server launch: the first 200 from `/health` on
/// its `--host`/`--port` (8000; loopback for a wildcard bind). A server on
/// a Unix socket (`--uds`) cannot be probed: Err says what to give.
pub(super) fn server_done(v: &VllmLaunch) -> Result<Done, DoneError> {
    let sizes = v.sizes();
    if sizes.headless {
        return headless_done(v, &sizes);
    }
    if v.option("--uds").is_some() {
        return Err(DoneError::UnixSocket);
    }
    // ssl.CERT_REQUIRED: the probe has no client certificate to give
    if v.option("--ssl-cert-reqs")
        .as_deref()
        .and_then(crate::done::endpoint::python_u16)
        == Some(2)
    {
        return Err(DoneError::ClientCertificate);
    }
    Ok(Done::Health(health(
        v.option("--host").as_deref().unwrap_or("127.0.0.1"),
        v,
    )))
}

/// `/health` on `host` (a wildcard bind probed on loopback) and the
/// launch's `--port` (8000).
fn health(host: &str, v: &VllmLaunch) -> Endpoint {
    let tls = crate::done::endpoint::serves_tls(|f| v.option(f));
    Endpoint::health(Some(host), v.option("--port").as_deref(), DEFAULT_PORT, tls)
}

/// How long a headless node's rank files must be quiet once they have all
/// landed: every local rank saves once, after a barrier, so they land
/// together and nothing follows. The default of `--headless-quiet`, which
/// replaces it ([`Done::headless_quiet`]).
const HEADLESS_QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// `--done auto` for a headless node (`--headless`), which serves nothing
/// (vLLM's `run_headless` starts only engine cores or workers, whose
/// readiness goes to the head, never to a port of this node) and needs no
/// `--port`. When the launch names the head (`--master-addr` for TP/PP
/// across nodes, `--data-parallel-address` for DP) and the API port
/// (`--port`, as the head's own launch says it), the head's `/health`;
/// else this node's expected rank files (layout C) landed and quiet. Never
/// a guessed 8000, which the head need not use (the node would never sign,
/// and the cluster would tune on every boot); never its exit 0.
fn headless_done(v: &VllmLaunch, sizes: &facts::ParallelSizes) -> Result<Done, DoneError> {
    let head = v
        .option("--master-addr")
        .or_else(|| v.option("--data-parallel-address"));
    if let Some(addr) = head.filter(|_| v.option("--port").is_some()) {
        return Ok(Done::HeadHealth(health(&addr, v)));
    }
    match sizes.local_rank_files() {
        Some(names) if !names.is_empty() => Ok(Done::RankFiles(names, HEADLESS_QUIET)),
        _ => Err(DoneError::HeadlessUnknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vllm::tests::launch;

    fn done(args: &str) -> Result<Done, DoneError> {
        server_done(&launch(args))
    }

    #[test]
    fn done_rules() {
        let health = |host: &str, port: u16| {
            Done::Health(Endpoint {
                host: host.into(),
                port,
                path: "/health".into(),
                tls: false,
            })
        };
        assert_eq!(done("vllm serve m"), Ok(health("127.0.0.1", 8000)));
        assert_eq!(
            done("vllm serve m --host 0.0.0.0 --port=9000"),
            Ok(health("127.0.0.1", 9000))
        );
        assert_eq!(done("vllm serve m --host ::1"), Ok(health("[::1]", 8000)));
        assert!(done("vllm serve m --uds /tmp/s").is_err());
        assert_eq!(
            done("vllm serve m --ssl-certfile c --ssl-keyfile k --port 9"),
            Ok(Done::Health(Endpoint {
                host: "127.0.0.1".into(),
                port: 9,
                path: "/health".into(),
                tls: true,
            }))
        );
        assert_eq!(
            done("vllm serve m --ssl-certfile c --ssl-keyfile k --ssl-cert-reqs 2"),
            Err(DoneError::ClientCertificate)
        );
        assert!(done("vllm serve m --ssl-certfile c --ssl-cert-reqs 1").is_ok());
        let files = |ranks: std::ops::Range<u64>, within: u64| {
            Ok(Done::RankFiles(
                ranks
                    .map(|r| format!("autotune_configs_dp{}_rank{r}.json", r / within))
                    .collect(),
                HEADLESS_QUIET,
            ))
        };
        // the head and its port named: the head's /health
        assert_eq!(
            done("vllm serve m -tp 2 -n 2 -r 1 --master-addr 10.0.0.1 --headless --port 8001"),
            Ok(Done::HeadHealth(Endpoint {
                host: "10.0.0.1".into(),
                port: 8001,
                path: "/health".into(),
                tls: false,
            }))
        );
        // no port: this node's own rank files, never a guessed 8000
        assert_eq!(
            done("vllm serve m -tp 2 -n 2 -r 1 --master-addr 10.0.0.1 --headless"),
            files(1..2, 2)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpl 2 -dpr 2 -dpa 10.0.0.1 --headless"),
            files(2..4, 1)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpl 2 -dpr 2 -tp 2 --headless"),
            files(4..8, 2)
        );
        assert_eq!(
            done("vllm serve m -dp 4 -dpr 2 -dpa 10.0.0.1 --headless"),
            Err(DoneError::HeadlessUnknown)
        );
        assert!(done("vllm serve m -dp 4 -dpr 2 --headless").is_err());
    }
}
