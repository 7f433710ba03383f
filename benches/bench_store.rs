//! Benchmarks of the store and of `keepwrap status`:
//!
//! - restore: 8 rank files of 200 KB, signed for launch A, stored (by a
//!   prune for launch B), then restored for A; store + restore repeated,
//!   the restore (verify bytes, rename the entry, move 16 files, fsync)
//!   timed alone;
//! - status: 10,000 cache files in place (1,250 sets of 8, each signed for
//!   its own launch), `keepwrap status` (the binary, text output to
//!   /dev/null) and `keepwrap status --json` timed end to end.
//!
//!     cargo bench --bench bench_store -- [ITERATIONS]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keepwrap::cache;
use keepwrap::store::Store;

fn fp(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

fn rank_body(rank: usize, bytes: usize) -> String {
    let mut s = String::from("{\n  \"_metadata\": {\"flashinfer_version\": \"0.7.2\"},\n");
    let mut i = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "  \"('op', 'R', (({i}, 7168),), ({rank},))\": [\"R\", [8, {i}], \"median\", {{\"time_ms\": 0.0123}}],\n"
        ));
        i += 1;
    }
    s.push_str("  \"_generation\": \"00\"\n}\n");
    s
}

fn write_ranks(root: &Path, dir: &str, n: usize, bytes: usize) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).unwrap();
    for r in 0..n {
        std::fs::write(
            d.join(format!("rank_tp{r}_pp0_dp0.json")),
            rank_body(r, bytes),
        )
        .unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("keepwrap")
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let t = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("BENCH_STORE_KEEP").map(PathBuf::from);

    // --- restore 8 rank files -------------------------------------------
    let root = t.path().join("restore");
    write_ranks(&root, "0.7.2/sm121/0123456789abcdef", 8, 200_000);
    let (a, b) = (fp('a'), fp('b'));
    cache::sign(
        &root,
        keepwrap::engine::SGLANG,
        &keepwrap::digest::Fingerprint::parse(&a).unwrap(),
    )
    .unwrap();
    let store = Store::open(&root, keepwrap::engine::SGLANG).unwrap();
    let mut times = Vec::new();
    for _ in 0..iters {
        cache::prune_stashing(
            &root,
            keepwrap::engine::SGLANG,
            &keepwrap::digest::Fingerprint::parse(&b).unwrap(),
            &mut |fd, set| store.stash(fd, set),
        )
        .unwrap();
        let t0 = Instant::now();
        let r = store
            .restore(&keepwrap::digest::Fingerprint::parse(&a).unwrap())
            .expect("restored");
        times.push(t0.elapsed());
        assert_eq!(r.paths.len(), 8);
    }
    println!(
        "restore 8 rank files (200 KB each): median {} (min {}, max {}) over {iters}",
        ms(median(times.clone())),
        ms(*times.iter().min().unwrap()),
        ms(*times.iter().max().unwrap())
    );
    // Anchors, same run: what verifying every byte costs on its own (read
    // and sha256 of the 8 files; and their JSON check).
    let dir = root.join("0.7.2/sm121/0123456789abcdef");
    let (mut hash, mut parse) = (Vec::new(), Vec::new());
    for _ in 0..iters {
        let t0 = Instant::now();
        let files: Vec<Vec<u8>> = (0..8)
            .map(|r| std::fs::read(dir.join(format!("rank_tp{r}_pp0_dp0.json"))).unwrap())
            .collect();
        for f in &files {
            std::hint::black_box(cache::sha256_hex(f));
        }
        hash.push(t0.elapsed());
        let t0 = Instant::now();
        for f in &files {
            std::hint::black_box(cache::json_object_entries(f).is_ok());
        }
        parse.push(t0.elapsed());
    }
    println!(
        "  anchors: read + sha256 of the 8 files median {}; their JSON check median {}",
        ms(median(hash)),
        ms(median(parse))
    );

    // --- status over 10,000 files ---------------------------------------
    let root = t.path().join("status");
    let sets = 1_250;
    let stage = t.path().join("stage");
    for s in 0..sets {
        let dir = format!("0.7.2/sm121/{s:016x}");
        let _ = std::fs::remove_dir_all(&stage);
        write_ranks(&stage, &dir, 8, 2_000);
        let f = format!("{:064x}", s + 1);
        cache::sign(
            &stage,
            keepwrap::engine::SGLANG,
            &keepwrap::digest::Fingerprint::parse(&f).unwrap(),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("0.7.2/sm121")).unwrap();
        std::fs::rename(stage.join(&dir), root.join(&dir)).unwrap();
        // and the set's manifest
        let sets = root.join(".keepwrap/sets");
        std::fs::create_dir_all(&sets).unwrap();
        let m = format!("{f}.json");
        std::fs::rename(stage.join(".keepwrap/sets").join(&m), sets.join(&m)).unwrap();
    }
    if let Some(k) = &keep {
        // Leave the 10,000-file tree for profiling.
        let _ = Command::new("cp").arg("-a").arg(&root).arg(k).status();
    }
    let bin = binary();
    // Write back the new tree first, so that its flush is not timed.
    let _ = Command::new("sync").status();
    for args in [&["status"][..], &["status", "--json"][..]] {
        let mut times = Vec::new();
        // One warm-up run.
        let _ = Command::new(&bin)
            .args(args)
            .arg("--cache-dir")
            .arg(&root)
            .stdout(Stdio::null())
            .status();
        for _ in 0..iters.min(10) {
            let t0 = Instant::now();
            let st = Command::new(&bin)
                .args(args)
                .arg("--cache-dir")
                .arg(&root)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            times.push(t0.elapsed());
            assert!(st.success());
        }
        println!(
            "keepwrap {} over {} files: median {} (min {})",
            args.join(" "),
            sets * 8,
            ms(median(times.clone())),
            ms(*times.iter().min().unwrap())
        );
    }
}
