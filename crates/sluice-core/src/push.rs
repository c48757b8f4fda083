//! Push delivery: a queue whose messages the broker delivers to an HTTP endpoint itself,
//! instead of waiting for consumers to receive them.
//!
//! A [`PushTarget`] is part of the queue's configuration. The broker leases messages as any
//! consumer would (so `rate_limit`, `max_in_flight`, retries, backoff and the DLQ all apply
//! unchanged) and settles each lease from the endpoint's answer ([`PushVerdict`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Limits of a push target.
pub mod limits {
    use std::time::Duration;

    /// Shortest request timeout.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);
    /// Longest request timeout.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
    /// Most requests in flight to one target from one broker node.
    pub const MAX_CONCURRENCY: u32 = 1000;
    /// Most extra headers.
    pub const MAX_HEADERS: usize = 32;
    /// Longest header value.
    pub const MAX_HEADER_VALUE_BYTES: usize = 4096;
    /// Longest URL.
    pub const MAX_URL_BYTES: usize = 2048;
    /// Shortest signing secret: shorter keys make the signature guessable.
    pub const MIN_SECRET_CHARS: usize = 16;
    /// Longest signing secret.
    pub const MAX_SECRET_CHARS: usize = 512;
}

/// The default request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default number of requests in flight per broker node.
pub const DEFAULT_CONCURRENCY: u32 = 16;

/// Headers the broker sets itself, which a target's `headers` may not name.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
];
/// What views show instead of a header value or a URL's query value, and what such a value
/// written back as read means: keep the current one (on the same origin).
pub const REDACTED: &str = "(redacted)";
/// The prefix of the headers that carry a message's metadata.
pub const HEADER_PREFIX: &str = "sluice-";

/// The HTTP method of push requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PushMethod {
    /// `POST` (the default).
    #[default]
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
}

impl PushMethod {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            PushMethod::Post => "POST",
            PushMethod::Put => "PUT",
            PushMethod::Patch => "PATCH",
        }
    }
}

/// What a 4xx answer other than 429 does to the message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientErrorAction {
    /// Dead-letter at once: the endpoint said the request itself is wrong, and sending it
    /// again would get the same answer (the default).
    #[default]
    Reject,
    /// Retry with backoff like a 5xx, for endpoints that answer 4xx for passing conditions.
    Retry,
}

/// Where and how a queue's messages are pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushTarget {
    /// The endpoint: `https`, or `http` on a loopback host unless the broker allows others;
    /// which addresses it may resolve to is the broker's rule (its `push_allow`).
    pub url: String,
    /// The request method.
    #[serde(default)]
    pub method: PushMethod,
    /// Extra request headers (for example an `Authorization` the endpoint expects).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long a request may take before it counts as failed and is retried.
    pub timeout: Duration,
    /// Most requests in flight to the target from one broker node.
    pub concurrency: u32,
    /// The key requests are signed with (`Sluice-Signature`); none means unsigned.
    #[serde(default)]
    pub secret: Option<String>,
    /// What a 4xx answer other than 429 does.
    #[serde(default)]
    pub on_client_error: ClientErrorAction,
}

