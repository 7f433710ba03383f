//! Publishing a set into the bucket: the files of one build, each blob,
//! then the set's [`Envelope`] and HEAD; a multi-node launch's node, its
//! part of the boot, and the union of the parts once every node's is
//! there.

use std::collections::{BTreeMap, BTreeSet};

use crate::cache::{self, Member, Shape, SignedFile};
use crate::digest::Fingerprint;
use crate::engine::fingerprint::ProfileName;
use crate::publish::{Failure, Put, Storage};

use super::manifest::{check_files, read_head, Envelope, Head, HeadIs, Placed, MAX_MANIFEST};
use super::{s3, silicon};

/// A set's files as published: each member (its sha256 the one signed)
/// with its bytes, as `cache::read_signed` read them.
pub(super) type Files = Vec<SignedFile>;

/// A launch in the bucket: its directory key (ending in `/`), profile and
/// name.
pub(super) type LaunchAt<'a> = (&'a str, ProfileName, &'a Fingerprint);

/// Blobs, manifest, then HEAD (created only when there is none, or
/// replaced when it is still the object `replace` names). The set's id,
/// and whether HEAD names it.
pub(super) fn publish(
    client: &dyn Storage,
    launch: LaunchAt,
    files: Files,
    stamps: BTreeMap<String, String>,
    replace: Option<&str>,
) -> Result<(String, bool), Failure> {
    upload_blobs(client, launch.0, &files)?;
    let placed = placed(&files, None);
    name_set(client, launch, (placed, stamps), None, replace)
}

/// The signed files of one build: that of the file written last (the
/// engine's own tuning of this boot, after any file a restore placed), and
/// that build. A file whose `_metadata` names no GPU model cannot be
/// published: no pod could match it to its machine.
pub(super) fn newest_build(
    files: Vec<SignedFile>,
    shape: Shape,
    stamp: &mut dyn FnMut(&str) -> Option<Vec<u8>>,
) -> Result<Built, String> {
    let mut built = Vec::with_capacity(files.len());
    let mut stamps = silicon::Stamps::new(stamp);
    let mut unstamped = Vec::new();
    for f in files {
        let b = match silicon::build_in(shape, &f.member.path, &f.bytes, &mut stamps) {
            Ok(b) => b,
            // A file whose stamp file is gone (a set restored from the
            // bucket, its environment never written again here) is of no
            // build that can be told: left out, as a file of another build.
            Err(_) if shape.stamp_of(&f.member.path).is_some() => {
                unstamped.push(f.member.path);
                continue;
            }
            Err(why) => return Err(why),
        };
        built.push((f.mtime, b, f));
    }
    let newest = built
        .iter()
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|x| x.1.clone())
        .ok_or_else(|| "no files".to_string())?;
    let (chosen, dropped): (Vec<_>, Vec<_>) = built.into_iter().partition(|x| x.1 == newest);
    let files: Files = chosen.into_iter().map(|x| x.2).collect();
    let dropped = dropped
        .into_iter()
        .map(|x| x.2.member.path)
        .chain(unstamped)
        .collect();
    // the stamps of the files chosen only
    let used: BTreeSet<String> = files
        .iter()
        .filter_map(|f| shape.stamp_of(&f.member.path))
        .collect();
    let mut stamps = stamps.texts();
    stamps.retain(|at, _| used.contains(at));
    Ok((files, newest, dropped, stamps))
}

/// The files of one build, that build, the files left out, and the stamps
/// of the files kept.
pub(super) type Built = (Files, silicon::Build, Vec<String>, BTreeMap<String, String>);

/// The files of the build chosen, refused when a directory of it also
/// holds rank files of another build (another GPU model's, say): the rank
/// files of one directory are one set, published whole or not at all.
pub(super) fn whole_dirs(
    (chosen, build, dropped, stamps): Built,
) -> Result<(Files, silicon::Build, BTreeMap<String, String>), String> {
    let dir = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let dirs: BTreeSet<String> = chosen.iter().map(|f| dir(&f.member.path)).collect();
    if let Some(other) = dropped.iter().find(|p| dirs.contains(&dir(p))) {
        return Err(format!(
            "{} is of another build than the other rank files of its directory",
            other
        ));
    }
    Ok((chosen, build, stamps))
}

/// The members of `files`, each of `node`: each path once.
fn placed(files: &Files, node: Option<u32>) -> Vec<Placed> {
    let mut out: Vec<Placed> = files.iter().map(|f| (f.member.clone(), node)).collect();
    out.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    out.dedup_by(|a, b| a.0.path == b.0.path);
    out
}

