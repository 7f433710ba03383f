//! The cache file parser and unify: any bytes as a rank file (and, split at
//! the first 0xff byte, as two rank files of one directory). Never panics;
//! what unify writes is a cache file keepwrap accepts, and unifying it
//! again changes nothing.
#![no_main]

use keepwrap::unify::{unify, Outcome, RankFile};
use libfuzzer_sys::fuzz_target;

fn file(rank: u32, bytes: &[u8]) -> RankFile {
    RankFile {
        name: format!("rank_tp{rank}_pp0_dp0.json"),
        bytes: bytes.to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = keepwrap::cache::fuzzing::cache_file_entries(data);
    let (a, b) = match data.iter().position(|&x| x == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    if let Outcome::Unified(u) = unify(&[file(0, a), file(1, b)], keepwrap::engine::SGLANG) {
        assert!(
            keepwrap::cache::fuzzing::cache_file_entries(&u.bytes).is_some(),
            "unify wrote a file keepwrap would not sign"
        );
        match unify(&[file(0, &u.bytes), file(1, &u.bytes)], keepwrap::engine::SGLANG) {
            Outcome::Unified(again) => {
                assert!(again.already_identical, "unify is not idempotent");
                assert_eq!(again.bytes, u.bytes);
            }
            Outcome::Leave(why) => panic!("unify's own output is left: {why}"),
        }
    }
});
