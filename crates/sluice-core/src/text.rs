//! The one rule for text a client asks the broker to keep.
//!
//! Every string stored with a message, a failure, a filter, a schedule or a queue's
//! configuration — attribute names and values, dedup ids, groups, errors, consumer names,
//! progress details, filter texts, tags — may hold any Unicode character except U+0000
//! (NUL). PostgreSQL's `text` and `jsonb` cannot store it, and SQS refuses it as well, so
//! both engines refuse it alike, in the checking layer, with `invalid_argument` naming the
//! field: the same input gets the same answer whatever the engine, and never a 503. Bodies
//! are bytes and may hold anything.

use crate::error::StoreError;

/// Refuses `value` when it holds U+0000, naming `field` in the error.
///
/// # Errors
/// `InvalidArgument` naming the field and saying what to do.
pub fn refuse_nul(field: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::invalid(format!(
            "{field} contains the character U+0000 (NUL), which cannot be stored; remove it or \
             encode the value (e.g. as base64)"
        )));
    }
    Ok(())
}

/// [`refuse_nul`] for every name and value of a string map (attributes, tags).
///
/// # Errors
/// `InvalidArgument` naming the entry.
pub fn refuse_nul_in_map<'a>(
    what: &str,
    entries: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), StoreError> {
    for (k, v) in entries {
        refuse_nul(&format!("a {what} name"), k)?;
        refuse_nul(&format!("{what} {:?}", k), v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_refused_anywhere_and_everything_else_is_kept() {
        assert!(refuse_nul("error", "a\0b").is_err());
        assert!(refuse_nul("error", "\0").is_err());
        for ok in [
            "",
            "tab\tnew\nline\u{1}",
            "\u{7f}\u{85}\u{2028}",
            "😀𝄞",
            "\u{fffd}",
        ] {
            assert!(refuse_nul("error", ok).is_ok(), "{ok:?}");
        }
        let e = refuse_nul("dedup_id", "x\0").unwrap_err().to_string();
        assert!(e.contains("dedup_id") && e.contains("U+0000"), "{e}");
    }
}
