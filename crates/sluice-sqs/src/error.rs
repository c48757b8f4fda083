//! SQS errors as the AWS JSON protocol answers them: `{"__type": "com.amazonaws.sqs#<Shape>",
//! "message": …}` with the legacy query-protocol code in `x-amzn-query-error`
//! (`<code>;Sender`), which SDKs read to pick the exception class and the `Error.Code` that
//! application code compares.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sluice_core::StoreError;

/// An SQS error answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SqsError {
    /// The error shape of the JSON protocol, e.g. `QueueDoesNotExist`.
    pub shape: &'static str,
    /// The legacy code, e.g. `AWS.SimpleQueueService.NonExistentQueue`.
    pub code: &'static str,
    /// The HTTP status.
    pub status: StatusCode,
    /// Whether the caller is at fault (`Sender`) or the service (`Receiver`).
    pub sender: bool,
    /// What went wrong.
    pub message: String,
}

impl SqsError {
    fn new(
        shape: &'static str,
        code: &'static str,
        status: u16,
        message: impl Into<String>,
    ) -> Self {
        SqsError {
            shape,
            code,
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            sender: status < 500,
            message: message.into(),
        }
    }

    /// A move task, or its source or destination, that does not exist.
    pub fn resource_not_found(message: impl Into<String>) -> Self {
        Self::new(
            "ResourceNotFoundException",
            "ResourceNotFoundException",
            404,
            message,
        )
    }

