//! The fleet's objects that describe a set: `sets/<id>.json` and a node's
//! part `parts/<boot>/<rank>.json`, each an [`Envelope`] of the fleet's
//! fields around a set manifest of the one format every set has
//! ([`SetManifest`]: the local cache's `.keepwrap/sets/<fp>.json`, the
//! store's `.set.json`, `--share`'s `manifest.json`); and `HEAD`, which
//! names one set. What a restore checks of them before it fetches a blob.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cache::{self, Member, SetManifest, Shape};
use crate::digest::Fingerprint;
use crate::engine::fingerprint::ProfileName;

/// Version of the envelope and HEAD formats. Format 1 (of earlier builds)
/// had a file list of the fleet's own; a HEAD of another format is read as
/// no set (`fleet_other_format`), and the launch's next set replaces it.
pub const FORMAT: u32 = 2;
/// Most files one set may list.
pub const MAX_FILES: usize = 4096;
/// Largest HEAD read (a HEAD is about 90 bytes).
pub const MAX_HEAD: u64 = 4 << 10;
/// Largest manifest read (a file's member is a few hundred bytes).
pub const MAX_MANIFEST: u64 = MAX_FILES as u64 * 1024;
/// Most bytes one set's blobs may hold together: a restore holds them in
/// memory until every one verifies.
pub const MAX_SET: u64 = 1 << 30;

/// `sets/<id>.json` (and a node's part): the fleet's fields around the set.
///
/// ```json
/// {"format":2,"profile":"sglang","nnodes":2,"nodes":[0,1],
///  "set":{"format":2,"fingerprint":"<64 hex: the launch's name>","id":"<64 hex>",
///         "members":[{"path":"0.5.23/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json",
///                     "sha256":"<64 hex>","size":20480}, ...]}}
/// ```
///
/// Compact, in this field order: the id of the object is the sha256 of
/// exactly these bytes, which depend on the files alone (the set carries no
/// `keepwrap` version and no `signed_at`: pods that publish the same files
/// write the same object, and the bucket's object time says when).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub format: u32,
    pub profile: String,
    /// The node count of a multi-node set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nnodes: Option<u32>,
    /// A multi-node set's node of each member, in the members' order (the
    /// node whose file it is); empty for a single-node set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<u32>,
    /// For a layout whose files carry no stamp of their own: each stamp
    /// file's text by its path (what the files beside it were tuned under).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stamps: BTreeMap<String, String>,
    /// The files, signed for the launch's name in the bucket.
    pub set: SetManifest,
}

/// A file of a set being made, and the node whose file it is (multi-node
/// sets only).
pub type Placed = (Member, Option<u32>);

impl Envelope {
    /// The envelope of `files` for the launch `name` of `profile`: members
    /// sorted by path (a path twice stays twice: [`check_files`] refuses
    /// it).
    pub fn new(
        profile: ProfileName,
        name: &Fingerprint,
        mut files: Vec<Placed>,
        nnodes: Option<u32>,
        stamps: BTreeMap<String, String>,
    ) -> Envelope {
        files.sort_by(|a, b| (&a.0.path, a.1).cmp(&(&b.0.path, b.1)));
        let nodes = files.iter().filter_map(|f| f.1).collect();
        let members: Vec<Member> = files.into_iter().map(|f| f.0).collect();
        Envelope {
            format: FORMAT,
            profile: profile.as_str().to_string(),
            nnodes,
            nodes,
            stamps,
            set: SetManifest {
                format: crate::SET_FORMAT,
                keepwrap: String::new(),
                fingerprint: name.to_string(),
                id: cache::set_id(name, &members),
                signed_at: 0,
                members,
            },
        }
    }

    /// Each file with its node (None in a single-node set).
    pub fn files(&self) -> impl Iterator<Item = (&Member, Option<u32>)> {
        let nodes = &self.nodes;
        self.set
            .members
            .iter()
            .enumerate()
            .map(move |(i, m)| (m, nodes.get(i).copied()))
    }

    /// The canonical bytes: compact JSON, fields in their order.
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn id(&self) -> String {
        cache::sha256_hex(&self.canonical())
    }

    /// Is it one of this format, for the launch `name` of `profile`, its
    /// set whole by its id, its files ones a restore may place? Err: why
    /// not.
    pub fn check(
        &self,
        profile: ProfileName,
        name: &Fingerprint,
        shape: Shape,
    ) -> Result<(), String> {
        if self.format != FORMAT
            || self.profile != profile.as_str()
            || *name != self.set.fingerprint
        {
            return Err("a set of another launch or format".into());
        }
        check_files(&self.set.members, shape)?;
        cache::validate_manifest(&self.set, name, shape)
    }
}

