//! `keepwrap explain`: how a launch differs from every signed launch
//! recorded in the store, nearest first ([`crate::keeper::explain`]).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cache::Shape;
use crate::clock::now_secs;
use crate::digest::short;
use crate::engine::fingerprint::Launch;
use crate::keeper::explain::{differences, nearest};
use crate::store::{ago, Store};

/// `keepwrap explain`: compare `launch` with every signed launch in the
/// store, nearest first.
pub fn print(root: Option<(PathBuf, Shape)>, launch: &Launch) -> ExitCode {
    let inputs = launch.redacted_inputs();
    let mut out = String::new();
    let Some((root, shape)) = root else {
        return super::no_root();
    };
    crate::events::set_root(&root);
    let store = Store::open_existing(&root, shape);
    // A launch whose engine last ran with inputs its words do not show is
    // offered the set of what ran: that is the launch compared.
    let seen = store
        .as_ref()
        .and_then(|s| crate::keeper::seen_as(s, launch.fingerprint()));
    if let Some(s) = &seen {
        out.push_str(&format!(
            "its words read as {}; its engine last ran as {}, with inputs the words do not show (the engine_differs line of that boot names them)\n",
            launch.fingerprint().short(),
            s.short()
        ));
    }
    let fp = seen.as_ref().unwrap_or(launch.fingerprint());
    let now = now_secs();
    let records = store.as_ref().map(Store::records).unwrap_or_default();
    let own = records.iter().find(|r| *fp == r.fingerprint).cloned();
    out.push_str(&format!(
        "this launch: {} ({} profile)",
        fp.short(),
        launch.profile().as_str()
    ));
    match &own {
        Some(r) => out.push_str(&format!(
            ": signed {} ({}, last used {})\n",
            ago(r.last_signed, now),
            crate::events::counted(r.files, "file", "files"),
            ago(r.last_used, now)
        )),
        None => out.push_str(": never signed under this cache root\n"),
    }
    let others = nearest(records, fp, &inputs);
    if others.is_empty() {
        out.push_str(&format!(
            "no other signed launch recorded under {}\n",
            root.display()
        ));
    }
    for (r, d) in &others {
        let stored = store
            .as_ref()
            .and_then(|s| s.manifest(&r.fingerprint))
            .is_some();
        out.push_str(&format!(
            "{} signed {}, {}{}: differs in: {}\n",
            short(&r.fingerprint),
            ago(r.last_signed, now),
            crate::events::counted(r.files, "file", "files"),
            if stored { " in the store" } else { "" },
            differences(d)
        ));
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
