//! Request extractors that answer bad input with the error envelope (400 `invalid_argument`,
//! 413 `payload_too_large`) instead of axum's plain-text rejections.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use sluice_core::{MessageId, QueueName};

use crate::http::error::ApiError;

/// The largest request body read, set per router (see `ServerOptions::max_body_bytes`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The default request body limit: 16 MiB of message bodies grow by a third in base64, plus
/// room for the JSON around them.
pub const DEFAULT_BODY_LIMIT: usize = 24 * 1024 * 1024;

/// How much of an oversized body is read and thrown away before answering 413. Answering
/// while the client is still writing makes most clients fail with a broken pipe instead of
/// showing the 413; past this much, the connection is simply closed.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// Reads the whole body, refusing more than the router's limit with 413.
pub async fn read_body(req: Request) -> Result<(Parts, Bytes), ApiError> {
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map_or(DEFAULT_BODY_LIMIT, |l| l.0);
    let (parts, mut body) = req.into_parts();
    let too_large = || {
        ApiError::too_large(format!(
            "request body is over the {limit}-byte limit; split the batch"
        ))
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > (limit + DRAIN_LIMIT) as u64) {
        return Err(too_large());
    }
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::invalid(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen > limit + DRAIN_LIMIT {
            return Err(too_large());
        }
        if seen <= limit {
            buf.extend_from_slice(&data);
        } else {
            buf = bytes::BytesMut::new();
        }
    }
    if seen > limit {
        return Err(too_large());
    }
    Ok((parts, buf.freeze()))
}

/// The media type of a request, lowercased, without parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// True for `application/json` and `application/*+json`.
pub fn is_json(media: &str) -> bool {
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    match media_type(headers) {
        Some(m) if is_json(&m) => Ok(()),
        Some(m) => Err(ApiError::invalid(format!(
            "Content-Type must be application/json, got \"{m}\""
        ))),
        None => Err(ApiError::invalid(
            "Content-Type must be application/json (the header is missing)",
        )),
    }
}

/// Parses a JSON request body, with a message that says what was wrong and where.
///
/// Every request body of the API is a JSON object; serde would also fill a struct from an
/// array, which we refuse so that `[]` is not read as "all defaults".
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => {}
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() => {
            return Err(ApiError::invalid("request body must be a JSON object"));
        }
        Some(_) => {}
    }
    // Each rewrite reparses the body: a few integral numbers are a convenience, a body full
    // of them is refused as it was sent.
    const MAX_REWRITES: usize = 16;
    let mut fixed: Option<Vec<u8>> = None;
    let mut rewrites = 0;
    let e = loop {
        let text = fixed.as_deref().unwrap_or(bytes);
        let e = match serde_json::from_slice(text) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        match integral_float_as_integer(text, &e).filter(|_| rewrites < MAX_REWRITES) {
            Some(next) => {
                rewrites += 1;
                fixed = Some(next);
            }
            None => break e,
        }
    };
    Err({
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => {
                // Parsed again only on this path, to name the field: serde's message says what
                // is wrong with a value but not where it sits.
                let text = fixed.as_deref().unwrap_or(bytes);
                let mut de = serde_json::Deserializer::from_slice(text);
                match serde_path_to_error::deserialize::<_, T>(&mut de) {
                    Err(pe) if pe.path().to_string() != "." => ApiError::invalid(format!(
                        "request body has a wrong or unknown field at `{}`: {e}",
                        pe.path()
                    )),
                    _ => {
                        ApiError::invalid(format!("request body has a wrong or unknown field: {e}"))
                    }
                }
            }
            Category::Eof if bytes.iter().all(u8::is_ascii_whitespace) => {
                ApiError::invalid("request body is empty; send a JSON object")
            }
            _ => ApiError::invalid(format!("request body is not valid JSON: {e}")),
        }
    })
}

/// JSON Schema counts `2570.0` as an integer, and clients that compute milliseconds in
/// floating point (Python's `seconds * 1000`) send it so; serde refuses it for an integer
/// field. When that is the error, `text` again with that one number written as an integer;
/// `None` when the error is another or the number has a fraction. Bodies and results are
/// kept as raw JSON and never reach this error, so their text is never rewritten.
fn integral_float_as_integer(text: &[u8], e: &serde_json::Error) -> Option<Vec<u8>> {
    if !e.to_string().starts_with("invalid type: floating point `") {
        return None;
    }
    // The error's column is the number's last character (1-based).
    let line_start = if e.line() <= 1 {
        0
    } else {
        text.iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\n')
            .nth(e.line() - 2)?
            .0
            + 1
    };
    let end = line_start + e.column();
    let is_number_char =
        |b: &u8| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-');
    let start = text.get(..end)?.iter().rposition(|b| !is_number_char(b))? + 1;
    let value: f64 = std::str::from_utf8(&text[start..end]).ok()?.parse().ok()?;
    // Within ±2^53 every integer is exact in an f64 and prints as itself; -0 is 0.
    if value.fract() != 0.0 || value.abs() > 9_007_199_254_740_992.0 {
        return None;
    }
    let integer = if value == 0.0 {
        "0".to_owned()
    } else {
        format!("{value:.0}")
    };
    if integer.as_bytes() == &text[start..end] {
        return None;
    }
    let mut out = Vec::with_capacity(text.len());
    out.extend_from_slice(&text[..start]);
    out.extend_from_slice(integer.as_bytes());
    out.extend_from_slice(&text[end..]);
    Some(out)
}

