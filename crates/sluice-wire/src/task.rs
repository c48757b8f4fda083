//! The status of a task.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use sluice_core::message::Message;

use crate::body::{BodyFields, wire_struct};
use crate::settle::ProgressView;

wire_struct! {
    /// `GET /v1/tasks/{id}`: the status of a task.
    #[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
    pub struct TaskView {
        /// Task id (its message id).
        pub id: String,
        /// `PENDING`, `STARTED`, `RETRY`, `SUCCESS`, `FAILURE`, `UNKNOWN` or `CANCELLED`.
        #[schema(value_type = String, example = "SUCCESS")]
        pub status: sluice_core::task::TaskStatus,
        /// The queue it is in now (absent when unknown).
        pub queue: Option<String>,
        /// Deliveries so far.
        pub receive_count: u32,
        @view {
            /// The result of a successful task, when JSON or text.
            result,
            /// The result when binary.
            result_base64,
            /// `"text"` when `result` holds text.
            result_encoding,
        }
        /// The last error of a failed or retrying task.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub error: Option<String>,
        /// The last progress its running handler reported.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub progress: Option<ProgressView>,
    }
}

impl TaskView {
    /// The view of a task whose message is `m`.
    pub fn of(m: &Message) -> Self {
        let result = BodyFields::of(m.result.as_ref());
        TaskView {
            id: m.id.to_string(),
            status: sluice_core::task::TaskStatus::of(m),
            queue: Some(m.queue.to_string()),
            receive_count: m.receive_count,
            result: result.json,
            result_base64: result.base64,
            result_encoding: result.encoding,
            error: m.last_error.clone(),
            progress: m.progress.as_ref().map(ProgressView::from),
        }
    }

    /// The view of an id nothing is known about.
    pub fn unknown(id: sluice_core::message::MessageId) -> Self {
        TaskView {
            id: id.to_string(),
            status: sluice_core::task::TaskStatus::Unknown,
            queue: None,
            receive_count: 0,
            result: None,
            result_base64: None,
            result_encoding: None,
            error: None,
            progress: None,
        }
    }
}

/// Query of `GET /v1/tasks/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskQuery {
    /// Long poll: wait up to this many ms (at most 30000) for the task to become final.
    #[param(default = 0, maximum = 30_000)]
    pub wait_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_result_reads_back_as_a_result() {
        let json = r#"{"id":"0000000000000007","status":"SUCCESS","queue":"q","receive_count":1,"result":null}"#;
        let task: TaskView = serde_json::from_str(json).unwrap();
        assert_eq!(task.result.as_ref().map(|r| r.get()), Some("null"));
        assert_eq!(serde_json::to_string(&task).unwrap(), json);
        let none: TaskView = serde_json::from_str(
            r#"{"id":"0000000000000007","status":"PENDING","queue":"q","receive_count":0}"#,
        )
        .unwrap();
        assert!(none.result.is_none());
    }
}
