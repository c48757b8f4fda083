//! The permission table: every operation of the HTTP API, the frame protocol and the SQS
//! endpoint, with the actions it needs and which queue they are checked on. It is the one
//! place a permission is declared: each protocol looks its operation up here before anything
//! runs, and refuses an operation it does not find (a new route, frame op or SQS action
//! cannot be served without a line here). Tests hold the table to the OpenAPI document, the
//! frame protocol's ops and the SQS actions served, both ways.

use super::Action::{self, *};

/// Which queue an operation's actions are checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// None: anybody may call it, with or without a key (health, the API document).
    Open,
    /// None beyond the key's role: what it shows is filtered to the queues the key covers
    /// (listings, totals, `/metrics`), or it names no queue (`whoami`).
    Role,
    /// The queue the operation names in its address: the HTTP path's `{q}`, the frame op's
    /// queue, the SQS `QueueUrl` (or `QueueName`). Checked before the operation runs.
    Queue,
    /// The queue of the message, task, redrive job or schedule the operation names by id or
    /// name, once it is found: a key that does not cover it reads it as not found, so an id
    /// reveals nothing outside the key's patterns.
    Found,
    /// The queues the request body names (a redrive's source and destination, a schedule's
    /// queue): each is checked when the body is read.
    Body,
}

/// One operation and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// A name for docs and tests, e.g. `queue.put`.
    pub name: &'static str,
    /// What the caller's role must allow: every one of them (a schedule both manages a queue
    /// and sends to it). Empty for [`Scope::Open`] and for `whoami`.
    pub actions: &'static [Action],
    /// Which queue the actions are checked on.
    pub scope: Scope,
    /// Its HTTP route: method and path template (as in the OpenAPI document).
    pub http: Option<(&'static str, &'static str)>,
    /// The frame protocol's ops that do it.
    pub frames: &'static [&'static str],
    /// The SQS actions that do it.
    pub sqs: &'static [&'static str],
    /// Other queues the request names that need the same actions (checked by the
    /// operation when it reads them), for the docs: "" when none.
    pub also: &'static str,
    /// The actions it records in the audit log when it changes something, e.g.
    /// `queue.purge`, under the name of the caller's key. An operation records nothing else,
    /// and one that declares none records nothing (reads, and the consumers' and producers'
    /// traffic, which the message lifecycle tells).
    pub audit: &'static [&'static str],
}

const fn op(name: &'static str, actions: &'static [Action], scope: Scope) -> Operation {
    Operation {
        name,
        actions,
        scope,
        http: None,
        frames: &[],
        sqs: &[],
        also: "",
        audit: &[],
    }
}

impl Operation {
    const fn http(mut self, method: &'static str, path: &'static str) -> Self {
        self.http = Some((method, path));
        self
    }

    const fn frames(mut self, ops: &'static [&'static str]) -> Self {
        self.frames = ops;
        self
    }

    const fn sqs(mut self, actions: &'static [&'static str]) -> Self {
        self.sqs = actions;
        self
    }

    const fn also(mut self, what: &'static str) -> Self {
        self.also = what;
        self
    }

    const fn audit(mut self, actions: &'static [&'static str]) -> Self {
        self.audit = actions;
        self
    }
}

use Scope::{Body, Found, Open, Queue, Role};

