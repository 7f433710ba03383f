//! Unify the rank files of one cache directory: replace every rank file with
//! the union of all their entries, written byte for byte as FlashInfer's
//! `AutoTuner.save_configs` writes it.
//!
//! Under expert parallelism each rank tunes its own MoE shapes, so SGLang's
//! stock entry gate (a digest of each rank's whole file, all-gathered) never
//! sees agreement and deletes every cache on every boot (SGLang issue 40320).
//! When every rank file is the same union, the gate agrees, every rank loads
//! every shape it needs, and nothing is profiled.
//!
//! This module is pure: [`unify`] takes file names and bytes and returns the
//! bytes every rank file should hold, or why the files are left as they are.
//!
//! # The file
//!
//! `json.dump(obj, f, indent=2)` (ensure_ascii, no trailing newline) of:
//! `_metadata` first (when there is one); then the entries sorted by key in
//! Python's code point order; then `_generation`, the sha256 hex of
//! `json.dumps(<the object without _generation>, sort_keys=True,
//! separators=(",", ":"))`. A file with `_records` (MegaMoE: a single writer)
//! is never rewritten, so this module never writes `_records`.
//!
//! # Strings
//!
//! Strings here are real strings parsed from JSON. [`crate::launch::canonical`]'s
//! writer reads U+10FFFF as the opening of a sentinel pair, so every string
//! is passed through [`canonical::py_str_from_str`] before it is written.
//! Keys are compared as real strings: UTF-8 byte order is code point order.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

mod render;
mod tree;

use render::*;
pub use render::{generation, render};
pub use tree::{unify_tree, TreeReport};

use crate::cache::{self, fsx, Shape};
use crate::launch::canonical::{self, Layout, Style};

/// The key of the metadata object.
pub const METADATA: &str = "_metadata";
/// The key of MegaMoE's single-writer records.
pub const RECORDS: &str = "_records";
/// The key of the generation digest.
pub const GENERATION: &str = "_generation";

pub use crate::cache::RankId;

/// One rank file of a cache directory: its file name (not a path) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// What to do with the rank files of one cache directory.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Write `bytes` to every rank file (nothing to write when
    /// `already_identical`).
    Unified(Unified),
    /// Leave every file as it is.
    Leave(LeaveReason),
}

/// The union of the rank files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unified {
    /// The file every rank gets, exactly as FlashInfer writes it.
    pub bytes: Vec<u8>,
    /// Entries in the union (keys other than `_metadata` and `_generation`).
    pub entries: usize,
    /// Keys whose value differs between files, in key order.
    pub conflicts: Vec<Conflict>,
    /// Every input file already holds exactly `bytes`.
    pub already_identical: bool,
}

/// A key the files disagree on: the value of `kept` (the lowest rank holding
/// the key) is kept; each file of `differing` holds another value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub key: String,
    pub kept: String,
    pub differing: Vec<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "entry {} differs between rank files: kept {}'s value over {}",
            self.key,
            self.kept,
            self.differing.join(", ")
        )
    }
}

/// Why the rank files of a directory are left as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaveReason {
    /// Fewer than two rank files: nothing to unify. Holds the file names.
    FewerThanTwo { names: Vec<String> },
    /// A file whose name is not a rank file name (`form`: the names the
    /// tree's shape gives rank files).
    NotRankFile { name: String, form: &'static str },
    /// A file that is not valid JSON.
    NotJson { name: String, error: String },
    /// A file that is valid JSON but not an object.
    NotObject { name: String },
    /// A file with `_records` (MegaMoE): it must keep its single writer.
    HasRecords { name: String },
    /// Two files whose `_metadata` differ (`first` is the lowest rank file).
    MetadataDiffer { first: String, other: String },
}

impl fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left as they are: ")?;
        match self {
            LeaveReason::FewerThanTwo { names } => match names.first() {
                None => f.write_str("no rank file"),
                Some(name) => write!(f, "only one rank file ({name})"),
            },
            LeaveReason::NotRankFile { name, form } => {
                write!(f, "{name} is not a rank file name ({form})")
            }
            LeaveReason::NotJson { name, error } => {
                write!(f, "{name} is not valid JSON ({error})")
            }
            LeaveReason::NotObject { name } => write!(f, "{name} is not a JSON object"),
            LeaveReason::HasRecords { name } => {
                write!(f, "{name} has _records (a single-writer file)")
            }
            LeaveReason::MetadataDiffer { first, other } => {
                write!(f, "their _metadata differ ({first} vs {other})")
            }
        }
    }
}

/// Unify the rank files of one cache directory (see the module docs).
///
/// Files are checked in rank order (lowest `(tp, pp, dp)` first, then by
/// name): every name must be a rank file name of `shape`, there must be two files or
/// more, each must be a JSON object without `_records`, and all `_metadata`
/// must be equal as JSON values (absent in all, or present and equal in all).
/// The first failed check is the reason to leave them.
///
/// The union holds every entry key of every file; where files disagree on a
/// key the lowest rank's value is kept and a [`Conflict`] recorded. Any
/// `_generation` in the inputs is ignored and recomputed; `_metadata` is the
/// lowest rank's.
pub fn unify(files: &[RankFile], shape: Shape) -> Outcome {
    match unify_inner(files, shape) {
        Ok(unified) => Outcome::Unified(unified),
        Err(reason) => Outcome::Leave(reason),
    }
}

