//! The managed store's tree as a [`Layout`]: `v2/<env16>/entries/` below
//! the store's root, the entry files `<stem>.json` in it with keepwrap's
//! `<stem>.launch` sidecars, FlashInfer's temp files `.autotune_*.tmp` and
//! keepwrap's own. The manifest beside `entries/` is one level above the
//! folder of files the layout names.

use super::{is_hex_name, is_tmp, ENTRIES, ENV_DIGITS, MANIFEST, SCHEMA_DIR, STEM_DIGITS};
use crate::cache::{Layout, Role, Shape, CACHE_EXT, SIDECAR_EXT};

/// FlashInfer's managed store below its root.
pub struct Store;

impl Layout for Store {
    fn name(&self) -> &'static str {
        "flashinfer-store"
    }
    fn key_depth(&self) -> usize {
        3
    }
    fn root_hint(&self) -> &'static str {
        "is --cache-dir FlashInfer's managed store root ($VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, else $FLASHINFER_AUTOTUNE_CACHE_DIR)?"
    }
    fn role(&self, name: &[u8]) -> Role {
        role(name)
    }
    /// An environment's `manifest.json`: FlashInfer writes it when it is
    /// missing and never reads it back.
    fn is_engines_file(&self, depth: usize, name: &[u8]) -> bool {
        depth == 2 && name == MANIFEST
    }
    /// An entry is a JSON object whose `key` hashes to its file's stem,
    /// with the `runner` and `tactic` FlashInfer's lookup reads.
    fn check_file(&self, name: &[u8], bytes: &[u8]) -> Result<(), String> {
        let key = super::entry_key(bytes).map_err(|why| why.to_string())?;
        let stem = name.strip_suffix(CACHE_EXT).unwrap_or(name);
        let want = super::entry_stem(&key);
        if want.as_bytes() == stem {
            Ok(())
        } else {
            Err(format!(
                "named {}, not the hash of its key ({want})",
                String::from_utf8_lossy(stem)
            ))
        }
    }
    /// An entry's build is its environment's: `v2/<env16>/manifest.json`.
    fn stamp_of(&self, path: &str) -> Option<String> {
        let mut parts = path.split('/');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(v2), Some(env), Some(entries), Some(_))
                if v2.as_bytes() == SCHEMA_DIR && entries.as_bytes() == ENTRIES =>
            {
                Some(format!("{v2}/{env}/manifest.json"))
            }
            _ => None,
        }
    }
    /// A manifest is its environment's when the directory it is in is
    /// named by its hash.
    fn check_stamp(&self, stamp_path: &str, bytes: &[u8]) -> Result<(), String> {
        let dir = stamp_path.split('/').nth(1).unwrap_or_default();
        match super::env16(bytes) {
            Ok(hash) if hash == dir => Ok(()),
            Ok(hash) => Err(format!(
                "'{stamp_path}' is not its directory's manifest (its hash is {hash})"
            )),
            Err(why) => Err(format!("'{stamp_path}' {why}")),
        }
    }
    /// An engine's gate over the store (SGLang's, after 0.5.23) digests
    /// every entry file of the environment on every rank, and on any
    /// difference every rank deletes all of them.
    fn same_on_every_node(&self) -> bool {
        true
    }
    fn is_layout_dir(&self, depth: usize, name: &[u8]) -> bool {
        match depth {
            0 => name == SCHEMA_DIR,
            1 => is_hex_name(name, ENV_DIGITS),
            2 => name == ENTRIES,
            _ => false,
        }
    }
}

/// FlashInfer's managed store below its root.
pub const STORE: Shape = Shape::of(&Store);

/// What a file name in an `entries/` folder makes it.
pub fn role(name: &[u8]) -> Role {
    let stem_of = |ext: &[u8]| {
        name.strip_suffix(ext)
            .is_some_and(|stem| is_hex_name(stem, STEM_DIGITS))
    };
    if stem_of(CACHE_EXT) {
        Role::Cache
    } else if stem_of(SIDECAR_EXT) {
        Role::Sidecar
    } else if is_tmp(name) {
        Role::AutotunerTmp
    } else if crate::cache::fsx::is_keepwrap_tmp(name) {
        Role::KeepwrapTmp
    } else {
        Role::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEM: &str = "0123456789abcdef01234567";

    #[test]
    fn directories_of_the_store() {
        assert!(STORE.is_layout_dir(0, b"v2"));
        assert!(!STORE.is_layout_dir(0, b"v1"));
        assert!(STORE.is_layout_dir(1, b"0123456789abcdef"));
        assert!(!STORE.is_layout_dir(1, b"0123456789ABCDEF"));
        assert!(!STORE.is_layout_dir(1, b"0123456789abcde"));
        assert!(STORE.is_layout_dir(2, b"entries"));
        assert!(!STORE.is_layout_dir(2, b"manifest.json"));
        assert!(!STORE.is_layout_dir(3, b"entries"));
        let file = crate::cache::fsx::Kind::File;
        assert!(STORE.is_engines(2, b"manifest.json", file));
        assert!(!STORE.is_engines(1, b"manifest.json", file));
        assert!(!STORE.is_engines(2, b"manifest.jsonx", file));
        assert_eq!(STORE.key_depth(), 3);
        assert_ne!(STORE, crate::engine::VLLM_FLAT);
    }

    #[test]
    fn an_entrys_build_is_its_environments_manifest() {
        let manifest = br#"{"cache_schema":"v2","gpu":"NVIDIA GB10"}"#;
        let env = super::super::env16(manifest).unwrap();
        let entry = format!("v2/{env}/entries/{STEM}.json");
        let stamp = STORE.stamp_of(&entry).unwrap();
        assert_eq!(stamp, format!("v2/{env}/manifest.json"));
        assert_eq!(STORE.check_stamp(&stamp, manifest), Ok(()));
        let other = br#"{"cache_schema":"v2","gpu":"NVIDIA H100"}"#;
        assert!(STORE.check_stamp(&stamp, other).is_err());
        assert!(STORE.check_stamp(&stamp, b"[]").is_err());
        assert_eq!(STORE.stamp_of("v2/x.json"), None);
        assert_eq!(
            STORE.stamp_of(&format!("v1/{env}/entries/{STEM}.json")),
            None
        );
    }

    #[test]
    fn roles_of_store_files() {
        assert_eq!(role(format!("{STEM}.json").as_bytes()), Role::Cache);
        assert_eq!(role(format!("{STEM}.launch").as_bytes()), Role::Sidecar);
        for n in [".autotune_k2j_9x0a.tmp", ".autotune_q.tmp"] {
            assert_eq!(role(n.as_bytes()), Role::AutotunerTmp, "{n}");
        }
        assert_eq!(role(b".keepwrap-x.tmp"), Role::KeepwrapTmp);
        for n in [
            "manifest.json",
            "0123456789abcdef0123456.json",
            "0123456789abcdef012345678.json",
            "0123456789ABCDEF01234567.json",
            ".autotune_.tmp",
            ".autotune_A.tmp",
            ".autotuner_abc.tmp",
            "0123456789abcdef01234567.json.bak",
        ] {
            assert_eq!(role(n.as_bytes()), Role::Other, "{n}");
        }
        assert_eq!(role(b"\xff.json"), Role::Other);
    }
}
