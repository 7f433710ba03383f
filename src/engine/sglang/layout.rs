//! SGLang's cache tree: `<version>/sm<arch>/<key16>/rank_*.json`, with
//! keepwrap's `rank_*.launch` sidecars and FlashInfer's `.autotuner_*.tmp`
//! temp files beside them.

use crate::cache::{fsx, is_version_dir, Layout, RankId, Role, Shape, CACHE_EXT, SIDECAR_EXT};

/// SGLang's tree below `$SGLANG_CACHE_DIR/flashinfer/autotune`.
pub struct Tree;

impl Layout for Tree {
    fn name(&self) -> &'static str {
        "sglang"
    }

    fn key_depth(&self) -> usize {
        3
    }

    fn root_hint(&self) -> &'static str {
        "is --cache-dir the engine's cache directory ($SGLANG_CACHE_DIR/flashinfer/autotune)?"
    }

    fn role(&self, name: &[u8]) -> Role {
        const RANK: &[u8] = b"rank_";
        if name.starts_with(RANK)
            && name.ends_with(CACHE_EXT)
            && name.len() > RANK.len() + CACHE_EXT.len()
        {
            Role::Cache
        } else if name.starts_with(RANK)
            && name.ends_with(SIDECAR_EXT)
            && name.len() > RANK.len() + SIDECAR_EXT.len()
        {
            Role::Sidecar
        } else if name.starts_with(b".autotuner_") && name.ends_with(b".tmp") && name.len() >= 15 {
            Role::AutotunerTmp
        } else if fsx::is_keepwrap_tmp(name) {
            Role::KeepwrapTmp
        } else {
            Role::Other
        }
    }

    /// `<version>` (`0.7.2`, `0.6.1.post2`, `unknown`), `sm<arch>` (`sm90`,
    /// `sm121`), `<key16>` (16 lowercase hex digits).
    fn is_layout_dir(&self, depth: usize, name: &[u8]) -> bool {
        match depth {
            0 => is_version_dir(name),
            1 => {
                name.len() > 2
                    && name.len() <= 8
                    && name.starts_with(b"sm")
                    && name[2..].iter().all(u8::is_ascii_digit)
            }
            2 => name.len() == 16 && crate::digest::is_lower_hex(name),
            _ => false,
        }
    }

    fn names_ranks(&self) -> bool {
        true
    }

    /// `rank_tp<T>_pp<P>_dp<D>.json` (MegaMoE:
    /// `rank_tp<T>_pp<P>_dp<D>_gpu<uuid>.json`). Numbers are decimal as
    /// Python's `str(int)` writes them (no sign, no leading zero); the
    /// `_gpu` suffix needs a non-empty id.
    fn rank_of(&self, name: &str) -> Option<RankId> {
        let rest = name.strip_prefix("rank_tp")?.strip_suffix(".json")?;
        let (tp, rest) = take_number(rest)?;
        let (pp, rest) = take_number(rest.strip_prefix("_pp")?)?;
        let (dp, rest) = take_number(rest.strip_prefix("_dp")?)?;
        if !rest.is_empty() {
            let uuid = rest.strip_prefix("_gpu")?;
            if uuid.is_empty() || uuid.contains('/') {
                return None;
            }
        }
        Some(RankId { tp, pp, dp })
    }

    fn rank_name_form(&self) -> &'static str {
        "rank_tp<T>_pp<P>_dp<D>.json"
    }
}

fn take_number(s: &str) -> Option<(u32, &str)> {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let digits = &s[..end];
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    Some((digits.parse().ok()?, &s[end..]))
}

/// SGLang's tree, as a value.
pub const TREE: Shape = Shape::of(&Tree);
