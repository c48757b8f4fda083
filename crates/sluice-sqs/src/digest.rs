//! The MD5 digests SQS answers carry (`MD5OfMessageBody`, `MD5OfMessageAttributes`), which
//! most AWS SDKs recompute and compare, failing the call on a mismatch.
//!
//! The body's digest is over its UTF-8 bytes. The attributes' digest is over each attribute
//! in name order: the name, the data type and the value, each as a 4-byte big-endian length
//! and its bytes, with a transport byte before the value (1 for a string or number, 2 for
//! binary).

use md5::{Digest, Md5};

use crate::attributes::{AttributeValue, Typed};

/// Lowercase hex MD5 of `bytes`.
pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&Md5::digest(bytes))
}

/// The digest of `attributes` (in name order), or `None` when there are none: SQS leaves
/// the field out then, and some SDKs refuse the digest of nothing.
pub fn attributes_md5(attributes: &[(String, Typed)]) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut md5 = Md5::new();
    let field = |md5: &mut Md5, bytes: &[u8]| {
        md5.update(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        md5.update(bytes);
    };
    for (name, typed) in attributes {
        field(&mut md5, name.as_bytes());
        field(&mut md5, typed.data_type.as_bytes());
        match &typed.value {
            AttributeValue::Text(s) => {
                md5.update([1]);
                field(&mut md5, s.as_bytes());
            }
            AttributeValue::Binary(b) => {
                md5.update([2]);
                field(&mut md5, b);
            }
        }
    }
    Some(hex(&md5.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(data_type: &str, v: &str) -> Typed {
        Typed {
            data_type: data_type.to_owned(),
            value: AttributeValue::Text(v.to_owned()),
        }
    }

    #[test]
    fn body_digest_is_md5_of_the_text() {
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    /// The published vectors of the `aws-md5-of-message-attributes` package.
    #[test]
    fn attribute_digests_match_the_published_vectors() {
        let one = vec![("attribName1".to_owned(), text("String", "attribValue 1"))];
        assert_eq!(
            attributes_md5(&one).as_deref(),
            Some("19e27d4e946b072f3f58da80d94fd778")
        );
        assert_eq!(attributes_md5(&[]), None);
    }
}