/// `HEAD`: the set of the launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    pub format: u32,
    pub set: String,
}

impl Head {
    pub fn of(set: &str) -> Vec<u8> {
        serde_json::to_vec(&Head {
            format: FORMAT,
            set: set.to_string(),
        })
        .unwrap_or_default()
    }
}

/// What a HEAD read says.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadIs {
    /// A HEAD of this format: the id of the set it names.
    Set(String),
    /// A HEAD of another format (a keepwrap of another format wrote it).
    Format(u64),
    /// Not a HEAD: why.
    Bad(String),
}

/// Read HEAD's bytes.
pub fn read_head(bytes: &[u8]) -> HeadIs {
    /// The one field every format of HEAD has.
    #[derive(Deserialize)]
    struct Versioned {
        format: u64,
    }
    match serde_json::from_slice::<Versioned>(bytes) {
        Ok(v) if v.format != u64::from(FORMAT) => return HeadIs::Format(v.format),
        Ok(_) => {}
        Err(e) => return HeadIs::Bad(format!("not a HEAD ({e})")),
    }
    match serde_json::from_slice::<Head>(bytes) {
        Ok(h) if cache::is_sha256_hex(&h.set) => HeadIs::Set(h.set),
        Ok(_) => HeadIs::Bad(format!("not a HEAD of format {FORMAT} naming a set")),
        Err(e) => HeadIs::Bad(format!("not a HEAD ({e})")),
    }
}

/// A set's nodes: none for a single-node launch; for one of `want` nodes,
/// that many, each file naming one, each node with at least one file
/// (but for a tree that is the same set on every node, where a file that
/// several nodes hold names the lowest of them only).
pub fn check_nodes(m: &Envelope, want: Option<u32>, shape: Shape) -> Result<(), String> {
    let n = match (m.nnodes, want) {
        (None, None) if m.nodes.is_empty() => return Ok(()),
        (Some(n), Some(w)) if n == w && (n as usize) <= MAX_FILES => n,
        (got, want) => {
            return Err(format!(
                "a set of {} nodes, for a launch of {}",
                got.unwrap_or(1),
                want.unwrap_or(1)
            ))
        }
    };
    if m.nodes.len() != m.set.members.len() {
        return Err(format!(
            "{} nodes for {} files",
            m.nodes.len(),
            m.set.members.len()
        ));
    }
    let mut seen = vec![false; n as usize];
    for (f, node) in m.files() {
        match node {
            Some(r) if r < n => seen[r as usize] = true,
            _ => return Err(format!("'{}' names no node of {n}", f.path)),
        }
    }
    match seen.iter().position(|s| !s) {
        Some(r) if !shape.same_on_every_node() => Err(format!("node {r} of {n} has no part in it")),
        _ => Ok(()),
    }
}

