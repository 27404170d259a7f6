//! What the bench runs, as text: the mesh file of each hop for `hopwise proxy`, and the
//! equivalent nginx, HAProxy and Envoy configurations of the same two sides (nginx's `stream`
//! for opaque TCP: `layout/stream.rs`). Pure: addresses
//! and paths in, configuration text out; [`super::hops`] writes and starts them.
//!
//! One hop is a caller's outbound side and a callee's inbound side, each its own process:
//! client ─▶ [out ─(mTLS)─▶ in] ─▶ [out ─(mTLS)─▶ in] ─▶ … ─▶ backend. Every hop has its own
//! mesh file (services `caller` → `callee`) and its own development CA. One file per hop,
//! because the inbound side of hop k forwards to the outbound side of hop k+1: its `app` *is*
//! that proxy's upstream port, and the mesh validator rightly refuses one address used twice
//! within one file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Mode;

mod stream;

/// The SPIFFE trust domain of every hop's mesh.
pub const TRUST_DOMAIN: &str = "bench.local";
/// The service whose outbound side starts a hop.
pub const CALLER: &str = "caller";
/// The service whose inbound side ends a hop.
pub const CALLEE: &str = "callee";

/// The addresses of one hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopPorts {
    /// The caller's outbound side listens here in plain HTTP (the previous hop's `app`).
    pub out: SocketAddr,
    /// The callee's inbound side: mutual TLS (or plain HTTP with `--plaintext`).
    pub inbound: SocketAddr,
    /// Where the inbound side forwards: the next hop's `out`, or the backend.
    pub app: SocketAddr,
}

/// The ports of an `n`-hop chain in front of `backend`, from 2n free ports
/// (`[out1, in1, out2, in2, …]`). The client talks to `hops[0].out`.
pub fn chain(ports: &[SocketAddr], backend: SocketAddr) -> Vec<HopPorts> {
    let n = ports.len() / 2;
    (0..n)
        .map(|k| HopPorts {
            out: ports[2 * k],
            inbound: ports[2 * k + 1],
            app: if k + 1 < n { ports[2 * k + 2] } else { backend },
        })
        .collect()
}

/// The PEM files of one hop, as `hopwise certs` writes them, plus the cert+key bundles
/// HAProxy wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopCerts {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub caller_cert: PathBuf,
    pub caller_key: PathBuf,
    pub callee_cert: PathBuf,
    pub callee_key: PathBuf,
    pub caller_bundle: PathBuf,
    pub callee_bundle: PathBuf,
}

impl HopCerts {
    pub fn in_dir(dir: &Path) -> Self {
        HopCerts {
            dir: dir.to_owned(),
            ca: dir.join("ca.pem"),
            caller_cert: dir.join(format!("{CALLER}.pem")),
            caller_key: dir.join(format!("{CALLER}-key.pem")),
            callee_cert: dir.join(format!("{CALLEE}.pem")),
            callee_key: dir.join(format!("{CALLEE}-key.pem")),
            caller_bundle: dir.join(format!("{CALLER}-bundle.pem")),
            callee_bundle: dir.join(format!("{CALLEE}-bundle.pem")),
        }
    }
}

/// The SPIFFE identity of the callee of every hop.
pub fn callee_identity() -> String {
    format!("spiffe://{TRUST_DOMAIN}/service/{CALLEE}")
}

