//! Time the pre-launch prune of a tree of rank files, as a launch runs it
//! (the store opened, recovered, prune with the store, one sync):
//!
//!     cargo bench --bench bench_prune -- [MODE...] [N...] [--stderr]
//!
//! Modes (default: all three), each over N rank files (default 100, 1,000,
//! 10,000 and 100,000) of 20 KB in directories of 8:
//!
//! - `--reuse`: every file signed for this launch, as sign leaves them (one
//!   set, one manifest, each sidecar with the file's stamp): all kept;
//! - `--stash`: each directory signed by a launch of its own: every set is
//!   whole and moves into the store;
//! - `--remove`: the same, but every sidecar records another sha256: every
//!   set is "changed after signing" and its directory goes to the trash
//!   (emptied after the timed part, as a launch empties it once the engine
//!   has started).
//!
//! Prints the median (and min, max) over `BENCH_RUNS` runs (5; at 100,000
//! files 3 for reuse, whose tree a run leaves as it is, and 1 for the
//! others, each of which needs 2 GB written first), the cost per file, and
//! the CPU time (all threads), which the machine's other load inflates
//! less. Log lines are formatted as keepwrap
//! formats them but written to a sink, unless `--stderr` (then redirect
//! stderr: `2>/dev/null`).

use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use keepwrap::cache::{self, Member, SetManifest, Sidecar, Stamp};
use keepwrap::store::Store;

#[allow(dead_code)] // of what the benchmarks share, this one reads only the CPU clock
mod common;

use common::process_cpu;

const THIS: &str = "1111111111111111111111111111111111111111111111111111111111111111";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Reuse,
    Stash,
    Remove,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Reuse => "reuse",
            Mode::Stash => "stash",
            Mode::Remove => "remove",
        }
    }
}

fn body() -> String {
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
    body
}

fn rel(m: usize, r: usize) -> String {
    format!("0.6.18/sm121/{m:016x}/rank_tp{r}_pp0_dp0.json")
}

/// The tree of `files` rank files as `mode` needs it.
fn build(root: &Path, files: usize, mode: Mode) {
    let body = body();
    let sha = cache::sha256_hex(body.as_bytes());
    let dirs = files.div_ceil(8);
    let ranks = |m: usize| 8.min(files - m * 8);
    for m in 0..dirs {
        fs::create_dir_all(root.join(rel(m, 0)).parent().unwrap()).unwrap();
        for r in 0..ranks(m) {
            fs::write(root.join(rel(m, r)), &body).unwrap();
        }
    }
    // A boot finds files written long ago: their change times settled, so
    // sign recorded their stamps.
    std::thread::sleep(Duration::from_millis(150));
    let root_fd = cache::fsx::open_root(root).unwrap();
    let sets = cache::open_sets(root_fd.as_fd(), true).unwrap();
    let sidecar = |fp: &str, path: &str, sha: &str| {
        let stat = (mode != Mode::Remove)
            .then(|| Stamp::of(&nix::sys::stat::lstat(&root.join(path)).unwrap()));
        let sc = Sidecar {
            format: keepwrap::SIDECAR_FORMAT,
            keepwrap: "0.1.0".into(),
            fingerprint: fp.into(),
            path: path.into(),
            sha256: sha.into(),
            size: body.len() as u64,
            signed_at: 1_796_049_314,
            signed_at_utc: "2026-11-30T14:35:14Z".into(),
            stat,
        };
        let launch = root.join(path.replace(".json", ".launch"));
        fs::write(launch, serde_json::to_vec_pretty(&sc).unwrap()).unwrap();
    };
    let manifest = |fp: &str, members: Vec<Member>| {
        let m = SetManifest {
            format: keepwrap::SET_FORMAT,
            keepwrap: "0.1.0".into(),
            fingerprint: fp.into(),
            id: cache::set_id(fp, &members),
            signed_at: 1_796_049_314,
            members,
        };
        cache::write_manifest(sets.as_fd(), &m).unwrap();
    };
    let member = |path: String, sha: &str| Member {
        path,
        sha256: sha.into(),
        size: body.len() as u64,
    };
    if mode == Mode::Reuse {
        let mut members: Vec<Member> = (0..dirs)
            .flat_map(|m| (0..ranks(m)).map(move |r| (m, r)))
            .map(|(m, r)| member(rel(m, r), &sha))
            .collect();
        members.sort_by(|a, b| a.path.cmp(&b.path));
        let paths: Vec<String> = members.iter().map(|m| m.path.clone()).collect();
        manifest(THIS, members);
        for p in paths {
            sidecar(THIS, &p, &sha);
        }
        return;
    }
    let fake = "ab".repeat(32);
    let sha = if mode == Mode::Stash { &sha } else { &fake };
    for m in 0..dirs {
        // Launch m+1 signed directory m.
        let fp = format!("{:064x}", m + 1);
        let members: Vec<Member> = (0..ranks(m)).map(|r| member(rel(m, r), sha)).collect();
        manifest(&fp, members);
        for r in 0..ranks(m) {
            sidecar(&fp, &rel(m, r), sha);
        }
    }
}

