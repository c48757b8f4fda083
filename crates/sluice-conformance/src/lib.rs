//! The engine-agnostic conformance suite: every lifecycle rule and every operation of the
//! [`Store`] contract as a test, written once and run against every engine.
//!
//! An engine's test crate implements [`Harness`] and expands [`conformance_suite!`](crate::conformance_suite):
//!
//! ```ignore
//! sluice_conformance::conformance_suite!(my_engine_tests::harness);
//! ```
//!
//! Stores evaluate time lazily: a test advances the [`ManualClock`] and the next call on the
//! store sees delays, leases and retention as of the new time.
//!
//! Conventions the cases pin down (where the contract leaves a choice, see the case for each):
//! - a time `t` is reached when `now >= t`: a message delayed until `t` is visible at `t`, a
//!   lease ending at `t` is over at `t`;
//! - every call sees the state as of `now`, whichever queue it names (a lease that ran out on
//!   its last attempt shows the message in the DLQ to `get_message` and to a browse of the DLQ);
//! - a receive with no limit in the way (pause, rate, in-flight cap) returns
//!   `min(max, visible)` messages.

use std::sync::Arc;

use async_trait::async_trait;

use sluice_core::Store;
use sluice_core::time::ManualClock;

pub mod cases;
pub mod differential;
pub mod model;

/// How the suite gets stores of the engine under test. A [`Store`] is always an engine inside
/// the contract's checking layer (`sluice_core::Checked`, as the engine's `open` hands it out),
/// so the cases that feed out-of-range input test that shared layer on the way to the engine.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// A fresh, empty store reading time from `clock`.
    async fn open(&self, clock: ManualClock) -> Arc<dyn Store>;

    /// The same data opened again, as after a broker restart. The caller has dropped every
    /// handle to the previous store first.
    async fn reopen(&self, clock: ManualClock) -> Arc<dyn Store>;
}

/// Expands to one `#[tokio::test]` per conformance case, each running the case against a
/// harness made by `$harness().await` (an `async fn() -> H` with `H: Harness`).
///
/// The test crate needs `tokio` (with the `macros` and `rt-multi-thread` features) among its
/// dev-dependencies. Tests are named like the cases in [`cases`](crate::cases),
/// so `cargo test -p <engine> --test conformance nack_` runs the nack cases.
///
/// ```ignore
/// struct Embedded { dir: tempfile::TempDir }
/// #[async_trait::async_trait]
/// impl sluice_conformance::Harness for Embedded { /* open, reopen */ }
/// async fn harness() -> Embedded { Embedded { dir: tempfile::tempdir().unwrap() } }
/// sluice_conformance::conformance_suite!(harness);
/// ```
///
/// An engine that needs an outside service (a database) passes a guard, an
/// `async fn() -> bool` run before each case: `false` skips the case (the guard says why).
///
/// ```ignore
/// sluice_conformance::conformance_suite!(harness, if = database_reachable);
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($harness:path $(,)?) => {
        $crate::__sluice_conformance_cases!(tests $harness);
    };
    ($harness:path, if = $guard:path $(,)?) => {
        $crate::__sluice_conformance_cases!(guarded $guard, $harness);
    };
}

