//! The handlers, one module per area, and the table of every API route.
//!
//! Each handler translates between the wire types of `sluice_wire` and the core types and
//! makes one `Store` call; permissions, idempotency replay, origin checks and the error
//! envelope are layers around them (`crate::http`), and the OpenAPI document is built from
//! this table (`crate::openapi`).

pub mod audit;
pub mod consume;
pub mod health;
pub mod inspect;
pub mod keys;
pub mod overview;
pub mod queues;
pub mod redrives;
pub mod schedules;
pub mod send;
pub mod summary;
pub mod tasks;

use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;

/// Every API route with its handler; its OpenAPI parts are collected as it is built.
pub(crate) fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(crate::openapi::ApiDoc::openapi())
        .routes(routes!(queues::list_queues))
        .routes(routes!(
            queues::put_queue,
            queues::get_queue,
            queues::delete_queue
        ))
        .routes(routes!(queues::pause_queue))
        .routes(routes!(queues::resume_queue))
        .routes(routes!(queues::force_breaker))
        .routes(routes!(queues::purge_queue))
        .routes(routes!(send::send, inspect::browse))
        .routes(routes!(consume::receive))
        .routes(routes!(consume::ack))
        .routes(routes!(consume::nack))
        .routes(routes!(consume::reject))
        .routes(routes!(consume::release))
        .routes(routes!(consume::move_message))
        .routes(routes!(consume::extend))
        .routes(routes!(inspect::get_message, inspect::delete_message))
        .routes(routes!(inspect::stats))
        .routes(routes!(keys::keys))
        .routes(routes!(keys::force_key_breaker))
        .routes(routes!(overview::overview))
        .routes(routes!(overview::whoami))
        .routes(routes!(summary::summary))
        .routes(routes!(inspect::history))
        .routes(routes!(tasks::get_task))
        .routes(routes!(tasks::cancel))
        .routes(routes!(tasks::events))
        .routes(routes!(consume::progress))
        .routes(routes!(redrives::create, redrives::list))
        .routes(routes!(redrives::get))
        .routes(routes!(redrives::cancel))
        .routes(routes!(redrives::pause))
        .routes(routes!(redrives::resume))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::put, schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(audit::list))
        .routes(routes!(tasks::scaling))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::openapi_json))
        .routes(routes!(health::metrics))
}