/// A set's files: at least one, at most [`MAX_FILES`], sorted and unique
/// paths, each a cache file path, sizes within the cache file limit.
pub fn check_files(files: &[Member], shape: Shape) -> Result<(), String> {
    if files.is_empty() || files.len() > MAX_FILES {
        return Err(format!("{} files", files.len()));
    }
    if files.windows(2).any(|w| w[0].path >= w[1].path) {
        return Err("its paths are not sorted and unique".into());
    }
    let total: u64 = files.iter().map(|f| f.size).fold(0, u64::saturating_add);
    if total > MAX_SET {
        return Err(format!("its files hold {total} bytes (at most {MAX_SET})"));
    }
    for f in files {
        if crate::publish::checked_path(&f.path, shape).is_none() {
            return Err(format!("'{}' is not a cache file path", f.path));
        }
        if !cache::is_sha256_hex(&f.sha256) || f.size > cache::MAX_CACHE_FILE {
            return Err(format!("'{}' has no sha256 or is too large", f.path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{flashinfer::STORE, SGLANG};

    const P: &str = "0.5.23/sm90/0123456789abcdef/rank_tp0_pp0_dp0.json";
    const Q: &str = "0.5.23/sm90/0123456789abcdef/rank_tp1_pp0_dp0.json";

    fn member(path: &str) -> Member {
        Member {
            path: path.into(),
            sha256: "a".repeat(64),
            size: 2,
        }
    }

    fn name() -> Fingerprint {
        Fingerprint::parse(&"f".repeat(64)).unwrap()
    }

    fn set(files: Vec<Placed>, nnodes: Option<u32>) -> Envelope {
        Envelope::new(ProfileName::Sglang, &name(), files, nnodes, BTreeMap::new())
    }

    #[test]
    fn an_envelope_is_a_set_manifest_and_its_id_the_hash_of_its_canonical_bytes() {
        let m = set(vec![(member(P), None)], None);
        let bytes = m.canonical();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"format":2,"profile":"sglang","set":{"format":2,"fingerprint":"#),
            "{text}"
        );
        // the same files give the same bytes on every pod: no version, no time
        assert!(
            !text.contains("keepwrap") && !text.contains("signed_at"),
            "{text}"
        );
        // a single-node set of files that stamp themselves says nothing of
        // nodes or stamps
        assert!(!text.contains("node") && !text.contains("stamps"), "{text}");
        assert_eq!(m.id(), cache::sha256_hex(&bytes));
        let back: Envelope = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.canonical(), bytes);
        assert!(back.check(ProfileName::Sglang, &name(), SGLANG).is_ok());
        // its set is one the local cache would take as the launch's
        assert!(cache::validate_manifest(&back.set, &name(), SGLANG).is_ok());
        let mut other = back.clone();
        other.set.members[0].size = 3;
        assert!(other
            .check(ProfileName::Sglang, &name(), SGLANG)
            .unwrap_err()
            .contains("id"));
        other = back.clone();
        other.format = 1;
        assert!(other.check(ProfileName::Sglang, &name(), SGLANG).is_err());
    }

    #[test]
    fn a_head_of_another_format_is_told_from_one_that_is_no_head() {
        let id = "0".repeat(64);
        assert_eq!(read_head(&Head::of(&id)), HeadIs::Set(id.clone()));
        let old = format!(r#"{{"format":1,"set":"{id}"}}"#);
        assert_eq!(read_head(old.as_bytes()), HeadIs::Format(1));
        assert!(matches!(read_head(b"not json"), HeadIs::Bad(_)));
        assert!(matches!(
            read_head(br#"{"format":2,"set":"x"}"#),
            HeadIs::Bad(_)
        ));
        assert!(matches!(
            read_head(br#"{"format":2,"set":"x","more":1}"#),
            HeadIs::Bad(_)
        ));
    }

    #[test]
    fn a_multi_node_set_names_every_node_and_only_a_launch_of_as_many_takes_it() {
        let two = set(vec![(member(P), Some(0)), (member(Q), Some(1))], Some(2));
        assert_eq!(two.nodes, vec![0, 1]);
        assert!(check_nodes(&two, Some(2), SGLANG).is_ok());
        assert!(
            check_nodes(&two, None, SGLANG).is_err(),
            "a single-node launch"
        );
        assert!(check_nodes(&two, Some(3), SGLANG).is_err(), "three nodes");
        let missing = set(vec![(member(P), Some(0)), (member(Q), Some(0))], Some(2));
        assert!(check_nodes(&missing, Some(2), SGLANG)
            .unwrap_err()
            .contains("node 1"));
        // a tree that is one set on every node: a file several nodes hold
        // names the lowest, so a node may name none
        assert!(check_nodes(&missing, Some(2), STORE).is_ok());
        assert!(check_nodes(&two, Some(3), STORE).is_err(), "three nodes");
        let huge = set(vec![(member(P), Some(0))], Some(u32::MAX));
        assert!(check_nodes(&huge, Some(u32::MAX), SGLANG).is_err());
        let mut stray = set(vec![(member(P), None)], None);
        stray.nodes = vec![0];
        assert!(
            check_nodes(&stray, None, SGLANG).is_err(),
            "a node in a single-node set"
        );
        let mut short = two.clone();
        short.nodes.pop();
        assert!(
            check_nodes(&short, Some(2), SGLANG).is_err(),
            "a file with no node"
        );
        let mut far = two.clone();
        far.nodes[1] = 2;
        assert!(check_nodes(&far, Some(2), SGLANG).is_err(), "node 2 of 2");
    }

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "../x.json",
            "/abs.json",
            "a/../../b.json",
            ".keepwrap/x.json",
            "plain.txt",
        ] {
            assert!(check_files(&[member(p)], SGLANG).is_err(), "{p}");
        }
        assert!(check_files(&[], SGLANG).is_err());
    }

    #[test]
    fn a_set_too_large_to_hold_or_naming_a_path_twice_is_refused() {
        assert!(check_files(&[member(P), member(Q)], SGLANG).is_ok());
        assert!(
            check_files(&[member(P), member(P)], SGLANG).is_err(),
            "twice"
        );
        assert!(
            check_files(&[member(Q), member(P)], SGLANG).is_err(),
            "unsorted"
        );
        let many: Vec<Member> = (0..5)
            .map(|i| Member {
                size: cache::MAX_CACHE_FILE,
                ..member(&format!(
                    "0.5.23/sm90/0123456789abcdef/rank_tp{i}_pp0_dp0.json"
                ))
            })
            .collect();
        let e = check_files(&many, SGLANG).unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
