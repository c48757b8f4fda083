//! API keys: a role plus queue-name patterns per key, sent as
//! `Authorization: Bearer <secret>`.
//!
//! Keys are stored as the SHA-256 of the secret, in hex. A slow password hash (argon2,
//! bcrypt) protects *low-entropy* secrets against guessing from a leaked hash; our secrets are
//! 256-bit random tokens (`sluice key generate`), which no hash speed makes guessable, so a
//! fast hash is as safe and costs nothing per request. Lookup is by hash, so the time a
//! comparison takes depends on the hash, never on how much of the secret was right.
//!
//! With no keys configured, authentication is off (and the binary refuses to listen on a
//! non-loopback address).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sluice_core::QueueName;

use crate::http::error::ApiError;

/// Longest `Authorization` header accepted; anything longer is abuse, not a key.
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;

use sluice_core::access::operations::Operation;
pub use sluice_core::access::{Action, Denied, Key, Role, glob_match, is_pattern};

/// One key as configured (the `[[keys]]` table of the config file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// A name for logs and audit (never the secret).
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Queue-name patterns it applies to: `*` matches any run of characters, `?` one
    /// character (`orders.*`, `*`). Default: every queue.
    #[serde(default = "all_queues")]
    pub queues: Vec<String>,
    /// The SHA-256 of the secret, 64 hex digits (`sluice key hash`).
    pub sha256: String,
}

fn all_queues() -> Vec<String> {
    vec!["*".to_owned()]
}

/// A configuration mistake in the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConfigError(pub String);

impl std::error::Error for KeyConfigError {}

impl std::fmt::Display for KeyConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 of a secret, in lowercase hex: what a key's `sha256` holds.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The configured keys, by hash.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    by_hash: HashMap<[u8; 32], Arc<Key>>,
}

impl KeyRing {
    /// No keys: authentication off.
    pub fn open() -> Self {
        KeyRing::default()
    }

    /// Builds the ring, checking every key.
    ///
    /// # Errors
    /// A hash that is not 64 hex digits, a duplicate secret or name, or a pattern with
    /// characters no queue name has.
    pub fn new(keys: Vec<ApiKeyConfig>) -> Result<Self, KeyConfigError> {
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for k in keys {
            let raw = hex::decode(k.sha256.trim())
                .ok()
                .and_then(|v| <[u8; 32]>::try_from(v).ok());
            let Some(hash) = raw else {
                return Err(KeyConfigError(format!(
                    "key \"{}\": sha256 must be 64 hex digits (the output of `sluice key hash`)",
                    k.name
                )));
            };
            if !names.insert(k.name.clone()) {
                return Err(KeyConfigError(format!(
                    "key name \"{}\" is used twice",
                    k.name
                )));
            }
            if k.queues.is_empty() {
                return Err(KeyConfigError(format!(
                    "key \"{}\": queues is empty; give at least one pattern, e.g. \"*\"",
                    k.name
                )));
            }
            for p in &k.queues {
                if !is_pattern(p) {
                    return Err(KeyConfigError(format!(
                        "key \"{}\": pattern \"{p}\" may hold only queue-name characters and the \
                         wildcards * and ?",
                        k.name
                    )));
                }
            }
            let key = Arc::new(Key {
                name: k.name.clone(),
                role: k.role,
                patterns: k.queues,
            });
            if by_hash.insert(hash, key).is_some() {
                return Err(KeyConfigError(format!(
                    "key \"{}\" has the same secret as another key",
                    k.name
                )));
            }
        }
        Ok(KeyRing { by_hash })
    }

    /// True when authentication is on.
    pub fn enabled(&self) -> bool {
        !self.by_hash.is_empty()
    }

    /// The key with this secret.
    pub fn find(&self, secret: &str) -> Option<Arc<Key>> {
        let hash: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        self.by_hash.get(&hash).cloned()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// True without keys.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// Who is calling: a key, or anybody when authentication is off; and, once the permission
/// layer has checked it, the operation it is calling (see `crate::http::access`).
#[derive(Debug, Clone)]
pub struct Caller {
    key: Option<Arc<Key>>,
    op: Option<&'static Operation>,
}

impl Caller {
    /// The key's name, for logs.
    pub fn name(&self) -> Option<&str> {
        self.key.as_deref().map(|k| k.name.as_str())
    }

    /// Checks that the caller may do `action` on `queue`.
    ///
    /// # Errors
    /// 403 `permission_denied` naming what is missing.
    pub fn allow(&self, action: Action, queue: &QueueName) -> Result<(), ApiError> {
        match &self.key {
            Some(k) => k.permits(action, queue.as_str()).map_err(denied),
            None => Ok(()),
        }
    }

    /// True when the caller reaches every queue, whatever its name: authentication is off, or
    /// the key has the pattern `*`.
    pub fn covers_all(&self) -> bool {
        self.key.as_deref().is_none_or(Key::covers_all)
    }

    /// Checks the role alone (before the queue is known).
    ///
    /// # Errors
    /// 403 `permission_denied`.
    pub fn allow_role(&self, action: Action) -> Result<(), ApiError> {
        match &self.key {
            Some(k) => k.permits_action(action).map_err(denied),
            None => Ok(()),
        }
    }

    /// The key's role (`None` when authentication is off: anybody may do anything).
    pub fn role(&self) -> Option<Role> {
        self.key.as_deref().map(|k| k.role)
    }

    /// The queue patterns the key covers (`*` when authentication is off).
    pub fn patterns(&self) -> Vec<String> {
        self.key
            .as_deref()
            .map_or_else(|| vec!["*".to_owned()], |k| k.patterns.clone())
    }

    /// True when the caller may see `queue` at all (for listing).
    pub fn sees(&self, queue: &str) -> bool {
        self.key.as_ref().is_none_or(|k| k.covers(queue))
    }
}

/// A refusal as the HTTP API answers it: 403 `permission_denied` naming what is missing.
fn denied(d: Denied) -> ApiError {
    ApiError::forbidden(d.to_string())
}

impl Caller {
    /// Anybody: authentication is off.
    pub(crate) fn anybody() -> Caller {
        Caller {
            key: None,
            op: None,
        }
    }

    /// The caller, calling `op` (its role and path already checked against it).
    pub(crate) fn doing(self, op: &'static Operation) -> Caller {
        Caller {
            op: Some(op),
            ..self
        }
    }

    /// The operation being called, once the access layer has looked it up.
    pub(crate) fn operation(&self) -> Option<&'static Operation> {
        self.op
    }

    /// The actions of the operation being called, as the permission table declares them.
    ///
    /// # Errors
    /// 403 `permission_denied` when no operation was checked: a handler reached without
    /// the permission layer is refused rather than trusted.
    fn actions(&self) -> Result<&'static [sluice_core::access::Action], ApiError> {
        self.op.map(|o| o.actions).ok_or_else(|| {
            ApiError::forbidden("this route is not in the permission table; nothing is allowed")
        })
    }

