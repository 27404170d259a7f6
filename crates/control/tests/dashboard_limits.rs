//! The dashboard's server against peers that are not a browser: connections past its cap are
//! closed before a byte is read, a head that never finishes and a keep-alive connection left
//! idle are closed after the header read timeout. Real sockets on loopback, a real plane;
//! waits are generous deadlines (a bound reached fails the test), not timing assertions.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use hopwise_control::dashboard::{self, server::Limits};
use support::closed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A control plane (`support`'s) with its dashboard within `limits`.
async fn dashboard(limits: Limits) -> (SocketAddr, support::Plant, dashboard::Dashboard) {
    let plant = support::start(hopwise_control::conn::Limits::default()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = plant.running.handle();
    let dash = dashboard::spawn_limited(handle, listener, None, None, limits).unwrap();
    (dash.addr, plant, dash)
}

/// `GET /api/graph` on `tcp`, kept alive: the status line of the answer.
async fn get_graph(tcp: &mut TcpStream, addr: SocketAddr) -> String {
    let req = format!("GET /api/graph HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut one = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut one))
            .await
            .expect("no answer")
            .unwrap();
        assert_eq!(n, 1, "closed before an answer: {head:?}");
        head.push(one[0]);
    }
    String::from_utf8(head).unwrap().trim_end().to_owned()
}

#[tokio::test]
async fn past_the_connection_cap_a_new_connection_is_closed_at_once() {
    let limits = Limits {
        connections: 2,
        ..Limits::default()
    };
    let (addr, _dir, _dash) = dashboard(limits).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get_graph(&mut a, addr).await, "HTTP/1.1 200 OK");
    assert_eq!(get_graph(&mut b, addr).await, "HTTP/1.1 200 OK");
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed(&mut third).await,
        "the third of a cap of two is closed"
    );
    // A place comes back when one closes.
    drop(a);
    let mut again = None;
    for _ in 0..100 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET /api/graph HTTP/1.1\r\nhost: {addr}\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        let mut first = [0u8; 12];
        if c.read_exact(&mut first).await.is_ok() {
            again = Some(first);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(&again.expect("no place came back"), b"HTTP/1.1 200");
}

#[tokio::test]
async fn a_head_that_never_ends_and_an_idle_keep_alive_are_closed() {
    let limits = Limits {
        header_read: Duration::from_millis(300),
        ..Limits::default()
    };
    let (addr, _dir, _dash) = dashboard(limits).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(format!("GET /api/graph HTTP/1.1\r\nhost: {addr}\r\n").as_bytes())
        .await
        .unwrap();
    assert!(closed(&mut slow).await, "a head without its end is closed");
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get_graph(&mut idle, addr).await, "HTTP/1.1 200 OK");
    assert!(
        closed(&mut idle).await,
        "an idle keep-alive connection is closed"
    );
}