impl PushTarget {
    /// A target at `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        PushTarget {
            url: url.into(),
            method: PushMethod::Post,
            headers: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            concurrency: DEFAULT_CONCURRENCY,
            secret: None,
            on_client_error: ClientErrorAction::Reject,
        }
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the field and the rule it breaks.
    pub fn validate(&self) -> Result<(), StoreError> {
        use limits::*;
        let url = self.parsed_url()?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(StoreError::invalid(
                "push.url must not carry credentials (they would show in the queue's config); \
                 put them in push.headers, e.g. an Authorization header",
            ));
        }
        if url
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.rsplit('=').next() == Some(REDACTED)))
        {
            return Err(StoreError::invalid(format!(
                "push.url holds {REDACTED} in place of a query value: views show that instead \
                 of the real value, and only the URL written back exactly as shown keeps it; \
                 give the real value"
            )));
        }
        if self.timeout < MIN_TIMEOUT || self.timeout > MAX_TIMEOUT {
            return Err(StoreError::invalid(format!(
                "push.timeout_ms must be {} to {}, got {}",
                MIN_TIMEOUT.as_millis(),
                MAX_TIMEOUT.as_millis(),
                self.timeout.as_millis()
            )));
        }
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(StoreError::invalid(format!(
                "push.concurrency must be 1 to {MAX_CONCURRENCY}, got {}",
                self.concurrency
            )));
        }
        if self.headers.len() > MAX_HEADERS {
            return Err(StoreError::invalid(format!(
                "push.headers may hold at most {MAX_HEADERS} headers, got {}",
                self.headers.len()
            )));
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        if let Some(s) = &self.secret
            && !(MIN_SECRET_CHARS..=MAX_SECRET_CHARS).contains(&s.chars().count())
        {
            return Err(StoreError::invalid(format!(
                "push.secret must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters, got {}",
                s.chars().count()
            )));
        }
        Ok(())
    }

    /// The URL, parsed and checked to be `http` or `https` with a host.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] saying what is wrong with it.
    pub fn parsed_url(&self) -> Result<url::Url, StoreError> {
        if self.url.len() > limits::MAX_URL_BYTES {
            return Err(StoreError::invalid(format!(
                "push.url may be at most {} bytes, got {}",
                limits::MAX_URL_BYTES,
                self.url.len()
            )));
        }
        let url = url::Url::parse(&self.url)
            .map_err(|e| StoreError::invalid(format!("push.url \"{}\": {e}", self.url)))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(StoreError::invalid(format!(
                "push.url must be an http or https URL with a host, got \"{}\"",
                self.url
            )));
        }
        Ok(url)
    }

    /// The URL as every view, log line, error and audit record shows it: each query value
    /// (a query may carry a token) and any user information replaced by [`REDACTED`], the
    /// fragment dropped. The real URL is kept for delivery; this one written back in a
    /// change keeps it (see [`PushPatch::resolve`]).
    pub fn shown_url(&self) -> String {
        match self.parsed_url() {
            Ok(u) => redacted_url(u),
            Err(_) => REDACTED.to_owned(),
        }
    }

    /// Whether `other` calls the same origin (scheme, host and port) as this target: the
    /// credentials a target holds (header values, signing secret) go to its origin only.
    pub fn same_origin(&self, other: &PushTarget) -> bool {
        match (self.parsed_url(), other.parsed_url()) {
            (Ok(a), Ok(b)) => a.origin() == b.origin(),
            _ => false,
        }
    }

    /// Whether the broker may push here when plain `http` is allowed only on loopback:
    /// `https` anywhere, `http` to `localhost`, `127.0.0.0/8` or `::1`.
    pub fn is_secure_or_loopback(&self) -> bool {
        let Ok(url) = self.parsed_url() else {
            return false;
        };
        if url.scheme() == "https" {
            return true;
        }
        match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        }
    }
}

fn check_header(name: &str, value: &str) -> Result<(), StoreError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(StoreError::invalid(format!(
            "push.headers: \"{name}\" is not a valid header name (letters, digits and !#$%&'*+-.^_`|~)"
        )));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with(HEADER_PREFIX) {
        return Err(StoreError::invalid(format!(
            "push.headers: \"{name}\" is set by the broker and cannot be configured \
             (reserved: {}, and every header starting with Sluice-)",
            RESERVED_HEADERS.join(", ")
        )));
    }
    if value.len() > limits::MAX_HEADER_VALUE_BYTES
        || !value.chars().all(|c| c == '\t' || (' '..='~').contains(&c))
    {
        return Err(StoreError::invalid(format!(
            "push.headers: the value of \"{name}\" must be at most {} bytes of visible ASCII",
            limits::MAX_HEADER_VALUE_BYTES
        )));
    }
    Ok(())
}

/// `url` with its query values, user information and fragment hidden (see
/// [`PushTarget::shown_url`]). A query part without `=` is hidden whole: it may be a token
/// itself.
fn redacted_url(mut url: url::Url) -> String {
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_password(None);
        let _ = url.set_username(REDACTED);
    }
    if let Some(query) = url.query().filter(|q| !q.is_empty()) {
        let hidden: Vec<String> = query
            .split('&')
            .map(|part| match part.split_once('=') {
                Some((key, _)) => format!("{key}={REDACTED}"),
                None if part.is_empty() => String::new(),
                None => REDACTED.to_owned(),
            })
            .collect();
        url.set_query(Some(&hidden.join("&")));
    }
    url.set_fragment(None);
    url.to_string()
}

/// A change to a queue's push target: the target's fields, and what to do with its secret,
/// which queue views never show (so a configuration read and written back keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPatch {
    /// The new target; its `secret` is ignored in favour of `secret` below.
    pub target: PushTarget,
    /// `None` keeps the current secret; `Some(None)` removes it; `Some(Some(s))` sets it.
    pub secret: Option<Option<String>>,
}