/// Every blob, each created only when absent (content addressing): the
/// bytes of each file, under the sha256 its member holds, once they are
/// seen to have it. A member's sha256 taken from the set manifest on its
/// sidecar's word (`cache::read_signed`) is checked here, on the
/// publication's thread; one computed from the bytes read is theirs. A file
/// changed under a sidecar that still vouches for the old bytes (planted)
/// would otherwise put other bytes under that key, where no later upload
/// of the real bytes can replace them (a create finds the key taken) and
/// every restore refuses them.
fn upload_blobs(client: &dyn Storage, dir: &str, files: &Files) -> Result<(), Failure> {
    let mut done = BTreeSet::new();
    for f in files {
        let (m, bytes) = (&f.member, &f.bytes);
        if done.insert(m.sha256.as_str()) {
            let key = format!("{dir}blobs/{}", m.sha256);
            let got = (!f.hashed).then(|| cache::sha256_hex(bytes));
            if let Some(got) = got.filter(|got| *got != m.sha256) {
                return Err(Failure::new(
                    &key,
                    None,
                    format!(
                        "{}: its bytes (sha256 {got}) are not the ones signed: it changed after it was signed; nothing is published",
                        m.path
                    ),
                ));
            }
            client.put_if_absent(&key, bytes)?;
        }
        crate::failpoint::hit("fleet");
    }
    Ok(())
}

/// The set of these files, then HEAD (created only when there is
/// none, or replaced when it is still the object `replace` names). The
/// set's id, and whether HEAD names it.
fn name_set(
    client: &dyn Storage,
    (dir, profile, name): LaunchAt,
    (files, stamps): (Vec<Placed>, BTreeMap<String, String>),
    nnodes: Option<u32>,
    replace: Option<&str>,
) -> Result<(String, bool), Failure> {
    let m = Envelope::new(profile, name, files, nnodes, stamps);
    let id = m.id();
    client.put_if_absent(&format!("{dir}sets/{id}.json"), &m.canonical())?;
    crate::failpoint::hit("fleet");
    let head = Head::of(&id);
    let head_key = format!("{dir}HEAD");
    let replaced = |etag: &str| -> Result<bool, Failure> {
        Ok(client.replace(&head_key, &head, etag)? == Put::Written)
    };
    let won = match client.put_if_absent(&head_key, &head)? {
        Put::Written => true,
        // HEAD named a set this boot's restore could not use, or one of
        // another build, and is still that object: it moves forward.
        Put::Refused
            if replace
                .filter(|e| !e.is_empty())
                .is_some_and(|e| replaced(e).unwrap_or(false)) =>
        {
            true
        }
        Put::Refused => match client.get(&format!("{dir}HEAD"), s3::MAX_OBJECT)? {
            // HEAD names this set already (in keepwrap's bytes or in any
            // other form of them: one written by hand): written again, in
            // keepwrap's bytes, only if it is still that object, so that
            // its time says when the launch was last used, which `fleet gc`
            // reads.
            Some(o) if read_head(&o.bytes) == HeadIs::Set(id.clone()) => {
                client.replace(&format!("{dir}HEAD"), &head, &o.etag)?;
                true
            }
            _ => false,
        },
    };
    Ok((id, won))
}

/// HEAD (`key`), naming `set`, written again while it is still the object
/// read with `etag`, or created when there is none (`fleet gc` removed it
/// meanwhile: created anew, as a publisher does, gc keeps the launch):
/// whether it names `set` now (a refusal where another node or pod wrote
/// it just now, naming the same set, is as good).
pub(super) fn rewrite_head(
    client: &dyn Storage,
    key: &str,
    set: &str,
    etag: &str,
) -> Result<bool, Failure> {
    let head = Head::of(set);
    let replaced = match client.replace(key, &head, etag) {
        Ok(put) => put == Put::Written,
        // S3 answers If-Match on a missing key 404.
        Err(f) if f.status == Some(404) => false,
        Err(f) => return Err(f),
    };
    Ok(replaced
        || client.put_if_absent(key, &head)? == Put::Written
        || client
            .get(key, s3::MAX_OBJECT)?
            .is_some_and(|o| read_head(&o.bytes) == HeadIs::Set(set.to_string())))
}

