//! The mesh `tests/gateway.rs` runs: a gateway `edge` with a plain and a TLS listener (a
//! certificate of its own for each of two host names, from a CA of the test's own, not the
//! mesh's), routing `shop.example` to `web` and `api.example/v1` to `api` through their real
//! proxies over mutual TLS to real apps; `admin` allows only `web`, so the gateway's identity
//! is refused there. And `curl`, the outside client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hopwise_model::rate::Limit;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::support::*;

pub const MESH: &str = r"
mesh: { name: t, trust_domain: test.local }
services:
  edge:
    gateway:
      http: { listen: 127.0.0.1:0 }
      https:
        listen: 127.0.0.1:0
        certificates:
          - { hostnames: [shop.example], cert: tls/shop.pem, key: tls/shop-key.pem }
          - { hostnames: [api.example], cert: tls/api.pem, key: tls/api-key.pem }
      max_body_bytes: 1024
    routes:
      shop:
        hostnames: [shop.example]
        rules:
          - backends: [{ service: web }]
          - matches: [{ path: { value: /admin } }]
            backends: [{ service: admin }]
      api:
        hostnames: [api.example]
        rules:
          - matches: [{ path: { value: /v1 } }]
            backends: [{ service: api }]
    calls: { web: { timeout: 2s }, api: { timeout: 2s }, admin: { timeout: 2s } }
  web: { allow: [edge] }
  api: { allow: [edge] }
  admin: { allow: [web] }
";

/// An app that names itself and tells what reached it: path, HTTP version, the identity its
/// proxy vouched for, the forged headers a client tried (`-` when none arrived), and what the
/// gateway told of the client (`X-Forwarded-For`, `-Proto`). It reads the whole body first, as an upload handler would.
fn named(name: &'static str) -> Handler {
    Arc::new(move |req: Request<Incoming>| {
        Box::pin(async move {
            let (head, body) = req.into_parts();
            let _ = http_body_util::BodyExt::collect(body).await;
            let req = Request::from_parts(head, ());
            let h = req.headers();
            let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("-");
            let text = format!(
                "app={name} path={} peer={} forged={} xfcc={} xff={} xfp={}",
                req.uri().path(),
                get("x-hopwise-peer-identity"),
                get("x-hopwise-forged"),
                get("x-forwarded-client-cert"),
                get("x-forwarded-for"),
                get("x-forwarded-proto"),
            );
            Response::new(Full::new(Bytes::from(text)))
        })
    })
}

pub struct Edge {
    pub f: Fixture,
    pub gateway: hopwise_proxy::Running,
    _callees: Vec<hopwise_proxy::Running>,
    _apps: Vec<Backend>,
}

impl Edge {
    pub fn http(&self) -> SocketAddr {
        self.gateway.bound.gateway_http.unwrap()
    }

    pub fn https(&self) -> SocketAddr {
        self.gateway.bound.gateway_https.unwrap()
    }

    /// The test CA that signed the gateway's certificates (what a client trusts).
    pub fn ca(&self) -> PathBuf {
        self.f.dir.path().join("tls/ca.pem")
    }
}

/// The mesh running: web, api and admin behind their proxies, the gateway in front, with
/// `limit` as its total rate limit when given.
pub async fn edge(limit: Option<Limit>) -> Edge {
    edge_with(|c| {
        if let Some(g) = c.gateway.as_mut() {
            g.gateway.total = limit;
        }
    })
    .await
}

/// The same, with the gateway's configuration changed by `change` before it starts.
pub async fn edge_with(change: impl FnOnce(&mut hopwise_proxy::ProxyConfig)) -> Edge {
    let f = Fixture::new(MESH);
    write_certificates(&f.dir.path().join("tls"), &["shop.example", "api.example"]);
    let mut callees = Vec::new();
    let mut apps = Vec::new();
    let mut endpoints = Vec::new();
    for name in ["web", "api", "admin"] {
        let app = backend(named(name)).await;
        let proxy = start(inbound(f.config(name), app.addr)).await;
        endpoints.push((name, proxy.bound.inbound.unwrap()));
        callees.push(proxy);
        apps.push(app);
    }
    let mut c = f.config("edge");
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    for (name, addr) in endpoints {
        if let Some(hopwise_proxy::config::Target::Mesh { endpoints, .. }) =
            c.clusters.get_mut(name).map(|c| &mut c.target)
        {
            *endpoints = vec![addr];
        }
    }
    change(&mut c);
    let gateway = start(c).await;
    Edge {
        f,
        gateway,
        _callees: callees,
        _apps: apps,
    }
}

/// A CA of the test's own and one certificate per name (`<name's first label>.pem`, `-key.pem`).
fn write_certificates(dir: &Path, names: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "gateway test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    for name in names {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![(*name).to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, *name);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let stem = name.split('.').next().unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}-key.pem")), key.serialize_pem()).unwrap();
    }
}

/// A self-signed certificate for `name` whose subject is `CN=<cn>`, with its key, written over
/// `dir/<name's first label>.pem` and `-key.pem` (a renewal); with `key_too` false only the
/// certificate is written, so it no longer matches the key on disk.
pub fn write_self_signed(dir: &Path, name: &str, cn: &str, key_too: bool) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.self_signed(&key).unwrap();
    let stem = name.split('.').next().unwrap();
    std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
    if key_too {
        std::fs::write(dir.join(format!("{stem}-key.pem")), key.serialize_pem()).unwrap();
    }
}

/// What one curl run gave: its exit status, `%{http_code} %{http_version}`, the body, and
/// stderr (with `-v`, the handshake and the certificate served).
#[derive(Debug)]
pub struct Curl {
    pub ok: bool,
    pub out: String,
    pub body: String,
    pub err: String,
}

/// Runs curl with `args` after the common ones (silent but errors shown, bounded, the body
/// then `\n%{http_code} %{http_version}`); proxies from the environment ignored.
pub async fn curl(args: &[&str]) -> Curl {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args([
        "--silent",
        "--show-error",
        "--max-time",
        "10",
        "--noproxy",
        "*",
    ])
    .args(["--write-out", "\n%{http_code} %{http_version}"])
    .args(args)
    .kill_on_drop(true);
    let out = match tokio::time::timeout(Duration::from_secs(20), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run curl (apt-get install curl): {e}"),
        Err(_) => panic!("curl {args:?} did not finish within 20 s"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Curl {
        ok: out.status.success(),
        out: code.to_owned(),
        body: body.to_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `--resolve NAME:PORT:127.0.0.1` and the URL `scheme://NAME:PORT/path`.
pub fn at(scheme: &str, name: &str, addr: SocketAddr, path: &str) -> [String; 3] {
    [
        "--resolve".to_owned(),
        format!("{name}:{}:127.0.0.1", addr.port()),
        format!("{scheme}://{name}:{}{path}", addr.port()),
    ]
}
