//! Turning a caller's `Serialize` value into JSON text, refusing what JSON cannot say.
//!
//! `serde_json` writes a NaN or an infinite float as `null`, silently changing the value the
//! caller meant to send; and it refuses a map whose keys are not strings with a terse
//! message. Both are caught here, before anything reaches the broker, with a message that
//! says where the value is and how to fix it.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::value::RawValue;

use crate::error::Error;

/// Serializes `value` to JSON text.
///
/// # Errors
/// [`Error::InvalidInput`] naming `what` for a value JSON cannot represent.
pub(crate) fn to_raw<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<Box<RawValue>, Error> {
    let text = serde_json::to_string(value).map_err(|e| {
        let e = e.to_string();
        let hint = if e.contains("key must be") {
            "JSON object keys are strings: use a map with String keys (e.g. convert the keys \
             with to_string()), or send the entries as a list of [key, value] pairs"
        } else {
            "check its Serialize implementation"
        };
        Error::InvalidInput(format!("{what} cannot be serialized as JSON: {e}; {hint}"))
    })?;
    // A non-finite float became `null`: only then is the slower walk needed to find it.
    if text.contains("null") {
        let mut path = Vec::new();
        if let Err(NonFinite(at, v)) = value.serialize(FiniteCheck { path: &mut path }) {
            return Err(Error::InvalidInput(format!(
                "{what} cannot be serialized as JSON: {} is {v}, which JSON cannot represent \
                 (serde_json would silently send null); replace it with a finite number, \
                 None/null, or a string such as \"NaN\"",
                if at.is_empty() {
                    "the value".to_owned()
                } else {
                    format!("the value at {at}")
                }
            )));
        }
    }
    RawValue::from_string(text).map_err(|e| Error::InvalidInput(format!("{what}: {e}")))
}

/// The first non-finite float found: where (a JSON-path-like string) and what.
#[derive(Debug)]
struct NonFinite(String, f64);

impl fmt::Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.1, self.0)
    }
}

impl std::error::Error for NonFinite {}

impl ser::Error for NonFinite {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        // serde_json already accepted the value, so a custom error cannot come from it here.
        NonFinite(String::new(), 0.0)
    }
}

/// A serializer that produces nothing and fails on the first non-finite float.
struct FiniteCheck<'a> {
    path: &'a mut Vec<String>,
}

impl FiniteCheck<'_> {
    fn float(&self, v: f64) -> Result<(), NonFinite> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(NonFinite(self.path.concat(), v))
        }
    }

    fn child<T: Serialize + ?Sized>(&mut self, seg: String, value: &T) -> Result<(), NonFinite> {
        self.path.push(seg);
        let r = value.serialize(FiniteCheck { path: self.path });
        self.path.pop();
        r
    }
}

/// Compound values: each element is checked under its own path segment.
struct Compound<'a> {
    path: &'a mut Vec<String>,
    index: usize,
    key: Option<String>,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        let seg = format!("[{}]", self.index);
        self.index += 1;
        FiniteCheck { path: self.path }.child(seg, value)
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), NonFinite> {
        FiniteCheck { path: self.path }.child(format!(".{name}"), value)
    }
}

macro_rules! ok_scalars {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, _v: $t) -> Result<(), NonFinite> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for FiniteCheck<'a> {
    type Ok = ();
    type Error = NonFinite;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    ok_scalars!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_char: char,
        serialize_str: &str, serialize_bytes: &[u8]);

    fn serialize_f32(self, v: f32) -> Result<(), NonFinite> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), NonFinite> {
        self.float(v)
    }
    fn serialize_none(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NonFinite> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), NonFinite> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), NonFinite> {
        self.child(format!(".{variant}"), value)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, NonFinite> {
        Ok(Compound {
            path: self.path,
            index: 0,
            key: None,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, NonFinite> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, NonFinite> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, NonFinite> {
        self.path.push(format!(".{variant}"));
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, NonFinite> {
        self.serialize_seq(len)
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Compound<'a>, NonFinite> {
        self.serialize_seq(Some(len))
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, NonFinite> {
        self.serialize_tuple_variant(name, index, variant, len)
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        self.element(value)
    }
    fn end(self) -> Result<(), NonFinite> {
        self.path.pop();
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), NonFinite> {
        // serde_json already accepted the keys; only their text is wanted, for the path.
        self.key = Some(key.serialize(KeyText).unwrap_or_else(|_| "?".to_owned()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NonFinite> {
        let key = self.key.take().unwrap_or_default();
        self.field(&key, value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NonFinite> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NonFinite> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), NonFinite> {
        self.path.pop();
        Ok(())
    }
}

/// The text of a map key, for paths in messages.
struct KeyText;

impl ser::Serializer for KeyText {
    type Ok = String;
    type Error = NonFinite;
    type SerializeSeq = Impossible<String, NonFinite>;
    type SerializeTuple = Impossible<String, NonFinite>;
    type SerializeTupleStruct = Impossible<String, NonFinite>;
    type SerializeTupleVariant = Impossible<String, NonFinite>;
    type SerializeMap = Impossible<String, NonFinite>;
    type SerializeStruct = Impossible<String, NonFinite>;
    type SerializeStructVariant = Impossible<String, NonFinite>;

    fn serialize_str(self, v: &str) -> Result<String, NonFinite> {
        Ok(v.to_owned())
    }
    fn serialize_bool(self, v: bool) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, v: f32) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_f64(self, v: f64) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_char(self, v: char) -> Result<String, NonFinite> {
        Ok(v.to_string())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, NonFinite> {
        Ok("?".to_owned())
    }
    fn serialize_none(self) -> Result<String, NonFinite> {
        Ok("null".to_owned())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<String, NonFinite> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, NonFinite> {
        Ok("null".to_owned())
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<String, NonFinite> {
        Ok(name.to_owned())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, NonFinite> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, NonFinite> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _value: &T,
    ) -> Result<String, NonFinite> {
        Ok(variant.to_owned())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, NonFinite> {
        Err(ser::Error::custom("key"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, NonFinite> {
        Err(ser::Error::custom("key"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Serialize)]
    struct Order {
        items: Vec<Item>,
    }

    #[derive(Serialize)]
    struct Item {
        price: f64,
        note: Option<String>,
    }

    #[test]
    fn finite_values_pass_exactly() {
        let o = Order {
            items: vec![Item {
                price: 1.5,
                note: None,
            }],
        };
        assert_eq!(
            to_raw("body", &o).unwrap().get(),
            r#"{"items":[{"price":1.5,"note":null}]}"#
        );
    }

    #[test]
    fn a_nan_is_refused_with_its_path() {
        let o = Order {
            items: vec![
                Item {
                    price: 1.0,
                    note: None,
                },
                Item {
                    price: f64::NAN,
                    note: None,
                },
            ],
        };
        let e = to_raw("body", &o).unwrap_err().to_string();
        assert!(e.contains(".items[1].price"), "{e}");
        assert!(e.contains("NaN"), "{e}");
        let mut m = BTreeMap::new();
        m.insert("x", f32::INFINITY);
        let e = to_raw("body", &m).unwrap_err().to_string();
        assert!(e.contains(".x"), "{e}");
    }

    #[test]
    fn non_string_keys_are_refused_with_a_fix() {
        let mut m = BTreeMap::new();
        m.insert((1, 2), "x");
        let e = to_raw("body", &m).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)));
        assert!(e.to_string().contains("String keys"), "{e}");
    }
}
