//! What an S3 server says when it refuses a request, read in one place:
//! its error code (`<Code>` of the XML body), the region it names for the
//! bucket (the `x-amz-bucket-region` header, or `<Region>` of the body),
//! and whether the refusal holds for every key (a wrong bucket, region,
//! endpoint or credentials: [`Broken`]) or for this one call (a missing
//! key, a server error). A missing key is `NoSuchKey`; a 404 that names
//! another code (`NoSuchBucket`) is the bucket's, never an empty launch.

use crate::publish::{Broken, Failure};

/// What the client knows of where it sent the request, for the advice.
pub struct Sent<'a> {
    pub bucket: &'a str,
    /// The region the request was signed for.
    pub region: &'a str,
}

/// A refused request: its key, status, code and region, and [`Broken`]
/// when the refusal is one every call would get.
pub fn failure(
    key: &str,
    status: u16,
    headers: &http::HeaderMap,
    body: &[u8],
    sent: &Sent,
) -> Failure {
    let code = error_code(body);
    let region = headers
        .get("x-amz-bucket-region")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| element(body, "Region"))
        .filter(|r| is_region(r));
    let broken = bucket_wide(status, code.as_deref()).then(|| {
        Box::new(Broken::Refused {
            advice: advice(status, code.as_deref(), region.as_deref(), sent),
            code: code.clone(),
            region: region.clone(),
        })
    });
    Failure {
        key: key.to_string(),
        status: Some(status),
        what: code.unwrap_or_else(|| reason(status).to_string()),
        broken,
    }
}

/// A 404 that says the key is missing (S3's `NoSuchKey`, or no code at
/// all): the bucket answered and holds no such object.
pub fn missing_key(status: u16, body: &[u8]) -> bool {
    status == 404 && error_code(body).is_none_or(|c| c == "NoSuchKey")
}

/// Does a refusal hold for every key: a redirect, a refusal of the
/// credentials or of access, a bucket that does not exist, a request
/// signed for another region?
fn bucket_wide(status: u16, code: Option<&str>) -> bool {
    match status {
        300..=399 | 401 | 403 => true,
        404 => code.is_some_and(|c| c != "NoSuchKey"),
        400 => code.is_some_and(|c| {
            matches!(
                c,
                "AuthorizationHeaderMalformed"
                    | "IllegalLocationConstraintException"
                    | "InvalidAccessKeyId"
                    | "InvalidBucketName"
                    | "InvalidToken"
                    | "ExpiredToken"
                    | "TokenRefreshRequired"
            )
        }),
        _ => false,
    }
}

/// What to change, by what the server said.
fn advice(status: u16, code: Option<&str>, region: Option<&str>, sent: &Sent) -> String {
    let bucket = sent.bucket;
    match (code, region) {
        (Some("NoSuchBucket"), _) => format!(
            "there is no bucket '{bucket}' at this endpoint: check the bucket in --fleet (KEEPWRAP_FLEET) and the endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL)"
        ),
        (_, Some(r)) if r != sent.region => format!(
            "the bucket '{bucket}' is in {r}, and the request was signed for {}: set AWS_REGION={r}",
            sent.region
        ),
        (Some("AccessDenied" | "AllAccessDisabled" | "AccountProblem"), _) => format!(
            "these credentials may not do this in '{bucket}': the role needs s3:GetObject on the prefix (and s3:ListBucket on the bucket, without which a missing key also reads as AccessDenied; read-write also s3:PutObject and s3:DeleteObject)"
        ),
        (
            Some(
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken"
                | "TokenRefreshRequired",
            ),
            _,
        ) => "the credentials are not valid at this endpoint: check the AWS credentials (keys, profile, role) and that the endpoint is the bucket's".to_string(),
        (
            Some(
                "PermanentRedirect"
                | "TemporaryRedirect"
                | "AuthorizationHeaderMalformed"
                | "IllegalLocationConstraintException",
            ),
            _,
        ) => format!(
            "the bucket '{bucket}' is not in {}, or not at this endpoint: set AWS_REGION to the bucket's region (or AWS_ENDPOINT_URL_S3 to its endpoint)",
            sent.region
        ),
        _ if (300..400).contains(&status) => "the endpoint redirects elsewhere: set AWS_ENDPOINT_URL_S3 (or AWS_REGION) to where the bucket is".to_string(),
        _ => format!("the endpoint refuses requests for '{bucket}': check the credentials, the bucket policy and the endpoint"),
    }
}

