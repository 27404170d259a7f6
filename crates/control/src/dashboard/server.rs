//! The dashboard's HTTP server (hyper, HTTP/1.1, loopback only): the page and its assets, and
//! the JSON API the page polls. Routes:
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /`, `/app.js`, `/charts.js`, `/traces.js`, `/style.css` | the page (embedded; no CDN, no build step) |
//! | `GET /api/graph` | services, copies, edges with live numbers ([`super::edges`]) |
//! | `GET /api/timeline[?since=MS]` | each edge's points over the last 15 min ([`super::timeline`]) |
//! | `GET /api/traces` | the recent traces, and where spans go ([`super::trace_api`]) |
//! | `GET /api/traces/<id>` | one trace as a waterfall ([`super::waterfall`]) |
//! | `GET /api/policy` | each service's calls with the policy its proxy applies |
//! | `GET /api/findings` | `hopwise check` on the mesh file in force |
//! | `GET /api/calc/samples` | the seed's samples for both calculators |
//! | `POST /api/calc/fanout`, `POST /api/calc/timeouts` | the calculators ([`super::calc`]) |
//! | `GET /api/fault[/<service>[/<copy>]]` | the sample apps' fault knobs |
//! | `POST /api/fault/<service>[/<copy>]` | a partial knob state, relayed to each copy |
//! | `POST /api/fault/<service>[/<copy>]/clear` | back to no fault |
//!
//! Every request is first put to [`hopwise_model::browser_guard`]: `Host` must be one of this
//! server's own loopback names and port (no DNS rebinding to this port; 403), and every POST
//! must say `content-type: application/json` (415) with no `Origin` or this server's own (403),
//! so a page from another site cannot calculate, set or clear a fault.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hopwise_model::browser_guard::{self, Header};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::{Value, json};

use super::calc::{self, FanoutInput, TimeoutInput};
use super::samples::{self, Knob};
use super::scrape::{self, Shared};
use super::{assets, chain, edges, policy, timeline, trace_api};
use crate::api::PlaneHandle;

/// The largest request body read.
const MAX_REQUEST: usize = 64 * 1024;
/// The most a request's head may take (hyper's read buffer: its smallest is 8 KiB).
const MAX_HEAD: usize = 16 * 1024;

/// What every request handler reads.
#[derive(Debug)]
pub struct App {
    pub plane: PlaneHandle,
    pub scraped: Shared,
    /// `--samples FILE`.
    pub samples: Option<PathBuf>,
    /// The port this server listens on: the only one its `Host` and `Origin` may name.
    pub port: u16,
    /// The OTLP receiver and the traces it keeps (`--traces-listen`).
    pub traces: Option<super::trace_api::Traces>,
}

type Body = Full<Bytes>;

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => respond(status, "application/json", bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({ "error": message }))
}

/// What the server holds for its peers. The page polls over a few keep-alive connections;
/// a peer past these bounds is not a browser on this machine.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; past it a new one is closed before a byte is read.
    pub connections: usize,
    /// A request's head must arrive within this, and an idle keep-alive connection is closed
    /// after it (hyper's header read timeout covers both).
    pub header_read: Duration,
    /// A request's answer, body included, within this (a relayed fault knob waits on a copy).
    pub request: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 64,
            header_read: Duration::from_secs(30),
            request: Duration::from_secs(30),
        }
    }
}

/// Serves one connection within `limits`.
pub async fn serve_connection(app: Arc<App>, tcp: tokio::net::TcpStream, limits: Limits) {
    let _ = tcp.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| {
        let app = app.clone();
        async move {
            let answer = tokio::time::timeout(limits.request, handle(&app, req)).await;
            Ok::<_, Infallible>(answer.unwrap_or_else(|_| {
                error(StatusCode::SERVICE_UNAVAILABLE, "the request took too long")
            }))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(MAX_HEAD)
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service)
        .await;
}

/// [`browser_guard::check_request`] on `req`, for a server on loopback port `port`: the
/// dashboard's, and the sample apps' knob ports' (`hopwise-lab` calls it too).
pub fn guard<B>(port: u16, req: &Request<B>) -> Result<(), browser_guard::Refusal> {
    browser_guard::check_request(
        port,
        req.method().as_str(),
        req.uri().authority().map(|a| a.as_str()),
        |name| {
            Header::of(
                req.headers()
                    .get_all(name)
                    .iter()
                    .map(HeaderValue::as_bytes),
            )
        },
    )
}

async fn body_json(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    // The content type was checked by `guard`, before any handler ran.
    let bytes = Limited::new(req.into_body(), MAX_REQUEST)
        .collect()
        .await
        .map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the body: {e}"),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, &format!("not JSON: {e}")))
}

pub async fn handle(app: &App, req: Request<Incoming>) -> Response<Body> {
    if let Err(refusal) = guard(app.port, &req) {
        let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
        return error(status, &refusal.to_string());
    }
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, [""] | ["index.html"]) => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            assets::INDEX_HTML,
        ),
        (&Method::GET, ["charts.js"]) => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            assets::CHARTS_JS,
        ),
        (&Method::GET, ["traces.js"]) => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            assets::TRACES_JS,
        ),
        (&Method::GET, ["app.js"]) => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            assets::APP_JS,
        ),
        (&Method::GET, ["style.css"]) => {
            respond(StatusCode::OK, "text/css; charset=utf-8", assets::STYLE_CSS)
        }
        (&Method::GET, ["api", "graph"]) => json_response(StatusCode::OK, &graph(app)),
        (&Method::GET, ["api", "timeline"]) => json_response(StatusCode::OK, &timeline(app, &req)),
        (&Method::GET, ["api", "traces"]) => {
            let mesh = app.plane.read(|p| p.mesh().clone());
            json_response(StatusCode::OK, &trace_api::list(app.traces.as_ref(), &mesh))
        }
        (&Method::GET, ["api", "traces", id]) => {
            let copies = app.scraped.lock().copy_names();
            match trace_api::one(app.traces.as_ref(), id, &copies) {
                Some(v) => json_response(StatusCode::OK, &v),
                None => error(
                    StatusCode::NOT_FOUND,
                    "no such trace here (evicted, or never sent)",
                ),
            }
        }
        (&Method::GET, ["api", "policy"]) => {
            let mesh = app.plane.read(|p| p.mesh().clone());
            json_response(StatusCode::OK, &policy::policy(&mesh))
        }
        (&Method::GET, ["api", "findings"]) => {
            let (mesh, version) = app.plane.read(|p| (p.mesh().clone(), p.config_version()));
            json_response(StatusCode::OK, &policy::findings(&mesh, version))
        }
        (&Method::GET, ["api", "calc", "samples"]) => json_response(
            StatusCode::OK,
            &json!({ "fanout": FanoutInput::default(), "timeouts": TimeoutInput::default() }),
        ),
        (&Method::POST, ["api", "calc", "fanout"]) => calculate(req, calc::fanout).await,
        (&Method::POST, ["api", "calc", "timeouts"]) => calculate(req, calc::timeouts).await,
        (_, ["api", "fault", rest @ ..]) => fault(app, req, rest).await,
        (&Method::GET, _) => error(StatusCode::NOT_FOUND, "not found"),
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
    }
}

/// A calculator: the form from the JSON body, the answer or the reason it was refused (400).
async fn calculate<I: serde::de::DeserializeOwned, O: Serialize>(
    req: Request<Incoming>,
    run: impl FnOnce(&I) -> Result<O, calc::CalcError>,
) -> Response<Body> {
    let form = match body_json(req).await.map(serde_json::from_value::<I>) {
        Err(r) => return r,
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        Ok(Ok(form)) => form,
    };
    match run(&form) {
        Ok(answer) => json_response(StatusCode::OK, &answer),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// `/api/graph`.
fn graph(app: &App) -> Value {
    let (mesh, version, config_version) = app
        .plane
        .read(|p| (p.mesh().clone(), p.version(), p.config_version()));
    let calls = edges::mesh_calls(&mesh);
    let scraped = app.scraped.lock();
    let summary = scraped.summary(&calls);
    let services: Vec<Value> = mesh
        .services
        .values()
        .map(|s| {
            let proxies: Vec<&scrape::ProxyView> = scraped
                .proxies()
                .iter()
                .filter(|c| c.service == s.name)
                .collect();
            json!({
                "name": s.name,
                "protocol": s.protocol,
                "entry": s.entry.is_some(),
                "external": s.external.is_some(),
                "proxies": proxies,
                "stats": summary.services.get(&s.name),
                "carries": {
                    "declared": s.carries.words(),
                    "disagrees": summary.services.get(&s.name).and_then(|t| t.app.disagrees(s.carries)),
                },
            })
        })
        .collect();
    let edges: Vec<Value> = summary
        .edges
        .iter()
        .map(|e| {
            let mut v = json!(e);
            if let Some(o) = v.as_object_mut() {
                o.insert(
                    "in_mesh".into(),
                    json!(calls.contains(&(e.from.clone(), e.to.clone()))),
                );
            }
            v
        })
        .collect();
    json!({
        "mesh": mesh.name,
        "version": format!("{}.{}", version >> 32, version & 0xffff_ffff),
        "config_version": config_version,
        "rounds": scraped.rounds,
        "interval_ms": scrape::INTERVAL.as_millis() as u64,
        "services": services,
        "edges": edges,
    })
}

/// `/api/timeline[?since=MS]`: each edge's points after `since` (Unix ms), so the page, which
/// keeps the 15 minutes itself, asks only for what is new.
fn timeline(app: &App, req: &Request<Incoming>) -> Value {
    let since = req
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("since=")?.parse::<u64>().ok())
        .unwrap_or(0);
    let order = app.plane.read(|p| chain::edges(p.mesh()));
    let scraped = app.scraped.lock();
    json!({
        "interval_ms": scrape::INTERVAL.as_millis() as u64,
        "window_ms": timeline::WINDOW.as_millis() as u64,
        "edges": scraped.timeline().since(since),
        // The mesh's calls in chain order: the charts are drawn in it.
        "order": order,
    })
}

fn knobs_of(
    app: &App,
    service: Option<&str>,
    copy: Option<usize>,
) -> Result<Vec<Knob>, samples::SamplesError> {
    let Some(path) = &app.samples else {
        return Ok(Vec::new());
    };
    Ok(samples::read(path)?.map_or_else(Vec::new, |file| file.knobs(service, copy)))
}

/// `/api/fault…`: read or change the sample apps' knobs.
async fn fault(app: &App, req: Request<Incoming>, rest: &[&str]) -> Response<Body> {
    let (service, copy, clear) = match rest {
        [] | [""] => (None, None, false),
        [s] => (Some(*s), None, false),
        [s, "clear"] => (Some(*s), None, true),
        [s, c] => (Some(*s), Some(*c), false),
        [s, c, "clear"] => (Some(*s), Some(*c), true),
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                "use /api/fault/<service>[/<copy>][/clear]",
            );
        }
    };
    let copy = match copy.map(str::parse::<usize>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return error(StatusCode::NOT_FOUND, "a copy is a number"),
    };
    let knobs = match knobs_of(app, service, copy) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    if service.is_some() && knobs.is_empty() {
        return error(
            StatusCode::NOT_FOUND,
            "no fault knobs for that service or copy",
        );
    }
    let (method, path, body) = match (req.method().clone(), clear) {
        (Method::GET, false) => (Method::GET, "/fault", None),
        (Method::POST, true) => (Method::POST, "/fault/clear", None),
        (Method::POST, false) if service.is_some() => match body_json(req).await {
            Err(r) => return r,
            Ok(Value::Object(o)) => (Method::POST, "/fault", Some(Value::Object(o).to_string())),
            Ok(_) => return error(StatusCode::BAD_REQUEST, "send a JSON object of knobs"),
        },
        _ => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET to read; POST to a service to change",
            );
        }
    };
    let mut results = Vec::new();
    let mut status = StatusCode::OK;
    for k in knobs {
        let r = scrape::request(k.knobs, method.clone(), path, body.clone()).await;
        let (state, err) = match r {
            Ok((200, text)) => (serde_json::from_str::<Value>(&text).ok(), None),
            Ok((code, text)) => {
                if status == StatusCode::OK {
                    status = StatusCode::from_u16(code)
                        .ok()
                        .filter(|s| s.is_client_error())
                        .unwrap_or(StatusCode::BAD_GATEWAY);
                }
                (
                    None,
                    Some(format!("the knobs answered {code}: {}", text.trim())),
                )
            }
            Err(e) => {
                status = StatusCode::BAD_GATEWAY;
                (None, Some(e.to_string()))
            }
        };
        results.push(json!({
            "service": k.service,
            "sample": k.sample,
            "copy": k.copy,
            "knobs": k.knobs.to_string(),
            "state": state,
            "error": err,
        }));
    }
    json_response(
        status,
        &json!({ "available": app.samples.is_some(), "copies": results }),
    )
}
