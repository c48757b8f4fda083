//! Type erasure of handlers and hooks: a typed `Fn(TaskContext, I) -> Future<Output =
//! Result<O, TaskError>>` becomes one callable the worker stores by task name.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::envelope::TaskEnvelope;
use crate::error::Error;
use crate::json::to_raw;
use crate::worker::context::TaskContext;
use crate::worker::error::TaskError;

pub(crate) type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a handler run ends with: its error, or its output as JSON (or why the output could
/// not be JSON).
pub(crate) type HandlerOutput = Result<Result<Box<RawValue>, Error>, TaskError>;

/// Decodes the input (failing with the decode error) and returns the run's future.
pub(crate) type ErasedHandler =
    Arc<dyn Fn(TaskContext, &TaskEnvelope) -> Result<BoxFut<HandlerOutput>, Error> + Send + Sync>;

/// The error a dead-letter hook may return.
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) type ErasedHook =
    Arc<dyn Fn(String, String) -> BoxFut<Result<(), HookError>> + Send + Sync>;

pub(crate) fn erase<I, O, F, Fut>(f: F) -> ErasedHandler
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(TaskContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: TaskContext, env: &TaskEnvelope| {
        let input: I = env.input()?;
        let f = Arc::clone(&f);
        let fut: BoxFut<HandlerOutput> = Box::pin(async move {
            // Called inside the future, so a panic in the handler's synchronous part is caught
            // with the rest by the task it runs in.
            let out = f(ctx, input).await?;
            Ok(to_raw("the task's result", &out))
        });
        Ok(fut)
    })
}

pub(crate) fn erase_hook<F, Fut>(f: F) -> ErasedHook
where
    F: Fn(String, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HookError>> + Send + 'static,
{
    Arc::new(move |id, error| Box::pin(f(id, error)))
}