/// A double-quoted string, valid in YAML, nginx and HAProxy alike for the paths we write.
fn quoted(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

fn q(p: &Path) -> String {
    quoted(&p.display().to_string())
}

/// The mesh file of hop `hop` (1-based): `caller` with a local port for `callee`, `callee`
/// with its inbound port and its "app" (the next hop, or the backend). `certs` is the hop's
/// certificate directory.
/// With `tcp`, the callee is opaque TCP (`tcp: {}`): the load's HTTP crosses as bytes.
pub fn hop_mesh(hop: usize, ports: &HopPorts, certs: &Path, tcp: bool) -> String {
    let (call, opaque) = if tcp {
        ("{}", "    tcp: {}\n")
    } else {
        ("{ timeout: 2s }", "")
    };
    format!(
        "# hopwise bench hops: hop {hop}. Written by the bench; the caller's outbound side and the\n\
         # callee's inbound side each run as their own `hopwise proxy` process.\n\
         mesh:\n  name: bench-hop-{hop}\n  trust_domain: {TRUST_DOMAIN}\n  certs: {certs}\n\
         services:\n\
         \x20 {CALLER}:\n\
         \x20   copies:\n\
         \x20     - upstreams: {{ {CALLEE}: \"{out}\" }}\n\
         \x20   calls:\n\
         \x20     {CALLEE}: {call}\n\
         \x20 {CALLEE}:\n{opaque}\
         \x20   copies:\n\
         \x20     - {{ inbound: \"{inbound}\", app: \"{app}\" }}\n",
        certs = q(certs),
        out = ports.out,
        inbound = ports.inbound,
        app = ports.app,
    )
}

/// A proxy of another make, run for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    Nginx,
    Haproxy,
    Envoy,
}

impl Peer {
    pub const ALL: [Peer; 3] = [Peer::Nginx, Peer::Haproxy, Peer::Envoy];

    pub fn program(self) -> &'static str {
        match self {
            Peer::Nginx => "nginx",
            Peer::Haproxy => "haproxy",
            Peer::Envoy => "envoy",
        }
    }

    /// The file name of a side's configuration.
    pub fn config_file(self, side: Side) -> String {
        let ext = match self {
            Peer::Nginx | Peer::Haproxy => "conf",
            Peer::Envoy => "yaml",
        };
        format!("{}-{}.{ext}", self.program(), side.name())
    }

    /// The configuration of one side of a hop. `dir` is that side's own scratch directory
    /// (nginx's prefix and temp paths).
    pub fn config(
        self,
        side: Side,
        ports: &HopPorts,
        mode: Mode,
        certs: &HopCerts,
        workers: usize,
        dir: &Path,
    ) -> String {
        let tls = (mode != Mode::Plain).then_some(certs);
        match (self, side) {
            (Peer::Nginx, _) if mode == Mode::Tcp => {
                stream::nginx(side, ports, certs, workers, dir)
            }
            (Peer::Nginx, Side::Out) => nginx_out(ports, tls, workers, dir),
            (Peer::Nginx, Side::In) => nginx_in(ports, tls, workers, dir),
            (Peer::Haproxy, Side::Out) => haproxy_out(ports, tls, workers),
            (Peer::Haproxy, Side::In) => haproxy_in(ports, tls, workers),
            (Peer::Envoy, Side::Out) => envoy_out(ports, tls),
            (Peer::Envoy, Side::In) => envoy_in(ports, tls),
        }
    }

    /// The command-line arguments that run `config` in the foreground.
    pub fn args(self, config: &Path, dir: &Path, workers: usize) -> Vec<String> {
        let c = config.display().to_string();
        match self {
            Peer::Nginx => vec![
                "-p".into(),
                format!("{}/", dir.display()),
                "-e".into(),
                "stderr".into(),
                "-c".into(),
                c,
            ],
            Peer::Haproxy => vec!["-db".into(), "-f".into(), c],
            Peer::Envoy => vec![
                "-c".into(),
                c,
                "--concurrency".into(),
                workers.to_string(),
                "--disable-hot-restart".into(),
                "--log-level".into(),
                "warn".into(),
            ],
        }
    }
}

/// Which side of a hop a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Out,
    In,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Out => "out",
            Side::In => "in",
        }
    }
}

fn nginx_main(workers: usize, dir: &Path) -> String {
    let d = |name: &str| q(&dir.join(name));
    format!(
        "daemon off;\nworker_processes {workers};\npid {pid};\nerror_log stderr warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n\
         \x20 client_body_temp_path {cb};\n  proxy_temp_path {pt};\n  fastcgi_temp_path {ft};\n\
         \x20 uwsgi_temp_path {ut};\n  scgi_temp_path {st};\n\
         \x20 keepalive_requests 1000000;\n  keepalive_timeout 300s;\n",
        pid = d("nginx.pid"),
        cb = d("tmp-body"),
        pt = d("tmp-proxy"),
        ft = d("tmp-fastcgi"),
        ut = d("tmp-uwsgi"),
        st = d("tmp-scgi"),
    )
}

