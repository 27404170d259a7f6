//! The dashboard's I/O towards proxies and sample apps: a small HTTP/1.1 client (hyper), and
//! the loop that reads every registered copy's `/metrics` about once a second and keeps the
//! last few readings of each, so [`super::edges`] can take differences; each round's
//! differences also go to [`super::timeline`], the charts over the last 15 minutes.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

use super::edges::{CopyCounts, Counts, Summary, mesh_calls, summarize};
use super::promtext;
use super::timeline::{self, Delta, Timeline};
use crate::api::PlaneHandle;

/// How often every copy is read.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long one exchange may take.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Readings kept per copy: rates are over the last ~10 s.
const KEEP: usize = 11;
/// The largest answer read (metrics text, a knob's state).
const MAX_BODY: usize = 8 << 20;
/// Reads in flight at once: a mesh of a thousand proxies is read in rounds of this many, not
/// with a thousand connections opened in the same instant.
const READS_AT_ONCE: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot connect to {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("{0}: {1}")]
    Http(SocketAddr, String),
    #[error("{0} did not answer within {1:?}")]
    Timeout(SocketAddr, Duration),
}

/// One HTTP/1.1 request on a fresh connection: the status and the body as text.
pub async fn request(
    addr: SocketAddr,
    method: http::Method,
    path: &str,
    body: Option<String>,
) -> Result<(u16, String), HttpError> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| HttpError::Connect(addr, e))?;
        let _ = tcp.set_nodelay(true);
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| HttpError::Http(addr, e.to_string()))?;
        tokio::spawn(conn);
        let change = method != http::Method::GET;
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, addr.to_string());
        // The knob servers take a change only as JSON (hopwise_model::browser_guard), an
        // empty `clear` too.
        if change {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| HttpError::Http(addr, e.to_string()))?;
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| HttpError::Http(addr, e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| HttpError::Http(addr, e.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    tokio::time::timeout(READ_TIMEOUT, exchange)
        .await
        .map_err(|_| HttpError::Timeout(addr, READ_TIMEOUT))?
}

/// One proxy the dashboard knows: a registered copy (it has an inbound address, a lease and a
/// health), a subscribed proxy with no inbound port (a client only), or both (one process).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProxyView {
    pub service: String,
    /// The name it gave the control plane (`b-0`), if known.
    pub proxy: Option<String>,
    /// Its registered inbound address (none: a proxy that takes no calls).
    pub inbound: Option<String>,
    pub admin: Option<String>,
    /// Its registry health (none: not a registered copy).
    pub healthy: Option<bool>,
    /// `ok`, `no admin endpoint`, or why the last read failed.
    pub metrics: String,
}

#[derive(Debug, Default)]
struct History {
    service: String,
    readings: VecDeque<(Instant, Counts)>,
}

/// What the scraper knows; read by the API.
#[derive(Debug, Default)]
pub struct Scraped {
    /// By admin address: one history per proxy process.
    history: BTreeMap<SocketAddr, History>,
    proxies: Vec<ProxyView>,
    /// Readings done (for the page's "updated" mark).
    pub rounds: u64,
    timeline: Timeline,
}

impl Scraped {
    /// The numbers of every edge in `calls` (and any other seen) and every service.
    pub fn summary(&self, calls: &[(String, String)]) -> Summary {
        let recent: Vec<Option<(Counts, f64)>> = self
            .history
            .values()
            .map(|h| match (h.readings.front(), h.readings.back()) {
                (Some((t0, first)), Some((t1, last))) if t1 > t0 => {
                    Some((last.minus(first), t1.duration_since(*t0).as_secs_f64()))
                }
                _ => None,
            })
            .collect();
        let copies: Vec<CopyCounts<'_>> = self
            .history
            .values()
            .zip(recent)
            .filter_map(|(h, recent)| {
                let (_, total) = h.readings.back()?;
                Some(CopyCounts {
                    service: &h.service,
                    total,
                    recent,
                })
            })
            .collect();
        summarize(&copies, calls)
    }

    pub fn proxies(&self) -> &[ProxyView] {
        &self.proxies
    }

    /// Each registered copy's name by its inbound address (`ip:port`): the name its proxy gave
    /// the control plane, else its service's.
    pub fn copy_names(&self) -> std::collections::HashMap<String, String> {
        self.proxies
            .iter()
            .filter_map(|p| {
                let name = p.proxy.clone().unwrap_or_else(|| p.service.clone());
                Some((p.inbound.clone()?, name))
            })
            .collect()
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }
}

