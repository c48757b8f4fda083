//! The progress line on a terminal while a run goes on.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;

use super::report::thousands;
use super::state::Shared;

/// A spinner on stderr, or a hidden bar for `--json` or when stderr is not a terminal.
pub(super) fn progress_bar(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        pb.set_style(style);
    }
    pb
}

/// Updates the progress line four times a second.
pub(super) async fn tick(
    shared: Arc<Shared>,
    pb: ProgressBar,
    warmup: Duration,
    duration: Duration,
) {
    if pb.is_hidden() {
        return;
    }
    let mut last = (0u64, 0u64, Instant::now());
    let mut every = tokio::time::interval(Duration::from_millis(250));
    loop {
        every.tick().await;
        let (sent, acked) = (
            shared.sent_total.load(Ordering::Relaxed),
            shared.acked_total.load(Ordering::Relaxed),
        );
        let now = Instant::now();
        let dt = now.duration_since(last.2).as_secs_f64().max(1e-3);
        let elapsed = now.duration_since(shared.epoch);
        let phase = if shared.stop_producers.load(Ordering::Relaxed) {
            "draining".to_owned()
        } else if elapsed < warmup {
            format!(
                "warm-up {:.1}/{:.0}s",
                elapsed.as_secs_f64(),
                warmup.as_secs_f64()
            )
        } else {
            format!(
                "measuring {:.1}/{:.0}s",
                (elapsed - warmup).as_secs_f64(),
                duration.as_secs_f64()
            )
        };
        pb.set_message(format!(
            "{phase}  sent {} ({}/s)  acked {} ({}/s)  errors {}",
            thousands(sent),
            thousands(((sent - last.0) as f64 / dt) as u64),
            thousands(acked),
            thousands(((acked - last.1) as f64 / dt) as u64),
            thousands(shared.errors_total.load(Ordering::Relaxed)),
        ));
        pb.tick();
        last = (sent, acked, now);
    }
}
