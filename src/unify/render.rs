//! Rendering: the bytes FlashInfer's `AutoTuner.save_configs` writes for
//! an object, and its `_generation`.

use super::*;

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
pub(super) fn render_sorted(metadata: Option<&Value>, entries: &[(&str, &Value)]) -> Vec<u8> {
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
pub(super) fn generation_of_sorted(fields: &[(&str, &Value)]) -> String {
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
    crate::digest::hex(hasher.finalize())
}

/// The object FlashInfer writes: `_metadata`, the entries, `_generation`.
pub(super) struct FileObject<'a> {
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
pub(super) struct Fields<'a> {
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
pub(super) struct Py<'a> {
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
