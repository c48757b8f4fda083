//! Starting `sluice serve` as a child process on ephemeral loopback ports and reading where
//! it listens.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::AsyncBufReadExt as _;

/// Starts `sluice serve` on `data_dir` and ephemeral loopback ports; returns once it
/// listens (recovery is done by then), at most after `limit`: the child, its HTTP URL and its
/// frame listener's address.
pub(crate) async fn spawn_sluice(
    bin: &PathBuf,
    data_dir: &std::path::Path,
    limit: Duration,
) -> anyhow::Result<(tokio::process::Child, String, String)> {
    spawn_sluice_with(bin, &["--data-dir".as_ref(), data_dir.as_os_str()], limit).await
}

/// Starts `sluice serve` with `store_args` (`--data-dir DIR` or `--store URL`) on ephemeral
/// loopback ports (HTTP and frames); returns once it listens, at most after `limit`.
pub(crate) async fn spawn_sluice_with(
    bin: &PathBuf,
    store_args: &[&std::ffi::OsStr],
    limit: Duration,
) -> anyhow::Result<(tokio::process::Child, String, String)> {
    let mut child = tokio::process::Command::new(bin)
        .arg("serve")
        .args(store_args)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--frames-listen")
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it: cargo build --release -p sluice, or give --sluice-url)",
                bin.display()
            )
        })?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let (url, frames) = tokio::time::timeout(limit, async {
        let mut frames = None;
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = line.strip_prefix("sluice frames listening on ") {
                frames = Some(addr.trim().to_owned());
            } else if let Some(url) = line.strip_prefix("sluice listening on ") {
                let frames = frames.context("sluice printed no frame listener")?;
                return anyhow::Ok((url.trim().to_owned(), frames));
            }
        }
        bail!("sluice exited before listening")
    })
    .await
    .with_context(|| format!("sluice did not start listening in {} s", limit.as_secs()))??;
    // Keep draining stdout so the broker never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, url, frames))
}