    /// An operation the queue or task cannot do (a move task out of a queue that is not a
    /// dead-letter queue, a second task on one source).
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(
            "UnsupportedOperation",
            "AWS.SimpleQueueService.UnsupportedOperation",
            400,
            message,
        )
    }

    /// A value out of range or malformed.
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(
            "InvalidParameterValue",
            "InvalidParameterValue",
            400,
            message,
        )
    }

    /// A required parameter is missing.
    pub fn missing_parameter(name: &str) -> Self {
        Self::new(
            "MissingParameter",
            "MissingParameter",
            400,
            format!("The request must contain the parameter {name}."),
        )
    }

    /// The queue named does not exist.
    pub fn no_queue() -> Self {
        Self::new(
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
            "The specified queue does not exist.",
        )
    }

    /// A receipt handle that is not one.
    pub fn bad_receipt(handle: &str) -> Self {
        Self::new(
            "ReceiptHandleIsInvalid",
            "ReceiptHandleIsInvalid",
            400,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    }

    /// The message is no longer in flight under that receipt.
    pub fn not_in_flight() -> Self {
        Self::new(
            "MessageNotInflight",
            "AWS.SimpleQueueService.MessageNotInflight",
            400,
            "The message referred to is not in flight.",
        )
    }

    /// An attribute name the front end does not know.
    pub fn invalid_attribute(name: &str) -> Self {
        Self::new(
            "InvalidAttributeName",
            "InvalidAttributeName",
            400,
            format!("Unknown Attribute {name}."),
        )
    }

    /// A queue of that name exists with other settings.
    pub fn name_exists(name: &str) -> Self {
        Self::new(
            "QueueNameExists",
            "QueueAlreadyExists",
            400,
            format!("A queue already exists with the name {name} and different attributes."),
        )
    }

    /// An action this endpoint does not serve.
    pub fn invalid_action(action: &str) -> Self {
        Self::new(
            "InvalidAction",
            "InvalidAction",
            400,
            format!("The action {action} is not valid for this endpoint."),
        )
    }

    /// A batch with no entries.
    pub fn empty_batch() -> Self {
        Self::new(
            "EmptyBatchRequest",
            "AWS.SimpleQueueService.EmptyBatchRequest",
            400,
            "There should be at least one entry in the request.",
        )
    }

    /// A batch with more than 10 entries.
    pub fn too_many_entries(n: usize) -> Self {
        Self::new(
            "TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
            format!("Maximum number of entries per request are 10. You have sent {n}."),
        )
    }

    /// Two entries of a batch with the same id.
    pub fn ids_not_distinct(id: &str) -> Self {
        Self::new(
            "BatchEntryIdsNotDistinct",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            400,
            format!("Id {id} repeated."),
        )
    }

    /// A batch entry id that is not 1 to 80 of `[A-Za-z0-9_-]`.
    pub fn bad_entry_id(id: &str) -> Self {
        Self::new(
            "InvalidBatchEntryId",
            "AWS.SimpleQueueService.InvalidBatchEntryId",
            400,
            format!(
                "A batch entry id can only contain alphanumeric characters, hyphens and \
                 underscores. It can be at most 80 letters long; got \"{id}\"."
            ),
        )
    }

    /// A request without a signature, to an endpoint with keys.
    pub fn missing_token() -> Self {
        Self::new(
            "MissingAuthenticationToken",
            "MissingAuthenticationToken",
            403,
            "Request is missing Authentication Token: sign it with an access key of \
             [[sqs_keys]] (SigV4).",
        )
    }

    /// A signature header that is not a SigV4 one.
    pub fn incomplete_signature(why: &str) -> Self {
        Self::new(
            "IncompleteSignature",
            "IncompleteSignature",
            400,
            format!("The request signature is incomplete: {why}."),
        )
    }

    /// An access key the endpoint does not know.
    pub fn unknown_key() -> Self {
        Self::new(
            "InvalidClientTokenId",
            "InvalidClientTokenId",
            403,
            "The security token included in the request is invalid: no [[sqs_keys]] entry \
             has this access key id.",
        )
    }

    /// A request signed too far from now.
    pub fn request_expired(at: &str) -> Self {
        Self::new(
            "RequestExpired",
            "RequestExpired",
            400,
            format!("Request has expired: signed at {at}, more than 15 minutes from now."),
        )
    }

    /// A signature that does not match (a wrong secret, or a request changed on the way).
    pub fn bad_signature() -> Self {
        Self::new(
            "SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
            403,
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method.",
        )
    }

    /// A key whose role or queue patterns do not allow the action.
    pub fn access_denied(action: &str, queue: &str) -> Self {
        Self::new(
            "AccessDeniedException",
            "AccessDenied",
            403,
            format!(
                "Access to the resource is denied: this access key may not {action} on queue {queue}."
            ),
        )
    }

    /// A key whose role does not allow the action, on any queue.
    pub fn access_denied_role(action: &str) -> Self {
        Self::new(
            "AccessDeniedException",
            "AccessDenied",
            403,
            format!("Access to the resource is denied: this access key may not {action}."),
        )
    }

    /// A move task without destination by a key that does not cover every queue: each
    /// message would go back to its own source queue, which may be outside the key's patterns.
    pub fn access_denied_implicit_destination() -> Self {
        Self::new(
            "AccessDeniedException",
            "AccessDenied",
            403,
            "Access to the resource is denied: a move task without DestinationArn moves each \
             message back to its own source queue, and this access key does not cover every \
             queue. Give a DestinationArn the key covers."
                .to_owned(),
        )
    }

    /// A request a browser sent for a page of another origin, or one for a host the
    /// endpoint does not answer to; `why` says which and what to do instead.
    pub fn refused_origin(why: String) -> Self {
        Self::new("AccessDeniedException", "AccessDenied", 403, why)
    }

    /// The request body is not the JSON of an SQS request.
    pub fn serialization(message: impl Into<String>) -> Self {
        Self::new(
            "SerializationException",
            "SerializationException",
            400,
            message,
        )
    }
}

impl From<StoreError> for SqsError {
    fn from(e: StoreError) -> Self {
        let message = e.to_string();
        match e {
            StoreError::QueueNotFound(_) => SqsError::no_queue(),
            StoreError::InvalidArgument(m) | StoreError::PayloadTooLarge(m) => {
                SqsError::invalid_parameter(m)
            }
            StoreError::ReceiptStale => SqsError::not_in_flight(),
            StoreError::QueueFull { .. } => SqsError::new("OverLimit", "OverLimit", 403, message),
            StoreError::Unavailable { .. } => {
                SqsError::new("ServiceUnavailable", "ServiceUnavailable", 503, message)
            }
            StoreError::Conflict(_) | StoreError::QueueExists(_) => SqsError::new(
                "InvalidParameterValue",
                "InvalidParameterValue",
                400,
                message,
            ),
            _ => SqsError::new("InternalFailure", "InternalFailure", 500, message),
        }
    }
}

impl IntoResponse for SqsError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "__type": format!("com.amazonaws.sqs#{}", self.shape),
            "message": self.message,
        });
        let mut resp = (self.status, body.to_string()).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::JSON_CONTENT_TYPE),
        );
        let fault = if self.sender { "Sender" } else { "Receiver" };
        if let Ok(v) = HeaderValue::from_str(&format!("{};{fault}", self.code)) {
            headers.insert("x-amzn-query-error", v);
        }
        resp
    }
}
