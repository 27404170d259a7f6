//! The admin endpoint (bind it to localhost): `/metrics` (Prometheus text), `/ready` (200 once
//! every worker listens, 503 while draining), `/live`, `/config` (the effective configuration).

use std::sync::atomic::Ordering;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use hyper::body::Incoming;

use crate::body::Body;
use crate::state::State;

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Body::local(body));
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

pub fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the admin endpoint only answers GET\n".to_owned(),
        );
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
        "/config" => match config_json(state) {
            Ok(json) => text(StatusCode::OK, "application/json", json + "\n"),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("cannot render the configuration: {e}\n"),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found; try /metrics, /ready, /live or /config\n".to_owned(),
        ),
    }
}
