//! Message attributes. SQS attributes are typed (`String`, `Number`, `Binary`, each with an
//! optional custom suffix such as `Number.float`); Sluice attributes are text. A `String`
//! attribute is stored as itself, so both APIs see the same value. Any other type is stored as
//! its text (binary in base64) with its data type beside it under `sqs:type:<name>`, a key no
//! SQS attribute can take (SQS names hold no `:`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sluice_core::message::Attributes;

use crate::error::SqsError;

/// Where the data type of a non-`String` attribute is kept.
pub const TYPE_PREFIX: &str = "sqs:type:";
/// Most attributes on one message.
const MAX_ATTRIBUTES: usize = 10;

/// A message attribute as the JSON protocol carries it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MessageAttributeValue {
    /// `String`, `Number` or `Binary`, optionally with a `.suffix`.
    pub data_type: String,
    /// The value of a `String` or `Number` attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    /// The value of a `Binary` attribute, in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
}

/// The value of a typed attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    /// A `String` or `Number` value.
    Text(String),
    /// A `Binary` value.
    Binary(Vec<u8>),
}

/// A typed attribute: its data type and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typed {
    /// `String`, `Number` or `Binary`, with its suffix.
    pub data_type: String,
    /// The value.
    pub value: AttributeValue,
}

impl Typed {
    /// The wire form.
    pub fn to_wire(&self) -> MessageAttributeValue {
        let (string_value, binary_value) = match &self.value {
            AttributeValue::Text(s) => (Some(s.clone()), None),
            AttributeValue::Binary(b) => (None, Some(STANDARD.encode(b))),
        };
        MessageAttributeValue {
            data_type: self.data_type.clone(),
            string_value,
            binary_value,
        }
    }
}

/// Checks the attributes of a send and returns them typed, in name order.
///
/// # Errors
/// `InvalidParameterValue` naming the attribute and the rule it breaks.
pub fn typed_from_wire(
    wire: BTreeMap<String, MessageAttributeValue>,
) -> Result<Vec<(String, Typed)>, SqsError> {
    if wire.len() > MAX_ATTRIBUTES {
        return Err(SqsError::invalid_parameter(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
            wire.len()
        )));
    }
    let mut out = Vec::with_capacity(wire.len());
    for (name, v) in wire {
        check_name(&name)?;
        let base = v.data_type.split('.').next().unwrap_or_default();
        if v.data_type.len() > 256 || !matches!(base, "String" | "Number" | "Binary") {
            return Err(SqsError::invalid_parameter(format!(
                "The type of message (user) attribute '{name}' is invalid. You must use only the \
                 following supported type prefixes: Binary, Number, String."
            )));
        }
        let value = if base == "Binary" {
            let b64 = v.binary_value.filter(|b| !b.is_empty()).ok_or_else(|| {
                SqsError::invalid_parameter(format!(
                    "Message (user) attribute '{name}' must contain a non-empty value of type \
                     'Binary'."
                ))
            })?;
            let bytes = STANDARD.decode(b64).map_err(|e| {
                SqsError::invalid_parameter(format!(
                    "Message (user) attribute '{name}' has a BinaryValue that is not base64: {e}"
                ))
            })?;
            AttributeValue::Binary(bytes)
        } else {
            let text = v.string_value.filter(|s| !s.is_empty()).ok_or_else(|| {
                SqsError::invalid_parameter(format!(
                    "Message (user) attribute '{name}' must contain a non-empty value of type \
                     '{base}'."
                ))
            })?;
            if let Some(c) = text.chars().find(|&c| !allowed_in_text(c)) {
                return Err(SqsError::invalid_parameter(format!(
                    "Message (user) attribute '{name}' contains U+{:04X}, which is outside the \
                     allowed set (#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 \
                     to #x10FFFF).",
                    u32::from(c)
                )));
            }
            if base == "Number" && text.trim().parse::<f64>().is_err() {
                return Err(SqsError::invalid_parameter(format!(
                    "Value {text} for message attribute '{name}' is not a valid number."
                )));
            }
            AttributeValue::Text(text)
        };
        out.push((
            name,
            Typed {
                data_type: v.data_type,
                value,
            },
        ));
    }
    Ok(out)
}

