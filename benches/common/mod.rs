//! What the benchmarks share: rank files shaped like FlashInfer's, with
//! dense entries every rank holds and expert-parallel MoE entries of its own.

use keepwrap::unify::render;
use serde_json::{json, Value};
use std::time::Duration;

/// Entries of one rank file.
pub const ENTRIES: usize = 2_000;
/// Of which every rank holds the same (dense GEMM shapes).
pub const SHARED: usize = 500;

/// A small deterministic generator (no dependency needed for a benchmark).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    fn time_ms(&mut self) -> Value {
        // Four decimals, as FlashInfer rounds them; as JSON text so that the
        // number is written the way Python writes it.
        let v = 0.005 + self.next(1_995_000) as f64 / 1e6;
        serde_json::from_str(&format!("{:.4}", v)).unwrap()
    }
}

fn key(op: &str, runner: &str, m: usize, extras: &str) -> String {
    format!("('{op}', '{runner}', (({m}, 7168), ({m}, 256), (256, 7168)), ({extras}))")
}

/// Rank `rank`'s file as FlashInfer 0.7 writes it: `SHARED` dense entries
/// (the same on every rank) and the MoE entries of its `experts` experts.
pub fn rank_file(rank: usize, experts: usize) -> Vec<u8> {
    let metadata = json!({
        "flashinfer_version": "0.7.2", "cuda_version": "13.0", "cublas_version": "13.1.0",
        "cudnn_version": "92000", "cudnn_frontend_version": "1.19.0", "gpu": "NVIDIA GB10",
        "cutlass_dsl_version": "4.3.0"
    });
    let mut rng = Lcg(0x5eed);
    let dense = "CutlassFp8BlockScaleGemmRunner";
    let mut entries: Vec<(String, Value)> = (0..SHARED)
        .map(|i| {
            let v = json!([dense, rng.next(48), "median", {"time_ms": rng.time_ms()}]);
            (key("flashinfer::fp8_blockscale_gemm", dense, i + 1, ""), v)
        })
        .collect();
    let moe = "TrtllmFp8BlockScaleMoERunner";
    let mut rng = Lcg(0x5eed + rank as u64);
    for i in 0..ENTRIES - SHARED {
        let tile = [8, 16, 32, 64, 128][rng.next(5) as usize];
        entries.push((
            key(
                "flashinfer::trtllm_fp8_block_scale_moe",
                moe,
                i + 1,
                &format!("{}, {}", rank * experts, (rank + 1) * experts),
            ),
            json!([moe, [tile, rng.next(24)], "median", {"time_ms": rng.time_ms()}]),
        ));
    }
    render(
        Some(&metadata),
        entries.iter().map(|(k, v)| (k.as_str(), v)),
    )
}

/// CPU time of this process, all threads: what the machine's other load
/// does not inflate much.
pub fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
