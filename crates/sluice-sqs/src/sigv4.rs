//! AWS Signature Version 4, as SDKs sign every SQS request: the verifier rebuilds the
//! canonical request from what arrived, signs it with the secret of the access key the
//! `Authorization` header names, and compares. Keys come from `[[sqs_keys]]` in the config
//! file, each with the Sluice role and queue patterns it stands for.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use sluice_core::access::Role;

use crate::error::SqsError;

/// How far a request's `X-Amz-Date` may be from the broker's clock.
const MAX_SKEW_SECS: i64 = 15 * 60;

/// One access key of the SQS endpoint (`[[sqs_keys]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqsKey {
    /// The access key id clients are configured with (`AWS_ACCESS_KEY_ID`).
    pub access_key_id: String,
    /// Its secret (`AWS_SECRET_ACCESS_KEY`). SigV4 needs the secret itself to check a
    /// signature, so unlike API keys it cannot be stored as a hash: keep the file private.
    pub secret_access_key: String,
    /// What it may do, as an API key's role.
    pub role: Role,
    /// Queue-name patterns it applies to (`*` any run, `?` one character). Default: all.
    #[serde(default = "all_queues")]
    pub queues: Vec<String>,
}

fn all_queues() -> Vec<String> {
    vec!["*".to_owned()]
}

