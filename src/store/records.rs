//! Launch records: `launches/<fp>.json`, one per signed launch.

use super::*;

impl Store {
    pub fn record(&self, fp: &str) -> Option<LaunchRecord> {
        if !is_fp(fp) {
            return None;
        }
        read_json(
            self.launches.as_fd(),
            &format!("{STATE_DIR}/launches"),
            &format!("{fp}.json"),
            fsx::STATE_FILE_MAX,
        )
    }

    /// Remove the record of `fp` (`keepwrap forget`): whether there was one.
    pub fn forget_record(&self, fp: &str) -> io::Result<bool> {
        if !is_fp(fp) {
            return Ok(false);
        }
        match fsx::unlink_at(self.launches.as_fd(), format!("{fp}.json").as_str()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Is there any launch record (did a launch ever sign on this root)?
    pub fn has_records(&self) -> bool {
        fsx::list_dir(self.launches.as_fd())
            .is_ok_and(|list| list.iter().any(|(name, _)| name.ends_with(b".json")))
    }

    /// Every launch record.
    pub fn records(&self) -> Vec<LaunchRecord> {
        let Ok(list) = fsx::list_dir(self.launches.as_fd()) else {
            return Vec::new();
        };
        list.into_iter()
            .filter_map(|(name, _)| {
                let name = String::from_utf8(name).ok()?;
                let fp = name.strip_suffix(".json")?;
                self.record(fp)
            })
            .collect()
    }

    /// Record that `fp` signed `files` cache files now, with its inputs.
    pub fn record_signed(&self, fp: &Fingerprint, profile: &str, inputs: Value, files: usize) {
        let now = now_secs();
        let first = self.record(fp).map_or(now, |r| r.first_signed);
        let rec = LaunchRecord {
            format: FORMAT,
            fingerprint: fp.to_string(),
            profile: profile.to_string(),
            inputs,
            first_signed: first,
            last_signed: now,
            last_used: now,
            files,
        };
        if let Err(e) = write_json(self.launches.as_fd(), &format!("{fp}.json"), &rec) {
            crate::events::Event::CannotWriteRecord {
                fingerprint: fp.to_string(),
                error: e.to_string(),
            }
            .emit();
        }
    }

    /// Record that `fp` was used now (its cache reused or restored).
    pub fn touch(&self, fp: &Fingerprint) {
        if let Some(mut rec) = self.record(fp) {
            rec.last_used = now_secs();
            let _ = write_json(self.launches.as_fd(), &format!("{fp}.json"), &rec);
        }
    }
}
