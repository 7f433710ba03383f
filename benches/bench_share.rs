//! Benchmark of the share's read side: four nodes of a TP4/EP4 launch (one
//! rank each) have published one rank file of 2,000 entries each (FlashInfer
//! 0.7 keys and values, 1,500 MoE entries of each rank's own plus 500 dense
//! entries every rank shares) into a share on local disk; building the union
//! (read every manifest and file, verify size and sha256, parse, merge,
//! render with `_generation`) is timed many times.
//!
//!     cargo bench --bench bench_share -- [ITERATIONS] [SHARE_PARENT_DIR]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use keepwrap::share::{gather, publish_to, Gathered, Node, Publication};
use keepwrap::unify::Outcome;

const NODES: u32 = 4;

mod common;

use common::{process_cpu, rank_file, ENTRIES};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let iterations: usize = args.first().map_or(100, |s| s.parse().expect("ITERATIONS"));
    let parent = args.get(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let share = parent.join(format!("keepwrap-bench-share-{}", std::process::id()));
    std::fs::create_dir_all(&share).unwrap();
    let cluster = "b".repeat(64);
    let mut input = 0;
    for rank in 0..NODES {
        let bytes = rank_file(rank as usize, 64);
        input += bytes.len();
        let p = Publication {
            cluster: cluster.clone(),
            node: Node {
                nnodes: NODES,
                rank,
            },
            files: vec![(
                format!("0.7.2/sm121/0123456789abcdef/rank_tp{rank}_pp0_dp0.json"),
                bytes,
            )],
        };
        publish_to(&share, &p, keepwrap::engine::SGLANG).unwrap();
    }
    let me = Node {
        nnodes: NODES,
        rank: 0,
    };
    let run = || match gather(&share, &cluster, me, keepwrap::engine::SGLANG).unwrap() {
        Gathered::Complete(dirs) => match &dirs[0].outcome {
            Outcome::Unified(u) => (u.entries, u.bytes.len()),
            Outcome::Leave(r) => panic!("{r}"),
        },
        Gathered::Incomplete(m) => panic!("{m:?}"),
    };
    let (entries, output) = run();
    let mut times: Vec<Duration> = Vec::with_capacity(iterations);
    let mut cpu: Vec<Duration> = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let (t, c) = (Instant::now(), process_cpu());
        std::hint::black_box(run());
        times.push(t.elapsed());
        cpu.push(process_cpu() - c);
    }
    times.sort();
    cpu.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "share {}: {NODES} nodes x {ENTRIES} entries, {:.1} MiB published; union {entries} entries, {:.1} MiB; {iterations} iterations",
        share.display(),
        input as f64 / (1 << 20) as f64,
        output as f64 / (1 << 20) as f64,
    );
    println!(
        "read + verify + unify: median {:.2} ms, p95 {:.2} ms (min {:.2}, max {:.2})",
        ms(times[times.len() / 2]),
        ms(times[(times.len() * 95 / 100).min(times.len() - 1)]),
        ms(times[0]),
        ms(times[times.len() - 1]),
    );
    // CPU time (all threads) is what other load on the machine inflates
    // least; wall time is what a boot waits for.
    println!(
        "  cpu time (all threads): median {:.2} ms, p95 {:.2} ms",
        ms(cpu[cpu.len() / 2]),
        ms(cpu[(cpu.len() * 95 / 100).min(cpu.len() - 1)]),
    );
    std::fs::remove_dir_all(&share).unwrap();
}
