//! Start-up recovery: replay every log segment, oldest first, through `State::apply`.
//!
//! A crash can tear only the unsynced tail of the newest segment: older segments were synced
//! in full before the next one was started. So a bad record in the newest segment is a torn
//! tail, cut off with a warning (nothing there was ever acknowledged); a bad record anywhere
//! else is damage, and start-up stops with an error naming the file rather than serve a store
//! that silently lost acknowledged messages.

use std::path::Path;

use crate::error::OpenError;
use crate::journal::log::{Loc, segment_path};
use crate::journal::record::{FrameError, decode_frame};
use crate::state::State;

/// What replay found, for the start-up log line.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReplayStats {
    pub records: u64,
    pub bytes: u64,
    pub torn_bytes: u64,
}

/// Replays segment `n` of `dir` into `state`.
pub(crate) fn replay_segment(
    dir: &Path,
    n: u32,
    newest: bool,
    state: &mut State,
    stats: &mut ReplayStats,
) -> Result<(), OpenError> {
    let path = segment_path(dir, n);
    let buf = std::fs::read(&path).map_err(|e| OpenError::io(&path, e))?;
    let mut off = 0usize;
    while off < buf.len() {
        match decode_frame(&buf[off..]) {
            Ok((rec, len)) => {
                let loc = Loc {
                    seg: n,
                    off: off as u32,
                };
                state.apply(&rec, loc, len as u32);
                off += len;
                stats.records += 1;
            }
            Err(_) if newest && buf[off..].iter().all(|b| *b == 0) => {
                // The unused, zero-filled end of a preallocated segment: a clean end. Cut it so
                // the segment, no longer the newest after this start, ends at its last record.
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| OpenError::io(&path, e))?;
                f.set_len(off as u64).map_err(|e| OpenError::io(&path, e))?;
                f.sync_all().map_err(|e| OpenError::io(&path, e))?;
                break;
            }
            Err(e) if newest && !matches!(e, FrameError::Decode(_)) => {
                let cut = buf.len() - off;
                tracing::warn!(
                    file = %path.display(),
                    offset = off,
                    bytes = cut,
                    reason = %e,
                    "cutting a torn tail left by a crash (these records were never acknowledged)"
                );
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| OpenError::io(&path, e))?;
                f.set_len(off as u64).map_err(|e| OpenError::io(&path, e))?;
                f.sync_all().map_err(|e| OpenError::io(&path, e))?;
                stats.torn_bytes += cut as u64;
                break;
            }
            Err(e) => {
                return Err(OpenError::Corrupt {
                    file: path,
                    offset: off as u64,
                    detail: e.to_string(),
                });
            }
        }
    }
    stats.bytes += off as u64;
    Ok(())
}
