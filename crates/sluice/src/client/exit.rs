//! Errors to exit codes and hints. The table is the contract scripts rely on: see the module
//! docs of `client` and [`EXIT_CODES_HELP`].

use sluice_client::{Error, ErrorCode};

use super::Failure;

/// The exit-code table shown at the end of `sluice --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes of the client commands (queue, send, receive, ack, nack, reject, message, stats,
task, dlq, redrive, audit):
  0  success (also `receive` that found nothing: it prints an empty table)
  1  other error
  2  usage error (bad flag or value, missing argument)
  3  not found (queue_not_found, message_not_found, not_found: no such route)
  4  conflict (receipt_stale, conflict)
  5  broker unreachable or unavailable (connection refused, timeout, 503)
  6  not allowed (unauthenticated 401, permission_denied 403)
  7  input refused (invalid_argument, payload_too_large, idempotency_mismatch,
     method_not_allowed)
  8  backpressure (queue_full, rate_limited): retry later

Client commands read --url from SLUICE_URL (default http://127.0.0.1:7878) and --token from
SLUICE_TOKEN; --json prints the broker's JSON instead of tables.";

/// The exit code of a broker error code.
pub fn code_of(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::QueueNotFound | ErrorCode::MessageNotFound | ErrorCode::NotFound => 3,
        ErrorCode::ReceiptStale | ErrorCode::Conflict => 4,
        ErrorCode::Unavailable => 5,
        ErrorCode::Unauthenticated | ErrorCode::PermissionDenied => 6,
        ErrorCode::InvalidArgument
        | ErrorCode::PayloadTooLarge
        | ErrorCode::IdempotencyMismatch
        | ErrorCode::MethodNotAllowed => 7,
        ErrorCode::QueueFull | ErrorCode::RateLimited => 8,
        _ => 1,
    }
}

/// True when a connection failed in its TLS handshake (the certificate, or a plain-text
/// broker at an https URL), where "is the broker running?" would mislead.
fn is_tls_trouble(e: &Error) -> bool {
    // Below the transport error only: it and the client's error name the URL, whose host
    // may well contain "tls".
    let Error::Transport(t) = e else {
        return false;
    };
    let mut source = std::error::Error::source(t);
    while let Some(s) = source {
        let text = s.to_string().to_lowercase();
        if [
            "certificate",
            "tls",
            "handshake",
            "unknownissuer",
            "corrupt message",
        ]
        .iter()
        .any(|w| text.contains(w))
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// The exit code of a client error.
pub fn exit_code(e: &Error) -> u8 {
    match e {
        Error::Transport(_) => 5,
        Error::InvalidInput(_) => 7,
        Error::Api { code, .. } => code_of(*code),
        _ => 1,
    }
}

fn hint(e: &Error) -> Option<String> {
    if e.is_connect() && is_tls_trouble(e) {
        return Some(
            "the TLS handshake failed: for a broker certificate signed by a private CA give \
             that CA with --ca-cert (SLUICE_CA_CERT); a broker started with --tls-client-ca \
             also needs --client-cert and --client-key; a broker without TLS is http://"
                .to_owned(),
        );
    }
    if e.is_connect() {
        return Some(
            "is the broker running? start it with `sluice serve`, or point --url / SLUICE_URL at it"
                .to_owned(),
        );
    }
    if e.is_timeout() {
        return Some(
            "the broker did not answer in time; check that it is healthy (GET /readyz)".to_owned(),
        );
    }
    let Error::Api { code, .. } = e else {
        return None;
    };
    let text = match code {
        ErrorCode::QueueNotFound => {
            "list the queues with `sluice queue list`, or create this one \
                                     with `sluice queue create NAME`"
        }
        ErrorCode::MessageNotFound => {
            "it was acknowledged, deleted or expired, or the id is wrong; \
             ids are the 16 hex digits `sluice send` printed"
        }
        ErrorCode::ReceiptStale => {
            "the lease ended and the message was delivered again, or it is gone; \
             receive it again to get a current receipt"
        }
        ErrorCode::Unauthenticated => "pass an API key with --token or SLUICE_TOKEN",
        ErrorCode::PermissionDenied => {
            "this key's role or queue patterns do not allow that; use a key that does"
        }
        ErrorCode::QueueFull => {
            "consumers are behind: retry later, or raise the queue's \
                                 limit with `sluice queue update NAME --max-depth N`"
        }
        ErrorCode::RateLimited => "retry later",
        ErrorCode::Unavailable => {
            "the broker's storage is unavailable; it recovers by itself when the cause \
             (e.g. a full disk) goes away — retry later"
        }
        ErrorCode::NotFound | ErrorCode::MethodNotAllowed => {
            "this broker does not serve that route; is it an older version?"
        }
        _ => return None,
    };
    Some(text.to_owned())
}

/// Prints a failure on stderr and returns its exit code.
pub fn report(f: &Failure) -> u8 {
    match f {
        Failure::Usage(msg) => {
            eprintln!("sluice: error: {msg}");
            eprintln!("  hint: see `sluice help` for usage");
            2
        }
        Failure::Other(msg) => {
            eprintln!("sluice: error: {msg}");
            1
        }
        Failure::Code(code, msg) => {
            eprintln!("sluice: error: {msg}");
            *code
        }
        Failure::Api(e) => {
            eprintln!("sluice: error: {e}");
            if let Some(h) = hint(e) {
                eprintln!("  hint: {h}");
            }
            if let Some(ra) = e.retry_after() {
                eprintln!("  retry after: {} s", ra.as_secs());
            }
            exit_code(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_documented_exit_code() {
        for c in ErrorCode::ALL {
            let code = code_of(c);
            assert!((3..=8).contains(&code), "{c} -> {code}");
            assert!(EXIT_CODES_HELP.contains(c.as_str()), "{c} is documented");
        }
    }
}