/// The one list of case names; calls `__sluice_conformance_expand!` with it.
#[doc(hidden)]
#[macro_export]
macro_rules! __sluice_conformance_cases {
    ($($mode:tt)*) => {
        $crate::__sluice_conformance_expand! {
            $($mode)*;
            queue_put_creates_with_defaults_and_dlq,
            queue_create_only_refuses_an_existing_queue,
            new_queue_names_are_dot_separated,
            queue_update_changes_only_named_fields,
            queue_get_list_delete,
            queue_pages_by_prefix_and_limit,
            queue_pages_cover_each_queue_once_while_queues_come_and_go,
            queue_page_cursors_past_the_end_and_bad_input,
            queue_delete_refused_while_used_as_dlq,
            queue_config_change_is_live,
            send_single_round_trips_body_and_attributes,
            send_batch_returns_ids_in_order,
            send_batch_size_limits,
            send_payload_too_large_is_all_or_nothing,
            send_invalid_message_is_all_or_nothing,
            send_delay_hides_message_until_due,
            send_uses_queue_default_delay,
            dedup_within_window_returns_first_id,
            dedup_within_batch_per_queue_and_disabled,
            content_dedup_uses_the_body_and_config_keeps_tags,
            receive_increments_count_and_leases,
            receive_visibility_override,
            receive_respects_max,
            ack_completes_and_keeps_result_for_result_ttl,
            ack_keeps_the_times_of_the_completed_message,
            completed_message_keeps_its_attempts,
            every_attempt_keeps_its_lease_start_and_consumer,
            ack_with_zero_result_ttl_keeps_nothing,
            ack_result_over_max_message_bytes_fails_only_its_receipt,
            ack_batch_reports_each_receipt,
            long_ack_batch_pairs_each_receipt,
            nack_with_explicit_delay,
            nack_with_zero_delay_is_visible_at_once,
            nack_backoff_stays_under_capped_ceiling,
            nack_on_last_attempt_dead_letters,
            lease_expiry_makes_message_visible_again,
            lease_expiry_on_last_attempt_dead_letters,
            reject_dead_letters_whatever_the_count,
            reject_without_dlq_is_conflict,
            move_puts_message_in_target_queue,
            move_to_unknown_queue_changes_nothing,
            extend_moves_lease_deadline,
            stale_receipt_after_redelivery_changes_nothing,
            stale_receipt_after_ack_or_nack_changes_nothing,
            foreign_and_forged_receipts_are_stale,
            never_leased_to_two_consumers_at_once,
            long_poll_wakes_on_send,
            long_poll_times_out_empty,
            pause_holds_deliveries,
            rate_limit_bounds_deliveries_per_window,
            rate_limit_holds_across_a_restart,
            rate_limit_spreads_deliveries_after_a_burst,
            max_in_flight_bounds_leases,
            lease_overlapping_an_ack_sees_it,
            max_depth_refuses_sends,
            retention_dead_letters_expired_messages,
            retention_drops_expired_messages_without_dlq,
            browse_pages_cover_each_message_once,
            browse_filters_by_state,
            browse_rejects_bad_cursor_and_limit,
            get_message_finds_message_anywhere,
            delete_message_removes_it,
            purge_empties_queue,
            stats_gauges,
            stats_totals,
            stats_of_many_queues_agree_with_each_queues_own,
            repeated_history_points_are_stored_once_an_hour,
            restart_keeps_messages_leases_dedup_counters_and_config,
            restart_keeps_dead_letters_of_a_deleted_source,
            idempotency_first_writer_wins_for_a_day_across_restart,
            idempotency_limits,
            idempotency_claim_holds_a_key_for_one_request,
            idempotency_concurrent_claims_have_one_winner,
            cancel_waiting_task_removes_it,
            cancel_running_task_is_cooperative_and_sticky,
            cancel_finished_task_changes_nothing,
            progress_is_reported_and_validated,
            redrive_moves_dead_letters_back,
            redrive_filter_limit_and_dry_run,
            redrive_one_job_per_source_and_cancel,
            redrive_waits_for_a_paused_destination,
            redrive_resumes_after_restart,
            redrive_pause_resume_and_cancel,
            stats_history_is_stored_once_and_kept_a_day,
            priority_orders_deliveries,
            a_quiet_key_is_not_starved_by_a_backlog,
            key_weights_share_deliveries,
            keys_and_priorities_outlive_retries_dead_letters_and_restarts,
            keys_and_priorities_are_checked,
            trace_context_travels_with_its_message,
            key_limits_hold_a_key_not_the_others,
            a_held_keys_backlog_does_not_hide_another_key,
            key_rates_hold_each_key_in_every_window,
            key_rates_spread_a_keys_deliveries,
            key_rates_count_from_when_they_are_set,
            key_breakers_open_for_the_failing_key_only,
            a_key_outage_keeps_its_messages_attempts,
            key_rates_hold_only_the_congested_key,
            a_forced_key_breaker_outlives_a_restart,
            an_idle_keys_state_is_forgotten,
            keys_listing_counts_each_key,
            reading_of_a_steady_drain,
            reading_of_a_backlog_held_by_a_rate_limit,
            reading_of_consumers_gone,
            reading_of_a_dead_letter_jump,
            reading_of_a_paused_queue,
            reading_of_a_new_queue_and_of_quiet,
            reading_of_a_dead_letter_queue_under_a_limited_redrive,
            audit_log_records_actions_and_dead_letters,
            audit_log_filters_by_action_actor_and_kind,
            release_hands_back_without_counting,
            unlimited_receive_count_never_dead_letters,
            nul_in_any_text_is_refused_and_other_characters_are_kept,
            long_error_is_clipped_not_refused,
            unknown_queue_is_queue_not_found,
            bad_input_is_invalid_argument,
            invalid_names_and_receipts_fail_to_parse,
            summary_counts_every_dead_letter,
            summary_groups_filters_and_limits,
            summary_by_attribute_through_restart_and_redrive,
            summary_group_filters_select_exactly_one_group,
            summary_and_redrive_by_key,
            schedule_put_get_list_delete,
            schedule_changed_trigger_reanchors,
            schedule_bad_specs_and_unknown_queue_are_refused,
            schedule_fire_step_enqueues_the_firing,
            schedule_stale_step_changes_nothing,
            schedule_skip_step_counts_missed,
            schedule_step_for_a_deleted_queue_is_missed,
            schedule_full_queue_refuses_the_step,
            schedule_duplicate_firing_answers_the_first,
            schedule_survives_restart,
            schedule_firings_carry_key_and_priority,
            group_delivers_in_send_order_one_at_a_time,
            group_max_in_flight_per_group_allows_n,
            group_nack_blocks_group_through_backoff,
            group_lease_expiry_redelivers_the_front_first,
            group_poison_head_dead_letters_and_group_continues,
            group_keyed_message_is_delivered_after_a_restart,
            group_reject_or_move_of_head_lets_group_continue,
            group_delayed_head_blocks_group,
            group_order_and_leases_survive_restart,
            group_redrive_rejoins_at_the_end,
            group_long_poll_wakes_when_the_group_moves_on,
            group_names_are_checked_and_unsupported_engines_refuse,
            group_model_random_sequences,
            model_equivalence,
            breaker_opens_keeps_attempts_and_a_probe_closes_it,
            breaker_open_still_dead_letters_rejects,
            adaptive_rate_stays_within_bounds_and_congestion_cuts_it,
            a_retry_after_holds_the_whole_adaptive_queue,
            a_forced_breaker_stays_open_until_forced_closed,
            a_congestion_nack_keeps_its_attempt,
            a_failure_under_a_breaker_waits_out_its_window,
        }
    };
}

