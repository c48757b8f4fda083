//! Conversions shared by the views: durations as `*_ms` fields, queue names, present fields.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use sluice_core::error::StoreError;
use sluice_core::name::QueueName;

/// Converts a `*_ms` field to a duration, refusing negative values.
///
/// # Errors
/// `InvalidArgument` naming `field` for a negative value.
pub fn millis(field: &str, ms: i64) -> Result<Duration, StoreError> {
    u64::try_from(ms).map(Duration::from_millis).map_err(|_| {
        StoreError::invalid(format!(
            "{field} must be a non-negative whole number of milliseconds, got {ms}"
        ))
    })
}

pub(crate) fn opt_millis(field: &str, ms: Option<i64>) -> Result<Option<Duration>, StoreError> {
    ms.map(|v| millis(field, v)).transpose()
}

/// A duration as whole milliseconds, saturating.
pub fn as_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn queue_name(field: &str, s: String) -> Result<QueueName, StoreError> {
    QueueName::new(s).map_err(|e| StoreError::invalid(format!("{field}: {e}")))
}

/// Deserializes a present field, even `null`, as `Some`: the outer `Option` says whether the
/// field was given, the inner value is what was given.
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}
