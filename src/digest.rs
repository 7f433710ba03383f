//! sha256 in hex, and the launch fingerprint that is one: how it is
//! written in full and how a log line names it by its first 8 digits.

use std::fmt;
use std::ops::Deref;

use sha2::{Digest, Sha256};

/// Lowercase hex of `bytes`.
pub fn hex(bytes: impl AsRef<[u8]>) -> String {
    use fmt::Write;
    let bytes = bytes.as_ref();
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    #[cfg(test)]
    HASHED.with(|n| n.set(n.get() + 1));
    hex(Sha256::digest(bytes))
}

#[cfg(test)]
thread_local! {
    /// How many times this thread called [`sha256_hex`]: what a test
    /// counts to show a hash is not computed again.
    pub(crate) static HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A launch fingerprint: the lowercase sha256 hex of what identifies a
/// launch. Shown in full by `Display`, by its first 8 digits through
/// [`Fingerprint::short`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of these bytes (a canonical payload).
    pub fn of(bytes: &[u8]) -> Fingerprint {
        Fingerprint(sha256_hex(bytes))
    }

    /// A fingerprint read back from disk (a marker, a file name): exactly
    /// 64 lowercase hex digits, as keepwrap writes one; None for anything
    /// else, which names no launch.
    pub fn parse(s: &str) -> Option<Fingerprint> {
        is_sha256_hex(s).then(|| Fingerprint(s.to_string()))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 digits, as log lines name a launch.
    pub fn short(&self) -> Short<'_> {
        short(&self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Deref for Fingerprint {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Fingerprint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Fingerprint {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Fingerprint {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Fingerprint {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl From<Fingerprint> for String {
    fn from(f: Fingerprint) -> String {
        f.0
    }
}

/// A fingerprint named by its first 8 digits: `Display` writes
/// `0123abcd...`, as log lines show a launch; [`Short::digits`] is the 8
/// digits alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short<'a>(&'a str);

/// The short form of `fingerprint`: its first 8 characters (all of it if
/// it has fewer; a planted sidecar's may not be hex).
pub fn short(fingerprint: &str) -> Short<'_> {
    match fingerprint.char_indices().nth(8) {
        Some((end, _)) => Short(&fingerprint[..end]),
        None => Short(fingerprint),
    }
}

impl<'a> Short<'a> {
    /// The first 8 digits, without the ellipsis.
    pub fn digits(self) -> &'a str {
        self.0
    }
}

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}...", self.0)
    }
}

/// Lowercase hex digits only, as keepwrap writes them (an empty slice is).
pub fn is_lower_hex(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A sha256 as keepwrap writes one: 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && is_lower_hex(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lowercase_digits_per_byte() {
        assert_eq!(hex([0x00u8, 0x0a, 0xab, 0xff]), "000aabff");
        assert_eq!(hex([]), "");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_fingerprint_read_back_is_64_lowercase_hex_digits() {
        let f = Fingerprint::of(b"{}");
        assert_eq!(Fingerprint::parse(f.as_str()), Some(f.clone()));
        assert_eq!(Fingerprint::parse(&f.as_str().to_uppercase()), None);
        assert_eq!(Fingerprint::parse(&f.as_str()[..63]), None);
        assert_eq!(Fingerprint::parse(&format!("{f}0")), None);
        assert_eq!(Fingerprint::parse(&format!("{}g", &f.as_str()[..63])), None);
        assert_eq!(Fingerprint::parse(""), None);
    }

    #[test]
    fn short_is_eight_digits_and_an_ellipsis() {
        let f = Fingerprint::of(b"{}");
        assert_eq!(f.as_str().len(), 64);
        assert_eq!(f.to_string(), f.as_str());
        assert_eq!(f.short().to_string(), format!("{}...", &f.as_str()[..8]));
        assert_eq!(f.short().digits(), &f.as_str()[..8]);
        assert_eq!(short("abc").to_string(), "abc...");
        assert_eq!(
            short("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}").digits(),
            "\u{e9}".repeat(8)
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