fn unify_inner(files: &[RankFile], shape: Shape) -> Result<Unified, LeaveReason> {
    let mut order: Vec<(RankId, &RankFile)> = Vec::with_capacity(files.len());
    for file in files {
        let rank = shape
            .rank_of(&file.name)
            .ok_or_else(|| LeaveReason::NotRankFile {
                name: file.name.clone(),
                form: shape.rank_name_form(),
            })?;
        order.push((rank, file));
    }
    if order.len() < 2 {
        return Err(LeaveReason::FewerThanTwo {
            names: order.iter().map(|(_, f)| f.name.clone()).collect(),
        });
    }
    order.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));

    // Files with the same bytes (every file, once the directory is unified)
    // are parsed once: `same[i]` is the first file with the bytes of file i.
    let same: Vec<usize> = (0..order.len())
        .map(|i| {
            (0..i)
                .find(|&j| order[j].1.bytes == order[i].1.bytes)
                .unwrap_or(i)
        })
        .collect();
    let unique: Vec<usize> = (0..order.len()).filter(|&i| same[i] == i).collect();

    let parsed = parse_unique(&order, &unique)?;

    // The union: every (key, value, file) in rank order, stably sorted by
    // key, so that the first of each run of one key is the lowest rank's.
    let total: usize = parsed.iter().map(|(_, _, m)| m.len()).sum();
    let mut all: Vec<(String, Value, usize)> = Vec::with_capacity(total);
    let mut metadata = None;
    for (n, (i, meta, map)) in parsed.into_iter().enumerate() {
        if n == 0 {
            metadata = meta;
        }
        all.extend(map.into_iter().map(|(k, v)| (k, v, i)));
    }
    // Each file's entries are already sorted (FlashInfer writes them so):
    // the stable sort merges runs.
    all.sort_by(|a, b| a.0.cmp(&b.0));

    let mut entries: Vec<(&str, &Value)> = Vec::with_capacity(all.len());
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut run = 0;
    while run < all.len() {
        let (key, kept, kept_file) = (&all[run].0, &all[run].1, all[run].2);
        let mut next = run + 1;
        let mut differing: Vec<usize> = Vec::new();
        while next < all.len() && all[next].0 == *key {
            if all[next].1 != *kept {
                let file = all[next].2;
                differing.extend((file..order.len()).filter(|&j| same[j] == file));
            }
            next += 1;
        }
        if !differing.is_empty() {
            differing.sort_unstable();
            conflicts.push(Conflict {
                key: key.clone(),
                kept: order[kept_file].1.name.clone(),
                differing: differing.iter().map(|&j| order[j].1.name.clone()).collect(),
            });
        }
        entries.push((key.as_str(), kept));
        run = next;
    }

    let bytes = render_sorted(metadata.as_ref(), &entries);
    let already_identical = files.iter().all(|f| f.bytes == bytes);
    Ok(Unified {
        entries: entries.len(),
        bytes,
        conflicts,
        already_identical,
    })
}

/// Parse each of the files `unique` (indices into `order`) once and take
/// `_metadata` and `_generation` out of it: (index, metadata, the rest).
/// Every file must be a JSON object without `_records`, and all must agree
/// on `_metadata`.
#[allow(clippy::type_complexity)]
fn parse_unique(
    order: &[(RankId, &RankFile)],
    unique: &[usize],
) -> Result<Vec<(usize, Option<Value>, Map<String, Value>)>, LeaveReason> {
    let values = parse_all(&unique.iter().map(|&i| order[i].1).collect::<Vec<_>>());
    let mut parsed: Vec<(usize, Option<Value>, Map<String, Value>)> =
        Vec::with_capacity(unique.len());
    for (&i, value) in unique.iter().zip(values) {
        let file = order[i].1;
        let value: Value = value.map_err(|e| LeaveReason::NotJson {
            name: file.name.clone(),
            error: e.to_string(),
        })?;
        let Value::Object(mut map) = value else {
            return Err(LeaveReason::NotObject {
                name: file.name.clone(),
            });
        };
        if map.contains_key(RECORDS) {
            return Err(LeaveReason::HasRecords {
                name: file.name.clone(),
            });
        }
        // shift_remove keeps the order of the rest, and costs nothing for
        // keys at the ends, which is where FlashInfer puts these two.
        let metadata = map.shift_remove(METADATA);
        map.shift_remove(GENERATION);
        parsed.push((i, metadata, map));
    }
    for (i, metadata, _) in parsed.iter().skip(1) {
        if *metadata != parsed[0].1 {
            return Err(LeaveReason::MetadataDiffer {
                first: order[0].1.name.clone(),
                other: order[*i].1.name.clone(),
            });
        }
    }
    Ok(parsed)
}

/// `serde_json::from_slice` of every file, in order. Building the trees is
/// most of the cost of [`unify`] (an allocation per string, number and
/// container), so the files are parsed on up to 4 threads when the machine
/// has the cores; on one thread when a thread cannot be started.
fn parse_all(files: &[&RankFile]) -> Vec<serde_json::Result<Value>> {
    crate::signals::in_parts(files, "keepwrap-unify", |part| {
        part.iter()
            .map(|file| serde_json::from_slice::<Value>(&file.bytes))
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect()
}