/// Every operation. Order: health and documents, queues, messages, consumers, inspection,
/// tasks, redrives, schedules, the SQS-only operations.
pub const OPERATIONS: &[Operation] = &[
    op("health.live", &[], Open).http("GET", "/healthz"),
    op("health.ready", &[], Open).http("GET", "/readyz"),
    op("document.openapi", &[], Open).http("GET", "/openapi.json"),
    op("console", &[], Open).http("GET", "/"),
    op("console.assets", &[], Open).http("GET", "/console/{*path}"),
    op("metrics", &[Stats], Role).http("GET", "/metrics"),
    op("whoami", &[], Role).http("GET", "/v1/whoami"),
    op("stats.overview", &[Stats], Role).http("GET", "/v1/stats"),
    op("audit.list", &[Inspect], Role)
        .http("GET", "/v1/audit")
        .also("the queue it filters on"),
    // Queues.
    op("queue.list", &[ReadQueue], Role)
        .http("GET", "/v1/queues")
        .sqs(&["ListQueues"]),
    op("queue.dead_letter_sources", &[ReadQueue], Queue)
        .sqs(&["ListDeadLetterSourceQueues"])
        .also("lists only the sources the key covers"),
    op("queue.get", &[ReadQueue], Queue)
        .http("GET", "/v1/queues/{q}")
        .sqs(&["GetQueueUrl", "GetQueueAttributes", "ListQueueTags"]),
    op("queue.put", &[ManageQueue], Queue)
        .http("PUT", "/v1/queues/{q}")
        .sqs(&[
            "CreateQueue",
            "SetQueueAttributes",
            "TagQueue",
            "UntagQueue",
        ])
        .also("its dead-letter queue")
        .audit(&["queue.create", "queue.update", "queue.tag", "queue.untag"]),
    op("queue.delete", &[ManageQueue], Queue)
        .http("DELETE", "/v1/queues/{q}")
        .sqs(&["DeleteQueue"])
        .audit(&["queue.delete"]),
    op("queue.pause", &[ManageQueue], Queue)
        .http("POST", "/v1/queues/{q}/pause")
        .audit(&["queue.pause"]),
    op("queue.resume", &[ManageQueue], Queue)
        .http("POST", "/v1/queues/{q}/resume")
        .audit(&["queue.resume"]),
    op("queue.purge", &[ManageQueue], Queue)
        .http("POST", "/v1/queues/{q}/purge")
        .sqs(&["PurgeQueue"])
        .audit(&["queue.purge"]),
    op("queue.breaker", &[ManageQueue], Queue)
        .http("POST", "/v1/queues/{q}/breaker")
        .audit(&["queue.breaker.force"]),
    op("queue.key_breaker", &[ManageQueue], Queue)
        .http("POST", "/v1/queues/{q}/keys/{key}/breaker")
        .audit(&["key.breaker.force"]),
    // Producers.
    op("message.send", &[Send], Queue)
        .http("POST", "/v1/queues/{q}/messages")
        .frames(&[
            "Send",
            "SendGrouped",
            "SendIdempotent",
            "SendTagged",
            "SendTraced",
        ])
        .sqs(&["SendMessage", "SendMessageBatch"]),
    // Consumers.
    op("message.receive", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/receive")
        .frames(&["Receive", "ReceiveTagged", "ReceiveTraced"])
        .sqs(&["ReceiveMessage"]),
    op("message.ack", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/ack")
        .frames(&["Ack", "AckWithResults"])
        .sqs(&["DeleteMessage", "DeleteMessageBatch"]),
    op("message.nack", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/nack")
        .frames(&["Nack", "NackRetryAfter"]),
    op("message.reject", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/reject")
        .frames(&["Reject"]),
    op("message.release", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/release")
        .frames(&["Release"]),
    op("message.move", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/move")
        .frames(&["Move"])
        .also("the queue it moves to"),
    op("message.extend", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/extend")
        .frames(&["Extend"])
        .sqs(&["ChangeMessageVisibility", "ChangeMessageVisibilityBatch"]),
    op("message.progress", &[Consume], Queue)
        .http("POST", "/v1/queues/{q}/progress")
        .frames(&["Progress"]),
    // Inspection.
    op("message.browse", &[Inspect], Queue).http("GET", "/v1/queues/{q}/messages"),
    op("message.get", &[Inspect], Found).http("GET", "/v1/messages/{id}"),
    op("message.delete", &[Inspect], Found)
        .http("DELETE", "/v1/messages/{id}")
        .audit(&["message.delete"]),
    op("queue.summary", &[Inspect], Queue).http("GET", "/v1/queues/{q}/summary"),
    op("queue.stats", &[Stats], Queue).http("GET", "/v1/queues/{q}/stats"),
    op("queue.history", &[Stats], Queue).http("GET", "/v1/queues/{q}/stats/history"),
    op("queue.keys", &[Stats], Queue).http("GET", "/v1/queues/{q}/keys"),
    op("queue.scaling", &[Stats], Queue).http("GET", "/v1/queues/{q}/scaling"),
    // Tasks.
    op("task.get", &[ReadTask], Found).http("GET", "/v1/tasks/{id}"),
    op("task.events", &[ReadTask], Found).http("GET", "/v1/tasks/{id}/events"),
    op("task.cancel", &[CancelTask], Found)
        .http("POST", "/v1/tasks/{id}/cancel")
        .audit(&["task.cancel"]),
    // Redrives.
    op("redrive.list", &[Redrive], Role).http("GET", "/v1/redrives"),
    op("redrive.list_of_source", &[Redrive], Queue).sqs(&["ListMessageMoveTasks"]),
    op("redrive.create", &[Redrive], Body)
        .http("POST", "/v1/redrives")
        .sqs(&["StartMessageMoveTask"])
        .also("its source and destination")
        .audit(&["redrive.create"]),
    op("redrive.get", &[Redrive], Found).http("GET", "/v1/redrives/{id}"),
    op("redrive.cancel", &[Redrive], Found)
        .http("POST", "/v1/redrives/{id}/cancel")
        .sqs(&["CancelMessageMoveTask"])
        .audit(&["redrive.cancel"]),
    op("redrive.pause", &[Redrive], Found)
        .http("POST", "/v1/redrives/{id}/pause")
        .audit(&["redrive.pause"]),
    op("redrive.resume", &[Redrive], Found)
        .http("POST", "/v1/redrives/{id}/resume")
        .audit(&["redrive.resume"]),
    // Schedules: changing one manages its queue and sends to it.
    op("schedule.list", &[Inspect], Role).http("GET", "/v1/schedules"),
    op("schedule.get", &[Inspect], Role).http("GET", "/v1/schedules/{name}"),
    op("schedule.put", &[ManageQueue, Send], Body)
        .http("PUT", "/v1/schedules/{name}")
        .also("the queue it replaces, when it changes queue")
        .audit(&["schedule.put"]),
    op("schedule.delete", &[ManageQueue, Send], Found)
        .http("DELETE", "/v1/schedules/{name}")
        .audit(&["schedule.delete"]),
    op("schedule.pause", &[ManageQueue, Send], Found)
        .http("POST", "/v1/schedules/{name}/pause")
        .audit(&["schedule.pause"]),
    op("schedule.resume", &[ManageQueue, Send], Found)
        .http("POST", "/v1/schedules/{name}/resume")
        .audit(&["schedule.resume"]),
    op("schedule.trigger", &[ManageQueue, Send], Found)
        .http("POST", "/v1/schedules/{name}/trigger")
        .audit(&["schedule.trigger"]),
];

/// The operation served at HTTP `method` and `path` (a route template, e.g.
/// `/v1/queues/{q}`).
pub fn http(method: &str, path: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| {
        o.http
            .is_some_and(|(m, p)| m.eq_ignore_ascii_case(method) && p == path)
    })
}

/// The operation a frame op does (`Send`, `Receive`, …; `Hello` authenticates and is none).
pub fn frame(op: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.frames.contains(&op))
}

/// The operation an SQS action does.
pub fn sqs(action: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.sqs.contains(&action))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_route_op_and_action_is_declared_once() {
        let mut seen = std::collections::HashSet::new();
        for o in OPERATIONS {
            assert!(seen.insert(o.name), "{} twice", o.name);
            if let Some((m, p)) = o.http {
                assert!(
                    seen.insert(Box::leak(format!("{m} {p}").into_boxed_str())),
                    "{m} {p}"
                );
            }
            for f in o.frames {
                assert!(
                    seen.insert(Box::leak(format!("frame {f}").into_boxed_str())),
                    "{f}"
                );
            }
            for s in o.sqs {
                assert!(
                    seen.insert(Box::leak(format!("sqs {s}").into_boxed_str())),
                    "{s}"
                );
            }
            assert_eq!(
                o.actions.is_empty(),
                o.scope == Open || o.name == "whoami",
                "{}: only open operations and whoami need no action",
                o.name
            );
        }
        assert_eq!(
            http("post", "/v1/queues/{q}/ack").map(|o| o.name),
            Some("message.ack")
        );
        assert_eq!(
            frame("NackRetryAfter").map(|o| o.name),
            Some("message.nack")
        );
        assert_eq!(sqs("PurgeQueue").map(|o| o.name), Some("queue.purge"));
        assert!(frame("Hello").is_none());
    }
}
