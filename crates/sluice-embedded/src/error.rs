//! Why an embedded store could not be opened.

use std::path::PathBuf;

/// An error opening (recovering) a data directory. Start-up stops on any of these rather
/// than serve a store that silently lost data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the data directory.
    #[error(
        "data directory {0} is in use by another sluice process; stop it or choose another --data-dir"
    )]
    Locked(PathBuf),
    /// A record failed its checksum or could not be decoded somewhere other than the tail of
    /// the newest log segment, where a crash can leave a torn write.
    #[error(
        "{file}: corrupt record at byte {offset}: {detail}. The data directory is damaged; \
         restore it from a backup, or move this file aside to start without its records"
    )]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
}

impl OpenError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        OpenError::Io {
            path: path.into(),
            source,
        }
    }
}
