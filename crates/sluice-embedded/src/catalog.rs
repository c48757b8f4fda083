//! The queue catalog: names, ids and configs of all queues, kept outside the message log as a
//! snapshot (`queues.json`, replaced atomically: write a temporary file, fsync, rename, fsync
//! the directory) and a journal of the changes since (`queues.journal`, one checksummed JSON
//! line per change, appended and fsynced before the change is answered).
//!
//! A message record names its queue by id, and a record whose queue id is not in the catalog
//! belongs to a deleted queue and is skipped on replay: delete-queue is one journal line.
//!
//! Why a journal: rewriting the whole catalog on every change made each create cost as much as
//! all the queues before it (41 creates a second at 5,000 queues). An append costs the same at
//! any size; the snapshot is rewritten, and the journal emptied, only once the journal holds
//! as many changes as there are queues (at least [`SNAPSHOT_AFTER`]), so its cost spread over
//! those changes stays constant too. Replaying a change is idempotent (a put replaces the
//! queue with its id, a delete removes it), so a crash between a new snapshot and emptying the
//! journal replays changes the snapshot already holds, harmlessly. A torn last line (a change
//! that was never answered) fails its checksum and is cut off at open.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_core::adaptive::FlowState;
use sluice_core::{QueueConfig, QueueName, StoreError, Timestamp};

use crate::error::OpenError;
use crate::journal::log::sync_dir;
use crate::journal::record::Qid;

/// One queue as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CatalogQueue {
    pub qid: Qid,
    pub name: QueueName,
    pub config: QueueConfig,
    pub created_at: Timestamp,
    /// The learned state of a governed queue (adaptive rate, breaker), written when it
    /// changes in a way worth keeping; catalogs written before it existed read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowState>,
    /// The states of keys governed one by one that are worth keeping (breakers not closed,
    /// or forced by an operator); catalogs written before it existed read as none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_flows: Vec<crate::state::KeptKeyFlow>,
}

/// The catalog file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Catalog {
    /// Queue ids are never reused.
    pub next_qid: Qid,
    pub queues: Vec<CatalogQueue>,
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join("queues.json")
}

/// Reads the catalog; a missing file is an empty catalog (a new data directory).
pub(crate) fn load(dir: &Path) -> Result<Catalog, OpenError> {
    let p = path(dir);
    match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| OpenError::Corrupt {
            file: p.clone(),
            offset: 0,
            detail: format!("queue catalog does not parse: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Catalog {
            next_qid: 1,
            queues: vec![],
        }),
        Err(e) => Err(OpenError::io(p, e)),
    }
}

/// Replaces the catalog durably.
pub(crate) fn store(dir: &Path, catalog: &Catalog) -> Result<(), StoreError> {
    let fail =
        |e: std::io::Error| StoreError::unavailable(format!("cannot write the queue catalog: {e}"));
    let tmp = dir.join("queues.json.tmp");
    let bytes = serde_json::to_vec_pretty(catalog)
        .map_err(|e| StoreError::unavailable(format!("cannot encode the queue catalog: {e}")))?;
    let mut f = File::create(&tmp).map_err(fail)?;
    f.write_all(&bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    drop(f);
    std::fs::rename(&tmp, path(dir)).map_err(fail)?;
    sync_dir(dir).map_err(fail)
}

/// Fewest journal lines before a new snapshot (more with more queues).
pub(crate) const SNAPSHOT_AFTER: usize = 1024;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Change {
    /// These queues, as they now are (created or reconfigured together, e.g. a queue and its
    /// new dead-letter queue), and the next queue id.
    Put {
        queues: Vec<CatalogQueue>,
        next_qid: Qid,
    },
    /// The queue with this id is gone.
    Delete { qid: Qid },
}

fn journal_path(dir: &Path) -> PathBuf {
    dir.join("queues.journal")
}

/// The open journal, appended under the store's lock.
#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    file: File,
    /// Bytes of whole lines: a failed append is cut back to here.
    len: u64,
    lines: usize,
    /// A failed append could not be cut back: further changes are refused until a restart,
    /// which cuts the torn line off.
    broken: bool,
}

