//! The dashboard, served by the control plane (`hopwise control --dashboard 127.0.0.1:PORT`):
//! the service graph with live numbers per edge read from every proxy's `/metrics`, each
//! service's effective policy, `hopwise check`'s findings on the mesh in force, the seed's two
//! calculators (computed by `hopwise-analyze`), and the sample apps' fault knobs. See
//! docs/dashboard.md.
//!
//! | file | owns |
//! | --- | --- |
//! | `server.rs` | HTTP (hyper), routes, the JSON API |
//! | `scrape.rs` | I/O: reading each copy's `/metrics` about once a second; the HTTP client |
//! | `promtext.rs` | the metrics text → samples (pure) |
//! | `edges.rs` | samples → per-edge and per-service numbers (pure) |
//! | `carried.rs` | what each app carried as its proxies saw it, against its `carries` (pure) |
//! | `timeline.rs` | per edge, a point per scrape round over the last 15 min (pure, bounded) |
//! | `chain.rs` | the mesh's calls in chain order, from the entry down: the charts' order (pure) |
//! | `calc.rs` | the calculators over `hopwise-analyze` (pure) |
//! | `policy.rs` | effective policy and findings (pure) |
//! | `samples.rs` | the `--samples` file of `hopwise up`: where the fault knobs are |
//! | `trace_api.rs` | the OTLP receiver feeding the store; `/api/traces…` |
//! | `traces.rs` | the recent traces the OTLP receiver was sent, bounded (pure) |
//! | `keep.rs` | which trace a full store lets go: failed and slow ones outlive the rest (pure) |
//! | `waterfall.rs` | one trace laid out, each span's proxies' and app's time (pure) |
//! | `assets/` | `index.html`, `app.js`, `style.css`, embedded |

pub mod assets;
pub mod calc;
pub mod carried;
pub mod chain;
pub mod edges;
pub mod keep;
pub mod policy;
pub mod promtext;
pub mod samples;
pub mod scrape;
pub mod server;
pub mod timeline;
pub mod trace_api;
pub mod traces;
pub mod waterfall;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::api::PlaneHandle;

/// The dashboard running in the background; dropping it does not stop it, [`Dashboard::stop`]
/// does.
#[derive(Debug)]
pub struct Dashboard {
    pub addr: SocketAddr,
    server: JoinHandle<()>,
    scraper: JoinHandle<()>,
    /// Its OTLP receiver's address, when it has one.
    pub traces: Option<SocketAddr>,
    receiver: Option<tokio::task::AbortHandle>,
}

impl Dashboard {
    pub fn stop(self) {
        self.server.abort();
        self.scraper.abort();
        if let Some(r) = self.receiver {
            r.abort();
        }
    }
}

/// Serves the dashboard on `listener` and starts reading proxies' metrics (needs a Tokio
/// runtime).
pub fn spawn(
    plane: PlaneHandle,
    listener: tokio::net::TcpListener,
    samples: Option<PathBuf>,
) -> std::io::Result<Dashboard> {
    spawn_with_traces(plane, listener, samples, None)
}

/// [`spawn`], with an OTLP trace receiver on `traces` whose spans the page shows as a
/// waterfall (`hopwise control --traces-listen`).
pub fn spawn_with_traces(
    plane: PlaneHandle,
    listener: tokio::net::TcpListener,
    samples: Option<PathBuf>,
    traces: Option<tokio::net::TcpListener>,
) -> std::io::Result<Dashboard> {
    spawn_limited(plane, listener, samples, traces, server::Limits::default())
}

/// [`spawn_with_traces`] within `limits` (tests set small ones).
pub fn spawn_limited(
    plane: PlaneHandle,
    listener: tokio::net::TcpListener,
    samples: Option<PathBuf>,
    traces: Option<tokio::net::TcpListener>,
    limits: server::Limits,
) -> std::io::Result<Dashboard> {
    let addr = listener.local_addr()?;
    let traces = traces
        .map(|l| trace_api::start(l, crate::otlp_receiver::Limits::default()))
        .transpose()?;
    let scraped = scrape::Shared::default();
    let scraper = tokio::spawn(scrape::run(plane.clone(), scraped.clone()));
    let app = Arc::new(server::App {
        plane,
        scraped,
        samples,
        port: addr.port(),
        traces,
    });
    let served = app.clone();
    let open = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let server = tokio::spawn(async move {
        let app = served;
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => {
                    // Past the cap: closed at once, before any byte is read.
                    let Ok(slot) = open.clone().try_acquire_owned() else {
                        drop(tcp);
                        continue;
                    };
                    let app = app.clone();
                    tokio::spawn(async move {
                        server::serve_connection(app, tcp, limits).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!("dashboard: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(Dashboard {
        addr,
        server,
        scraper,
        traces: app.traces.as_ref().map(|t| t.receiver.addr),
        receiver: app.traces.as_ref().map(|t| t.receiver.abort_handle()),
    })
}
