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
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::cache::{self, fsx};
use crate::launch::canonical::{self, Layout, Style};

/// The key of the metadata object.
pub const METADATA: &str = "_metadata";
/// The key of MegaMoE's single-writer records.
pub const RECORDS: &str = "_records";
/// The key of the generation digest.
pub const GENERATION: &str = "_generation";

/// A rank's place in the launch, from its file name
/// `rank_tp<T>_pp<P>_dp<D>.json` (MegaMoE: `rank_tp<T>_pp<P>_dp<D>_gpu<uuid>.json`).
/// Ordered by `(tp, pp, dp)`: the lowest wins a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RankId {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
}

impl RankId {
    /// The rank of a rank file name, or `None` when `name` is not one.
    /// Numbers are decimal as Python's `str(int)` writes them (no sign, no
    /// leading zero); the `_gpu` suffix needs a non-empty id.
    pub fn from_file_name(name: &str) -> Option<RankId> {
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
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tp{} pp{} dp{}", self.tp, self.pp, self.dp)
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
    /// A file whose name is not `rank_tp<T>_pp<P>_dp<D>[_gpu<uuid>].json`.
    NotRankFile { name: String },
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
            LeaveReason::NotRankFile { name } => write!(
                f,
                "{name} is not a rank file name (rank_tp<T>_pp<P>_dp<D>.json)"
            ),
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
/// name): every name must be a rank file name, there must be two files or
/// more, each must be a JSON object without `_records`, and all `_metadata`
/// must be equal as JSON values (absent in all, or present and equal in all).
/// The first failed check is the reason to leave them.
///
/// The union holds every entry key of every file; where files disagree on a
/// key the lowest rank's value is kept and a [`Conflict`] recorded. Any
/// `_generation` in the inputs is ignored and recomputed; `_metadata` is the
/// lowest rank's.
pub fn unify(files: &[RankFile]) -> Outcome {
    match unify_inner(files) {
        Ok(unified) => Outcome::Unified(unified),
        Err(reason) => Outcome::Leave(reason),
    }
}

fn unify_inner(files: &[RankFile]) -> Result<Unified, LeaveReason> {
    let mut order: Vec<(RankId, &RankFile)> = Vec::with_capacity(files.len());
    for file in files {
        let rank = RankId::from_file_name(&file.name).ok_or_else(|| LeaveReason::NotRankFile {
            name: file.name.clone(),
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

    // Parse each file once; take `_metadata` and `_generation` out of it.
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

/// `serde_json::from_slice` of every file, in order. Building the trees is
/// most of the cost of [`unify`] (an allocation per string, number and
/// container), so the files are parsed on up to 4 threads when the machine
/// has the cores; on one thread when a thread cannot be started.
fn parse_all(files: &[&RankFile]) -> Vec<serde_json::Result<Value>> {
    let parse = |file: &&RankFile| serde_json::from_slice::<Value>(&file.bytes);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
        .min(files.len());
    if workers <= 1 {
        return files.iter().map(parse).collect();
    }
    let chunk = files.len().div_ceil(workers);
    std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .skip(1)
            .map(|part| {
                let handle = std::thread::Builder::new()
                    .name("keepwrap-unify".into())
                    .spawn_scoped(scope, move || {
                        crate::signals::block_signals_in_thread();
                        part.iter().map(parse).collect::<Vec<_>>()
                    });
                (part, handle)
            })
            .collect();
        let mut out: Vec<serde_json::Result<Value>> = Vec::with_capacity(files.len());
        out.extend(files[..chunk].iter().map(parse));
        for (part, handle) in handles {
            match handle {
                Ok(handle) => out.extend(handle.join().expect("a parse thread panicked")),
                Err(_) => out.extend(part.iter().map(parse)),
            }
        }
        out
    })
}

/// FlashInfer's `_generation` of a parsed object: the sha256 hex of
/// `json.dumps(obj, sort_keys=True, separators=(",", ":"))`, leaving out any
/// `_generation` key of `obj` (FlashInfer hashes the object without it).
/// Strings are real strings (as parsed from JSON).
pub fn generation(obj: &Map<String, Value>) -> String {
    let mut fields: Vec<(&str, &Value)> = obj
        .iter()
        .filter(|(k, _)| k.as_str() != GENERATION)
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    generation_of_sorted(&fields)
}

/// A whole FlashInfer cache file: `_metadata` (when given), the entries
/// sorted by key in Python's code point order, then `_generation`, as
/// `json.dump(obj, f, indent=2)` writes it (no trailing newline). Of
/// entries with the same key the first is kept. Entries named `_metadata`,
/// `_records` or `_generation` must not be given. Strings are real strings
/// (as parsed from JSON).
pub fn render<'a>(
    metadata: Option<&Value>,
    entries: impl IntoIterator<Item = (&'a str, &'a Value)>,
) -> Vec<u8> {
    let mut entries: Vec<(&str, &Value)> = entries.into_iter().collect();
    if !entries.is_sorted_by(|a, b| a.0 < b.0) {
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
    }
    render_sorted(metadata, &entries)
}

/// [`render`] of entries sorted by key, without duplicates.
fn render_sorted(metadata: Option<&Value>, entries: &[(&str, &Value)]) -> Vec<u8> {
    debug_assert!(entries.is_sorted_by(|a, b| a.0 < b.0));
    debug_assert!(entries
        .iter()
        .all(|(k, _)| ![METADATA, RECORDS, GENERATION].contains(k)));

    // The hashed form sorts `_metadata` among the entries' keys (after
    // every key that starts with `(`).
    let generation = match metadata {
        None => generation_of_sorted(entries),
        Some(meta) => {
            let at = entries.partition_point(|(k, _)| *k < METADATA);
            let mut fields = Vec::with_capacity(entries.len() + 1);
            fields.extend_from_slice(&entries[..at]);
            fields.push((METADATA, meta));
            fields.extend_from_slice(&entries[at..]);
            generation_of_sorted(&fields)
        }
    };

    let file = FileObject {
        metadata,
        entries,
        generation: &generation,
    };
    // About what json.dump(indent=2) writes for a FlashInfer value.
    let mut out = Vec::with_capacity(256 + entries.len() * 192);
    canonical::write_python_json(&mut out, &file, Style::INDENT2)
        .expect("serializing into a Vec cannot fail");
    out
}

/// The sha256 hex of the compact, sorted JSON of an object whose `fields`
/// are already sorted by key.
fn generation_of_sorted(fields: &[(&str, &Value)]) -> String {
    let mut hasher = Sha256::new();
    let object = Fields {
        fields,
        sort_nested: true,
    };
    let compact = Style {
        layout: Layout::Compact,
        sort_keys: false,
    };
    canonical::write_python_json(&mut hasher, &object, compact)
        .expect("serializing into a hasher cannot fail");
    hex::encode(hasher.finalize())
}

/// The object FlashInfer writes: `_metadata`, the entries, `_generation`.
struct FileObject<'a> {
    metadata: Option<&'a Value>,
    entries: &'a [(&'a str, &'a Value)],
    generation: &'a str,
}

impl Serialize for FileObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let len = self.entries.len() + 1 + usize::from(self.metadata.is_some());
        let mut map = s.serialize_map(Some(len))?;
        if let Some(meta) = self.metadata {
            map.serialize_entry(METADATA, &Py::new(meta, false))?;
        }
        for (key, value) in self.entries {
            map.serialize_entry(&*canonical::py_str_from_str(key), &Py::new(value, false))?;
        }
        map.serialize_entry(GENERATION, self.generation)?;
        map.end()
    }
}

