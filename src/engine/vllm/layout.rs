//! vLLM's cache tree.
//!
//! vLLM (0.27.1 and later) keeps FlashInfer's tactics in
//! `$VLLM_CACHE_ROOT/flashinfer_autotune_cache/<flashinfer version>/<arch>/<sha256>/`
//! ([`TREE`], the root being `.../flashinfer_autotune_cache`),
//! or right in `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR/<sha256>/`
//! ([`FLAT`]). In a `<sha256>/` folder the engine's files are
//! `autotune_configs_dp<D>_rank<R>.json` (layout C), `autotune_configs.json`
//! (layout A), `autotune_config.json` (layout B), their temp files, and
//! keepwrap's `<stem>.launch` sidecars. With the override variable, a
//! one-rank launch on 0.33.0 keeps FlashInfer's managed store in `v2/`
//! beside the folders: it is the engine's, and keepwrap never walks into it.
//!
//! The engine names the shape ([`crate::engine::Engine::shape`]), and it is a
//! value wherever a path is judged: the walk, the cache's checks, the
//! store, the share, the fleet, the watcher and the commit are each given
//! it by the launch (or the subcommand) that knows its engine.

use crate::cache::{is_version_dir, Layout, Role, Shape, CACHE_EXT, SIDECAR_EXT};
use crate::engine::vllm::launch::{self as facts, FileKind};

/// The managed store's directory in a [`FLAT`] root.
pub const MANAGED_STORE_DIR: &[u8] = b"v2";

/// vLLM's tree: `<flashinfer version>/<arch>/<sha256>/autotune_configs*.json`
/// below `$VLLM_CACHE_ROOT/flashinfer_autotune_cache`, else (`flat`)
/// `<sha256>/autotune_configs*.json` right in
/// `$VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR`.
pub struct Tree {
    flat: bool,
}

impl Layout for Tree {
    fn name(&self) -> &'static str {
        if self.flat {
            "vllm-flat"
        } else {
            "vllm-tree"
        }
    }
    fn key_depth(&self) -> usize {
        if self.flat {
            1
        } else {
            3
        }
    }
    fn root_hint(&self) -> &'static str {
        "is --cache-dir vLLM's autotune cache directory ($VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, else $VLLM_CACHE_ROOT/flashinfer_autotune_cache)?"
    }
    fn role(&self, name: &[u8]) -> Role {
        role(name)
    }
    fn is_layout_dir(&self, depth: usize, name: &[u8]) -> bool {
        match (self.flat, depth) {
            (true, 0) | (false, 2) => is_hash_dir(name),
            (false, 0) => is_version_dir(name),
            (false, 1) => is_arch_dir(name),
            _ => false,
        }
    }
    /// The managed store (`v2/`) of a flat root is the engine's, and
    /// keepwrap never walks into it.
    fn is_unwalked(&self, depth: usize, name: &[u8]) -> bool {
        self.flat && depth == 0 && name == MANAGED_STORE_DIR
    }
}

/// vLLM's tree below its root.
pub const TREE: Shape = Shape::of(&Tree { flat: false });
/// vLLM's flat folders in the override directory.
pub const FLAT: Shape = Shape::of(&Tree { flat: true });

/// `<sha256 hex>`: vLLM's folder of one engine configuration.
pub fn is_hash_dir(name: &[u8]) -> bool {
    name.len() == 64 && crate::digest::is_lower_hex(name)
}

/// FlashInfer's `<arch>` level: compute capabilities `_`-joined, each
/// digits with an optional letter (`90a`, `100a_120f`, `80`).
pub fn is_arch_dir(name: &[u8]) -> bool {
    name.len() <= 64
        && !name.is_empty()
        && name.split(|&b| b == b'_').all(|cc| {
            let digits = cc.iter().take_while(|b| b.is_ascii_digit()).count();
            digits > 0
                && (cc.len() == digits
                    || (cc.len() == digits + 1 && cc[digits].is_ascii_lowercase()))
        })
}

/// What a file name in a `<sha256>/` folder makes it.
pub fn role(name: &[u8]) -> Role {
    let Ok(s) = std::str::from_utf8(name) else {
        return Role::Other;
    };
    if let Some(stem) = s.strip_suffix(std::str::from_utf8(SIDECAR_EXT).unwrap_or(".launch")) {
        let cache = format!(
            "{stem}{}",
            std::str::from_utf8(CACHE_EXT).unwrap_or(".json")
        );
        return match facts::file_kind(&cache) {
            Some(FileKind::Rank { .. } | FileKind::Shared | FileKind::LayoutB) => Role::Sidecar,
            _ => Role::Other,
        };
    }
    match facts::file_kind(s) {
        Some(FileKind::Rank { .. } | FileKind::Shared | FileKind::LayoutB) => Role::Cache,
        Some(FileKind::Temp) => Role::AutotunerTmp,
        None if crate::cache::fsx::is_keepwrap_tmp(name) => Role::KeepwrapTmp,
        None => Role::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_of_the_vllm_tree() {
        assert!(TREE.is_layout_dir(0, b"0.7.2.post1"));
        assert!(TREE.is_layout_dir(1, b"90a"));
        assert!(TREE.is_layout_dir(1, b"90a_100a_120f"));
        assert!(TREE.is_layout_dir(1, b"80"));
        assert!(!TREE.is_layout_dir(1, b"sm90"));
        assert!(!TREE.is_layout_dir(1, b"90ab"));
        assert!(!TREE.is_layout_dir(1, b"_90a"));
        assert!(TREE.is_layout_dir(2, H.as_bytes()));
        assert!(!TREE.is_layout_dir(2, &H.as_bytes()[..16]));
        assert!(!TREE.is_layout_dir(0, H.as_bytes()));
        assert!(FLAT.is_layout_dir(0, H.as_bytes()));
        assert!(!FLAT.is_layout_dir(0, b"v2"));
        assert!(!FLAT.is_layout_dir(1, H.as_bytes()));
        assert!(!crate::engine::sglang::TREE.is_layout_dir(0, H.as_bytes()));
        assert_eq!(FLAT.key_depth(), 1);
        assert_eq!(TREE.key_depth(), 3);
    }

    #[test]
    fn roles_of_vllm_files() {
        for n in [
            "autotune_configs_dp0_rank0.json",
            "autotune_configs_dp1_rank3.json",
            "autotune_configs.json",
            "autotune_config.json",
        ] {
            assert_eq!(role(n.as_bytes()), Role::Cache, "{n}");
            let sc = n.replace(".json", ".launch");
            assert_eq!(role(sc.as_bytes()), Role::Sidecar, "{sc}");
        }
        for n in [
            ".autotune_configs.json.x1y2.tmp",
            ".autotuner_abc.tmp",
            ".autotune_q.tmp",
        ] {
            assert_eq!(role(n.as_bytes()), Role::AutotunerTmp, "{n}");
        }
        assert_eq!(role(b".keepwrap-x.tmp"), Role::KeepwrapTmp);
        for n in [
            "rank_tp0_pp0_dp0.json",
            "autotune_configs_dp00_rank0.json",
            "manifest.json",
            "x.launch",
            "autotune_configs_dp0_rank0.json.bak",
        ] {
            assert_eq!(role(n.as_bytes()), Role::Other, "{n}");
        }
        assert_eq!(role(b"\xff.json"), Role::Other);
    }
}
