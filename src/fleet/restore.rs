//! The restore: before the start, the fleet's set for this launch fetched
//! (HEAD, the manifest, every blob, each verified), placed into the root
//! and signed, all or nothing, within `--fleet-timeout`; and the helper
//! thread every call to the bucket runs on.

use super::*;

impl Fleet {
    /// Before the start, when the root has no set for this launch: bring
    /// the fleet's set into the root and sign it (the files signed), or
    /// None (a cold boot, logged). Bounded by `--fleet-timeout`; a stop
    /// signal ends it (and keepwrap).
    pub fn restore(&self, root: &Path) -> Result<Option<Vec<PathBuf>>, crate::stops::Stopped> {
        let started = Instant::now();
        // A set is restored only onto the GPU model it was tuned on: a
        // machine that shows none (no NVIDIA driver, a container that
        // hides it, GPUs of several models) cannot check one, and boots
        // cold (and publishes nothing: see `publish`).
        let gpu = match silicon::machine_model(&crate::failpoint::nvidia_gpus_dir()) {
            Ok(g) => g,
            Err(why) => {
                crate::events::Event::FleetNoGpuModel { why: why.clone() }.emit();
                // The bucket is asked all the same whether it answers: a
                // bucket that is wrong says so at the start on any machine.
                let broken = self.probe(started)?;
                self.note(|s| s.restored(&format!("not restored: {why}"), broken.as_ref()));
                return Ok(None);
            }
        };
        let name = name_for(&self.name, &gpu);
        let (tx, rx) = mpsc::channel();
        let client = self.store.clone();
        let keys = (
            self.key(&name, "HEAD"),
            self.key(&name, "sets/"),
            self.key(&name, "blobs/"),
        );
        let head_key = keys.0.clone();
        let profile = self.profile;
        let place_of = self.nodes.as_ref().map(|(n, _)| (n.rank, n.nnodes));
        let shape = self.shape;
        let job = move || {
            let _ = tx.send(fetch(
                &*client,
                &keys,
                (profile, &name, &gpu),
                place_of,
                shape,
            ));
        };
        let got = match self.on_helper(started, rx, job)? {
            Helper::NoThread => return Ok(None),
            Helper::Done(r) => Some(r),
            Helper::TimedOut => None,
        };
        let (etag, result) = match got {
            None => (
                None,
                Err(Miss::Failed(Failure {
                    key: head_key.clone(),
                    status: None,
                    what: format!(
                        "no answer within {}",
                        humantime::format_duration(self.timeout)
                    ),
                    broken: None,
                })),
            ),
            Some(r) => r,
        };
        if let Some(etag) = etag {
            let seen = Seen {
                etag,
                unusable: match &result {
                    Ok(r) => !r.3,
                    Err(miss) => matches!(miss, Miss::Bad { .. } | Miss::Format { .. }),
                },
                build: result.as_ref().ok().map(|r| r.2.clone()),
                restored: result.as_ref().ok().map(|r| r.0.clone()),
            };
            if let Ok(mut s) = self.seen.lock() {
                *s = Some(seen);
            }
        }
        let (id, files) = match result {
            Ok((id, files, _, _)) => (id, files),
            Err(miss) => {
                match &miss {
                    Miss::Empty => crate::events::Event::FleetEmpty { key: head_key }.emit(),
                    Miss::Format { key, format } => crate::events::Event::FleetOtherFormat {
                        key: key.clone(),
                        format: *format,
                        reads: FORMAT,
                    }
                    .emit(),
                    m => failure_of(m)
                        .and_then(check::broken_event)
                        .unwrap_or_else(|| crate::events::Event::FleetRestoreFailed {
                            reason: m.to_string(),
                        })
                        .emit(),
                }
                self.note(|s| s.restored(&miss.to_string(), failure_of(&miss)));
                return Ok(None);
            }
        };
        match crate::publish::place(root, self.shape, &self.fingerprint, &files) {
            Ok(signed) => {
                crate::events::Event::FleetRestored {
                    files: signed.len(),
                    set: id.clone(),
                    took: started.elapsed(),
                }
                .emit();
                self.note(|s| s.restored(&format!("restored set {id}"), None));
                Ok(Some(signed))
            }
            Err(e) => {
                crate::events::Event::FleetCannotPlace {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                self.note(|s| s.restored(&format!("not placed: {e}"), None));
                Ok(None)
            }
        }
    }

    /// `job` on the fleet's helper thread, which sends its result on the
    /// channel `rx` reads, awaited until `--fleet-timeout` after `started`
    /// (a stop signal ends the wait, and keepwrap).
    pub(super) fn on_helper<T>(
        &self,
        started: Instant,
        rx: mpsc::Receiver<T>,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<Helper<T>, crate::stops::Stopped> {
        if let Err(e) = std::thread::Builder::new()
            .name("keepwrap-fleet".into())
            .spawn(job)
        {
            crate::events::Event::FleetNoThread {
                error: e.to_string(),
            }
            .emit();
            return Ok(Helper::NoThread);
        }
        let deadline = crate::clock::after(started, self.timeout);
        loop {
            crate::stops::check()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Helper::TimedOut);
            }
            match rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(r) => return Ok(Helper::Done(r)),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(Helper::TimedOut),
            }
        }
    }

    /// One GET under the prefix, where no launch's object is: a bucket
    /// that is wrong (it does not exist, refuses these credentials, is in
    /// another region, or nothing answers) is said as at a restore. What
    /// it said, then.
    fn probe(&self, started: Instant) -> Result<Option<Failure>, crate::stops::Stopped> {
        let (tx, rx) = mpsc::channel();
        let client = self.store.clone();
        let key = self.location.key(&format!("{TOP}/"));
        let job = move || {
            let _ = tx.send(client.get(&key, MAX_HEAD));
        };
        let Helper::Done(Err(f)) = self.on_helper(started, rx, job)? else {
            return Ok(None);
        };
        Ok(check::broken_event(&f).map(|e| {
            e.emit();
            f
        }))
    }
}

