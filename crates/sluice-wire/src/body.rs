//! How a message body (or a task result) is put on the wire and read back from it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use sluice_core::error::StoreError;
use sluice_core::message::{Body, BodyKind};

/// Any JSON value, kept as its exact text.
pub type JsonText = Box<RawValue>;

/// Marks a `body` (or `result`) that holds UTF-8 text rather than a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BodyEncoding {
    /// `body` is a JSON string holding the text that was sent as `text/plain`.
    Text,
}

pub(crate) fn decode_base64(field: &str, s: &str) -> Result<bytes::Bytes, StoreError> {
    STANDARD.decode(s).map(bytes::Bytes::from).map_err(|e| {
        StoreError::invalid(format!(
            "{field} is not valid base64 (standard alphabet with padding): {e}"
        ))
    })
}

/// The form a body (or result) takes on the wire, decided from its kind and its bytes.
pub enum BodyForm<'a> {
    /// `body`: the JSON value as it is (without surrounding whitespace).
    Json(&'a RawValue),
    /// `body` as a JSON string, with `body_encoding: "text"`.
    Text(&'a str),
    /// `body_base64`: binary, or stored bytes that do not match their kind (base64 is
    /// always faithful).
    Base64,
}

impl<'a> BodyForm<'a> {
    /// How `body` goes on the wire; a JSON body is checked, not copied.
    pub fn of(body: &'a Body) -> Self {
        match body.kind {
            BodyKind::Json => {
                serde_json::from_slice(&body.bytes).map_or(BodyForm::Base64, BodyForm::Json)
            }
            BodyKind::Text => {
                std::str::from_utf8(&body.bytes).map_or(BodyForm::Base64, BodyForm::Text)
            }
            BodyKind::Binary => BodyForm::Base64,
        }
    }
}

/// How a body (or result) is put on the wire: `(json, base64, encoding)`.
pub(crate) fn body_fields(body: &Body) -> (Option<JsonText>, Option<String>, Option<BodyEncoding>) {
    match BodyForm::of(body) {
        BodyForm::Json(raw) => (Some(raw.to_owned()), None, None),
        BodyForm::Text(text) => match serde_json::value::to_raw_value(text) {
            Ok(raw) => (Some(raw), None, Some(BodyEncoding::Text)),
            Err(_) => (None, Some(STANDARD.encode(&body.bytes)), None),
        },
        BodyForm::Base64 => (None, Some(STANDARD.encode(&body.bytes)), None),
    }
}

/// Builds a body from the JSON and base64 alternatives of a request.
pub(crate) fn body_from(
    field: &str,
    json: Option<JsonText>,
    base64: Option<String>,
    required: bool,
) -> Result<Option<Body>, StoreError> {
    match (json, base64) {
        (Some(_), Some(_)) => Err(StoreError::invalid(format!(
            "give either {field} (a JSON value) or {field}_base64 (bytes in base64), not both"
        ))),
        // The parsed value already owns its text: it becomes the body without a copy.
        (Some(j), None) => Ok(Some(Body::json(String::from(Box::<str>::from(j))))),
        (None, Some(b)) => Ok(Some(Body::binary(decode_base64(
            &format!("{field}_base64"),
            &b,
        )?))),
        (None, None) if required => Err(StoreError::invalid(format!(
            "missing {field}: give {field} (a JSON value) or {field}_base64 (bytes in base64)"
        ))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::SendRequest;

    #[test]
    fn send_keeps_json_text_exact() {
        let req: SendRequest =
            serde_json::from_str(r#"{"body": {"b": 1,  "a": [1.50, "x"]}}"#).unwrap();
        let (msgs, batch) = req.into_messages().unwrap();
        assert!(!batch);
        assert_eq!(&msgs[0].body.bytes[..], br#"{"b": 1,  "a": [1.50, "x"]}"#);
    }

    #[test]
    fn null_body_is_a_json_null_not_a_missing_body() {
        let req: SendRequest = serde_json::from_str(r#"{"body": null}"#).unwrap();
        let (msgs, _) = req.into_messages().unwrap();
        assert_eq!(&msgs[0].body.bytes[..], b"null");
    }

    #[test]
    fn bodies_come_back_in_their_form() {
        let text = Body::text("héllo \"x\"");
        let (j, b, e) = body_fields(&text);
        assert_eq!(j.unwrap().get(), r#""héllo \"x\"""#);
        assert!(b.is_none());
        assert_eq!(e, Some(BodyEncoding::Text));
        let bin = Body::binary(vec![0xff, 0x00, 0xfe]);
        let (j, b, _) = body_fields(&bin);
        assert!(j.is_none());
        assert_eq!(b.unwrap(), "/wD+");
    }
}