/// A multi-node launch's node: its blobs, then its part
/// (`parts/<boot>/<rank>.json`, created only when absent: the first part
/// of a node in a boot stays), then every node's part of the boot. When
/// all are there, their union is the set, named as one node's would be:
/// Ok(the set's id, whether HEAD names it). Else Err(how many nodes have
/// no part yet): a later node names the set.
pub(super) fn publish_part(
    client: &dyn Storage,
    launch: LaunchAt,
    (rank, nnodes): (u32, u32),
    boot: &str,
    (files, stamps): (Files, BTreeMap<String, String>),
    shape: Shape,
    replace: Option<&str>,
) -> Result<Result<(String, bool), usize>, Failure> {
    let (dir, profile, name) = launch;
    upload_blobs(client, dir, &files)?;
    let part = Envelope::new(
        profile,
        name,
        placed(&files, Some(rank)),
        Some(nnodes),
        stamps,
    );
    let parts = format!("{dir}parts/{boot}/");
    let mine = format!("{parts}{rank}.json");
    if client.put_if_absent(&mine, &part.canonical())? == Put::Refused {
        // The slot was taken: by these very bytes (this node published
        // again), or by another boot that had the same id. A node whose
        // slot holds other bytes never names the boot's set: the union
        // would hold another boot's files for this node.
        let there = client.get(&mine, MAX_MANIFEST)?;
        if there.is_none_or(|o| o.bytes != part.canonical()) {
            return Err(Failure {
                key: mine,
                status: Some(412),
                what: "this node's part slot of the boot holds another part (another boot with the same boot id?): the boot's set is not named".into(),
                broken: None,
            });
        }
    }
    crate::failpoint::hit("fleet");
    let (mut all, mut stamps, mut missing) = (Vec::new(), BTreeMap::new(), 0);
    for r in 0..nnodes {
        let key = format!("{parts}{r}.json");
        let Some(o) = client.get(&key, MAX_MANIFEST)? else {
            missing += 1;
            continue;
        };
        let bad = |what: String| Failure {
            key: key.clone(),
            status: None,
            what,
            broken: None,
        };
        let p: Envelope =
            serde_json::from_slice(&o.bytes).map_err(|e| bad(format!("not a part ({e})")))?;
        if p.nnodes != Some(nnodes)
            || p.nodes.len() != p.set.members.len()
            || p.nodes.iter().any(|n| *n != r)
        {
            return Err(bad(format!("not node {r}'s part of this launch")));
        }
        p.check(profile, name, shape).map_err(bad)?;
        all.extend(p.set.members.into_iter().map(|m| (m, Some(r))));
        // the lowest node's stamp where two differ (the parts are read in
        // node order)
        for (at, text) in p.stamps {
            stamps.entry(at).or_insert(text);
        }
    }
    if missing > 0 {
        return Ok(Err(missing));
    }
    if shape.same_on_every_node() {
        // One set on every node: a path several nodes publish is the
        // lowest node's.
        all.sort_by(|a, b| (&a.0.path, a.1).cmp(&(&b.0.path, b.1)));
        all.dedup_by(|later, first| later.0.path == first.0.path);
    } else {
        all.sort_by(|a, b| (&a.0.path, a.1).cmp(&(&b.0.path, b.1)));
    }
    let members: Vec<Member> = all.iter().map(|f| f.0.clone()).collect();
    check_files(&members, shape).map_err(|what| Failure {
        key: parts.clone(),
        status: None,
        what: format!("the union of the parts: {what}"),
        broken: None,
    })?;
    if !shape.same_on_every_node() {
        shapes_agree(client, dir, &all)?;
    }
    name_set(client, launch, (all, stamps), Some(nnodes), replace).map(Ok)
}

/// Every shape that several nodes' files hold has one tactic in all of
/// them (the tactics of one boot are all-reduced across the ranks): else
/// the union would put the nodes of later launches on different tactics
/// for one shape, which the engine's gate cannot see. Each blob is
/// fetched and verified as a restore does.
fn shapes_agree(client: &dyn Storage, dir: &str, all: &[Placed]) -> Result<(), Failure> {
    let mut tactic_of: std::collections::BTreeMap<String, (u32, serde_json::Value)> =
        std::collections::BTreeMap::new();
    for (f, node) in all {
        let key = format!("{dir}blobs/{}", f.sha256);
        let bad = |what: String| Failure {
            key: key.clone(),
            status: None,
            what,
            broken: None,
        };
        let got = client
            .get(&key, f.size)?
            .ok_or_else(|| bad(format!("blob of {} missing", f.path)))?;
        if cache::sha256_hex(&got.bytes) != f.sha256 {
            return Err(bad(format!("blob of {} does not match its sha256", f.path)));
        }
        let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&got.bytes)
            .map_err(|_| bad(format!("blob of {} is not a JSON object", f.path)))?;
        let node = node.unwrap_or(0);
        for (shape, value) in obj {
            if shape.starts_with('_') {
                continue;
            }
            // [runner, tactic, measurements...]: the tactic decides.
            let tactic = match &value {
                serde_json::Value::Array(v) if v.len() >= 2 => v[..2].to_vec().into(),
                v => v.clone(),
            };
            match tactic_of.get(&shape) {
                Some((n, t)) if *n != node && *t != tactic => {
                    return Err(bad(format!(
                        "nodes {n} and {node} hold different tactics for one shape: the parts are not of one boot; the boot's set is not named"
                    )))
                }
                Some(_) => {}
                None => {
                    tactic_of.insert(shape, (node, tactic));
                }
            }
        }
    }
    Ok(())
}
