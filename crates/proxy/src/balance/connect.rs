//! Opening a connection on a copy for a call that cannot be retried once a byte went (opaque
//! TCP's tunnels, upgrades): copies chosen as HTTP tries choose them, each within the connect
//! timeout, the next one only after a connect failure (nothing was sent), every result
//! recorded for ejection. One loop for both, so they cannot drift.

use std::sync::Arc;

use hopwise_model::TcpPolicy;
use tokio::time::Instant;

use super::{Endpoint, Endpoints, InFlight};

/// A connection opened on a copy, with the copy's in-flight mark (held while it lives).
#[derive(Debug)]
pub struct OnCopy<T> {
    pub conn: T,
    pub copy: Arc<Endpoint>,
    pub in_flight: InFlight,
}

/// How one kind of connection reads its errors.
#[derive(Debug)]
pub struct Failures<E> {
    /// What a try that reached the connect timeout failed with.
    pub timed_out: fn() -> E,
    /// Nothing was sent: the copy counts a gateway failure, and the next copy may be tried.
    /// Any other error is final.
    pub connect_failure: fn(&E) -> bool,
}

impl Endpoints {
    /// Opens a connection with `open` on up to `policy.connect_tries` copies; `none` is the
    /// error when no copy was there to try. `kind` and `service` name the call in the log.
    pub async fn connect_each<T, E, Fut>(
        &self,
        policy: &TcpPolicy,
        (kind, service): (&str, &str),
        failures: Failures<E>,
        none: E,
        mut open: impl FnMut(Arc<Endpoint>) -> Fut,
    ) -> Result<OnCopy<T>, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let mut tried = Vec::new();
        let mut last = none;
        for _ in 0..policy.connect_tries.max(1) {
            let Some(copy) = self.pick(&tried) else {
                break;
            };
            tried.push(copy.addr);
            let in_flight = Endpoints::start(&copy);
            let started = Instant::now();
            let result = tokio::time::timeout(policy.connect_timeout, open(copy.clone()))
                .await
                .unwrap_or_else(|_| Err((failures.timed_out)()));
            let failed = result.as_ref().err().is_some_and(failures.connect_failure);
            if let Some(e) = self.record(&copy, started.elapsed(), failed) {
                tracing::info!("{kind} {service}: copy {} ejected for {:?}", e.addr, e.for_);
            }
            match result {
                Ok(conn) => {
                    return Ok(OnCopy {
                        conn,
                        copy,
                        in_flight,
                    });
                }
                Err(e) if failed => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}
