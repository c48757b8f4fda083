//! How a message body (or a task result) is put on the wire and read back from it.
//!
//! A body travels as a group of fields: `body`, `body_base64` and, in views, `body_encoding`
//! (a result as `result`, `result_base64`, `result_encoding`). Every view and request declares
//! its groups with `wire_struct!`, which writes the fields with their serde and OpenAPI
//! attributes in one place; `BodyFields` is a view's group as a value, made from a body, and
//! `body_from` turns a request's group into a body.
//!
//! The structs keep the group as plain fields rather than holding a `BodyFields` under
//! `#[serde(flatten)]`: flatten buffers the fields through serde's `Content`, which loses the
//! `RawValue` token (a JSON body would no longer be kept as its exact text), does not combine
//! with `deny_unknown_fields`, and makes utoipa describe the struct as an `allOf`. Hand-written
//! `Serialize` and `Deserialize` impls would avoid that, but for seven structs of up to 24
//! fields; the macro keeps the derives, so the JSON, the parse errors and the OpenAPI document
//! stay byte for byte what they were.

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

/// A view's body (or result) group as a value: the fields [`BodyForm`] decides for a body,
/// all absent for none.
#[derive(Debug, Default)]
pub(crate) struct BodyFields {
    /// `body` (or `result`): the JSON value, or the text as a JSON string.
    pub(crate) json: Option<JsonText>,
    /// `body_base64`: the bytes in base64.
    pub(crate) base64: Option<String>,
    /// `body_encoding`: `text` when `json` holds a text.
    pub(crate) encoding: Option<BodyEncoding>,
}

impl BodyFields {
    /// How `body` is put on the wire; every field absent when there is no body.
    pub(crate) fn of(body: Option<&Body>) -> Self {
        let Some(body) = body else {
            return BodyFields::default();
        };
        let base64 = || BodyFields {
            base64: Some(STANDARD.encode(&body.bytes)),
            ..BodyFields::default()
        };
        match BodyForm::of(body) {
            BodyForm::Json(raw) => BodyFields {
                json: Some(raw.to_owned()),
                ..BodyFields::default()
            },
            BodyForm::Text(text) => match serde_json::value::to_raw_value(text) {
                Ok(raw) => BodyFields {
                    json: Some(raw),
                    base64: None,
                    encoding: Some(BodyEncoding::Text),
                },
                Err(_) => base64(),
            },
            BodyForm::Base64 => base64(),
        }
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

/// Declares a view or request struct whose body (or result) groups are written as
/// `@view { body, body_base64, body_encoding }` or `@request { body, body_base64 }`, each
/// field name after its own doc lines (the OpenAPI description); every other field is written
/// as usual. A group's fields get their types and attributes here, once:
/// - the JSON field is `Option<JsonText>`, described as any JSON value, and a field that is
///   present reads as `Some` even when it is `null` (a JSON `null` body is a body);
/// - every field is left out of the JSON when absent.
///
/// Fields keep the order they are written in, which is the order of the JSON.
macro_rules! wire_struct {
    // The struct: its fields are turned over one at a time into the brackets.
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident { $($fields:tt)* }
    ) => {
        $crate::body::wire_struct!(@fields [$(#[$attr])* $vis struct $name] [] $($fields)*);
    };
    // A view's group: a request's pair, then the text marker.
    (
        @fields $head:tt [$($done:tt)*]
        @view {
            $(#[$json_doc:meta])* $json:ident,
            $(#[$base64_doc:meta])* $base64:ident,
            $(#[$encoding_doc:meta])* $encoding:ident $(,)?
        }
        $($rest:tt)*
    ) => {
        $crate::body::wire_struct!(@fields $head [$($done)*]
            @request { $(#[$json_doc])* $json, $(#[$base64_doc])* $base64 }
            $(#[$encoding_doc])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $encoding: Option<$crate::body::BodyEncoding>,
            $($rest)*
        );
    };
    // A request's group: the body as JSON or as base64 (text comes in a raw request only).
    (
        @fields $head:tt [$($done:tt)*]
        @request {
            $(#[$json_doc:meta])* $json:ident,
            $(#[$base64_doc:meta])* $base64:ident $(,)?
        }
        $($rest:tt)*
    ) => {
        $crate::body::wire_struct!(@fields $head [
            $($done)*
            $(#[$json_doc])*
            #[serde(
                default,
                deserialize_with = "crate::convert::present",
                skip_serializing_if = "Option::is_none"
            )]
            #[schema(value_type = Option<Value>)]
            pub $json: Option<$crate::body::JsonText>,
            $(#[$base64_doc])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $base64: Option<String>,
        ] $($rest)*);
    };
    // Any other field, as written.
    (
        @fields $head:tt [$($done:tt)*]
        $(#[$field_attr:meta])* $field_vis:vis $field:ident : $ty:ty,
        $($rest:tt)*
    ) => {
        $crate::body::wire_struct!(@fields $head [
            $($done)*
            $(#[$field_attr])* $field_vis $field: $ty,
        ] $($rest)*);
    };
    // Every field turned over: the struct as Rust sees it.
    (@fields [$($head:tt)*] [$($done:tt)*]) => {
        $($head)* { $($done)* }
    };
}
pub(crate) use wire_struct;

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
        let f = BodyFields::of(Some(&text));
        assert_eq!(f.json.unwrap().get(), r#""héllo \"x\"""#);
        assert!(f.base64.is_none());
        assert_eq!(f.encoding, Some(BodyEncoding::Text));
        let bin = Body::binary(vec![0xff, 0x00, 0xfe]);
        let f = BodyFields::of(Some(&bin));
        assert!(f.json.is_none() && f.encoding.is_none());
        assert_eq!(f.base64.unwrap(), "/wD+");
        let none = BodyFields::of(None);
        assert!(none.json.is_none() && none.base64.is_none() && none.encoding.is_none());
    }
}
