//! Client subcommands (SPEC §9): every subcommand other than `serve` and `key` is a client
//! of the HTTP API. They will live here, one module per command group (`queue.rs`,
//! `send.rs`, `receive.rs`, `stats.rs`, `dlq.rs`, `redrive.rs`, `task.rs`, `drill.rs`,
//! `bench.rs`), over a shared `http.rs` that sends `Authorization: Bearer $SLUICE_TOKEN` to
//! `$SLUICE_URL` and turns the error envelope back into `sluice_core::ErrorCode`s.
