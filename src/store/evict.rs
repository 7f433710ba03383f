//! The store's entries, their sizes and use, and eviction.

use super::*;

impl Store {
    /// Every entry of the store, with its size on disk (an inode with
    /// several links in the entry counted once).
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let Ok(list) = fsx::list_dir(self.store.as_fd()) else {
            return out;
        };
        for (name, kind) in list {
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            if kind != fsx::Kind::Dir || !is_fp(&name) {
                continue;
            }
            let Ok(dir) = fsx::open_dir_at(self.store.as_fd(), name.as_str()) else {
                continue;
            };
            let shown = format!("{STATE_DIR}/store/{name}");
            let Some(manifest) = self.entry_manifest(dir.as_fd(), &shown, &name) else {
                continue;
            };
            let side = Side::of(dir.as_fd(), &manifest);
            // A unified directory's rank files are hard links of one
            // union: its bytes count once, not once a member.
            let mut inodes = std::collections::HashSet::new();
            let mut bytes = 0;
            for m in &manifest.set.members {
                let Some(d) = side.dir(&m.path) else {
                    bytes += m.size;
                    continue;
                };
                let [file, launch] = names(split(&m.path).1);
                match fsx::lstat_at(d.fd(), file.as_c_str()) {
                    Ok(st) if st.st_nlink > 1 => {
                        if inodes.insert((st.st_dev, st.st_ino)) {
                            bytes += st.st_size.max(0) as u64;
                        }
                    }
                    Ok(st) => bytes += st.st_size.max(0) as u64,
                    Err(_) => bytes += m.size,
                }
                if let Ok(st) = fsx::lstat_at(d.fd(), launch.as_c_str()) {
                    bytes += st.st_size.max(0) as u64;
                }
            }
            out.push(Entry { manifest, bytes });
        }
        out
    }

    /// Does the store hold any entry? (One listing, no entry read.)
    pub fn has_entries(&self) -> bool {
        fsx::list_dir(self.store.as_fd()).is_ok_and(|list| {
            list.iter().any(|(name, kind)| {
                *kind == fsx::Kind::Dir && std::str::from_utf8(name).is_ok_and(is_fp)
            })
        })
    }

    /// When the launch of a stored set was last used (a restore counts).
    pub fn last_used(&self, e: &Entry) -> u64 {
        self.record(&e.manifest.set.fingerprint)
            .map(|r| r.last_used)
            .unwrap_or(e.manifest.stored_at)
    }

    /// Evict entries unused for longer than `max_age`, then the least
    /// recently used until the store fits `max_size` (call under the lock),
    /// never the entry of `spare` (a set a cold start put aside, which
    /// waits for its boot to sign a new one: it counts toward the size).
    /// Each evicted entry leaves the store at once, into a trash directory
    /// of `.keepwrap` that the returned [`Evicted`] removes (after the lock
    /// is given back: deleting thousands of files must not hold it).
    pub fn evict(&self, limits: Limits, now: u64, spare: Option<&str>) -> Evicted {
        let mut entries: Vec<(u64, Entry)> = self
            .entries()
            .into_iter()
            .map(|e| (self.last_used(&e), e))
            .collect();
        let total_spared: u64 = entries
            .iter()
            .filter(|(_, e)| Some(e.manifest.set.fingerprint.as_str()) == spare)
            .map(|(_, e)| e.bytes)
            .sum();
        entries.retain(|(_, e)| Some(e.manifest.set.fingerprint.as_str()) != spare);
        entries.sort_by_key(|(used, e)| (*used, e.manifest.set.fingerprint.clone()));
        let mut total: u64 = total_spared + entries.iter().map(|(_, e)| e.bytes).sum::<u64>();
        let mut out = Evicted::default();
        for (used, e) in &entries {
            let old = now.saturating_sub(*used) > limits.max_age.as_secs();
            let over = total > limits.max_size;
            if !old && !over {
                continue;
            }
            let why = if old {
                format!(
                    "unused for longer than --store-max-age {}",
                    humantime::format_duration(limits.max_age)
                )
            } else {
                format!(
                    "the store is over --store-max-size {}",
                    size_text(limits.max_size)
                )
            };
            if let Some(trash) = self.evict_entry(e, *used, now, &why) {
                out.trash.push(trash);
            }
            total -= e.bytes;
            out.entries += 1;
        }
        out
    }

    /// Delete what [`Store::evict`] moved out of the store.
    pub fn remove_evicted(&self, evicted: Evicted) {
        for name in evicted.trash {
            fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
        }
    }

    /// Move one stored set out of the store (the trash directory it is in
    /// now, to delete), remove its launch record, and say why.
    pub(super) fn evict_entry(&self, e: &Entry, used: u64, now: u64, why: &str) -> Option<String> {
        let fp = &e.manifest.set.fingerprint;
        let trash = self.trash_entry(fp);
        if trash.is_some() {
            crate::failpoint::hit("store");
        }
        let _ = fsx::unlink_at(self.launches.as_fd(), format!("{fp}.json").as_str());
        let set = &e.manifest.set;
        cache::remove_manifest(self.root_fd.as_fd(), fp, &set.id, e.manifest.shape);
        crate::events::Event::Evicted {
            fingerprint: fp.to_string(),
            files: e.manifest.set.members.len(),
            bytes: e.bytes,
            size: (size_text(e.bytes)).to_string(),
            last_used: (ago(used, now)).to_string(),
            reason: why.to_string(),
        }
        .emit();
        trash
    }

    /// Evict every stored set `pick(entry, last used)` selects, least
    /// recently used first (call under the lock); the evicted entries.
    pub fn evict_where(
        &self,
        now: u64,
        why: &str,
        pick: impl Fn(&Entry, u64) -> bool,
    ) -> Vec<Entry> {
        let mut entries: Vec<(u64, Entry)> = self
            .entries()
            .into_iter()
            .map(|e| (self.last_used(&e), e))
            .filter(|(used, e)| pick(e, *used))
            .collect();
        entries.sort_by_key(|(used, e)| (*used, e.manifest.set.fingerprint.clone()));
        for (used, e) in &entries {
            if let Some(trash) = self.evict_entry(e, *used, now, why) {
                fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
            }
        }
        entries.into_iter().map(|(_, e)| e).collect()
    }
}

/// What [`Store::evict`] evicted: how many entries, and the trash
/// directories (names in `.keepwrap`) they wait in to be deleted.
#[derive(Debug, Default)]
pub struct Evicted {
    pub entries: usize,
    pub(super) trash: Vec<String>,
}

impl Evicted {
    /// Nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.trash.is_empty()
    }
}
