//! FIFO message groups: the name a message may carry so that the messages of one group are
//! delivered in send order, a limited number at a time.
//!
//! The rule every engine that supports groups follows (and the conformance suite checks):
//! within one queue, the members of a group form a line in the order they entered the queue
//! (their send, or the dead-lettering, move or redrive that brought them there). Only the
//! first `max_in_flight_per_group` members of the line (default 1) may be delivered; a member
//! among them that waits (a send delay, a retry backoff) holds its place, so the members after
//! it wait too. A member leaves the line when it is acknowledged, dead-lettered, moved,
//! deleted or purged, and the next one moves up. Messages without a group are not affected.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Longest group name, in characters.
pub const MAX_GROUP_CHARS: usize = 128;

/// A validated FIFO group name: 1 to 128 characters, none of them a control character.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GroupName(String);

impl GroupName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field `group` and its rule when the name is
    /// empty, longer than 128 characters, or holds a control character.
    pub fn new(name: impl Into<String>) -> Result<Self, StoreError> {
        let name = name.into();
        check_label("group", &name)?;
        Ok(GroupName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a name a message carries (`field`: `group` or `key`): 1 to 128 characters, none of
/// them a control character.
///
/// # Errors
/// [`StoreError::InvalidArgument`] naming `field` and the rule broken.
pub(crate) fn check_label(field: &str, name: &str) -> Result<(), StoreError> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_GROUP_CHARS {
        return Err(StoreError::invalid(format!(
            "{field} must be 1 to {MAX_GROUP_CHARS} characters long, got {chars}"
        )));
    }
    if let Some(bad) = name.chars().find(|c| c.is_control()) {
        return Err(StoreError::invalid(format!(
            "{field} must not contain control characters, got {bad:?} in {name:?}"
        )));
    }
    Ok(())
}

impl TryFrom<String> for GroupName {
    type Error = StoreError;
    fn try_from(s: String) -> Result<Self, StoreError> {
        GroupName::new(s)
    }
}

impl From<GroupName> for String {
    fn from(g: GroupName) -> String {
        g.0
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for GroupName {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        GroupName::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_by_characters_not_bytes() {
        assert!(GroupName::new("customer-42").is_ok());
        assert!(GroupName::new("é".repeat(128)).is_ok(), "128 characters");
        assert!(GroupName::new("a".repeat(128)).is_ok());
        for bad in [
            String::new(),
            "a".repeat(129),
            "a\nb".into(),
            "\u{7f}".into(),
        ] {
            let e = GroupName::new(bad.clone()).expect_err(&format!("{bad:?} accepted"));
            assert_eq!(e.code(), crate::ErrorCode::InvalidArgument);
            assert!(e.to_string().contains("group"), "{e}");
        }
        assert!(GroupName::new("with space / und ünïcode ✓").is_ok());
    }

    #[test]
    fn serde_refuses_invalid_names() {
        assert!(serde_json::from_str::<GroupName>("\"\"").is_err());
        let g: GroupName = serde_json::from_str("\"g1\"").unwrap();
        assert_eq!(g.as_str(), "g1");
    }
}
