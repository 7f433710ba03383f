//! Benchmark of the nearest-launch comparison (`keepwrap explain`, the
//! launch-time "no cache for this launch" line): two launches of N
//! arguments that differ in one value, compared as argv and as canonical
//! SGLang launches, for N doubling from 15,000. Linear time shows as a ratio
//! near 2 from one row to the next (the first row is the anchor).
//!
//!     cargo bench --bench bench_explain -- [ITERATIONS]

use std::ffi::OsString;
use std::time::{Duration, Instant};

use keepwrap::engine::fingerprint::{Launch, Options, ProfileName};
use keepwrap::keeper::explain::diff;
use serde_json::{json, Value};

fn args(n: usize, changed: bool) -> Vec<String> {
    (0..n / 2)
        .flat_map(|i| {
            let v = if changed && i == 0 {
                "x".to_string()
            } else {
                i.to_string()
            };
            [format!("--flag-{i}"), v]
        })
        .collect()
}

fn canonical_inputs(n: usize, changed: bool) -> Value {
    let opts = Options {
        profile: ProfileName::Sglang,
        env_prefixes: vec![],
        volatile_env: vec![],
        ignored_args: vec![],
    };
    let argv: Vec<OsString> = ["python3", "-m", "sglang.launch_server"]
        .into_iter()
        .map(String::from)
        .chain(args(n, changed))
        .map(OsString::from)
        .collect();
    Launch::new(&opts, &argv, &[]).redacted_inputs()
}

fn median(iterations: usize, mut f: impl FnMut() -> usize) -> Duration {
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let iterations: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--bench")
        .map(|s| s.parse().expect("ITERATIONS is a number"))
        .unwrap_or(11);
    println!("arguments  argv diff (ms)  ratio  canonical diff (ms)  ratio");
    let mut prev: Option<(f64, f64)> = None;
    for n in [15_000, 30_000, 60_000, 120_000] {
        let (a, b) = (
            json!({"profile": "sglang", "argv": args(n, false), "env": {}}),
            json!({"profile": "sglang", "argv": args(n, true), "env": {}}),
        );
        let (ca, cb) = (canonical_inputs(n, false), canonical_inputs(n, true));
        assert_eq!(diff(&a, &b).len(), 1);
        assert_eq!(diff(&ca, &cb).len(), 1);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let argv = ms(median(iterations, || diff(&a, &b).len()));
        let canon = ms(median(iterations, || diff(&ca, &cb).len()));
        let ratio = |now: f64, before: Option<f64>| {
            before.map_or("anchor".to_string(), |b| format!("{:.2}", now / b))
        };
        println!(
            "{n:>9}  {argv:>14.1}  {:>5}  {canon:>19.1}  {:>5}",
            ratio(argv, prev.map(|p| p.0)),
            ratio(canon, prev.map(|p| p.1)),
        );
        prev = Some((argv, canon));
    }
}