fn run(mode: Mode, files: usize, runs: usize) {
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    // The kept tree is not changed by a run: built once.
    let mut kept: Option<tempfile::TempDir> = None;
    for _ in 0..runs {
        let tmp = match kept.take() {
            Some(t) => t,
            None => {
                let t = tempfile::TempDir::new().unwrap();
                build(t.path(), files, mode);
                // Written back, so that the run does not wait on the flush.
                nix::unistd::sync();
                if std::env::var_os("BENCH_PAUSE").is_some() {
                    // For `perf record -p`: time to attach.
                    eprintln!("bench_prune: built, pid {}", std::process::id());
                    std::thread::sleep(Duration::from_secs(2));
                }
                t
            }
        };
        let this = keepwrap::digest::Fingerprint::parse(THIS).unwrap();
        let c = process_cpu();
        let t = Instant::now();
        let store = Store::open(tmp.path(), keepwrap::engine::SGLANG).unwrap();
        store.recover();
        let (r, trash) = cache::prune_then_empty(
            tmp.path(),
            keepwrap::engine::SGLANG,
            &this,
            Some(&mut |fd, set| store.stash(fd, set)),
            None,
        )
        .unwrap();
        store.sync();
        times.push(t.elapsed());
        cpus.push(process_cpu() - c);
        if std::env::var_os("BENCH_PAUSE").is_some() {
            // For `perf record -p`: time to stop it before the clean-up.
            eprintln!("bench_prune: timed part done");
            std::thread::sleep(Duration::from_secs(2));
        }
        // As a launch does once the engine has started.
        trash.run();
        let (want, got) = match mode {
            Mode::Reuse => ((files, 0, 0), (r.kept.len(), r.stored, r.removed)),
            Mode::Stash => ((0, files, 0), (r.kept.len(), r.stored, r.removed)),
            Mode::Remove => ((0, 0, files), (r.kept.len(), r.stored, r.removed)),
        };
        assert_eq!(got, want, "{} {files}: kept, stored, removed", mode.name());
        drop(store);
        if mode == Mode::Reuse {
            kept = Some(tmp);
        }
    }
    times.sort();
    cpus.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = times[times.len() / 2];
    let cpu = cpus[cpus.len() / 2];
    println!(
        "bench_prune: {:<6} {files:>6} files: median {:8.1} ms (min {:.1}, max {:.1}) over {} runs: {:6.1} us per file; cpu {:.1} ms, {:.1} us per file",
        mode.name(),
        ms(median),
        ms(times[0]),
        ms(times[times.len() - 1]),
        times.len(),
        ms(median) * 1e3 / files as f64,
        ms(cpu),
        ms(cpu) * 1e3 / files as f64,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--stderr") {
        keepwrap::logging::init(keepwrap::logging::LogFormat::Text);
    } else {
        let sub = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(sub).unwrap();
    }
    let mut modes: Vec<Mode> = args
        .iter()
        .filter_map(|a| match a.as_str() {
            "--reuse" => Some(Mode::Reuse),
            "--stash" | "--signed" => Some(Mode::Stash),
            "--remove" => Some(Mode::Remove),
            _ => None,
        })
        .collect();
    if modes.is_empty() {
        modes = vec![Mode::Reuse, Mode::Stash, Mode::Remove];
    }
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![100, 1_000, 10_000, 100_000];
    }
    let runs: Option<usize> = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok());
    for &files in &sizes {
        for &mode in &modes {
            // A run of stash or remove needs a fresh tree: at 100,000 files
            // (2 GB to write) one run by default.
            let runs = runs.unwrap_or(match (files, mode) {
                (100_000.., Mode::Reuse) => 3,
                (100_000.., _) => 1,
                _ => 5,
            });
            run(mode, files, runs);
        }
    }
}
