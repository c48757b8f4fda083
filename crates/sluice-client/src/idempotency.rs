//! Stable idempotency keys for a task's side effects.
//!
//! A task may run more than once (at-least-once delivery: a lease can expire, a worker can
//! die after charging a card and before its ack). A side effect is safe when the service it
//! calls deduplicates by a key that is the same on every attempt of the same task and
//! different between tasks and between effects of one task. The task id plus a label naming
//! the effect is exactly that; hashing it keeps keys short, opaque and of a fixed form.

use sha2::{Digest, Sha256};

/// A stable key for side effect `label` of task `task_id`: the same for every attempt of the
/// task, different for another task or another label. 32 lowercase hex digits.
///
/// ```
/// let a = sluice_client::idempotency_key("00000000000000a1", "charge-card");
/// assert_eq!(a, sluice_client::idempotency_key("00000000000000a1", "charge-card"));
/// assert_ne!(a, sluice_client::idempotency_key("00000000000000a1", "send-receipt"));
/// assert_eq!(a.len(), 32);
/// ```
pub fn idempotency_key(task_id: &str, label: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"sluice-task-effect\0");
    h.update(task_id.as_bytes());
    h.update([0]);
    h.update(label.as_bytes());
    hex::encode(&h.finalize()[..16])
}