/// Expands the case list in one of its modes: `tests <harness>`, `guarded <guard>, <harness>`,
/// `names` or `refs`.
#[doc(hidden)]
#[macro_export]
macro_rules! __sluice_conformance_expand {
    (tests $harness:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $harness().await;
                $crate::cases::$case(&harness).await;
            }
        )*
    };
    (guarded $guard:path, $harness:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if !$guard().await {
                    return;
                }
                let harness = $harness().await;
                $crate::cases::$case(&harness).await;
            }
        )*
    };
    (names; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
    (refs; $($case:ident),* $(,)?) => {
        $( let _ = $crate::cases::$case; )*
    };
}

/// The names of all cases, in the order the suite lists them.
pub const CASE_NAMES: &[&str] = crate::__sluice_conformance_cases!(names);

#[cfg(test)]
mod tests {
    use super::CASE_NAMES;

    #[test]
    fn every_listed_case_exists() {
        // Fails to compile when the macro lists a case that `cases/` does not define.
        crate::__sluice_conformance_cases!(refs);
    }

    #[test]
    fn every_case_is_listed_once() {
        let src = [
            include_str!("cases/ack.rs"),
            include_str!("cases/adaptive.rs"),
            include_str!("cases/audit.rs"),
            include_str!("cases/browse.rs"),
            include_str!("cases/create_only.rs"),
            include_str!("cases/dedup.rs"),
            include_str!("cases/delivery_caps.rs"),
            include_str!("cases/errors.rs"),
            include_str!("cases/fairness.rs"),
            include_str!("cases/groups.rs"),
            include_str!("cases/groups/model.rs"),
            include_str!("cases/idempotency.rs"),
            include_str!("cases/key_rates.rs"),
            include_str!("cases/key_flows.rs"),
            include_str!("cases/key_stats.rs"),
            include_str!("cases/lease_expiry.rs"),
            include_str!("cases/long_polling.rs"),
            include_str!("cases/mod.rs"),
            include_str!("cases/model_based.rs"),
            include_str!("cases/nack.rs"),
            include_str!("cases/queue_listing.rs"),
            include_str!("cases/queues.rs"),
            include_str!("cases/receipts.rs"),
            include_str!("cases/receive.rs"),
            include_str!("cases/redrive.rs"),
            include_str!("cases/redrive_control.rs"),
            include_str!("cases/reject_move_extend.rs"),
            include_str!("cases/release.rs"),
            include_str!("cases/restart.rs"),
            include_str!("cases/retention.rs"),
            include_str!("cases/schedules.rs"),
            include_str!("cases/send.rs"),
            include_str!("cases/readings.rs"),
            include_str!("cases/stats.rs"),
            include_str!("cases/summary.rs"),
            include_str!("cases/tasks.rs"),
            include_str!("cases/trace.rs"),
        ];
        // Every file of `cases/` is read above: a new one must join the list.
        fn rs_files(dir: &std::path::Path) -> usize {
            std::fs::read_dir(dir)
                .expect("cases directory")
                .map(|e| e.expect("entry").path())
                .map(|p| {
                    if p.is_dir() {
                        rs_files(&p)
                    } else {
                        usize::from(p.extension().is_some_and(|e| e == "rs"))
                    }
                })
                .sum()
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cases");
        assert_eq!(
            rs_files(&dir),
            src.len(),
            "a file of src/cases is not read here"
        );
        let defined: Vec<&str> = src
            .iter()
            .flat_map(|s| s.lines())
            .filter_map(|l| l.strip_prefix("pub async fn "))
            .filter_map(|l| l.split('(').next())
            .collect();
        let mut listed = CASE_NAMES.to_vec();
        listed.sort_unstable();
        let before = listed.len();
        listed.dedup();
        assert_eq!(
            before,
            listed.len(),
            "a case is listed twice in conformance_suite!"
        );
        let mut defined_sorted = defined.clone();
        defined_sorted.sort_unstable();
        assert_eq!(
            defined_sorted, listed,
            "every `pub async fn` in cases/*.rs must be listed in \
             __sluice_conformance_cases!"
        );
    }
}
