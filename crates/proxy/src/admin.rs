//! The admin endpoint (bind it to localhost): `/metrics` (Prometheus text), `/ready` (200 once
//! every worker listens, 503 while draining), `/live`, `/config` (the effective configuration),
//! `/tap[?route=R]` (the live tap's stream of JSON lines, `tap.rs`), `/app-health/…` (the app's
//! kubelet probes in an injected pod, run at the app: `app_probe.rs`). Every request passes
//! `hopwise_model::browser_guard` first, as the dashboard's do: `Host` must name this port by a
//! loopback name (or, bound off loopback, by its own address), so a web page that re-binds its
//! name to 127.0.0.1 cannot read the tap's live requests or the topology (DNS rebinding).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use hopwise_model::browser_guard::{self, Header};

use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use hyper::body::Incoming;

use crate::app_probe;
use crate::body::Body;
use crate::state::State;
use crate::tap;

/// An answer: text, or a tap's stream.
pub type Reply = http_body_util::Either<Body, tap::Stream>;

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Reply> {
    let mut r = Response::new(Reply::Left(Body::local(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// The configuration in force, with the control plane's versions of it: `version` (the last
/// snapshot accepted) and `config_version` (the mesh file's); 0 when not from a control plane.
fn config_json(state: &State) -> Result<String, serde_json::Error> {
    let live = state.live();
    let mut json = serde_json::to_value(&*live.config)?;
    if let Some(map) = json.as_object_mut() {
        map.insert(
            "version".into(),
            state.version.load(Ordering::Acquire).into(),
        );
        map.insert(
            "config_version".into(),
            state.config_version.load(Ordering::Acquire).into(),
        );
    }
    serde_json::to_string_pretty(&json)
}

/// `GET /tap?route=R`: a stream of this proxy's requests as they finish, of one route (a name
/// this proxy has) or all.
fn tap(state: &State, query: Option<&str>) -> Response<Reply> {
    let plain = "text/plain; charset=utf-8";
    let route = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("route="))
        .map(str::to_owned);
    if let Some(r) = &route {
        let config = state.config();
        let mut names = vec!["inbound"];
        names.extend(config.inbound_routes.iter().map(|(n, _)| n.as_str()));
        let outbound = config.clusters.values().flat_map(|c| &c.routes);
        names.extend(outbound.map(|r| r.name.as_str()));
        names.dedup();
        if !names.contains(&r.as_str()) {
            let body = format!(
                "route `{r}` is not a route of `{}`; its routes: {}\n",
                config.service,
                names.join(", ")
            );
            return text(StatusCode::BAD_REQUEST, plain, body);
        }
    }
    match state.metrics.tap().subscribe(route) {
        Ok(stream) => {
            let mut r = Response::new(Reply::Right(stream));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            );
            r
        }
        Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, plain, format!("{e}\n")),
    }
}

/// The answer to `req`, which arrived at `local` (the accepted socket's own address).
pub async fn handle(state: &State, local: SocketAddr, req: Request<Incoming>) -> Response<Reply> {
    if req.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the admin endpoint only answers GET\n".to_owned(),
        );
    }
    if let Err(refused) = guard(local, &req) {
        let status = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::FORBIDDEN);
        return text(status, "text/plain; charset=utf-8", format!("{refused}\n"));
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            state.metrics.encode(),
        ),
        "/ready" if state.ready() => text(StatusCode::OK, "text/plain", "ready\n".to_owned()),
        "/ready" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".to_owned(),
        ),
        "/live" => text(StatusCode::OK, "text/plain", "live\n".to_owned()),
        "/tap" => tap(state, req.uri().query()),
        "/config" => match config_json(state) {
            Ok(json) => text(StatusCode::OK, "application/json", json + "\n"),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("cannot render the configuration: {e}\n"),
            ),
        },
        path if path.starts_with(app_probe::PREFIX) => probe(state, path, &req).await,
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found; try /metrics, /ready, /live, /config or /tap\n".to_owned(),
        ),
    }
}

/// `GET /app-health/<container>/<kind>`: the app's probe run at the app; 404 when injection
/// wrote none there.
async fn probe<B>(state: &State, path: &str, req: &Request<B>) -> Response<Reply> {
    let plain = "text/plain; charset=utf-8";
    let config = state.config();
    let user_agent = req.headers().get(header::USER_AGENT).cloned();
    let ran = match &config.app_probes {
        Some(target) => app_probe::run(target, path, user_agent).await,
        None => None,
    };
    match ran {
        Some(v) => text(v.status, plain, v.message + "\n"),
        None => text(
            StatusCode::NOT_FOUND,
            plain,
            format!("no probe of the app at {path}\n"),
        ),
    }
}

/// [`browser_guard::check_at`] on `req`, for this connection's own address.
fn guard<B>(local: SocketAddr, req: &Request<B>) -> Result<(), browser_guard::Refusal> {
    let header = |name| {
        Header::of(
            req.headers()
                .get_all(name)
                .iter()
                .map(HeaderValue::as_bytes),
        )
    };
    let asked = browser_guard::Asked {
        method: req.method().as_str(),
        authority: req.uri().authority().map(|a| a.as_str()),
        host: header("host"),
        origin: header("origin"),
        content_type: header("content-type"),
    };
    browser_guard::check_at(local, &asked)
}
