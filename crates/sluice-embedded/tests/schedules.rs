//! A schedule's firing survives a crash whole or not at all: its message and the schedule's
//! `last_fired` are one log record, so a write torn at any byte leaves both or neither.

use std::path::{Path, PathBuf};

use sluice_core::schedule::{CatchUp, ScheduleName, ScheduleSpec, TriggerSpec};
use sluice_core::store::prelude::*;
use sluice_core::store::{BrowseState, ScheduleStep, StepOutcome};
use sluice_core::time::rfc3339;
use sluice_core::{Body, BrowseRequest, QueueConfigPatch, QueueName, Timestamp};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

/// The newest non-empty log segment of `dir`.
fn newest_segment(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
        .collect();
    v.sort();
    v.pop().expect("a segment")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[tokio::test]
async fn a_torn_firing_leaves_both_or_neither() {
    let dir = tempfile::tempdir().expect("temp dir");
    let q = QueueName::new("ticks").expect("name");
    let tick = ScheduleName::new("tick").expect("name");
    let (t1, t2, before, after) = {
        let (store, _) = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("open");
        store
            .put_queue(&q, &QueueConfigPatch::default())
            .await
            .expect("queue");
        let spec = ScheduleSpec {
            trigger: TriggerSpec::Every { every_ms: 1000 },
            queue: q.clone(),
            body: Body::json(r#"{"n":1}"#),
            attributes: [("k".to_string(), "v".to_string())].into(),
            key: None,
            priority: None,
            catch_up: CatchUp::All,
            paused: false,
        };
        let (s, _) = store.put_schedule(&tick, spec).await.expect("put");
        let t1 = Timestamp(s.anchor.0 + 1000);
        let t2 = Timestamp(s.anchor.0 + 2000);
        let step = |expected, through| ScheduleStep {
            expected,
            through,
            fire: true,
            missed: 0,
        };
        store
            .step_schedule(&tick, step(None, t1))
            .await
            .expect("first firing");
        let before = std::fs::metadata(newest_segment(dir.path()))
            .expect("meta")
            .len();
        let out = store
            .step_schedule(&tick, step(Some(t1), t2))
            .await
            .expect("second firing");
        assert!(matches!(out, StepOutcome::Fired { .. }));
        let after = std::fs::metadata(newest_segment(dir.path()))
            .expect("meta")
            .len();
        (t1, t2, before, after)
    };
    assert!(after > before, "the firing was written");
    let segment_name = newest_segment(dir.path());
    let segment_name = segment_name.file_name().expect("file name");
    let mut both = 0;
    for cut in before..=after {
        let copy = tempfile::tempdir().expect("temp dir");
        copy_dir(dir.path(), copy.path());
        std::fs::OpenOptions::new()
            .write(true)
            .open(copy.path().join("log").join(segment_name))
            .expect("open segment")
            .set_len(cut)
            .expect("cut");
        let (store, _) =
            EmbeddedStore::open(copy.path(), EmbeddedOptions::default()).expect("recovers");
        let s = store.get_schedule(&tick).await.expect("schedule");
        let page = store
            .browse(
                &q,
                BrowseRequest {
                    state: BrowseState::All,
                    limit: 10,
                    cursor: None,
                },
            )
            .await
            .expect("browse");
        let times: Vec<&str> = page
            .messages
            .iter()
            .filter_map(|m| m.attributes.get("scheduled_for").map(String::as_str))
            .collect();
        let (r1, r2) = (rfc3339(t1), rfc3339(t2));
        if s.last_fired == Some(t2) {
            assert_eq!(times, vec![r1.as_str(), r2.as_str()], "cut at {cut}");
            assert_eq!(s.fired, 2, "cut at {cut}");
            both += 1;
        } else {
            assert_eq!(s.last_fired, Some(t1), "cut at {cut}");
            assert_eq!(
                times,
                vec![r1.as_str()],
                "cut at {cut}: a message without progress"
            );
            assert_eq!(s.fired, 1, "cut at {cut}");
        }
    }
    assert_eq!(both, 1, "only the whole record keeps the firing");
}
