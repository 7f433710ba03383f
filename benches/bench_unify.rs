//! Benchmark of keepwrap::unify: 8 rank files of 2,000 entries each (FlashInfer
//! 0.7 keys and values, 1,500 EP entries of each rank's own plus 500 dense
//! entries every rank shares), unified (parse + merge + render + generation)
//! many times.
//!
//!     cargo bench --bench bench_unify -- [ITERATIONS] [--parts]

use std::time::{Duration, Instant};

use keepwrap::unify::{render, unify, Outcome, RankFile};
use serde_json::Value;

const RANKS: usize = 8;

mod common;

use common::{process_cpu, rank_file, ENTRIES};

fn files() -> Vec<RankFile> {
    (0..RANKS)
        .map(|rank| RankFile {
            name: format!("rank_tp{rank}_pp0_dp0.json"),
            bytes: rank_file(rank, 32),
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let show_parts = args.iter().any(|a| a == "--parts");
    let iterations: usize = args
        .iter()
        .find(|a| *a != "--parts")
        .map(|s| s.parse().expect("ITERATIONS is a number"))
        .unwrap_or(200);
    let files = files();
    let input: usize = files.iter().map(|f| f.bytes.len()).sum();

    let (entries, output) = match unify(&files, keepwrap::engine::SGLANG) {
        Outcome::Unified(u) => (u.entries, u.bytes.len()),
        Outcome::Leave(reason) => panic!("{reason}"),
    };
    let mut times: Vec<Duration> = Vec::with_capacity(iterations);
    let mut cpu: Vec<Duration> = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let (start, start_cpu) = (Instant::now(), process_cpu());
        let outcome = unify(std::hint::black_box(&files), keepwrap::engine::SGLANG);
        times.push(start.elapsed());
        cpu.push(process_cpu() - start_cpu);
        std::hint::black_box(outcome);
    }
    times.sort();
    cpu.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = times[times.len() / 2];
    let p95 = times[(times.len() * 95 / 100).min(times.len() - 1)];
    println!(
        "input {RANKS} files, {:.1} MiB; union {entries} entries, {:.1} MiB; {iterations} iterations",
        input as f64 / (1 << 20) as f64,
        output as f64 / (1 << 20) as f64,
    );
    println!(
        "unify {RANKS} x {ENTRIES} entries: median {:.2} ms, p95 {:.2} ms (min {:.2}, max {:.2})",
        ms(median),
        ms(p95),
        ms(times[0]),
        ms(times[times.len() - 1]),
    );
    // CPU time (all threads) is what the machine's other load does not
    // inflate much; wall time is what a boot waits for.
    println!(
        "  cpu time (all threads): median {:.2} ms, p95 {:.2} ms",
        ms(cpu[cpu.len() / 2]),
        ms(cpu[(cpu.len() * 95 / 100).min(cpu.len() - 1)]),
    );
    if show_parts {
        parts(&files);
    }
}

/// Where the time goes, single-threaded: serde_json trees of the 8 files,
/// lexing alone, and `render` (with `_generation`) of one rank file.
fn parts(files: &[RankFile]) {
    let n = 20;
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e3 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        for f in files {
            std::hint::black_box(serde_json::from_slice::<Value>(&f.bytes).unwrap());
        }
    }
    println!("  parse {RANKS} files into Values: {:.2} ms", per(t));
    let t = Instant::now();
    for _ in 0..n {
        for f in files {
            let v: serde::de::IgnoredAny = serde_json::from_slice(&f.bytes).unwrap();
            std::hint::black_box(v);
        }
    }
    println!("  lex {RANKS} files only: {:.2} ms", per(t));
    let v: serde_json::Map<String, Value> = serde_json::from_slice(&files[0].bytes).unwrap();
    let entries: Vec<(&str, &Value)> = v
        .iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(render(v.get("_metadata"), entries.iter().copied()));
    }
    println!("  render one file of {ENTRIES} entries: {:.2} ms", per(t));
}
