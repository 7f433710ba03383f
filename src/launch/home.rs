//! `~` as the engine's Python expands it (`posixpath.expanduser`, which
//! SGLang's `SGLANG_CACHE_DIR` default, vLLM's cache roots and the Hugging
//! Face hub cache go through): `~` and `~/...` take `HOME` when it is set,
//! empty too (`HOME=` makes `~/.cache` `/.cache`), else the home of the
//! user's password-database entry (`pwd.getpwuid(os.getuid())`); `~name`
//! takes `name`'s entry (`pwd.getpwnam`). Trailing slashes of the home are
//! dropped. With no entry Python leaves the path as written (a relative
//! directory named `~`); keepwrap then names no cache root rather than
//! guard that.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The password database's home of `user` (None: this process's user),
/// as `pwd.getpwuid`/`pwd.getpwnam` give it. The child runs as keepwrap's
/// user, so its entry is the engine's.
pub fn passwd_home(user: Option<&[u8]>) -> Option<PathBuf> {
    use nix::unistd::{getuid, User};
    let u = match user {
        None => User::from_uid(getuid()).ok()??,
        Some(name) => User::from_name(std::str::from_utf8(name).ok()?).ok()??,
    };
    Some(u.dir)
}

/// `path` expanded as `posixpath.expanduser` does, with `HOME`'s value
/// `home` (None: unset) and the password database `passwd` (see
/// [`passwd_home`]; a parameter so the pure callers stay pure). None when
/// `~` needs an entry the database does not have (Python would leave the
/// path as written).
pub fn expanduser(
    path: &OsStr,
    home: Option<&OsStr>,
    passwd: &dyn Fn(Option<&[u8]>) -> Option<PathBuf>,
) -> Option<PathBuf> {
    let b = path.as_bytes();
    if !b.starts_with(b"~") {
        return Some(PathBuf::from(path));
    }
    let end = b.iter().position(|&c| c == b'/').unwrap_or(b.len());
    let user_home: Vec<u8> = if end == 1 {
        match home {
            Some(h) => h.as_bytes().to_vec(),
            None => passwd(None)?.into_os_string().into_vec(),
        }
    } else {
        passwd(Some(&b[1..end]))?.into_os_string().into_vec()
    };
    let mut out = user_home;
    while out.last() == Some(&b'/') {
        out.pop();
    }
    out.extend_from_slice(&b[end..]);
    if out.is_empty() {
        out.push(b'/');
    }
    Some(PathBuf::from(OsString::from_vec(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_posixpath_expanduser() {
        let pw = |u: Option<&[u8]>| match u {
            None => Some(PathBuf::from("/pw/me/")),
            Some(b"bob") => Some(PathBuf::from("/home/bob")),
            Some(_) => None,
        };
        let none = |_: Option<&[u8]>| None;
        let e = |p: &str, h: Option<&str>, pw: &dyn Fn(Option<&[u8]>) -> Option<PathBuf>| {
            expanduser(OsStr::new(p), h.map(OsStr::new), pw).map(|p| p.display().to_string())
        };
        let s = |p: &str| Some(p.to_string());
        assert_eq!(e("~/.cache", Some("/h"), &pw), s("/h/.cache"));
        assert_eq!(e("~/.cache", Some("/h//"), &pw), s("/h/.cache"));
        assert_eq!(e("~/.cache", Some(""), &pw), s("/.cache"));
        assert_eq!(e("~", Some(""), &pw), s("/"));
        assert_eq!(e("~", Some("/"), &pw), s("/"));
        assert_eq!(e("~/.cache", None, &pw), s("/pw/me/.cache"));
        assert_eq!(e("~/.cache", None, &none), None);
        assert_eq!(e("~bob/x", Some("/h"), &pw), s("/home/bob/x"));
        assert_eq!(e("~eve/x", Some("/h"), &pw), None);
        assert_eq!(e("/abs", None, &none), s("/abs"));
        assert_eq!(e("rel/~", None, &none), s("rel/~"));
    }

    #[test]
    fn this_users_entry() {
        // every test machine runs as a user with an entry (root in CI)
        assert!(passwd_home(None).is_some());
        assert_eq!(passwd_home(Some(b"no such user \xff")), None);
    }
}