/// Reads the snapshot and replays the journal over it; opens the journal for appending, with a
/// torn last line cut off. A new data directory gets an empty snapshot.
pub(crate) fn open(dir: &Path) -> Result<(Catalog, Journal), OpenError> {
    let snapshot = load(dir)?;
    if !path(dir).exists() {
        store(dir, &snapshot)
            .map_err(|e| OpenError::io(path(dir), std::io::Error::other(e.to_string())))?;
    }
    let jp = journal_path(dir);
    let bytes = match std::fs::read(&jp) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(OpenError::io(jp, e)),
    };
    let mut queues: BTreeMap<Qid, CatalogQueue> =
        snapshot.queues.into_iter().map(|q| (q.qid, q)).collect();
    let mut next_qid = snapshot.next_qid;
    let mut good = 0usize;
    let mut lines = 0usize;
    while let Some(end) = bytes[good..].iter().position(|b| *b == b'\n') {
        let Some(change) = decode_line(&bytes[good..good + end]) else {
            break;
        };
        match change {
            Change::Put {
                queues: put,
                next_qid: n,
            } => {
                next_qid = next_qid.max(n);
                for q in put {
                    queues.insert(q.qid, q);
                }
            }
            Change::Delete { qid } => {
                queues.remove(&qid);
            }
        }
        good += end + 1;
        lines += 1;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&jp)
        .map_err(|e| OpenError::io(&jp, e))?;
    if good < bytes.len() {
        tracing::warn!(
            bytes = bytes.len() - good,
            "the queue catalog's journal ends in a torn change (never answered); cut off"
        );
        file.set_len(good as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| OpenError::io(&jp, e))?;
    }
    let catalog = Catalog {
        next_qid,
        queues: queues.into_values().collect(),
    };
    let journal = Journal {
        dir: dir.to_path_buf(),
        file,
        len: good as u64,
        lines,
        broken: false,
    };
    Ok((catalog, journal))
}

/// `crc32c-hex SP json` without its newline, or `None` when torn or damaged.
fn decode_line(line: &[u8]) -> Option<Change> {
    let (crc, json) = (line.get(..8)?, line.get(9..)?);
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if line.get(8) != Some(&b' ') || crc32c::crc32c(json) != crc {
        return None;
    }
    serde_json::from_slice(json).ok()
}