fn nginx_upstream(target: SocketAddr) -> String {
    format!(
        "  upstream next {{\n    server {target};\n    keepalive 32;\n\
         \x20   keepalive_requests 1000000;\n    keepalive_timeout 300s;\n  }}\n"
    )
}

const NGINX_PROXY: &str =
    "      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n";

/// nginx's TLS 1.3 to the callee's side (`http` or `stream`): the caller's certificate, the
/// callee's verified against the hop's CA; each line indented by `pad`.
fn nginx_proxy_ssl(c: &HopCerts, pad: &str) -> String {
    [
        format!("proxy_ssl_certificate {};", q(&c.caller_cert)),
        format!("proxy_ssl_certificate_key {};", q(&c.caller_key)),
        format!("proxy_ssl_trusted_certificate {};", q(&c.ca)),
        "proxy_ssl_verify on;".to_owned(),
        format!("proxy_ssl_name {CALLEE};"),
        "proxy_ssl_protocols TLSv1.3;".to_owned(),
        "proxy_ssl_session_reuse on;".to_owned(),
    ]
    .iter()
    .map(|l| format!("{pad}{l}\n"))
    .collect()
}

/// nginx as the caller's side: plain HTTP in, HTTP/1.1 keep-alive out, TLS 1.3 with the
/// caller's certificate, the callee's verified against the hop's CA.
pub fn nginx_out(ports: &HopPorts, tls: Option<&HopCerts>, workers: usize, dir: &Path) -> String {
    let mut s = nginx_main(workers, dir);
    s += &nginx_upstream(ports.inbound);
    s += &format!(
        "  server {{\n    listen {};\n    location / {{\n",
        ports.out
    );
    match tls {
        Some(c) => {
            s += "      proxy_pass https://next;\n";
            s += NGINX_PROXY;
            s += &nginx_proxy_ssl(c, "      ");
        }
        None => {
            s += "      proxy_pass http://next;\n";
            s += NGINX_PROXY;
        }
    }
    s += "    }\n  }\n}\n";
    s
}

/// nginx as the callee's side: TLS 1.3 requiring a client certificate from the hop's CA,
/// HTTP/1.1 keep-alive to the app.
pub fn nginx_in(ports: &HopPorts, tls: Option<&HopCerts>, workers: usize, dir: &Path) -> String {
    let mut s = nginx_main(workers, dir);
    s += &nginx_upstream(ports.app);
    s += "  server {\n";
    match tls {
        Some(c) => {
            s += &format!(
                "    listen {} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};\n\
                 \x20   ssl_client_certificate {};\n    ssl_verify_client on;\n\
                 \x20   ssl_protocols TLSv1.3;\n",
                ports.inbound,
                q(&c.callee_cert),
                q(&c.callee_key),
                q(&c.ca)
            );
        }
        None => s += &format!("    listen {};\n", ports.inbound),
    }
    s += "    location / {\n      proxy_pass http://next;\n";
    s += NGINX_PROXY;
    s += "    }\n  }\n}\n";
    s
}

fn haproxy_main(workers: usize) -> String {
    format!(
        "global\n  nbthread {workers}\n  maxconn 4096\n\n\
         defaults\n  mode http\n  option http-keep-alive\n  http-reuse always\n\
         \x20 timeout connect 2s\n  timeout client 300s\n  timeout server 300s\n\
         \x20 timeout http-keep-alive 300s\n\n"
    )
}

/// HAProxy as the caller's side (see [`nginx_out`]).
pub fn haproxy_out(ports: &HopPorts, tls: Option<&HopCerts>, workers: usize) -> String {
    let mut s = haproxy_main(workers);
    s += &format!(
        "frontend out\n  bind {}\n  default_backend next\n\nbackend next\n  server next {}",
        ports.out, ports.inbound
    );
    if let Some(c) = tls {
        s += &format!(
            " ssl crt {} ca-file {} verify required verifyhost {CALLEE} ssl-min-ver TLSv1.3",
            q(&c.caller_bundle),
            q(&c.ca)
        );
    }
    s += "\n";
    s
}