/// How a wait for the helper thread ended.
pub(super) enum Helper<T> {
    Done(T),
    /// The thread could not start (said).
    NoThread,
    /// No answer within the timeout.
    TimedOut,
}

pub(super) fn failure_of(m: &Miss) -> Option<&Failure> {
    match m {
        Miss::Failed(f) => Some(f),
        _ => None,
    }
}

/// A set fetched and verified: its id, this node's files (each path with
/// its bytes), their build, and whether its object is in its one form
/// (its canonical bytes).
pub(super) type Fetched = (String, Vec<(String, Vec<u8>)>, String, bool);

/// The network half of a restore: HEAD's ETag (None when it could not be
/// read), and HEAD, the manifest, every blob, each verified: the set's
/// id, its files with their bytes, and their build.
pub(super) fn fetch(
    client: &dyn Storage,
    keys: &(String, String, String),
    launch: (ProfileName, &Fingerprint, &str),
    place_of: Option<(u32, u32)>,
    shape: Shape,
) -> (Option<String>, Result<Fetched, Miss>) {
    let head = match client.get(&keys.0, MAX_HEAD) {
        Ok(Some(h)) => h,
        Ok(None) => return (None, Err(Miss::Empty)),
        Err(e) => return (None, Err(Miss::Failed(e))),
    };
    let etag = head.etag.clone();
    (
        Some(etag),
        fetch_set(client, keys, head.bytes, launch, place_of, shape),
    )
}

/// [`fetch`] after HEAD was read (its bytes).
pub(super) fn fetch_set(
    client: &dyn Storage,
    (head_key, sets, blobs): &(String, String, String),
    head: Vec<u8>,
    (profile, fingerprint, gpu): (ProfileName, &Fingerprint, &str),
    place_of: Option<(u32, u32)>,
    shape: Shape,
) -> Result<Fetched, Miss> {
    let bad = |key: &str, why: String| Miss::Bad {
        key: key.to_string(),
        why,
    };
    let id = match read_head(&head) {
        HeadIs::Set(id) => id,
        HeadIs::Format(format) => {
            return Err(Miss::Format {
                key: head_key.clone(),
                format,
            })
        }
        HeadIs::Bad(why) => return Err(bad(head_key, why)),
    };
    let set_key = format!("{sets}{id}.json");
    let bytes = client
        .get(&set_key, MAX_MANIFEST)
        .map_err(Miss::Failed)?
        .ok_or_else(|| bad(&set_key, "named by HEAD but missing".into()))?
        .bytes;
    if cache::sha256_hex(&bytes) != id {
        return Err(bad(&set_key, "its sha256 is not its id".into()));
    }
    let m: Envelope = serde_json::from_slice(&bytes)
        .map_err(|e| bad(&set_key, format!("not a manifest ({e})")))?;
    m.check(profile, fingerprint, shape)
        .map_err(|why| bad(&set_key, why))?;
    let canonical = m.canonical() == bytes;
    check_nodes(&m, place_of.map(|p| p.1), shape).map_err(|why| bad(&set_key, why))?;
    // Every node's part is fetched and verified, this node's placed (every
    // node's, for a tree that must be the same set on every node): all or
    // nothing across the nodes, as every node decides alike.
    let mut out = Vec::with_capacity(m.set.members.len());
    let mut builds = BTreeSet::new();
    let mut stamp = |at: &str| m.stamps.get(at).map(|t| t.as_bytes().to_vec());
    let mut stamps = silicon::Stamps::new(&mut stamp);
    for (f, node) in m.files() {
        let key = format!("{blobs}{}", f.sha256);
        // Read no more than the manifest says: a blob that is longer is
        // refused at its size, never read whole.
        let got = client
            .get(&key, f.size)
            .map_err(Miss::Failed)?
            .ok_or_else(|| bad(&key, format!("blob of {} missing", f.path)))?;
        if got.bytes.len() as u64 != f.size || cache::sha256_hex(&got.bytes) != f.sha256 {
            return Err(bad(
                &key,
                format!("blob of {} does not match its size and sha256", f.path),
            ));
        }
        if cache::json_object_entries(&got.bytes).is_err() {
            return Err(bad(
                &key,
                format!("blob of {} is not a cache file (not a JSON object)", f.path),
            ));
        }
        // A set the engine would reject is never restored: every file is
        // of one build, tuned on this machine's GPU model.
        let build = silicon::build_in(shape, &f.path, &got.bytes, &mut stamps)
            .map_err(|why| bad(&key, why))?;
        if build.gpu != gpu {
            return Err(bad(
                &key,
                format!(
                    "{} was tuned on GPU model '{}'; this machine shows '{gpu}'",
                    f.path, build.gpu
                ),
            ));
        }
        builds.insert(build.id);
        if node == place_of.map(|p| p.0) || shape.same_on_every_node() {
            out.push((f.path.clone(), got.bytes));
        }
    }
    let mut builds = builds.into_iter();
    match (builds.next(), builds.next()) {
        (Some(b), None) => Ok((id, out, b, canonical)),
        _ => Err(bad(
            &set_key,
            "its files were tuned under several FlashInfer builds".into(),
        )),
    }
}
