//! nginx's `stream` module as both sides of an opaque-TCP hop (`--modes tcp`): the caller's side
//! takes plain TCP and opens TLS 1.3 to the next side with the caller's certificate, verifying
//! the callee's against the hop's CA; the callee's side requires a client certificate from that
//! CA and relays plain TCP to the app. One TLS connection per TCP connection (nginx `stream`
//! has no multiplexing); sessions resumed. Needs Debian's `libnginx-mod-stream`. Pure.

use std::net::SocketAddr;
use std::path::Path;

use super::{HopCerts, HopPorts, Side, nginx_proxy_ssl, q};

/// Where Debian's `libnginx-mod-stream` puts the module (nginx runs with our file, not
/// /etc/nginx's, so it is loaded here).
pub const STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

fn main(workers: usize, dir: &Path) -> String {
    format!(
        "load_module {STREAM_MODULE};\ndaemon off;\nworker_processes {workers};\npid {pid};\n\
         error_log stderr warn;\nevents {{ worker_connections 4096; }}\nstream {{\n",
        pid = q(&dir.join("nginx.pid")),
    )
}

/// One side of a hop as an nginx `stream` configuration.
pub fn nginx(side: Side, ports: &HopPorts, c: &HopCerts, workers: usize, dir: &Path) -> String {
    let mut s = main(workers, dir);
    match side {
        Side::Out => {
            s += &server(ports.out, "", ports.inbound);
            s += "    proxy_ssl on;\n";
            s += &nginx_proxy_ssl(c, "    ");
        }
        Side::In => {
            s += &server(ports.inbound, " ssl", ports.app);
            s += &format!(
                "    ssl_certificate {};\n    ssl_certificate_key {};\n\
                 \x20   ssl_client_certificate {};\n    ssl_verify_client on;\n\
                 \x20   ssl_protocols TLSv1.3;\n",
                q(&c.callee_cert),
                q(&c.callee_key),
                q(&c.ca)
            );
        }
    }
    s += "  }\n}\n";
    s
}

fn server(listen: SocketAddr, ssl: &str, next: SocketAddr) -> String {
    format!("  server {{\n    listen {listen}{ssl};\n    proxy_pass {next};\n    tcp_nodelay on;\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_relay_tcp_with_mutual_tls_between_them() {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let ports = HopPorts {
            out: a(4001),
            inbound: a(4002),
            app: a(4003),
        };
        let certs = HopCerts::in_dir(Path::new("/c"));
        let out = nginx(Side::Out, &ports, &certs, 2, Path::new("/d"));
        assert!(out.starts_with(&format!("load_module {STREAM_MODULE};")));
        assert!(out.contains("listen 127.0.0.1:4001;\n    proxy_pass 127.0.0.1:4002;"));
        assert!(out.contains("proxy_ssl on;") && out.contains("proxy_ssl_verify on;"));
        assert!(!out.contains("http {"), "{out}");
        let inb = nginx(Side::In, &ports, &certs, 2, Path::new("/d"));
        assert!(inb.contains("listen 127.0.0.1:4002 ssl;\n    proxy_pass 127.0.0.1:4003;"));
        assert!(inb.contains("ssl_verify_client on;"));
        assert_eq!(out.matches('{').count(), out.matches('}').count());
        assert_eq!(inb.matches('{').count(), inb.matches('}').count());
    }
}