/// A JSON body (`Content-Type: application/json` required).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let (_, bytes) = read_body(req).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON body that may be left out entirely (an empty body means all defaults).
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, bytes) = read_body(req).await?;
        if bytes.is_empty() {
            return Ok(OptionalJsonBody(T::default()));
        }
        require_json(&parts.headers)?;
        parse_json(&bytes).map(OptionalJsonBody)
    }
}

/// The raw body and its headers, for routes that take several content types.
#[derive(Debug)]
pub struct RawBody {
    /// The request headers.
    pub headers: HeaderMap,
    /// The body bytes.
    pub bytes: Bytes,
}

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, ApiError> {
        let (parts, bytes) = read_body(req).await?;
        Ok(RawBody {
            headers: parts.headers,
            bytes,
        })
    }
}

pub use crate::http::query::ApiQuery;

/// `If-None-Match: *` on a PUT: create only, never overwrite. Any other value is a 400 (the
/// API has no entity tags to match).
#[derive(Debug, Clone, Copy)]
pub struct CreateOnly(pub bool);

impl<S: Send + Sync> FromRequestParts<S> for CreateOnly {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(v) = parts.headers.get(header::IF_NONE_MATCH) else {
            return Ok(CreateOnly(false));
        };
        match v.to_str().map(str::trim) {
            Ok("*") => Ok(CreateOnly(true)),
            _ => Err(ApiError::invalid(
                "If-None-Match must be * (create only: refuse if the queue exists); \
                 leave the header out to create or update",
            )),
        }
    }
}

/// The `{q}` path segment, validated as a queue name.
#[derive(Debug)]
pub struct QueuePath(pub QueueName);

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("bad path: {}", e.body_text())))?;
        Ok(QueuePath(QueueName::new(name)?))
    }
}

/// The `{q}` and `{key}` path segments, validated as a queue name and a message key.
#[derive(Debug)]
pub struct QueueKeyPath(pub QueueName, pub sluice_core::MessageKey);

impl<S: Send + Sync> FromRequestParts<S> for QueueKeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((queue, key)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("bad path: {}", e.body_text())))?;
        Ok(QueueKeyPath(
            QueueName::new(queue)?,
            sluice_core::MessageKey::new(key)?,
        ))
    }
}

/// The `{name}` path segment, validated as a schedule name.
#[derive(Debug)]
pub struct SchedulePath(pub sluice_core::schedule::ScheduleName);

impl<S: Send + Sync> FromRequestParts<S> for SchedulePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("bad path: {}", e.body_text())))?;
        Ok(SchedulePath(sluice_core::schedule::ScheduleName::new(
            name,
        )?))
    }
}

/// The `{id}` path segment, validated as a message id.
#[derive(Debug)]
pub struct MessagePath(pub MessageId);

impl<S: Send + Sync> FromRequestParts<S> for MessagePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("bad path: {}", e.body_text())))?;
        Ok(MessagePath(id.parse()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Delays {
        delay_ms: Option<i64>,
        max: Option<u32>,
        pct: Option<f64>,
        maxes: Option<Vec<u32>>,
        body: Option<Box<serde_json::value::RawValue>>,
    }

    #[test]
    fn integral_numbers_fill_integer_fields() {
        let d: Delays =
            parse_json(b"{\"delay_ms\": 78865.0,\n \"max\": 1e1, \"body\": {\"x\": 2.0}}").unwrap();
        assert_eq!(d.delay_ms, Some(78865));
        assert_eq!(d.max, Some(10));
        assert_eq!(
            d.body.unwrap().get(),
            "{\"x\": 2.0}",
            "the body's text is untouched"
        );
        let d: Delays = parse_json(b"{\"delay_ms\":-903.0,\"pct\":5.0}").unwrap();
        assert_eq!((d.delay_ms, d.pct), (Some(-903), Some(5.0)));
        for zero in ["-0", "-0.0", "-0e5", "-1e-400"] {
            let d: Delays = parse_json(format!("{{\"delay_ms\": {zero}}}").as_bytes()).unwrap();
            assert_eq!(d.delay_ms, Some(0), "{zero}");
        }
        // A body full of them is refused as sent, after a bounded number of rewrites.
        let floats = |n: u32| {
            let list: Vec<String> = (0..n).map(|i| format!("{i}.0")).collect();
            format!("{{\"maxes\": [{}]}}", list.join(","))
        };
        let d: Delays = parse_json(floats(10).as_bytes()).unwrap();
        assert_eq!(d.maxes, Some((0..10).collect()));
        assert!(parse_json::<Delays>(floats(100).as_bytes()).is_err());
        for bad in [
            &b"{\"delay_ms\": 1.5}"[..],
            b"{\"max\": 5e9}",
            b"{\"delay_ms\": 1e300}",
        ] {
            let e = parse_json::<Delays>(bad).expect_err("refused");
            assert_eq!(e.code(), sluice_core::ErrorCode::InvalidArgument);
        }
    }
}