impl Journal {
    /// Appends `change` and makes it durable; on failure nothing of it stays.
    pub(crate) fn append(&mut self, change: &Change) -> Result<(), StoreError> {
        if self.broken {
            return Err(StoreError::unavailable(
                "the queue catalog could not be written earlier and is closed to changes; restart the broker",
            ));
        }
        let json = serde_json::to_vec(change)
            .map_err(|e| StoreError::unavailable(format!("cannot encode a queue change: {e}")))?;
        let mut line = format!("{:08x} ", crc32c::crc32c(&json)).into_bytes();
        line.extend_from_slice(&json);
        line.push(b'\n');
        let written = self
            .file
            .write_all(&line)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            if self
                .file
                .set_len(self.len)
                .and_then(|()| self.file.sync_data())
                .is_err()
            {
                self.broken = true;
            }
            return Err(StoreError::unavailable(format!(
                "cannot write the queue catalog: {e}"
            )));
        }
        self.len += line.len() as u64;
        self.lines += 1;
        Ok(())
    }

    /// True when the journal holds enough changes that `queues` queues are worth a new
    /// snapshot.
    pub(crate) fn wants_snapshot(&self, queues: usize) -> bool {
        self.lines >= SNAPSHOT_AFTER.max(queues)
    }

    /// Writes `catalog` (the state after every journal line) as the snapshot and empties the
    /// journal.
    pub(crate) fn snapshot(&mut self, catalog: &Catalog) -> Result<(), StoreError> {
        store(&self.dir, catalog)?;
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| {
                StoreError::unavailable(format!("cannot empty the queue catalog's journal: {e}"))
            })?;
        self.len = 0;
        self.lines = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(qid: Qid, name: &str) -> CatalogQueue {
        let name = QueueName::new(name).unwrap();
        CatalogQueue {
            qid,
            config: QueueConfig::defaults_for(&name),
            name,
            created_at: Timestamp(qid.into()),
            flow: None,
            key_flows: Vec::new(),
        }
    }

    fn names(c: &Catalog) -> Vec<&str> {
        c.queues.iter().map(|q| q.name.as_str()).collect()
    }

    #[test]
    fn changes_survive_a_reopen_and_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (cat, mut j) = open(dir.path()).unwrap();
        assert!(cat.queues.is_empty() && path(dir.path()).exists());
        for i in 1..=5 {
            j.append(&Change::Put {
                queues: vec![queue(i, &format!("q{i}"))],
                next_qid: i + 1,
            })
            .unwrap();
        }
        j.append(&Change::Delete { qid: 2 }).unwrap();
        let mut renamed = queue(3, "q3");
        renamed.config.max_receive_count = 9;
        j.append(&Change::Put {
            queues: vec![renamed],
            next_qid: 6,
        })
        .unwrap();
        drop(j);
        let (cat, mut j) = open(dir.path()).unwrap();
        assert_eq!(names(&cat), ["q1", "q3", "q4", "q5"]);
        assert_eq!(cat.queues[1].config.max_receive_count, 9);
        assert_eq!(cat.next_qid, 6);
        assert_eq!(j.lines, 7);

        j.snapshot(&cat).unwrap();
        assert_eq!(
            std::fs::metadata(journal_path(dir.path())).unwrap().len(),
            0
        );
        j.append(&Change::Delete { qid: 1 }).unwrap();
        drop(j);
        let (cat, _) = open(dir.path()).unwrap();
        assert_eq!(names(&cat), ["q3", "q4", "q5"]);
    }

    #[test]
    fn a_journal_replayed_over_a_newer_snapshot_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut j) = open(dir.path()).unwrap();
        j.append(&Change::Put {
            queues: vec![queue(1, "a"), queue(2, "b")],
            next_qid: 3,
        })
        .unwrap();
        j.append(&Change::Delete { qid: 1 }).unwrap();
        // A crash after the snapshot, before the journal was emptied.
        let after = Catalog {
            next_qid: 3,
            queues: vec![queue(2, "b")],
        };
        store(dir.path(), &after).unwrap();
        drop(j);
        let (cat, _) = open(dir.path()).unwrap();
        assert_eq!(cat, after);
    }

    #[test]
    fn a_torn_last_change_is_cut_off_and_later_changes_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut j) = open(dir.path()).unwrap();
        j.append(&Change::Put {
            queues: vec![queue(1, "kept")],
            next_qid: 2,
        })
        .unwrap();
        drop(j);
        // Half a line, as a crash in the middle of an append leaves it; then a damaged one.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(journal_path(dir.path()))
            .unwrap();
        f.write_all(b"0badc0de {\"delete\":{\"qid\":1}}\n00000000 {\"del")
            .unwrap();
        drop(f);
        let (cat, mut j) = open(dir.path()).unwrap();
        assert_eq!(names(&cat), ["kept"]);
        j.append(&Change::Put {
            queues: vec![queue(2, "after")],
            next_qid: 3,
        })
        .unwrap();
        drop(j);
        let (cat, _) = open(dir.path()).unwrap();
        assert_eq!(names(&cat), ["kept", "after"]);
    }

    #[test]
    fn snapshots_come_once_the_journal_outgrows_the_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut j) = open(dir.path()).unwrap();
        j.lines = SNAPSHOT_AFTER - 1;
        assert!(!j.wants_snapshot(10));
        j.lines = SNAPSHOT_AFTER;
        assert!(j.wants_snapshot(10));
        assert!(!j.wants_snapshot(5_000));
    }
}
