//! Files, by release: which layout a vLLM version writes and what each file
//! name in the cache is.

/// What a vLLM release does with the autotune cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// 0.24.0: the cache code is switched off; every boot tunes, nothing is written.
    Off,
    /// 0.25.x, 0.26.x: one-rank launches only, one `autotune_configs.json`.
    OneRankOnly,
    /// Layout A, 0.27.1 - 0.31.x: one shared `autotune_configs.json` that
    /// world rank 0 writes on every boot and broadcasts on the next. Until
    /// 0.29.x the folder's hash includes the `VLLM_*` environment and the
    /// vLLM version; from 0.30.0 on, the engine configuration only. A kept
    /// file hangs every warm boot of a MoE model with more than one rank.
    Shared { env_in_key: bool },
    /// Layout C, 0.32.0 on: `autotune_configs_dp<D>_rank<R>.json` per rank,
    /// kept only when every rank's file agrees (the gate), saved only by a
    /// rank that tuned. From 0.33.0 on a kept cache skips tuning altogether,
    /// and one-rank launches use FlashInfer's managed store instead.
    PerRank {
        skips_tuning_when_kept: bool,
        managed_store_for_one_rank: bool,
    },
}

/// The layout of vLLM `version` (`0.33.0`, `0.31.0+cu129`, `0.32.0rc1`...),
/// or `None` for releases before 0.24.0 and versions that do not parse.
/// Releases between 0.26.x and 0.27.1 (0.27.0) were not read: `None`.
pub fn layout_for_version(version: &str) -> Option<Layout> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
    let v = (num()?, num()?, num().unwrap_or(0));
    Some(match v {
        (0, 0..=23, _) => return None,
        (0, 24, _) => Layout::Off,
        (0, 25 | 26, _) => Layout::OneRankOnly,
        (0, 27, 0) => return None,
        (0, 27..=29, _) => Layout::Shared { env_in_key: true },
        (0, 30 | 31, _) => Layout::Shared { env_in_key: false },
        (0, 32, _) => Layout::PerRank {
            skips_tuning_when_kept: false,
            managed_store_for_one_rank: false,
        },
        _ => Layout::PerRank {
            skips_tuning_when_kept: true,
            managed_store_for_one_rank: true,
        },
    })
}

/// The shared file of layout A (and of 0.25 / 0.26).
pub const SHARED_FILE: &str = "autotune_configs.json";
/// The second name of vLLM PR 57579 (layout B, in no release read).
pub const LAYOUT_B_FILE: &str = "autotune_config.json";

/// The layout C file of world rank `rank` in data-parallel rank `dp_rank`.
pub fn rank_file_name(dp_rank: u64, rank: u64) -> String {
    format!("autotune_configs_dp{dp_rank}_rank{rank}.json")
}

/// What a file name in a `<sha256>/` folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `autotune_configs_dp<D>_rank<R>.json` (layout C)
    Rank { dp_rank: u64, rank: u64 },
    /// `autotune_configs.json` (layout A)
    Shared,
    /// `autotune_config.json` (layout B)
    LayoutB,
    /// A temporary file of a save in progress, or left by a process that
    /// died: vLLM's `.autotune_configs*.json.<random>.tmp`, FlashInfer's
    /// `.autotuner_<random>.tmp`, the managed store's `.autotune_<random>.tmp`.
    Temp,
}

/// The kind of a file named `name`, `None` when it is none of vLLM's.
pub fn file_kind(name: &str) -> Option<FileKind> {
    match name {
        SHARED_FILE => return Some(FileKind::Shared),
        LAYOUT_B_FILE => return Some(FileKind::LayoutB),
        _ => {}
    }
    if name.ends_with(".tmp")
        && [".autotune_configs", ".autotuner_", ".autotune_"]
            .iter()
            .any(|p| name.starts_with(p))
    {
        return Some(FileKind::Temp);
    }
    let rest = name
        .strip_prefix("autotune_configs_dp")?
        .strip_suffix(".json")?;
    let (dp, rank) = rest.split_once("_rank")?;
    let number = |s: &str| {
        (!s.is_empty()
            && s.bytes().all(|c| c.is_ascii_digit())
            && (s == "0" || !s.starts_with('0')))
        .then(|| s.parse().ok())
        .flatten()
    };
    Some(FileKind::Rank {
        dp_rank: number(dp)?,
        rank: number(rank)?,
    })
}
