//! The signals the running broker answers: SIGHUP reloads TLS, SIGINT and SIGTERM drain and
//! stop it.

/// Reads the TLS certificate and key again on each SIGHUP (a reload that fails keeps the
/// configuration in use and says why); without TLS a SIGHUP only says there is nothing to
/// reload. The handler is installed before this returns.
pub(super) fn watch_sighup(tls: Option<sluice_server::listen::tls::TlsConfig>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP: TLS certificates reload only on restart");
                return;
            }
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let Some(tls) = &tls else {
                    tracing::info!("SIGHUP: nothing to reload (no TLS configured)");
                    continue;
                };
                match tls.reload() {
                    Ok(()) => tracing::info!(
                        cert = %tls.files().cert.display(),
                        "SIGHUP: TLS certificate and key reloaded for new connections"
                    ),
                    Err(e) => tracing::error!(
                        error = %e,
                        "SIGHUP: TLS reload failed; still serving the previous certificate"
                    ),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = tls;
}

/// Returns once SIGINT or SIGTERM arrives, which starts the drain.
pub(super) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