/// The reason phrase of a status, for an answer with no code.
pub fn reason(status: u16) -> &'static str {
    match status {
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "error",
    }
}

/// `<Code>X</Code>` of an S3 error body: letters and digits only.
pub fn error_code(body: &[u8]) -> Option<String> {
    element(body, "Code").filter(|c| c.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The text of the first `<name>` element of a short body (at most 80
/// characters), else None.
fn element(body: &[u8], name: &str) -> Option<String> {
    let s = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = s.find(&open)? + open.len();
    let end = s[start..].find(&format!("</{name}>"))? + start;
    let text = &s[start..end];
    (!text.is_empty() && text.len() < 80).then(|| text.to_string())
}

/// A region as AWS spells one (`eu-west-1`): what a header or a body may
/// put in a line only when it is one.
fn is_region(r: &str) -> bool {
    (2..=32).contains(&r.len())
        && r.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(status: u16, header: Option<&str>, body: &str) -> Failure {
        let mut h = http::HeaderMap::new();
        if let Some(r) = header {
            h.insert("x-amz-bucket-region", r.parse().unwrap());
        }
        let sent = Sent {
            bucket: "kw-b",
            region: "us-east-1",
        };
        failure("p/HEAD", status, &h, body.as_bytes(), &sent)
    }

    fn code(f: &Failure) -> Option<&str> {
        match f.broken.as_deref() {
            Some(Broken::Refused { code, .. }) => code.as_deref(),
            _ => None,
        }
    }

    #[test]
    fn codes_regions_and_which_refusals_are_the_buckets() {
        let f = refused(404, None, "<Error><Code>NoSuchBucket</Code></Error>");
        assert_eq!(f.what, "NoSuchBucket");
        assert_eq!(code(&f), Some("NoSuchBucket"));
        assert!(!missing_key(
            404,
            b"<Error><Code>NoSuchBucket</Code></Error>"
        ));
        assert!(missing_key(404, b"<Error><Code>NoSuchKey</Code></Error>"));
        assert!(missing_key(404, b""));
        let f = refused(
            301,
            Some("eu-west-1"),
            "<Error><Code>PermanentRedirect</Code></Error>",
        );
        let Some(Broken::Refused { region, advice, .. }) = f.broken.as_deref() else {
            panic!("{f:?}")
        };
        assert_eq!(region.as_deref(), Some("eu-west-1"));
        assert!(advice.contains("AWS_REGION=eu-west-1"), "{advice}");
        assert_eq!(
            f.to_string(),
            "p/HEAD: HTTP 301 PermanentRedirect (the bucket is in eu-west-1)"
        );
        let f = refused(
            400,
            None,
            "<Error><Code>AuthorizationHeaderMalformed</Code><Region>ap-south-1</Region></Error>",
        );
        assert!(
            f.to_string().ends_with("(the bucket is in ap-south-1)"),
            "{f}"
        );
        assert_eq!(
            code(&refused(403, None, "<Code>AccessDenied</Code>")),
            Some("AccessDenied")
        );
        let bare = refused(302, Some("Not a region"), "");
        assert!(matches!(
            bare.broken.as_deref(),
            Some(Broken::Refused {
                code: None,
                region: None,
                ..
            })
        ));
        assert_eq!(bare.what, "Found");
        for (status, body) in [
            (500, "<Code>InternalError</Code>"),
            (503, "<Code>SlowDown</Code>"),
            (400, "<Code>InvalidArgument</Code>"),
            (404, "<Code>NoSuchKey</Code>"),
        ] {
            assert_eq!(refused(status, None, body).broken, None, "{status} {body}");
        }
        assert_eq!(error_code(b"<Code>a b</Code>"), None);
    }
}