/// An object of the given fields, in their order.
struct Fields<'a> {
    fields: &'a [(&'a str, &'a Value)],
    sort_nested: bool,
}

impl Serialize for Fields<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.fields.len()))?;
        for (key, value) in self.fields {
            map.serialize_entry(
                &*canonical::py_str_from_str(key),
                &Py::new(value, self.sort_nested),
            )?;
        }
        map.end()
    }
}

/// A borrowed `Value` as canonical's writer needs it: strings and keys in
/// its sentinel form (a real U+10FFFF doubled), objects' keys in Python
/// order when `sort` (real strings: UTF-8 byte order is code point order).
/// Numbers keep their text (serde_json's `arbitrary_precision`).
struct Py<'a> {
    value: &'a Value,
    sort: bool,
}

impl<'a> Py<'a> {
    fn new(value: &'a Value, sort: bool) -> Self {
        Py { value, sort }
    }
}

impl Serialize for Py<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Number(n) => n.serialize(s),
            Value::String(text) => s.serialize_str(&canonical::py_str_from_str(text)),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Py::new(item, self.sort))?;
                }
                seq.end()
            }
            Value::Object(object) => {
                let mut fields: Vec<(&String, &Value)> = object.iter().collect();
                if self.sort {
                    fields.sort_by(|a, b| a.0.cmp(b.0));
                }
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (key, value) in fields {
                    map.serialize_entry(
                        &*canonical::py_str_from_str(key),
                        &Py::new(value, self.sort),
                    )?;
                }
                map.end()
            }
        }
    }
}

/// What unifying the cache directories of a tree did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TreeReport {
    /// Directories whose rank files were rewritten as their union.
    pub rewritten: usize,
}

