//! Time prune over a tree of rank files none of which is for this launch:
//! `cargo run --release --example bench_prune -- [RANK_FILES] [MODE] [--stderr]`.
//!
//! Default 10,000 files (1,250 model directories x 8 ranks, 20 KB each, each
//! with a sidecar signed as a set of 8 for another launch). Prune runs as a
//! launch runs it: with the store (`.keepwrap/store`), after its recovery.
//! Modes:
//!
//! - (none): the sidecars carry a fake sha256, so every set is "changed
//!   after signing": nothing is stored, every directory goes to the trash;
//! - `--signed`: the sidecars are genuine, each directory signed by its own
//!   launch (the store holds one set per launch: one launch signs one set),
//!   so every set is whole and moves into the store;
//! - `--no-store`: `cache::prune` without a store (fake sha256: every file
//!   is simply "signed for another launch");
//! - `--unlink-only`, `--rename-only`: floors, no prune.
//!
//! Log lines are formatted as keepwrap formats them but written to a sink,
//! unless `--stderr` (then redirect stderr: `2>/dev/null`).

use std::fs;
use std::path::Path;
use std::time::Instant;

use keepwrap::cache::{self, Member, SetRecord, Sidecar};
use keepwrap::store::Store;

const THIS: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const OTHER: &str = "8c01d2e4aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn build(root: &Path, files: usize, signed: bool) {
    let mut body = String::from(
        "{\n  \"_metadata\": {\"flashinfer_version\": \"0.6.18\", \"gpu\": \"NVIDIA GB10\"},\n",
    );
    let mut i = 0;
    while body.len() < 20_000 {
        body.push_str(&format!(
            "  \"('op', 'Runner', (({i}, 7168), (8, 256)), ())\": [\"Runner\", [8, 34]],\n"
        ));
        i += 1;
    }
    body.push_str("  \"_generation\": \"00\"\n}");
    let sha = if signed {
        cache::sha256_hex(body.as_bytes())
    } else {
        "ab".repeat(32)
    };
    for m in 0..files.div_ceil(8) {
        let dir = format!("0.6.18/sm121/{m:016x}");
        fs::create_dir_all(root.join(&dir)).unwrap();
        let ranks = 8.min(files - m * 8);
        let members: Vec<Member> = (0..ranks)
            .map(|r| Member {
                path: format!("{dir}/rank_tp{r}_pp0_dp0.json"),
                sha256: sha.clone(),
                size: body.len() as u64,
            })
            .collect();
        // --signed: launch m+1 signed directory m.
        let own = format!("{:064x}", m + 1);
        let fp = if signed { own.as_str() } else { OTHER };
        let set = SetRecord {
            id: cache::set_id(fp, &members),
            members,
        };
        for r in 0..ranks {
            let path = format!("{dir}/rank_tp{r}_pp0_dp0.json");
            fs::write(root.join(&path), &body).unwrap();
            let sc = Sidecar {
                format: 1,
                keepwrap: "0.1.0".into(),
                fingerprint: fp.into(),
                path: path.clone(),
                sha256: sha.clone(),
                size: body.len() as u64,
                signed_at: 1_796_049_314,
                signed_at_utc: "2026-11-30T14:35:14Z".into(),
                set: set.clone(),
            };
            let launch = root.join(path.replace(".json", ".launch"));
            fs::write(launch, serde_json::to_vec_pretty(&sc).unwrap()).unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(10_000);
    let mode = args
        .iter()
        .find(|a| a.starts_with("--") && *a != "--stderr")
        .map(String::as_str)
        .unwrap_or("");
    if args.iter().any(|a| a == "--stderr") {
        keepwrap::logging::init(keepwrap::logging::LogFormat::Text);
    } else {
        let sub = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(sub).unwrap();
    }
    let mut times = Vec::new();
    let mut empty = Vec::new();
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for _ in 0..runs {
        let tmp = tempfile::TempDir::new().unwrap();
        build(tmp.path(), files, mode == "--signed");
        // A boot finds files written long ago, flushed: not dirty pages.
        nix::unistd::sync();
        if std::env::var_os("BENCH_PAUSE").is_some() {
            // For `perf record -p`: time to attach.
            eprintln!("bench_prune: built, pid {}", std::process::id());
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let models = tmp.path().join("0.6.18/sm121");
        let t = Instant::now();
        match mode {
            // Only unlink every file: the floor for a prune that unlinks.
            "--unlink-only" => {
                for d in fs::read_dir(&models).unwrap() {
                    for f in fs::read_dir(d.unwrap().path()).unwrap() {
                        fs::remove_file(f.unwrap().path()).unwrap();
                    }
                }
            }
            // Only rename every file into one directory.
            "--rename-only" => {
                let trash = tmp.path().join(".trash");
                fs::create_dir(&trash).unwrap();
                let mut n = 0;
                for d in fs::read_dir(&models).unwrap() {
                    for f in fs::read_dir(d.unwrap().path()).unwrap() {
                        n += 1;
                        fs::rename(f.unwrap().path(), trash.join(n.to_string())).unwrap();
                    }
                }
            }
            "--no-store" => {
                let r = cache::prune(tmp.path(), THIS).unwrap();
                assert_eq!((r.kept.len(), r.removed), (0, files));
            }
            // As a launch prunes: open the store, recover, prune stashing.
            _ => {
                let store = Store::open(tmp.path()).unwrap();
                store.recover();
                let r =
                    cache::prune_stashing(tmp.path(), THIS, &mut |fd, set| store.stash(fd, set))
                        .unwrap();
                store.sync();
                let want = if mode == "--signed" {
                    (0, 0, files)
                } else {
                    (0, files, 0)
                };
                assert_eq!((r.kept.len(), r.removed, r.stored), want);
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        // Do not let the background emptying of this run overlap the next.
        let t = Instant::now();
        cache::empty_trash(tmp.path()).unwrap();
        empty.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let what = match mode {
        "" => "with the store, sets changed after signing (removed)",
        "--signed" => "with the store, sets signed (stored)",
        "--no-store" => "without the store (removed)",
        _ => "floor",
    };
    println!(
        "bench_prune: {files} rank files (none for this launch), prune {what}: min {:.1} ms, median {:.1} ms, max {:.1} ms over {} runs",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1],
        times.len(),
    );
    empty.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !mode.ends_with("-only") {
        println!(
            "bench_prune: then emptying .keepwrap/trash (background in keepwrap) took median {:.1} ms",
            empty[empty.len() / 2]
        );
    }
}
