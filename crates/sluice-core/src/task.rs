//! Task status: what a task id's message says about the task's progress.
//!
//! A task is a message whose body is a task envelope; its id is the message id. The status
//! is derived from where the message is, so it needs no bookkeeping of its own and is the same
//! on every engine.

use serde::{Deserialize, Serialize};

use crate::message::{Message, MessageState};

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Waiting, never tried.
    Pending,
    /// Leased by a worker.
    Started,
    /// Waiting after a failure.
    Retry,
    /// Acknowledged; its result is kept for the queue's `result_ttl`.
    Success,
    /// In a dead-letter queue.
    Failure,
    /// Not known (never sent, or its record is gone).
    Unknown,
    /// Cancelled before or while running.
    Cancelled,
}

impl TaskStatus {
    /// The status of the task whose message is `m`.
    pub fn of(m: &Message) -> TaskStatus {
        if m.cancelled {
            return TaskStatus::Cancelled;
        }
        if m.dead_letter.is_some() {
            return TaskStatus::Failure;
        }
        match m.state {
            MessageState::Completed => TaskStatus::Success,
            MessageState::InFlight => TaskStatus::Started,
            MessageState::Delayed | MessageState::Visible if m.receive_count == 0 => {
                TaskStatus::Pending
            }
            MessageState::Delayed | MessageState::Visible => TaskStatus::Retry,
        }
    }

    /// True when the status will not change any more: waiting for it can stop.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Success | TaskStatus::Failure | TaskStatus::Cancelled
        )
    }

    /// The wire form, e.g. `SUCCESS`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "PENDING",
            TaskStatus::Started => "STARTED",
            TaskStatus::Retry => "RETRY",
            TaskStatus::Success => "SUCCESS",
            TaskStatus::Failure => "FAILURE",
            TaskStatus::Unknown => "UNKNOWN",
            TaskStatus::Cancelled => "CANCELLED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{DeadLetter, DeadLetterReason, MessageId};
    use crate::name::QueueName;
    use crate::time::Timestamp;

    fn msg(state: MessageState, receive_count: u32) -> Message {
        Message {
            trace: None,
            id: MessageId(1),
            queue: QueueName::new("q").unwrap(),
            state,
            body: None,
            attributes: Default::default(),
            enqueued_at: Timestamp(0),
            entered_at: Timestamp(0),
            visible_at: None,
            receive_count,
            last_error: None,
            attempts: vec![],
            dedup_id: None,
            source_queue: None,
            dead_letter: None,
            result: None,
            completed_at: None,
            cancelled: false,
            progress: None,
            group: None,
            key: None,
            priority: None,
        }
    }

    #[test]
    fn statuses_follow_the_lifecycle() {
        assert_eq!(
            TaskStatus::of(&msg(MessageState::Visible, 0)),
            TaskStatus::Pending
        );
        assert_eq!(
            TaskStatus::of(&msg(MessageState::Delayed, 0)),
            TaskStatus::Pending
        );
        assert_eq!(
            TaskStatus::of(&msg(MessageState::InFlight, 1)),
            TaskStatus::Started
        );
        assert_eq!(
            TaskStatus::of(&msg(MessageState::Delayed, 1)),
            TaskStatus::Retry
        );
        assert_eq!(
            TaskStatus::of(&msg(MessageState::Completed, 1)),
            TaskStatus::Success
        );
        let mut dead = msg(MessageState::Visible, 5);
        dead.dead_letter = Some(DeadLetter {
            reason: DeadLetterReason::Exhausted,
            at: Timestamp(0),
        });
        assert_eq!(TaskStatus::of(&dead), TaskStatus::Failure);
        assert!(TaskStatus::Failure.is_final() && !TaskStatus::Retry.is_final());
    }
}
