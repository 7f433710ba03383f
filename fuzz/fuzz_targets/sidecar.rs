//! The sidecar parser: any bytes, judged for the fingerprint they carry
//! (so that well-formed inputs reach the set checks). Never panics; a
//! trusted sidecar names a relative cache file path.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fingerprint = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| v.get("fingerprint")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "0".repeat(64));
    if let Some(path) = keepwrap::cache::fuzzing::judge_sidecar(data, &fingerprint) {
        assert!(!path.starts_with('/') && !path.split('/').any(|c| c == ".."));
        assert!(keepwrap::cache::is_cache_file(std::path::Path::new(&path)));
    }
    // And for a fingerprint it does not carry: never trusted.
    assert!(keepwrap::cache::fuzzing::judge_sidecar(data, "not-a-fingerprint").is_none());
});
