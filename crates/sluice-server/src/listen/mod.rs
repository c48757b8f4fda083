//! The listeners a broker serves on: HTTP (the API, and any router given to it such as the
//! SQS endpoint), the frame protocol, TLS around either, and the connection rules all of
//! them share.

pub mod connections;
mod frame_deadline;
mod frame_idempotency;
pub(crate) mod frames;
pub mod tls;