/// Unify, directory by directory, the rank files among `files` (paths
/// relative to `root`): each directory whose files agree on `_metadata` and
/// carry no `_records` gets the union written over every rank file,
/// atomically and without following a symlink. One log line per directory
/// says what happened or why its files were left as they are.
pub fn unify_tree<'a>(root: &Path, files: impl IntoIterator<Item = &'a Path>) -> TreeReport {
    let mut by_dir: BTreeMap<&Path, Vec<&str>> = BTreeMap::new();
    for rel in files {
        let (Some(dir), Some(name)) = (rel.parent(), rel.file_name().and_then(|n| n.to_str()))
        else {
            continue;
        };
        if RankId::from_file_name(name).is_some() {
            by_dir.entry(dir).or_default().push(name);
        }
    }
    let mut report = TreeReport::default();
    if by_dir.is_empty() {
        return report;
    }
    let root_fd = match fsx::open_root(root) {
        Ok(fd) => fd,
        Err(e) => {
            crate::events::unify::cannot_unify_root(root.display(), e);
            return report;
        }
    };
    let total = by_dir.len();
    for (n, (dir, names)) in by_dir.into_iter().enumerate() {
        match unify_dir(root_fd.as_fd(), dir, &names) {
            Ok(true) => report.rewritten += 1,
            Ok(false) => {}
            // Every other directory would fail the same way: one warning.
            Err(e) if no_room(&e) => {
                crate::events::unify::unify_no_room(dir.display(), e, total - n - 1);
                break;
            }
            Err(e) => crate::events::unify::unify_failed(dir.display(), e),
        }
    }
    report
}

/// A write failed for want of room or of a writable file system.
fn no_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Most conflicts named one per line; the rest are counted.
const CONFLICT_LINES: usize = 10;

fn unify_dir(root: BorrowedFd<'_>, dir: &Path, names: &[&str]) -> io::Result<bool> {
    // Never rewrite files another user can swap or planted: they are not
    // signed either.
    if let Some(why) = cache::untrusted_dir(root, dir)? {
        crate::events::unify::unify_left(dir.display(), format_args!("left as they are: {why}"));
        return Ok(false);
    }
    let dfd = fsx::open_dir_path(root, dir)?;
    let mut files = Vec::with_capacity(names.len());
    let mut modes = Vec::with_capacity(names.len());
    for name in names {
        let mut bytes = Vec::new();
        let st = fsx::read_at(dfd.as_fd(), *name, &mut bytes, cache::MAX_CACHE_FILE)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        modes.push(st.st_mode & 0o7777);
        files.push(RankFile {
            name: name.to_string(),
            bytes,
        });
    }
    let unified = match unify(&files) {
        Outcome::Leave(reason) => {
            crate::events::unify::unify_left(dir.display(), reason);
            return Ok(false);
        }
        Outcome::Unified(u) => u,
    };
    if unified.already_identical {
        crate::events::unify::already_unified(dir.display(), files.len());
        return Ok(false);
    }
    // The union is one content: written once (a temp file, fsynced), then
    // every rank path becomes a hard link to it, each atomically (a link
    // under a temp name renamed onto the rank file). The engine replaces a
    // rank file by rename (`os.replace` of its own temp file), which gives
    // that path a new inode and leaves the others' alone. One fsync of the
    // directory for all the renames.
    let mode = modes.iter().fold(0o7777, |a, m| a & m);
    let union = fsx::write_temp_at(dfd.as_fd(), &unified.bytes, mode, true)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", files[0].name)))?;
    let mut name_buf = Vec::new();
    let linked = files.iter().try_for_each(|file| {
        name_buf.clear();
        name_buf.extend_from_slice(file.name.as_bytes());
        name_buf.push(0);
        let cname = CStr::from_bytes_with_nul(&name_buf).map_err(io::Error::other)?;
        fsx::link_onto_at(dfd.as_fd(), &union, cname)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", file.name)))
            .map(|()| crate::failpoint::hit("unify"))
    });
    let _ = fsx::unlink_at(dfd.as_fd(), union.as_slice());
    linked?;
    fsx::fsync_dir(dfd.as_fd())?;
    crate::events::unify::unified(
        dir.display(),
        files.len(),
        unified.entries,
        unified.conflicts.len(),
    );
    for c in unified.conflicts.iter().take(CONFLICT_LINES) {
        crate::events::unify::unify_conflict(dir.display(), c);
    }
    if unified.conflicts.len() > CONFLICT_LINES {
        crate::events::unify::unify_more_conflicts(
            dir.display(),
            unified.conflicts.len() - CONFLICT_LINES,
        );
    }
    Ok(true)
}
