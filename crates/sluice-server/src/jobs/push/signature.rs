//! `Sluice-Signature`: how an endpoint knows a push request came from its broker and was not
//! changed or replayed.
//!
//! The header reads `t=<unix seconds>,v1=<hex>`, where the hex is HMAC-SHA256, keyed with the
//! target's secret, of the timestamp's decimal digits, a `.`, and the request body's exact
//! bytes. An endpoint recomputes it, compares in constant time, and refuses a timestamp too
//! far from its own clock (five minutes is usual) so that a captured request cannot be
//! replayed later.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "Sluice-Signature";

/// The header value for `body` sent at `unix_seconds`, signed with `secret`.
pub fn sign(secret: &[u8], unix_seconds: i64, body: &[u8]) -> String {
    format!(
        "t={unix_seconds},v1={}",
        hex::encode(mac(secret, unix_seconds, body))
    )
}

/// Whether `header` is a valid signature of `body` under `secret`, made no more than
/// `tolerance_seconds` away from `now_unix_seconds`. What an endpoint written in Rust does.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_unix_seconds: i64,
    tolerance_seconds: i64,
) -> bool {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let Some(t) = t else {
        return false;
    };
    if (now_unix_seconds - t).abs() > tolerance_seconds {
        return false;
    }
    sigs.iter().any(|sig| {
        let mut m = keyed(secret);
        m.update(t.to_string().as_bytes());
        m.update(b".");
        m.update(body);
        // `verify_slice` compares in constant time.
        m.verify_slice(sig).is_ok()
    })
}

fn keyed(secret: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!())
}

fn mac(secret: &[u8], unix_seconds: i64, body: &[u8]) -> [u8; 32] {
    let mut m = keyed(secret);
    m.update(unix_seconds.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_any_change_breaks_it() {
        let secret = b"0123456789abcdef";
        let h = sign(secret, 1_700_000_000, b"{\"id\":1}");
        assert!(verify(secret, &h, b"{\"id\":1}", 1_700_000_010, 300));
        assert!(!verify(secret, &h, b"{\"id\":2}", 1_700_000_010, 300));
        assert!(!verify(
            b"another secret!!",
            &h,
            b"{\"id\":1}",
            1_700_000_010,
            300
        ));
        assert!(!verify(secret, &h, b"{\"id\":1}", 1_700_001_000, 300));
        let moved = h.replace("t=1700000000", "t=1700000001");
        assert!(!verify(secret, &moved, b"{\"id\":1}", 1_700_000_010, 300));
    }

    #[test]
    fn the_known_vector_of_the_docs_holds() {
        // The example in docs/push.md: secret "whsec_0123456789abcdef", t 1700000000, body "hello".
        let h = sign(b"whsec_0123456789abcdef", 1_700_000_000, b"hello");
        assert_eq!(
            h,
            "t=1700000000,v1=7ac1317c3d3d81aaba6ea9f6ffd14ea5a3b1e5a92af3ce7f7a5148d9a909015d"
        );
    }

    /// The standalone check docs/push.md gives endpoint authors, kept compiling and right.
    fn readme_verify(secret: &[u8], header: &str, body: &[u8], now: i64) -> bool {
        let field = |k: &str| header.split(',').find_map(|p| p.strip_prefix(k));
        let (Some(t), Some(sig)) = (field("t="), field("v1=")) else {
            return false;
        };
        let (Ok(ts), Ok(sig)) = (t.parse::<i64>(), hex::decode(sig)) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        (now - ts).abs() <= 300 && mac.verify_slice(&sig).is_ok()
    }

    #[test]
    fn the_readme_check_agrees_with_the_broker() {
        let secret = b"whsec_0123456789abcdef";
        let h = sign(secret, 1_700_000_000, b"hello");
        assert!(readme_verify(secret, &h, b"hello", 1_700_000_100));
        assert!(!readme_verify(secret, &h, b"hellO", 1_700_000_100));
        assert!(!readme_verify(secret, &h, b"hello", 1_700_001_000));
    }
}
