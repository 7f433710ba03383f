//! What `--done health` probes: the endpoint a launch serves on, read
//! from its URL or its options as the engine reads them.

use super::DoneError;

/// An HTTP endpoint to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host as written in the URL (brackets kept for IPv6), for `Host:`.
    pub host: String,
    pub port: u16,
    pub path: String,
    /// HTTPS: the request goes over TLS.
    pub tls: bool,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

impl Endpoint {
    /// `/health` on the server's `host` (none or a wildcard: loopback) and
    /// `port` as the engine's `int()` reads it (`default` when none or
    /// not a port); `tls`: HTTPS.
    pub fn health(host: Option<&str>, port: Option<&str>, default: u16, tls: bool) -> Endpoint {
        let host = match host.unwrap_or("127.0.0.1") {
            "0.0.0.0" | "" => "127.0.0.1".to_string(),
            "::" | "[::]" => "[::1]".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        Endpoint {
            host,
            port: port.and_then(python_u16).unwrap_or(default),
            path: "/health".into(),
            tls,
        }
    }

    /// `http://HOST[:PORT][/PATH]` or `https://...`.
    pub fn parse(url: &str) -> Result<Endpoint, DoneError> {
        let bad = |why: &'static str| DoneError::Url(url.to_string(), why);
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err(bad("only http:// and https:// URLs can be probed")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/health".to_string()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = &v6[end + 1..];
            (format!("[{}]", &v6[..end]), port.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| bad("the port is not a number from 0 to 65535"))?,
            None if tls => 443,
            None => 80,
        };
        Ok(Endpoint {
            host,
            port,
            path,
            tls,
        })
    }
}

/// Does a server launch serve HTTPS: `--ssl-certfile` or `--ssl-keyfile`
/// (uvicorn, which SGLang and vLLM run, turns TLS on with either), read by
/// `option`?
pub fn serves_tls(option: impl Fn(&str) -> Option<String>) -> bool {
    ["--ssl-certfile", "--ssl-keyfile"]
        .iter()
        .any(|f| option(f).is_some_and(|v| !v.is_empty()))
}

/// A number up to 65535 as Python's `int(text)` reads it (SGLang's and
/// vLLM's `--port` is `type=int`): surrounding whitespace, a sign, leading zeros and single
/// `_` between digits are allowed (`int(" 3_1555 ")` is 31555). ASCII
/// digits only: another script's digits, which `int()` also reads, give
/// None (the default port is probed).
pub fn python_u16(text: &str) -> Option<u16> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let b = t.as_bytes();
    let ok = !b.is_empty()
        && b.iter().all(|&c| c.is_ascii_digit() || c == b'_')
        && b.first().is_some_and(u8::is_ascii_digit)
        && b.last().is_some_and(u8::is_ascii_digit)
        && !t.contains("__");
    if !ok {
        return None;
    }
    let digits: String = t.chars().filter(|&c| c != '_').collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_urls_parse() {
        assert_eq!(
            Endpoint::parse("http://localhost:8080/ready")
                .unwrap()
                .to_string(),
            "http://localhost:8080/ready"
        );
        assert_eq!(
            Endpoint::parse("http://[::1]:81").unwrap().to_string(),
            "http://[::1]:81/health"
        );
        let https = Endpoint::parse("https://x/health").unwrap();
        assert_eq!((https.tls, https.port), (true, 443));
        assert_eq!(https.to_string(), "https://x:443/health");
        assert!(Endpoint::parse("ftp://x/health")
            .unwrap_err()
            .to_string()
            .contains("only http:// and https://"));
        assert!(Endpoint::parse("http://x:99999/").is_err());
    }

    #[test]
    fn numbers_read_as_python_int_reads_them() {
        for (text, port) in [
            ("8000", Some(8000)),
            ("31_555", Some(31555)),
            (" +0031555\n", Some(31555)),
            ("0", Some(0)),
            ("00", Some(0)),
            ("65535", Some(65535)),
            ("65536", None),
            ("-1", None),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("0x10", None),
            ("", None),
            ("1 0", None),
            ("99999999999999999999999", None),
        ] {
            assert_eq!(python_u16(text), port, "{text:?}");
        }
    }
}
