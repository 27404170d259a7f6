//! A stand-in app for the tests that run proxies and apps in network namespaces (`capture.rs`,
//! `kube_e2e.rs`, which includes this file alone): it answers each request with the identity
//! its proxy vouched for, so a test sees who called through which proxies.

use std::io::{Read, Write};
use std::net::TcpListener;

/// Serves `listener` on a thread of its own: every request is answered `<name> saw <identity>
/// for <path>`, the identity being the `x-hopwise-peer-identity` its proxy set (`nobody`
/// without), one request per connection.
pub fn serve(listener: TcpListener, name: &str) {
    let name = name.to_owned();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
            let who = head
                .to_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("x-hopwise-peer-identity: "))
                .unwrap_or("nobody")
                .to_owned();
            let mut body = format!("{name} saw {who} for {path}");
            // A proxy's header meant for the proxy alone must never reach an app.
            if head.to_lowercase().contains("\nx-hopwise-service-port:") {
                body.push_str(" and x-hopwise-service-port");
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}