/// Shared between the scraper and the API.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<Mutex<Scraped>>);

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Scraped> {
        match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Every proxy to show: the registry's live copies, and the subscribed proxies that said where
/// their admin endpoint is, merged by admin address.
fn targets(plane: &PlaneHandle) -> Vec<ProxyView> {
    let now = Instant::now();
    let (copies, subscribed) = plane.read(|p| {
        let copies: Vec<(String, SocketAddr, Option<SocketAddr>, bool)> = p
            .registry()
            .copies()
            .filter(|(_, c)| c.expires > now)
            .map(|(_, c)| (c.service.clone(), c.inbound, c.admin, c.healthy))
            .collect();
        (copies, p.subscribed_admins())
    });
    let mut out: Vec<ProxyView> = copies
        .into_iter()
        .map(|(service, inbound, admin, healthy)| ProxyView {
            service,
            proxy: None,
            inbound: Some(inbound.to_string()),
            admin: admin.map(|a| a.to_string()),
            healthy: Some(healthy),
            metrics: String::new(),
        })
        .collect();
    for (service, proxy, admin) in subscribed {
        let admin_text = admin.to_string();
        match out
            .iter_mut()
            .find(|v| v.admin.as_deref() == Some(admin_text.as_str()))
        {
            Some(v) => v.proxy = Some(proxy).filter(|p| !p.is_empty()),
            None => out.push(ProxyView {
                service,
                proxy: Some(proxy).filter(|p| !p.is_empty()),
                inbound: None,
                admin: Some(admin_text),
                healthy: None,
                metrics: String::new(),
            }),
        }
    }
    out
}

/// What one read of `/metrics` gave, and when.
type Reading = (Result<(u16, String), HttpError>, Instant);

/// Reads `/metrics` of every address, [`READS_AT_ONCE`] at a time.
async fn read_all(admins: impl IntoIterator<Item = SocketAddr>) -> BTreeMap<SocketAddr, Reading> {
    let mut reads = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(READS_AT_ONCE));
    for admin in admins {
        let slots = slots.clone();
        reads.spawn(async move {
            // Never closed, so a permit always comes; its timeout starts once it has one.
            let _slot = slots.acquire_owned().await;
            let r = request(admin, http::Method::GET, "/metrics", None).await;
            (admin, r, Instant::now())
        });
    }
    let mut results = BTreeMap::new();
    while let Some(done) = reads.join_next().await {
        if let Ok((admin, r, at)) = done {
            results.insert(admin, (r, at));
        }
    }
    results
}

/// Reads every proxy's `/metrics` once.
pub async fn round(plane: &PlaneHandle, shared: &Shared) {
    let mut proxies = targets(plane);
    let mut results = read_all(
        proxies
            .iter()
            .filter_map(|v| v.admin.as_deref()?.parse::<SocketAddr>().ok()),
    )
    .await;
    let calls = mesh_calls(&plane.read(|p| p.mesh().clone()));
    let mut s = shared.lock();
    s.history.retain(|admin, _| results.contains_key(admin));
    // What each proxy counted since its previous reading, for the timeline.
    let mut deltas: Vec<(String, Counts, f64)> = Vec::new();
    for v in &mut proxies {
        let admin = v
            .admin
            .as_deref()
            .and_then(|a| a.parse::<SocketAddr>().ok());
        v.metrics = match admin.and_then(|a| results.remove(&a).map(|r| (a, r))) {
            None => "no admin endpoint".to_owned(),
            Some((admin, (Ok((200, text)), at))) => {
                let counts = Counts::from_samples(&v.service, &promtext::parse(&text));
                let h = s.history.entry(admin).or_default();
                if let Some((then, before)) = h.readings.back()
                    && h.service == v.service
                    && at > *then
                {
                    let secs = at.duration_since(*then).as_secs_f64();
                    deltas.push((v.service.clone(), counts.minus(before), secs));
                }
                h.service = v.service.clone();
                h.readings.push_back((at, counts));
                while h.readings.len() > KEEP {
                    h.readings.pop_front();
                }
                "ok".to_owned()
            }
            Some((_, (Ok((status, _)), _))) => format!("/metrics answered {status}"),
            Some((_, (Err(e), _))) => e.to_string(),
        };
    }
    s.proxies = proxies;
    s.rounds += 1;
    let t = unix_ms();
    let deltas: Vec<Delta<'_>> = deltas
        .iter()
        .map(|(service, counts, secs)| Delta {
            service,
            counts,
            secs: *secs,
        })
        .collect();
    let round = timeline::points(t, &deltas, &calls);
    s.timeline.record(t, round);
}

/// Now as Unix time in ms (the charts' time axis is the wall clock's).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Reads every copy about once a second until the task is dropped.
pub async fn run(plane: PlaneHandle, shared: Shared) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        round(&plane, &shared).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Forty admin endpoints that each hold their answer for a moment: every one is read, and
    /// never more than [`READS_AT_ONCE`] at the same time.
    #[tokio::test]
    async fn reads_every_endpoint_a_bounded_number_at_a_time() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut admins = Vec::new();
        for _ in 0..40 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            admins.push(listener.local_addr().unwrap());
            let (in_flight, most) = (in_flight.clone(), most.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let (in_flight, most) = (in_flight.clone(), most.clone());
                    async move {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from_static(b"hopwise_requests_total 1\n"),
                        )))
                    }
                });
                let (tcp, _) = listener.accept().await.unwrap();
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
        let results = read_all(admins.iter().copied()).await;
        assert_eq!(results.len(), 40);
        assert!(
            results.values().all(|(r, _)| matches!(r, Ok((200, _)))),
            "{results:?}"
        );
        let most = most.load(Ordering::SeqCst);
        assert!((2..=READS_AT_ONCE).contains(&most), "{most} reads at once");
    }
}