/// HAProxy as the callee's side (see [`nginx_in`]).
pub fn haproxy_in(ports: &HopPorts, tls: Option<&HopCerts>, workers: usize) -> String {
    let mut s = haproxy_main(workers);
    s += &format!("frontend in\n  bind {}", ports.inbound);
    if let Some(c) = tls {
        s += &format!(
            " ssl crt {} ca-file {} verify required ssl-min-ver TLSv1.3",
            q(&c.callee_bundle),
            q(&c.ca)
        );
    }
    s += &format!(
        "\n  default_backend app\n\nbackend app\n  server app {}\n",
        ports.app
    );
    s
}

fn envoy_listener(name: &str, listen: SocketAddr, cluster: &str, tls: Option<String>) -> String {
    let mut s = format!(
        "static_resources:\n  listeners:\n  - name: {name}\n    address:\n      socket_address: {{ address: \"{}\", port_value: {} }}\n    filter_chains:\n    - filters:\n      - name: envoy.filters.network.http_connection_manager\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          stat_prefix: {name}\n          codec_type: HTTP1\n          route_config:\n            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n              routes:\n              - match: {{ prefix: \"/\" }}\n                route: {{ cluster: {cluster} }}\n          http_filters:\n          - name: envoy.filters.http.router\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
        listen.ip(),
        listen.port()
    );
    if let Some(t) = tls {
        s += &t;
    }
    s
}

fn envoy_cluster(target: SocketAddr, tls: Option<String>) -> String {
    let mut s = format!(
        "  clusters:\n  - name: next\n    type: STATIC\n    connect_timeout: 2s\n    load_assignment:\n      cluster_name: next\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{ address: \"{}\", port_value: {} }}\n",
        target.ip(),
        target.port()
    );
    if let Some(t) = tls {
        s += &t;
    }
    s
}

/// Envoy as the caller's side (see [`nginx_out`]); the callee must present its SPIFFE URI.
pub fn envoy_out(ports: &HopPorts, tls: Option<&HopCerts>) -> String {
    let upstream_tls = tls.map(|c| {
        format!(
            "    transport_socket:\n      name: envoy.transport_sockets.tls\n      typed_config:\n        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n        common_tls_context:\n          tls_params: {{ tls_minimum_protocol_version: TLSv1_3 }}\n          tls_certificates:\n          - certificate_chain: {{ filename: {} }}\n            private_key: {{ filename: {} }}\n          validation_context:\n            trusted_ca: {{ filename: {} }}\n            match_typed_subject_alt_names:\n            - san_type: URI\n              matcher: {{ exact: \"{}\" }}\n",
            q(&c.caller_cert),
            q(&c.caller_key),
            q(&c.ca),
            callee_identity()
        )
    });
    envoy_listener("out", ports.out, "next", None) + &envoy_cluster(ports.inbound, upstream_tls)
}

/// Envoy as the callee's side (see [`nginx_in`]).
pub fn envoy_in(ports: &HopPorts, tls: Option<&HopCerts>) -> String {
    let downstream_tls = tls.map(|c| {
        format!(
            "      transport_socket:\n        name: envoy.transport_sockets.tls\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext\n          require_client_certificate: true\n          common_tls_context:\n            tls_params: {{ tls_minimum_protocol_version: TLSv1_3 }}\n            tls_certificates:\n            - certificate_chain: {{ filename: {} }}\n              private_key: {{ filename: {} }}\n            validation_context:\n              trusted_ca: {{ filename: {} }}\n",
            q(&c.callee_cert),
            q(&c.callee_key),
            q(&c.ca)
        )
    });
    envoy_listener("in", ports.inbound, "next", downstream_tls) + &envoy_cluster(ports.app, None)
}

#[cfg(test)]
mod tests;
