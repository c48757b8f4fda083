//! Receipts: opaque tokens naming one delivery of one message.
//!
//! A receipt carries the message id and the lease token the store drew for that delivery.
//! The store keeps the current token with the message, durably, so a receipt stays valid
//! across a restart and goes stale the moment its delivery ends (ack, nack, expiry, move).

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::StoreError;
use crate::message::MessageId;

/// A receipt as a regular expression, for schemas: 16 bytes in unpadded base64url, whose
/// last character carries two bits and four of padding.
pub const RECEIPT_PATTERN: &str = "^[A-Za-z0-9_-]{21}[AQgw]$";

/// Names one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The delivered message.
    pub id: MessageId,
    /// The token of this delivery; never reused for the same message.
    pub token: u64,
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&self.id.0.to_be_bytes());
        raw[8..].copy_from_slice(&self.token.to_be_bytes());
        f.write_str(&URL_SAFE_NO_PAD.encode(raw))
    }
}

impl FromStr for Receipt {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        let bad = || {
            StoreError::invalid(
                "receipt is malformed; pass the receipt string exactly as receive returned it",
            )
        };
        if s.len() != 22 {
            return Err(bad());
        }
        let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
        let raw: [u8; 16] = raw.try_into().map_err(|_| bad())?;
        let (id, token) = raw.split_at(8);
        Ok(Receipt {
            id: MessageId(u64::from_be_bytes(id.try_into().map_err(|_| bad())?)),
            token: u64::from_be_bytes(token.try_into().map_err(|_| bad())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn receipts_round_trip(id: u64, token: u64) {
            let r = Receipt { id: MessageId(id), token };
            prop_assert_eq!(r.to_string().parse::<Receipt>().unwrap(), r);
        }

        #[test]
        fn garbage_is_refused_not_panicked_on(s in ".{0,40}") {
            let _ = s.parse::<Receipt>();
        }
    }
}
