//! The Sluice brokers the side-by-side run uses: those given on the command line, or started
//! by this tool (embedded, on PostgreSQL, and with relaxed durability) and stopped at the end.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::args::Args;
use crate::pg;
use crate::report::Skipped;
use crate::spawn::{spawn_sluice, spawn_sluice_with};

/// The relaxed-durability broker's sync interval: Redis `everysec`'s promise.
pub(crate) const RELAXED_SYNC_INTERVAL: &str = "1s";

/// The schema of the Sluice broker on PostgreSQL this tool starts (dropped afterwards).
const PG_SCHEMA: &str = "peerbench_sluice";

/// Where a broker serves its rows: base URL, frame listener, and its pid when this tool
/// started it (for its CPU time).
pub(crate) type Endpoints = (Option<String>, Option<String>, Option<u32>);

/// A Sluice broker this tool started.
struct OwnSluice {
    child: tokio::process::Child,
    url: String,
    frames: String,
    _dir: tempfile::TempDir,
}

async fn start_sluice(bin: &PathBuf) -> anyhow::Result<OwnSluice> {
    let dir = tempfile::tempdir().context("creating a data directory")?;
    let (child, url, frames) = spawn_sluice(bin, dir.path(), Duration::from_secs(30)).await?;
    Ok(OwnSluice {
        child,
        url,
        frames,
        _dir: dir,
    })
}

/// The brokers this tool started; each is killed when dropped, or by [`Started::stop`].
#[derive(Default)]
pub(crate) struct Started {
    embedded: Option<OwnSluice>,
    on_pg: Option<tokio::process::Child>,
    relaxed: Option<(tokio::process::Child, tempfile::TempDir)>,
}

impl Started {
    /// The embedded broker of the `sluice` and `sluice-frames` rows, when one of them runs:
    /// the one of --sluice-url, else one started here. A broker that does not start skips
    /// its rows.
    pub(crate) async fn embedded(&mut self, args: &Args, skipped: &mut Vec<Skipped>) -> Endpoints {
        let embedded = ["sluice", "sluice-frames"];
        if !args.systems.iter().any(|s| embedded.contains(&s.as_str())) {
            return (None, None, None);
        }
        if let Some(u) = &args.sluice_url {
            return (Some(u.clone()), args.sluice_frames.clone(), None);
        }
        match start_sluice(&args.sluice_bin).await {
            Ok(o) => {
                let r = (Some(o.url.clone()), Some(o.frames.clone()), o.child.id());
                self.embedded = Some(o);
                r
            }
            Err(e) => {
                for name in embedded {
                    skipped.push(Skipped::new(name, &e));
                }
                (None, None, None)
            }
        }
    }

    /// The broker on PostgreSQL of the `sluice-postgres` rows, when one of them runs: the one
    /// of --sluice-pg-url, else one started here on the database of `--pg-*`.
    pub(crate) async fn on_postgres(
        &mut self,
        args: &Args,
        skipped: &mut Vec<Skipped>,
    ) -> Endpoints {
        let on_pg = ["sluice-postgres", "sluice-postgres-frames"];
        if !args.systems.iter().any(|s| on_pg.contains(&s.as_str())) {
            return (None, None, None);
        }
        if let Some(u) = &args.sluice_pg_url {
            return (Some(u.clone()), args.sluice_pg_frames.clone(), None);
        }
        let store = format!(
            "postgres://{}@{}:{}/{}?schema={PG_SCHEMA}",
            args.pg_user, args.pg_host, args.pg_port, args.pg_db
        );
        match spawn_sluice_with(
            &args.sluice_bin,
            &["--store".as_ref(), store.as_ref()],
            Duration::from_secs(30),
        )
        .await
        {
            Ok((child, url, frames)) => {
                let r = (Some(url), Some(frames), child.id());
                self.on_pg = Some(child);
                r
            }
            Err(e) => {
                for name in on_pg {
                    skipped.push(Skipped::new(name, &e));
                }
                (None, None, None)
            }
        }
    }

    /// The relaxed-durability broker of the `sluice-relaxed` row, when it runs: a broker of
    /// its own, so the durable rows' broker keeps syncing before every answer.
    pub(crate) async fn relaxed(
        &mut self,
        args: &Args,
        skipped: &mut Vec<Skipped>,
    ) -> anyhow::Result<Option<(String, String, Option<u32>)>> {
        if !args.systems.iter().any(|s| s == "sluice-relaxed") {
            return Ok(None);
        }
        if let (Some(u), Some(f)) = (&args.sluice_relaxed_url, &args.sluice_relaxed_frames) {
            return Ok(Some((u.clone(), f.clone(), None)));
        }
        let dir = tempfile::tempdir().context("creating a data directory")?;
        let store_args = [
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
            "--sync-interval".as_ref(),
            RELAXED_SYNC_INTERVAL.as_ref(),
        ];
        match spawn_sluice_with(&args.sluice_bin, &store_args, Duration::from_secs(30)).await {
            Ok((child, url, frames)) => {
                let pid = child.id();
                self.relaxed = Some((child, dir));
                Ok(Some((url, frames, pid)))
            }
            Err(e) => {
                skipped.push(Skipped::new("sluice-relaxed", &e));
                Ok(None)
            }
        }
    }

    /// Kills the brokers started here and drops the schema of the one on PostgreSQL.
    pub(crate) async fn stop(self, args: &Args) {
        if let Some(mut o) = self.embedded {
            let _ = o.child.kill().await;
        }
        if let Some((mut child, _dir)) = self.relaxed {
            let _ = child.kill().await;
        }
        if let Some(mut child) = self.on_pg {
            let _ = child.kill().await;
            if let Err(e) =
                pg::drop_schema(&args.pg_host, args.pg_port, &args.pg_db, PG_SCHEMA).await
            {
                eprintln!("peerbench: could not drop schema {PG_SCHEMA}: {e:#}");
            }
        }
    }
}
