//! Who may do what: the roles of API keys, the actions operations need, the queue-name
//! patterns a key covers, and the one table that says which action every operation of every
//! protocol needs ([`operations`]).
//!
//! Nothing here knows a protocol: the HTTP API, the frame protocol and the SQS endpoint each
//! look their operation up in the table and refuse a caller the way their protocol refuses
//! (403 `permission_denied`, a frame error, SQS `AccessDenied`).

pub mod operations;

use serde::{Deserialize, Serialize};

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Queue administration (create, update, delete, pause, resume, purge), browse,
    /// get and delete messages, stats, redrives, schedules.
    Operator,
    /// Send (plus reading a queue's config and stats).
    Producer,
    /// Receive, ack, nack, reject, move, extend (plus reading a queue's config).
    Consumer,
}

impl Role {
    /// Every role, for tables and tests.
    pub const ALL: [Role; 4] = [Role::Admin, Role::Operator, Role::Producer, Role::Consumer];

    /// The config form, e.g. `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Producer => "producer",
            Role::Consumer => "consumer",
        }
    }
}

/// What an operation does to a queue, for the permission check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Create, update, delete, pause, resume, purge.
    ManageQueue,
    /// Read a queue's config.
    ReadQueue,
    /// Send messages.
    Send,
    /// Receive, ack, nack, reject, move, extend.
    Consume,
    /// Browse, get or delete messages.
    Inspect,
    /// Read stats.
    Stats,
    /// Read a task's status and result.
    ReadTask,
    /// Cancel a task.
    CancelTask,
    /// Start, list or cancel redrive jobs.
    Redrive,
}

impl Action {
    /// Whether `role` may do this.
    pub fn allowed(self, role: Role) -> bool {
        use Role::*;
        match self {
            Action::ManageQueue | Action::Inspect | Action::Redrive => {
                matches!(role, Admin | Operator)
            }
            Action::ReadQueue | Action::ReadTask => true,
            Action::CancelTask => matches!(role, Admin | Operator | Producer),
            Action::Send => matches!(role, Admin | Producer),
            Action::Consume => matches!(role, Admin | Consumer),
            Action::Stats => matches!(role, Admin | Operator | Producer),
        }
    }

    /// What it is, for error messages: "send", "manage queues", ….
    pub fn describe(self) -> &'static str {
        match self {
            Action::ManageQueue => "manage queues",
            Action::ReadQueue => "read queues",
            Action::Send => "send",
            Action::Consume => "consume",
            Action::Inspect => "browse or change messages",
            Action::Stats => "read stats",
            Action::ReadTask => "read task status",
            Action::CancelTask => "cancel tasks",
            Action::Redrive => "redrive dead letters",
        }
    }
}

/// An authenticated key: its name, its role and the queue-name patterns it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Its name, for logs and audit (never the secret).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its queue patterns (see [`glob_match`]).
    pub patterns: Vec<String>,
}

/// Why a key may not do something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Its role does not allow the action.
    #[error("key \"{key}\" has role {}, which may not {}", role.as_str(), action.describe())]
    Role {
        /// The key's name.
        key: String,
        /// Its role.
        role: Role,
        /// What it tried.
        action: Action,
    },
    /// None of its patterns matches the queue.
    #[error("key \"{key}\" does not cover queue \"{queue}\" (its patterns: {})", patterns.join(", "))]
    Queue {
        /// The key's name.
        key: String,
        /// The queue it named.
        queue: String,
        /// Its patterns.
        patterns: Vec<String>,
    },
}

impl Key {
    /// True when one of the key's patterns matches `queue`.
    pub fn covers(&self, queue: &str) -> bool {
        self.patterns.iter().any(|p| glob_match(p, queue))
    }

    /// True when the key reaches every queue, whatever its name (it has the pattern `*`).
    pub fn covers_all(&self) -> bool {
        self.patterns.iter().any(|p| p == "*")
    }

    /// Checks the role alone (before the queue is known).
    ///
    /// # Errors
    /// [`Denied::Role`].
    pub fn permits_action(&self, action: Action) -> Result<(), Denied> {
        if action.allowed(self.role) {
            Ok(())
        } else {
            Err(Denied::Role {
                key: self.name.clone(),
                role: self.role,
                action,
            })
        }
    }

    /// Checks that the key may do `action` on `queue`.
    ///
    /// # Errors
    /// [`Denied::Role`], then [`Denied::Queue`].
    pub fn permits(&self, action: Action, queue: &str) -> Result<(), Denied> {
        self.permits_action(action)?;
        if self.covers(queue) {
            Ok(())
        } else {
            Err(Denied::Queue {
                key: self.name.clone(),
                queue: queue.to_owned(),
                patterns: self.patterns.clone(),
            })
        }
    }
}

/// True when `pattern` may be a key's queue pattern: queue-name characters and the wildcards
/// `*` and `?`, at least one.
pub fn is_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern
            .chars()
            .all(|c| crate::name::is_name_char(c) || matches!(c, '*' | '?'))
}

/// Matches `name` against a pattern where `*` is any run of characters and `?` one.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_shells() {
        assert!(glob_match("orders.*", "orders.eu"));
        assert!(!glob_match("orders.*", "orders"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("*.dlq", "a.b.dlq"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
    }

    #[test]
    fn a_key_is_refused_for_its_role_first_then_its_queues() {
        let k = Key {
            name: "w".into(),
            role: Role::Consumer,
            patterns: vec!["orders.*".into()],
        };
        assert_eq!(k.permits(Action::Consume, "orders.eu"), Ok(()));
        let e = k.permits(Action::Send, "billing").unwrap_err();
        assert_eq!(
            e.to_string(),
            "key \"w\" has role consumer, which may not send"
        );
        let e = k.permits(Action::Consume, "billing").unwrap_err();
        assert_eq!(
            e.to_string(),
            "key \"w\" does not cover queue \"billing\" (its patterns: orders.*)"
        );
    }
}