/// The characters SQS allows in a body or a string attribute: those XML 1.0 can carry.
pub(crate) fn allowed_in_text(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// SQS's rule for attribute names.
fn check_name(name: &str) -> Result<(), SqsError> {
    let lower = name.to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.");
    if ok {
        Ok(())
    } else {
        Err(SqsError::invalid_parameter(format!(
            "Message (user) attribute name '{name}' is invalid: use 1 to 256 letters, digits, \
             '_', '-' and '.', not starting or ending with '.', without '..', and not starting \
             with 'AWS.' or 'Amazon.'."
        )))
    }
}

/// Stores typed attributes as Sluice attributes.
pub fn to_sluice(typed: &[(String, Typed)], into: &mut Attributes) {
    for (name, t) in typed {
        let text = match &t.value {
            AttributeValue::Text(s) => s.clone(),
            AttributeValue::Binary(b) => STANDARD.encode(b),
        };
        into.insert(name.clone(), text);
        if t.data_type != "String" {
            into.insert(format!("{TYPE_PREFIX}{name}"), t.data_type.clone());
        }
    }
}

/// The typed attributes of a stored message, in name order: every attribute not kept for the
/// front end's own use, a `String` unless its type was stored beside it.
pub fn from_sluice(attributes: &Attributes) -> Vec<(String, Typed)> {
    let mut out = Vec::new();
    for (name, text) in attributes {
        if name.starts_with("sqs:") {
            continue;
        }
        let data_type = attributes
            .get(&format!("{TYPE_PREFIX}{name}"))
            .cloned()
            .unwrap_or_else(|| "String".to_owned());
        let value = if data_type.starts_with("Binary") {
            match STANDARD.decode(text) {
                Ok(b) => AttributeValue::Binary(b),
                Err(_) => AttributeValue::Text(text.clone()),
            }
        } else {
            AttributeValue::Text(text.clone())
        };
        let data_type = match value {
            // A stored binary that no longer decodes is shown as the text it is.
            AttributeValue::Text(_) if data_type.starts_with("Binary") => "String".to_owned(),
            _ => data_type,
        };
        out.push((name.clone(), Typed { data_type, value }));
    }
    out
}

/// Which attributes a receive asked for: `All`, `.*`, `prefix.*` or exact names.
pub fn wanted(names: &[String], name: &str) -> bool {
    names.iter().any(|n| {
        n == "All"
            || n == ".*"
            || n == name
            || n.strip_suffix(".*").is_some_and(|prefix| {
                name.starts_with(prefix) && name[prefix.len()..].starts_with('.')
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(data_type: &str, s: Option<&str>, b: Option<&str>) -> MessageAttributeValue {
        MessageAttributeValue {
            data_type: data_type.to_owned(),
            string_value: s.map(str::to_owned),
            binary_value: b.map(str::to_owned),
        }
    }

    #[test]
    fn typed_attributes_round_trip_through_sluice_attributes() {
        let sent = BTreeMap::from([
            ("a".to_owned(), wire("String", Some("x"), None)),
            ("n".to_owned(), wire("Number.float", Some("1.5"), None)),
            ("b".to_owned(), wire("Binary", None, Some("AAEC"))),
        ]);
        let typed = typed_from_wire(sent).unwrap();
        let mut stored = Attributes::new();
        to_sluice(&typed, &mut stored);
        assert_eq!(stored["a"], "x", "a String is stored as itself");
        assert_eq!(stored["sqs:type:n"], "Number.float");
        assert_eq!(from_sluice(&stored), typed);
    }

    #[test]
    fn bad_attributes_are_refused() {
        for (name, v) in [
            ("AWS.x", wire("String", Some("x"), None)),
            ("a..b", wire("String", Some("x"), None)),
            ("ok", wire("Text", Some("x"), None)),
            ("ok", wire("String", Some(""), None)),
            ("ok", wire("Number", Some("ten"), None)),
            ("ok", wire("Binary", None, Some("%%%"))),
        ] {
            let e = typed_from_wire(BTreeMap::from([(name.to_owned(), v)])).unwrap_err();
            assert_eq!(e.code, "InvalidParameterValue", "{name}");
        }
    }

    #[test]
    fn receive_filters_by_name_or_prefix() {
        let all = ["All".to_owned()];
        assert!(wanted(&all, "x"));
        let some = ["bar.*".to_owned(), "exact".to_owned()];
        assert!(wanted(&some, "bar.baz") && wanted(&some, "exact"));
        assert!(!wanted(&some, "barbaz") && !wanted(&some, "other"));
    }
}