impl PushPatch {
    /// The target this patch makes of `current`.
    ///
    /// A URL written back as views show it ([`PushTarget::shown_url`]) keeps the current
    /// URL, query values included. A header whose value is [`REDACTED`] keeps its current
    /// value (views never show header values, which often carry credentials), and an absent
    /// `secret` keeps the current secret — but only while the target's origin (scheme, host
    /// and port) stays the same: credentials set for one endpoint never go to another that
    /// whoever changes the URL names. On a new origin, header values and the secret are the
    /// ones given in this patch or none; a redacted placeholder does not count as given.
    pub fn resolve(&self, current: Option<&PushTarget>) -> PushTarget {
        let mut t = self.target.clone();
        if let Some(c) = current
            && t.url == c.shown_url()
        {
            t.url = c.url.clone();
        }
        let current = current.filter(|c| c.same_origin(&t));
        t.headers = std::mem::take(&mut t.headers)
            .into_iter()
            .filter_map(|(k, v)| {
                if v != REDACTED {
                    return Some((k, v));
                }
                let kept = current?
                    .headers
                    .iter()
                    .find(|(ck, _)| ck.eq_ignore_ascii_case(&k));
                kept.map(|(_, cv)| (k, cv.clone()))
            })
            .collect();
        t.secret = match &self.secret {
            None => current.and_then(|c| c.secret.clone()),
            Some(s) => s.clone(),
        };
        t
    }
}

/// How one push attempt ended, from the endpoint's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushVerdict {
    /// 2xx: acknowledge.
    Delivered,
    /// 429 or 503 with a `Retry-After`: nack with exactly that delay.
    Throttled(Duration),
    /// Any other failure worth retrying (5xx, 429/503 without `Retry-After`, a redirect,
    /// a timeout, a connection error): nack with the queue's backoff.
    Retry,
    /// A 4xx the target's `on_client_error` says to dead-letter: reject.
    Reject,
}