    /// Checks that the caller may do what its operation does on `queue` too: a queue the
    /// request's body names (a move's destination, a dead-letter queue, a redrive's source
    /// and destination, a schedule's queue).
    ///
    /// # Errors
    /// 403 `permission_denied` naming what is missing.
    pub fn allow_also(&self, queue: &QueueName) -> Result<(), ApiError> {
        for action in self.actions()? {
            self.allow(*action, queue)?;
        }
        Ok(())
    }

    /// Checks that the caller may do what its operation does on `queue`, the queue of the
    /// message, task, redrive job or schedule it named by id or name. A key that does not
    /// cover that queue gets `missing()`, the answer for one that does not exist: an id must
    /// not reveal which queue outside the key's patterns holds it, nor that it exists.
    ///
    /// # Errors
    /// `missing()` for a queue outside the patterns.
    pub fn allow_found(
        &self,
        queue: &QueueName,
        missing: impl FnOnce() -> ApiError,
    ) -> Result<(), ApiError> {
        self.actions()?;
        if self.sees(queue.as_str()) {
            Ok(())
        } else {
            Err(missing())
        }
    }

    /// The holder of `secret`, or `unauthenticated` when no key has it.
    pub(crate) fn holder_of(keys: &KeyRing, secret: &str) -> Result<Caller, ApiError> {
        match keys.find(secret) {
            Some(key) => Ok(Caller {
                key: Some(key),
                op: None,
            }),
            None => Err(ApiError::unauthenticated("unknown API key")),
        }
    }
}

/// Something that holds the key ring (the router state).
pub trait HasKeys {
    /// The keys.
    fn keys(&self) -> &KeyRing;
}

impl<S: HasKeys + Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller the permission layer (`crate::http::access`) authenticated and checked. A
    /// request it did not check (a route missing from the permission table) is refused:
    /// every handler that acts takes a `Caller`, so none runs unchecked.
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::forbidden("this route is not in the permission table; nothing is allowed")
        })
    }
}

impl Caller {
    /// The caller a request's `Authorization` header names. It needs the headers alone, so
    /// it runs before anything reads the request's body: a client that is not authenticated
    /// makes the broker read nothing past the headers.
    ///
    /// # Errors
    /// 400 `invalid_argument` for a malformed header (with or without keys); 401
    /// `unauthenticated` for a missing or unknown key when the broker has keys.
    pub fn from_headers(headers: &HeaderMap, keys: &KeyRing) -> Result<Caller, ApiError> {
        let header = headers.get(header::AUTHORIZATION);
        // Malformed headers are refused even with authentication off: they are abuse or a
        // broken client either way, and answering them the same in both modes hides nothing.
        let value = match header {
            None => None,
            Some(h) if h.len() > MAX_AUTHORIZATION_BYTES => {
                return Err(ApiError::invalid(format!(
                    "Authorization header is {} bytes; at most {MAX_AUTHORIZATION_BYTES} are accepted",
                    h.len()
                )));
            }
            Some(h) => Some(h.to_str().map_err(|_| {
                ApiError::invalid("Authorization header must be visible ASCII: Bearer <key>")
            })?),
        };
        if !keys.enabled() {
            return Ok(Caller::anybody());
        }
        let Some(value) = value else {
            return Err(ApiError::unauthenticated(
                "missing Authorization header; send Authorization: Bearer <key>",
            ));
        };
        let secret = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, s)| s.trim())
            .ok_or_else(|| {
                ApiError::unauthenticated("Authorization must use the Bearer scheme: Bearer <key>")
            })?;
        Caller::holder_of(keys, secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_secret() {
        let ring = KeyRing::new(vec![ApiKeyConfig {
            name: "w".into(),
            role: Role::Consumer,
            queues: vec!["jobs".into()],
            sha256: hash_secret("s3cret"),
        }])
        .unwrap();
        assert_eq!(ring.find("s3cret").unwrap().name, "w");
        assert!(ring.find("s3cret ").is_none());
    }

    #[test]
    fn bad_hashes_are_refused() {
        let bad = ApiKeyConfig {
            name: "x".into(),
            role: Role::Admin,
            queues: vec!["*".into()],
            sha256: "abc".into(),
        };
        assert!(KeyRing::new(vec![bad]).is_err());
    }
}
