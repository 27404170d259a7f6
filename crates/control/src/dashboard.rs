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
//! | `timeline.rs` | per edge, a point per scrape round over the last 15 min (pure, bounded) |
//! | `calc.rs` | the calculators over `hopwise-analyze` (pure) |
//! | `policy.rs` | effective policy and findings (pure) |
//! | `samples.rs` | the `--samples` file of `hopwise up`: where the fault knobs are |
//! | `assets/` | `index.html`, `app.js`, `style.css`, embedded |

pub mod assets;
pub mod calc;
pub mod edges;
pub mod policy;
pub mod promtext;
pub mod samples;
pub mod scrape;
pub mod server;
pub mod timeline;

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
}

impl Dashboard {
    pub fn stop(self) {
        self.server.abort();
        self.scraper.abort();
    }
}

/// Serves the dashboard on `listener` and starts reading proxies' metrics (needs a Tokio
/// runtime).
pub fn spawn(
    plane: PlaneHandle,
    listener: tokio::net::TcpListener,
    samples: Option<PathBuf>,
) -> std::io::Result<Dashboard> {
    let addr = listener.local_addr()?;
    let scraped = scrape::Shared::default();
    let scraper = tokio::spawn(scrape::run(plane.clone(), scraped.clone()));
    let app = Arc::new(server::App {
        plane,
        scraped,
        samples,
        port: addr.port(),
    });
    let server = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => {
                    tokio::spawn(server::serve_connection(app.clone(), tcp));
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
    })
}