/// A request as the signature covers it.
pub struct Signed<'a> {
    /// `POST`, `GET`, ….
    pub method: &'a str,
    /// The path as it arrived (still percent-encoded).
    pub path: &'a str,
    /// The query string as it arrived, without `?`.
    pub query: &'a str,
    /// The headers.
    pub headers: &'a axum::http::HeaderMap,
    /// The body.
    pub body: &'a [u8],
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` header.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, SqsError> {
    let incomplete = |why: &str| SqsError::incomplete_signature(why);
    let rest = value
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| incomplete("the Authorization header is not AWS4-HMAC-SHA256"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').unwrap_or(("", ""));
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let credential = credential.ok_or_else(|| incomplete("Credential is missing"))?;
    let mut scope = credential.split('/');
    let (Some(access_key_id), Some(date), Some(region), Some(service), Some("aws4_request"), None) = (
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
    ) else {
        return Err(incomplete(
            "Credential must be <key>/<date>/<region>/<service>/aws4_request",
        ));
    };
    Ok(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed
            .ok_or_else(|| incomplete("SignedHeaders is missing"))?
            .split(';')
            .collect(),
        signature: signature.ok_or_else(|| incomplete("Signature is missing"))?,
    })
}

/// Checks the signature of `req` against `keys`, at `now` (Unix seconds).
///
/// # Errors
/// `MissingAuthenticationToken` without a signature, `IncompleteSignature` for a malformed
/// one, `InvalidClientTokenId` for an unknown key, `RequestExpired` for a clock too far off,
/// and `SignatureDoesNotMatch` for a wrong signature (a wrong secret).
pub fn verify<'k>(keys: &'k [SqsKey], req: &Signed<'_>, now: i64) -> Result<&'k SqsKey, SqsError> {
    let (auth, key, amz_date) = signer(keys, req.headers, now)?;
    // The signature covers the body only through its hash, so the hash is always taken of
    // the body received: a stated hash must match it, and an unsigned payload would let
    // anyone who saw one request replay its signature with another body.
    let payload = hex(&Sha256::digest(req.body));
    if header_value(req.headers, "x-amz-content-sha256").is_some_and(|s| s != payload) {
        return Err(SqsError::incomplete_signature(
            "X-Amz-Content-SHA256 must be the SHA-256 of the body (unsigned payloads are not \
             accepted)",
        ));
    }
    let canonical = canonical_request(req, &auth.signed_headers, &payload);
    let scope = format!(
        "{}/{}/{}/aws4_request",
        auth.date, auth.region, auth.service
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut mac = signing_mac(&key.secret_access_key, auth.date, auth.region, auth.service);
    mac.update(to_sign.as_bytes());
    let given = unhex(auth.signature).ok_or_else(SqsError::bad_signature)?;
    mac.verify_slice(&given)
        .map_err(|_| SqsError::bad_signature())?;
    Ok(key)
}

/// Checks what the headers alone can say about a request's signature (run before its body
/// is read, so that a request no key could have signed costs the broker its headers only):
/// it is signed with a known access key, at a time within 15 minutes of `now` (Unix
/// seconds), with every header AWS requires covered.
///
/// # Errors
/// As [`verify`], but for `SignatureDoesNotMatch`, which needs the body.
pub fn check_headers(
    keys: &[SqsKey],
    headers: &axum::http::HeaderMap,
    now: i64,
) -> Result<(), SqsError> {
    signer(keys, headers, now).map(|_| ())
}

/// The parsed `Authorization` header, the key it names and the time of signing, once the
/// headers pass [`check_headers`]'s checks.
fn signer<'h, 'k>(
    keys: &'k [SqsKey],
    headers: &'h axum::http::HeaderMap,
    now: i64,
) -> Result<(Authorization<'h>, &'k SqsKey, String), SqsError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(SqsError::missing_token)?;
    let auth = parse_authorization(header)?;
    let key = keys
        .iter()
        .find(|k| k.access_key_id == auth.access_key_id)
        .ok_or_else(SqsError::unknown_key)?;
    // The time of signing is X-Amz-Date, or else a Date header in the same form.
    let (date_header, amz_date) = match header_value(headers, "x-amz-date") {
        Some(d) => ("x-amz-date", d),
        None => (
            "date",
            header_value(headers, "date")
                .ok_or_else(|| SqsError::incomplete_signature("X-Amz-Date is missing"))?,
        ),
    };
    let at = parse_amz_date(&amz_date).ok_or_else(|| {
        SqsError::incomplete_signature(if date_header == "date" {
            "X-Amz-Date is missing (a Date header stands for it only as yyyymmddThhmmssZ)"
        } else {
            "X-Amz-Date is not yyyymmddThhmmssZ"
        })
    })?;
    if (at - now).abs() > MAX_SKEW_SECS || !amz_date.starts_with(auth.date) {
        return Err(SqsError::request_expired(&amz_date));
    }
    if let Some(name) = unsigned_header(headers, &auth.signed_headers, date_header) {
        return Err(SqsError::incomplete_signature(&format!(
            "the {name} header must be signed (SignedHeaders must list host, the date, \
             content-type and every x-amz-* header the request carries)"
        )));
    }
    Ok((auth, key, amz_date))
}

/// The first header the request carries that AWS requires a signature to cover but
/// `signed` does not name: `host`, the header that dates the request (`date_header`),
/// `content-type` and every `x-amz-*` header. Were one left out, it could be changed after
/// signing: `X-Amz-Target` picks the action of a JSON-protocol request, `Content-Type` the
/// protocol.
fn unsigned_header<'h>(
    headers: &'h axum::http::HeaderMap,
    signed: &[&str],
    date_header: &'h str,
) -> Option<&'h str> {
    let is_signed = |name: &str| signed.iter().any(|s| s.eq_ignore_ascii_case(name));
    let carried = headers.keys().map(axum::http::HeaderName::as_str);
    ["host", date_header]
        .into_iter()
        .chain(carried.filter(|n| *n == "content-type" || n.starts_with("x-amz-")))
        .find(|name| !is_signed(name))
}

/// The HMAC keyed with the request's signing key.
fn signing_mac(secret: &str, date: &str, region: &str, service: &str) -> Hmac<Sha256> {
    let step = |key: &[u8], data: &str| {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
        m.update(data.as_bytes());
        m.finalize().into_bytes()
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(&k_date, region);
    let k_service = step(&k_region, service);
    let k_signing = step(&k_service, "aws4_request");
    <Hmac<Sha256> as Mac>::new_from_slice(&k_signing).expect("HMAC takes any key")
}

/// The canonical request: method, path, query, the signed headers, their names and the
/// payload's hash, one per line.
fn canonical_request(req: &Signed<'_>, signed: &[&str], payload: &str) -> String {
    let path = if req.path.is_empty() { "/" } else { req.path };
    let mut query: Vec<(String, String)> = req
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k), false), encode(&decode(v), false))
        })
        .collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers = String::new();
    for name in signed {
        let values: Vec<String> = req
            .headers
            .get_all(*name)
            .iter()
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    format!(
        "{}\n{}\n{}\n{headers}\n{}\n{payload}",
        req.method,
        encode(path.as_bytes(), true),
        query.join("&"),
        signed.join(";"),
    )
}

fn header_value(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// RFC 3986 encoding of everything but the unreserved characters (and `/` in a path).
fn encode(bytes: &[u8], path: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (path && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-decoding (`+` stays `+`).
fn decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// `yyyymmddThhmmssZ` as Unix seconds.
fn parse_amz_date(s: &str) -> Option<i64> {
    let format =
        time::format_description::parse_borrowed::<2>("[year][month][day]T[hour][minute][second]Z")
            .ok()?;
    time::PrimitiveDateTime::parse(s, &format)
        .ok()
        .map(|t| t.assume_utc().unix_timestamp())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    /// The worked example of AWS's Signature Version 4 documentation (IAM `ListUsers`).
    #[test]
    fn the_documented_example_verifies() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
        );
        headers.insert("host", HeaderValue::from_static("iam.amazonaws.com"));
        headers.insert("x-amz-date", HeaderValue::from_static("20150830T123600Z"));
        headers.insert(
            "authorization",
            HeaderValue::from_static(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, \
                 Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            ),
        );
        let key = SqsKey {
            access_key_id: "AKIDEXAMPLE".to_owned(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
            role: Role::Admin,
            queues: all_queues(),
        };
        let req = Signed {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &headers,
            body: b"",
        };
        let now = parse_amz_date("20150830T123600Z").unwrap();
        assert!(verify(std::slice::from_ref(&key), &req, now).is_ok());
        let wrong = SqsKey {
            secret_access_key: "not the secret".to_owned(),
            ..key.clone()
        };
        let e = verify(std::slice::from_ref(&wrong), &req, now).unwrap_err();
        assert_eq!(e.code, "SignatureDoesNotMatch");
        let e = verify(std::slice::from_ref(&key), &req, now + 3600).unwrap_err();
        assert_eq!(e.code, "RequestExpired");
        let other = SqsKey {
            access_key_id: "SOMEONE".to_owned(),
            ..key.clone()
        };
        let e = verify(std::slice::from_ref(&other), &req, now).unwrap_err();
        assert_eq!(e.code, "InvalidClientTokenId");
        // A stated payload hash that is not the body's is refused, unsigned payloads too.
        for stated in ["UNSIGNED-PAYLOAD", &hex(&Sha256::digest(b"another body"))] {
            let mut headers = headers.clone();
            headers.insert(
                "x-amz-content-sha256",
                HeaderValue::from_str(stated).unwrap(),
            );
            let signed = ["content-type", "host", "x-amz-content-sha256", "x-amz-date"];
            let authorization = sign(
                &key,
                &Signed {
                    headers: &headers,
                    ..req
                },
                &signed,
            );
            headers.insert("authorization", authorization);
            let req = Signed {
                headers: &headers,
                ..req
            };
            let e = verify(std::slice::from_ref(&key), &req, now).unwrap_err();
            assert_eq!(e.code, "IncompleteSignature", "{stated}");
            assert!(e.message.contains("X-Amz-Content-SHA256"), "{e}");
        }
    }

    const JSON_BODY: &[u8] = br#"{"QueueUrl": "http://localhost:9324/000000000000/jobs"}"#;
    const SIGNED_AT: &str = "20261130T123258Z";

    fn admin() -> SqsKey {
        SqsKey {
            access_key_id: "AKIAADMIN".to_owned(),
            secret_access_key: "admin-secret".to_owned(),
            role: Role::Admin,
            queues: all_queues(),
        }
    }

    /// A JSON-protocol request, as an SDK sends it, for `target`.
    fn json_headers(target: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("localhost:9324"));
        h.insert(
            "content-type",
            HeaderValue::from_static("application/x-amz-json-1.0"),
        );
        h.insert("x-amz-date", HeaderValue::from_static(SIGNED_AT));
        h.insert("x-amz-target", HeaderValue::from_str(target).unwrap());
        h
    }

    /// Signs `req` with `key` over the headers `signed` (in this order), setting its
    /// `Authorization` header, as an SDK would.
    fn sign(key: &SqsKey, req: &Signed<'_>, signed: &[&str]) -> HeaderValue {
        let payload = hex(&Sha256::digest(req.body));
        let canonical = canonical_request(req, signed, &payload);
        let date = req
            .headers
            .get("x-amz-date")
            .or_else(|| req.headers.get("date"))
            .and_then(|v| v.to_str().ok())
            .unwrap();
        let day = &date[..8];
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{day}/us-east-1/sqs/aws4_request\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let mut mac = signing_mac(&key.secret_access_key, day, "us-east-1", "sqs");
        mac.update(to_sign.as_bytes());
        let signature = hex(&mac.finalize().into_bytes());
        HeaderValue::from_str(&format!(
            "AWS4-HMAC-SHA256 Credential={}/{day}/us-east-1/sqs/aws4_request, \
             SignedHeaders={}, Signature={signature}",
            key.access_key_id,
            signed.join(";")
        ))
        .unwrap()
    }

    /// Verifies a JSON-protocol request for `target` whose signature covers `signed`, after
    /// `change` alters its headers (as a relay on the way could).
    fn verify_json(signed: &[&str], change: impl FnOnce(&mut HeaderMap)) -> Result<(), SqsError> {
        let key = admin();
        let mut headers = json_headers("AmazonSQS.ListQueues");
        fn request(headers: &HeaderMap) -> Signed<'_> {
            Signed {
                method: "POST",
                path: "/",
                query: "",
                headers,
                body: JSON_BODY,
            }
        }
        let authorization = sign(&key, &request(&headers), signed);
        headers.insert("authorization", authorization);
        change(&mut headers);
        let req = request(&headers);
        let now = parse_amz_date(SIGNED_AT).unwrap();
        verify(std::slice::from_ref(&key), &req, now).map(|_| ())
    }

    #[test]
    fn a_signature_must_cover_the_target_and_the_other_headers_aws_requires() {
        let all = ["content-type", "host", "x-amz-date", "x-amz-target"];
        assert_eq!(verify_json(&all, |_| {}), Ok(()));
        // Signed over the target, which is then changed: the signature no longer matches.
        let e = verify_json(&all, |h| {
            h.insert(
                "x-amz-target",
                HeaderValue::from_static("AmazonSQS.DeleteQueue"),
            );
        })
        .unwrap_err();
        assert_eq!(e.code, "SignatureDoesNotMatch");
        // Signed without the target: refused whatever target comes with it, the one signed
        // for included.
        for target in ["AmazonSQS.ListQueues", "AmazonSQS.DeleteQueue"] {
            let e = verify_json(&["content-type", "host", "x-amz-date"], |h| {
                h.insert("x-amz-target", HeaderValue::from_str(target).unwrap());
            })
            .unwrap_err();
            assert_eq!(e.code, "IncompleteSignature", "{target}");
            assert!(e.message.contains("x-amz-target"), "{e}");
        }
        for (left_out, signed) in [
            ("content-type", &["host", "x-amz-date", "x-amz-target"][..]),
            ("x-amz-date", &["content-type", "host", "x-amz-target"][..]),
            ("host", &["content-type", "x-amz-date", "x-amz-target"][..]),
        ] {
            let e = verify_json(signed, |_| {}).unwrap_err();
            assert_eq!(e.code, "IncompleteSignature", "{left_out}");
            assert!(e.message.contains(left_out), "{e}");
        }
        // Any other x-amz-* header the request carries must be signed too.
        let e = verify_json(&all, |h| {
            h.insert("x-amz-security-token", HeaderValue::from_static("t"));
        })
        .unwrap_err();
        assert!(e.message.contains("x-amz-security-token"), "{e}");
        // Headers outside the rule need not be signed.
        assert_eq!(
            verify_json(&all, |h| {
                h.insert("user-agent", HeaderValue::from_static("Boto3/1.43.11"));
                h.insert("x-amzn-trace-id", HeaderValue::from_static("Root=1-2-3"));
            }),
            Ok(())
        );
    }

    #[test]
    fn a_signed_date_header_stands_for_x_amz_date() {
        let key = admin();
        let mut headers = json_headers("AmazonSQS.ListQueues");
        headers.remove("x-amz-date");
        headers.insert("date", HeaderValue::from_static(SIGNED_AT));
        let now = parse_amz_date(SIGNED_AT).unwrap();
        let req = Signed {
            method: "POST",
            path: "/",
            query: "",
            headers: &headers,
            body: JSON_BODY,
        };
        for (signed, ok) in [
            (&["content-type", "date", "host", "x-amz-target"][..], true),
            (&["content-type", "host", "x-amz-target"][..], false),
        ] {
            let mut headers = headers.clone();
            headers.insert("authorization", sign(&key, &req, signed));
            let req = Signed {
                headers: &headers,
                ..req
            };
            let outcome = verify(std::slice::from_ref(&key), &req, now);
            assert_eq!(outcome.is_ok(), ok, "{signed:?}: {outcome:?}");
        }
    }
}
