//! Before the start of a launch whose managed store keepwrap keeps (a
//! one-rank vLLM launch, an SGLang on the store): the store's own check of
//! what prune kept, the store or the fleet restored.

use std::path::{Path, PathBuf};

/// Before the start of a launch whose managed store keepwrap keeps: the
/// store's own check of its environments' directories
/// ([`super::check_dirs`]) for what prune kept (or the
/// store or the fleet restored). A kept entry in an environment directory
/// whose name is not the hash of its manifest leaves the whole set
/// untrusted: named in one line, and every kept file goes. Each entry was
/// checked when it was signed (its name the hash of its key, a JSON object
/// with a key, runner and tactic: the store's `check_file`), and its
/// signature holds its bytes since.
pub fn check_kept(root: &Path, kept: &mut Vec<PathBuf>) {
    if kept.is_empty() {
        return;
    }
    let findings = match super::check_dirs(root) {
        Ok(f) => f,
        Err(e) => vec![super::Finding {
            path: String::new(),
            why: super::Why::Unreadable(e.to_string()),
        }],
    };
    let concerns = |f: &super::Finding| {
        if matches!(f.why, super::Why::NoManifest) {
            // FlashInfer never reads it and writes it when it is missing
            return false;
        }
        let dir = match f.path.strip_suffix("manifest.json") {
            Some(dir) => dir,
            None if f.path.ends_with('/') || f.path.is_empty() => &f.path,
            None => return kept.iter().any(|k| k.as_os_str() == f.path.as_str()),
        };
        kept.iter().any(|k| k.to_string_lossy().starts_with(dir))
    };
    let bad: Vec<&super::Finding> = findings.iter().filter(|f| concerns(f)).collect();
    if bad.is_empty() {
        return;
    }
    for f in &bad {
        crate::events::Event::UntrustedStoreEntry {
            path: f.path.clone(),
            why: f.why.to_string(),
        }
        .emit();
    }
    let remove_said = |path: PathBuf| {
        if let Err(e) = remove(&path) {
            crate::events::Event::CannotRemoveStoreEntry {
                path,
                error: e.to_string(),
            }
            .emit();
        }
    };
    let n = kept.len();
    for k in kept.drain(..) {
        remove_said(root.join(&k));
        remove_said(root.join(k.with_extension("launch")));
    }
    // A manifest that is not its directory's is removed too: FlashInfer
    // writes one only where there is none, so the next boot's own would
    // never replace it, and every boot after would be cold.
    for f in &bad {
        let dir = f.path.strip_suffix("manifest.json").unwrap_or(&f.path);
        if dir.ends_with('/') && !dir.is_empty() {
            remove_said(root.join(dir).join("manifest.json"));
        }
    }
    crate::events::Event::UntrustedStoreRemoved { files: n }.emit();
}

/// Remove the file at `path`; one already gone is removed.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
