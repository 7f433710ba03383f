//! The parallel layout: the world size and which ranks' files a node
//! writes.

use std::ffi::OsString;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;

use super::{canonical_flag, rank_file_name, switch_spellings, NAMES};

/// The parallel sizes and node placement of a launch, from its engine
/// arguments (a `--config` file's keys must be merged in by the caller, in
/// front, as vLLM does). A size that does not parse is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelSizes {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub dp: Option<u64>,
    /// `--prefill-context-parallel-size` (multiplies the ranks per DP rank)
    pub pcp: Option<u64>,
    pub expert_parallel: bool,
    pub nnodes: Option<u64>,
    pub node_rank: Option<u64>,
    pub dp_rank: Option<u64>,
    pub dp_start_rank: Option<u64>,
    pub dp_size_local: Option<u64>,
    pub headless: bool,
}

impl ParallelSizes {
    /// Read from `args` (the last occurrence of a flag wins, as in argparse).
    pub fn from_args(args: &[OsString]) -> ParallelSizes {
        let num = |long: &str, short: &str, default: Option<u64>| -> Option<u64> {
            let v = match crate::launch::flags::hits(args, &[long, short], NAMES).last() {
                Some(hit) => hit.value?.to_str()?.to_string(),
                None => default?.to_string(),
            };
            v.parse().ok()
        };
        let switch = |long: &str, short: &str| -> bool {
            let mut on = false;
            for a in args {
                let name = canonical_flag(a.as_bytes());
                if name == long.as_bytes() || name == short.as_bytes() {
                    on = true;
                } else if switch_spellings(long)[1..]
                    .iter()
                    .any(|s| s.as_bytes() == name.as_slice())
                {
                    on = false;
                }
            }
            on
        };
        ParallelSizes {
            tp: num("--tensor-parallel-size", "-tp", Some(1)),
            pp: num("--pipeline-parallel-size", "-pp", Some(1)),
            dp: num("--data-parallel-size", "-dp", Some(1)),
            pcp: num("--prefill-context-parallel-size", "-pcp", Some(1)),
            expert_parallel: switch("--enable-expert-parallel", "-ep"),
            nnodes: num("--nnodes", "-n", Some(1)),
            node_rank: num("--node-rank", "-r", Some(0)),
            dp_rank: num("--data-parallel-rank", "-dpn", None),
            dp_start_rank: num("--data-parallel-start-rank", "-dpr", None),
            dp_size_local: num("--data-parallel-size-local", "-dpl", None),
            headless: switch("--headless", "--headless"),
        }
    }

    /// Ranks per DP rank (TP x PP x PCP); `None` when a size is unknown.
    pub fn within_dp(&self) -> Option<u64> {
        self.tp?.checked_mul(self.pp?)?.checked_mul(self.pcp?)
    }

    /// The world size, DP folded in as vLLM does; `None` when unknown.
    pub fn world(&self) -> Option<u64> {
        self.within_dp()?.checked_mul(self.dp?)
    }

    /// The world ranks whose files this node writes (layout C), `None` when
    /// the arguments do not say it unambiguously. `--nnodes N --node-rank R`:
    /// ranks `R*W/N .. (R+1)*W/N`; `--data-parallel-size-local L` with
    /// `--data-parallel-start-rank S` (or `--data-parallel-rank S`, L = 1):
    /// the ranks of DP ranks `S .. S+L`; otherwise the whole world.
    pub fn local_ranks(&self) -> Option<Range<u64>> {
        let world = self.world()?;
        let nnodes = self.nnodes?;
        if nnodes > 1 {
            let node = self.node_rank?;
            if world % nnodes != 0 || node >= nnodes {
                return None;
            }
            let per = world / nnodes;
            return Some(node * per..(node + 1) * per);
        }
        let within = self.within_dp()?;
        let (start, local) = match (self.dp_rank, self.dp_start_rank, self.dp_size_local) {
            (Some(r), _, _) => (r, 1),
            (None, Some(s), Some(l)) => (s, l),
            (None, None, Some(l)) => (0, l),
            (None, None, None) => (0, self.dp?),
            (None, Some(_), None) => return None,
        };
        let end = start.checked_add(local)?;
        if local == 0 || end > self.dp? {
            return None;
        }
        Some(start * within..end * within)
    }

    /// The layout C file names this node's ranks write.
    pub fn local_rank_files(&self) -> Option<Vec<String>> {
        let within = self.within_dp()?;
        Some(
            self.local_ranks()?
                .map(|r| rank_file_name(r / within, r))
                .collect(),
        )
    }
}
