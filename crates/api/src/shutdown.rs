//! The one wait for a shutdown signal: the proxy drains on it, the control plane stops on it,
//! and the lab's runs stop their children on it.

/// Resolves on SIGTERM or Ctrl-C. Never resolves if neither can be watched (no signal is not a
/// signal).
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                () = ctrl_c => {}
            }
        }
        Err(_) => ctrl_c.await,
    }
}
