//! Done to signed at scale: what keepwrap does when tuning is done (unify
//! each directory's rank files, then sign the set) over RANKS rank files of
//! 2,000 entries each (1,500 MoE entries of each rank's own, 500 shared),
//! in one directory; the time, and the bytes written (what this thread
//! passed to write(2), `/proc/thread-self/io`) against one union.
//!
//!     cargo bench --bench bench_done -- [RANKS] [RUNS]
//!
//! Defaults: 64 ranks, 5 runs, each on a fresh tree.

use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use common::{process_cpu, rank_file, ENTRIES};

const FP: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn written() -> u64 {
    std::fs::read_to_string("/proc/thread-self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ranks = args.first().copied().unwrap_or(64);
    let runs = args.get(1).copied().unwrap_or(5);
    let sub = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(sub).unwrap();
    let files: Vec<Vec<u8>> = (0..ranks).map(|r| rank_file(r, 32)).collect();
    let input: usize = files.iter().map(Vec::len).sum();
    let dir = "0.7.2/sm121/0123456789abcdef";
    let mut times = Vec::new();
    let mut signs = Vec::new();
    let mut restamps = Vec::new();
    let mut cpus = Vec::new();
    let mut bytes = 0;
    let mut union = 0;
    for _ in 0..runs {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join(dir)).unwrap();
        let rels: Vec<PathBuf> = (0..ranks)
            .map(|r| PathBuf::from(format!("{dir}/rank_tp{r}_pp0_dp0.json")))
            .collect();
        for (rel, b) in rels.iter().zip(&files) {
            std::fs::write(root.join(rel), b).unwrap();
        }
        nix::unistd::sync();
        let w0 = written();
        let c0 = process_cpu();
        let t0 = Instant::now();
        let u = keepwrap::unify::unify_tree(
            root,
            rels.iter().map(PathBuf::as_path),
            keepwrap::engine::SGLANG,
        );
        let t1 = Instant::now();
        // As the commit worker signs: at once, the stamps of the files
        // unify just wrote recorded once their change times settle (after
        // "signed", off the timed part; its bytes counted).
        let s = keepwrap::cache::sign_with(
            root,
            keepwrap::engine::SGLANG,
            &keepwrap::digest::Fingerprint::parse(FP).unwrap(),
            keepwrap::cache::Settle::Later,
        )
        .unwrap();
        times.push(t0.elapsed());
        signs.push(t1.elapsed());
        cpus.push(process_cpu() - c0);
        let r0 = Instant::now();
        if let Some(at) = s.settle_at {
            let wait = at.saturating_sub(keepwrap::cache::now_ns());
            std::thread::sleep(Duration::from_nanos(wait.max(0) as u64));
        }
        let c1 = process_cpu();
        let r = keepwrap::cache::sign_with(
            root,
            keepwrap::engine::SGLANG,
            &keepwrap::digest::Fingerprint::parse(FP).unwrap(),
            keepwrap::cache::Settle::Restamp,
        )
        .unwrap();
        restamps.push((r0.elapsed(), process_cpu() - c1));
        assert!(r.unchanged, "the restamp keeps the set");
        bytes = written() - w0;
        assert_eq!((u.rewritten, s.signed.len()), (1, ranks));
        union = std::fs::metadata(root.join(&rels[0])).unwrap().len();
    }
    times.sort();
    signs.sort();
    cpus.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "  of which sign: median {:.0} ms; cpu time (all threads) median {:.0} ms",
        ms(signs[signs.len() / 2]),
        ms(cpus[cpus.len() / 2])
    );
    restamps.sort();
    println!(
        "  then the stamps, once settled: median {:.0} ms after signed, of which cpu {:.0} ms",
        ms(restamps[restamps.len() / 2].0),
        ms(restamps[restamps.len() / 2].1)
    );
    println!(
        "done -> signed, {ranks} rank files x {ENTRIES} entries ({:.1} MiB in; union {:.1} MiB): median {:.0} ms (min {:.0}, max {:.0}) over {runs} runs; {:.1} MiB written ({:.2} unions)",
        mib(input as u64),
        mib(union),
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1]),
        mib(bytes),
        bytes as f64 / union as f64,
    );
}