impl PushVerdict {
    /// The verdict of an HTTP answer with `status` and, if present, its `Retry-After`
    /// delay (already parsed).
    pub fn of_status(status: u16, retry_after: Option<Duration>, target: &PushTarget) -> Self {
        match status {
            200..=299 => PushVerdict::Delivered,
            429 | 503 => retry_after.map_or(PushVerdict::Retry, PushVerdict::Throttled),
            400..=499 if target.on_client_error == ClientErrorAction::Reject => PushVerdict::Reject,
            _ => PushVerdict::Retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_http_and_any_https_are_secure_enough() {
        for ok in [
            "https://example.com/hook",
            "http://127.0.0.1:8080/x",
            "http://127.9.9.9/x",
            "http://[::1]:9/x",
            "http://LOCALHOST/x",
        ] {
            assert!(PushTarget::new(ok).is_secure_or_loopback(), "{ok}");
        }
        for no in [
            "http://example.com/hook",
            "http://10.0.0.1/x",
            "http://localhost.example.com/",
        ] {
            assert!(!PushTarget::new(no).is_secure_or_loopback(), "{no}");
        }
    }

    #[test]
    fn bad_targets_are_refused_with_the_rule() {
        let bad = |t: PushTarget, says: &str| {
            let e = t.validate().expect_err("should be refused").to_string();
            assert!(e.contains(says), "{e}");
        };
        bad(PushTarget::new("ftp://example.com/"), "http or https");
        bad(PushTarget::new("not a url"), "push.url");
        bad(PushTarget::new("https://u:p@example.com/"), "credentials");
        bad(
            PushTarget::new("https://example.com/?token=(redacted)"),
            "real value",
        );
        let mut t = PushTarget::new("https://example.com/");
        t.timeout = Duration::from_millis(10);
        bad(t, "timeout_ms");
        let mut t = PushTarget::new("https://example.com/");
        t.concurrency = 0;
        bad(t, "concurrency");
        let mut t = PushTarget::new("https://example.com/");
        t.headers.insert("Sluice-Signature".into(), "x".into());
        bad(t, "set by the broker");
        let mut t = PushTarget::new("https://example.com/");
        t.headers.insert("Host".into(), "x".into());
        bad(t, "set by the broker");
        let mut t = PushTarget::new("https://example.com/");
        t.headers.insert("X-A".into(), "line\nbreak".into());
        bad(t, "visible ASCII");
        let mut t = PushTarget::new("https://example.com/");
        t.secret = Some("short".into());
        bad(t, "push.secret");
        PushTarget::new("https://example.com/").validate().unwrap();
    }

    #[test]
    fn the_shown_url_hides_query_values_and_user_information() {
        let t = PushTarget::new("https://example.com/hook?token=s3cret&mode=a&bare#x");
        assert_eq!(
            t.shown_url(),
            "https://example.com/hook?token=(redacted)&mode=(redacted)&(redacted)"
        );
        let t = PushTarget::new("https://u:pw@example.com/hook");
        assert!(!t.shown_url().contains("pw"), "{}", t.shown_url());
        assert!(!t.shown_url().contains("u@"), "{}", t.shown_url());
        assert_eq!(
            PushTarget::new("https://example.com/hook").shown_url(),
            "https://example.com/hook"
        );
    }

    #[test]
    fn a_url_written_back_as_shown_keeps_the_real_one() {
        let current = PushTarget::new("https://a.example/hook?token=s3cret");
        let t = PushPatch {
            target: PushTarget::new(current.shown_url()),
            secret: None,
        }
        .resolve(Some(&current));
        assert_eq!(t.url, current.url);
    }

    #[test]
    fn a_new_origin_drops_the_hidden_credentials() {
        let mut current = PushTarget::new("https://a.example/hook");
        current.secret = Some("0123456789abcdef".into());
        current
            .headers
            .insert("Authorization".into(), "Bearer t0k".into());
        for elsewhere in [
            "https://b.example/hook",
            "http://a.example/hook",
            "https://a.example:8443/hook",
        ] {
            let mut target = PushTarget::new(elsewhere);
            target
                .headers
                .insert("Authorization".into(), REDACTED.into());
            let t = PushPatch {
                target,
                secret: None,
            }
            .resolve(Some(&current));
            assert_eq!(t.secret, None, "{elsewhere}");
            assert!(t.headers.is_empty(), "{elsewhere}: {:?}", t.headers);
        }
        // Given again in the same change, they are the new target's.
        let mut target = PushTarget::new("https://b.example/hook");
        target
            .headers
            .insert("Authorization".into(), "Bearer b".into());
        let t = PushPatch {
            target,
            secret: Some(Some("fedcba9876543210".into())),
        }
        .resolve(Some(&current));
        assert_eq!(t.secret.as_deref(), Some("fedcba9876543210"));
        assert_eq!(t.headers["Authorization"], "Bearer b");
        // Another path on the same origin keeps them.
        let mut target = PushTarget::new("https://A.example:443/other");
        target
            .headers
            .insert("Authorization".into(), REDACTED.into());
        let t = PushPatch {
            target,
            secret: None,
        }
        .resolve(Some(&current));
        assert_eq!(t.secret, current.secret);
        assert_eq!(t.headers["Authorization"], "Bearer t0k");
    }

    #[test]
    fn answers_map_to_verdicts() {
        let t = PushTarget::new("https://example.com/");
        let s = Duration::from_secs(7);
        assert_eq!(
            PushVerdict::of_status(204, None, &t),
            PushVerdict::Delivered
        );
        assert_eq!(
            PushVerdict::of_status(429, Some(s), &t),
            PushVerdict::Throttled(s)
        );
        assert_eq!(
            PushVerdict::of_status(503, Some(s), &t),
            PushVerdict::Throttled(s)
        );
        assert_eq!(PushVerdict::of_status(429, None, &t), PushVerdict::Retry);
        assert_eq!(PushVerdict::of_status(404, None, &t), PushVerdict::Reject);
        assert_eq!(PushVerdict::of_status(500, Some(s), &t), PushVerdict::Retry);
        assert_eq!(PushVerdict::of_status(302, None, &t), PushVerdict::Retry);
        let retry = PushTarget {
            on_client_error: ClientErrorAction::Retry,
            ..t
        };
        assert_eq!(
            PushVerdict::of_status(404, None, &retry),
            PushVerdict::Retry
        );
    }

    #[test]
    fn a_patch_without_a_secret_keeps_the_current_one() {
        let mut current = PushTarget::new("https://a.example/");
        current.secret = Some("0123456789abcdef".into());
        let keep = PushPatch {
            target: PushTarget::new("https://a.example/v2"),
            secret: None,
        };
        let t = keep.resolve(Some(&current));
        assert_eq!(t.url, "https://a.example/v2");
        assert_eq!(t.secret, current.secret);
        let clear = PushPatch {
            secret: Some(None),
            ..keep
        };
        assert_eq!(clear.resolve(Some(&current)).secret, None);
    }

    #[test]
    fn a_redacted_header_value_keeps_the_current_one() {
        let mut current = PushTarget::new("https://a.example/");
        current
            .headers
            .insert("Authorization".into(), "Bearer t0k".into());
        let mut target = PushTarget::new("https://a.example/");
        target
            .headers
            .insert("authorization".into(), REDACTED.into());
        target.headers.insert("X-New".into(), REDACTED.into());
        target.headers.insert("X-Set".into(), "v".into());
        let t = PushPatch {
            target,
            secret: None,
        }
        .resolve(Some(&current));
        assert_eq!(
            t.headers.get("authorization").map(String::as_str),
            Some("Bearer t0k")
        );
        assert_eq!(t.headers.get("X-New"), None, "nothing to keep: dropped");
        assert_eq!(t.headers.get("X-Set").map(String::as_str), Some("v"));
    }
}
