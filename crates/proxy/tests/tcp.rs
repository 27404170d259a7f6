//! Opaque TCP through two real proxies over mutual TLS (docs/tcp.md): Debian's `redis-server`
//! and an unmodified `redis-cli` (a caller not in `allow` refused before the app sees it), a
//! server-speaks-first protocol, a half-close, and resets carried both ways. The apps are real
//! processes or real sockets on loopback; every wait is bounded and fails the test when it runs
//! out. `redis-server` and `redis-tools` must be installed (scripts/test installs them).

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use hopwise_proxy::Running;
use hopwise_proxy::config::Target;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MESH: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls: { cache: { connect_timeout: 2s }, mail: {}, echo: {} }
  stranger:
    calls: { cache: {} }
  cache: { tcp: {}, allow: [a] }
  mail: { tcp: { idle_timeout: 30s } }
  echo: { tcp: {} }
";

/// Bounds every wait in these tests: reaching it is a failure, never a pass.
const LIMIT: Duration = Duration::from_secs(10);

/// The callee's proxy in front of `app`, then `caller`'s proxy with its local port to it.
async fn through(f: &Fixture, caller: &str, callee: &str, app: SocketAddr) -> (Running, Running) {
    let b = start(inbound(f.config(callee), app)).await;
    let a = start(outbound(
        f.config(caller),
        &[(callee, b.bound.inbound.unwrap())],
    ))
    .await;
    (a, b)
}

fn local(a: &Running, upstream: &str) -> SocketAddr {
    a.bound.upstreams[upstream]
}

/// A metric's value in a proxy's `/metrics` text (0 when the series is absent).
async fn value(p: &Running, series: &str) -> f64 {
    let text = metrics(p).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (bounded) until `series` reads `want`.
async fn wait_for(p: &Running, series: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let got = value(p, series).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} is {got}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Redis {
    addr: SocketAddr,
    _child: tokio::process::Child,
}

async fn redis() -> Redis {
    let addr = closed_port();
    let child = tokio::process::Command::new("redis-server")
        .args(["--port", &addr.port().to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("redis-server (Debian package redis-server) cannot run: {e}"));
    let deadline = tokio::time::Instant::now() + LIMIT;
    while TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "redis-server did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Redis {
        addr,
        _child: child,
    }
}

/// `redis-cli` against `addr` with `args` (and `stdin`): its stdout and whether it succeeded.
async fn cli(addr: SocketAddr, args: &[&str], stdin: Option<Vec<u8>>) -> (String, bool) {
    let mut cmd = tokio::process::Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("redis-cli (Debian package redis-tools) cannot run: {e}"));
    if let Some(bytes) = stdin {
        let mut w = child.stdin.take().unwrap();
        w.write_all(&bytes).await.unwrap();
    }
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("redis-cli hung")
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (text.trim().to_owned(), out.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_reaches_redis_server_through_two_proxies_over_mtls() {
    let f = Fixture::new(MESH);
    let redis = redis().await;
    let (a, b) = through(&f, "a", "cache", redis.addr).await;
    let port = local(&a, "cache");
    assert_eq!(
        cli(port, &["SET", "member:U-41", "fee due"], None).await.0,
        "OK"
    );
    assert_eq!(cli(port, &["GET", "member:U-41"], None).await.0, "fee due");
    // A megabyte each way: more than any window, so flow control is crossed both ways.
    let big = vec![b'x'; 1 << 20];
    assert_eq!(cli(port, &["-x", "SET", "big"], Some(big)).await.0, "OK");
    let (len, _) = cli(port, &["STRLEN", "big"], None).await;
    assert_eq!(len, "1048576");
    let (got, _) = cli(port, &["GET", "big"], None).await;
    assert_eq!(got.len(), 1 << 20);

    let out = r#"{direction="outbound",service="cache"}"#;
    let inb = r#"{direction="inbound",service="cache"}"#;
    wait_for(&a, &format!("hopwise_tcp_connections_total{out}"), 5.0).await;
    wait_for(&a, &format!("hopwise_tcp_connections_open{out}"), 0.0).await;
    wait_for(&b, &format!("hopwise_tcp_connections_total{inb}"), 5.0).await;
    wait_for(&b, &format!("hopwise_tcp_connections_open{inb}"), 0.0).await;
    let sent = r#"hopwise_tcp_bytes_total{direction="outbound",service="cache",way="to-callee"}"#;
    let got_back =
        r#"hopwise_tcp_bytes_total{direction="inbound",service="cache",way="to-caller"}"#;
    assert!(value(&a, sent).await > (1 << 20) as f64);
    assert!(value(&b, got_back).await > (1 << 20) as f64);
    // Five connections, one tunnel connection between the proxies: identity checked once.
    let handshakes = r#"hopwise_tls_handshakes_total{direction="inbound",result="ok"}"#;
    assert_eq!(value(&b, handshakes).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_not_in_allow_is_refused_before_redis_sees_it() {
    let f = Fixture::new(MESH);
    let redis = redis().await;
    let (stranger, cache) = through(&f, "stranger", "cache", redis.addr).await;
    let before = connections_received(redis.addr).await;
    let (text, ok) = cli(local(&stranger, "cache"), &["PING"], None).await;
    assert!(!ok && !text.contains("PONG"), "redis-cli: {text}");
    let refused =
        r#"hopwise_tcp_refused_total{direction="inbound",service="cache",reason="forbidden"}"#;
    assert_eq!(value(&cache, refused).await, 1.0);
    let outbound =
        r#"hopwise_tcp_refused_total{direction="outbound",service="cache",reason="forbidden"}"#;
    assert_eq!(value(&stranger, outbound).await, 1.0);
    // Redis saw no connection between our two questions: the refusal happened before it.
    assert_eq!(connections_received(redis.addr).await, before + 1);
}

/// Redis's own count of connections it accepted (this question's included).
async fn connections_received(redis: SocketAddr) -> u64 {
    let (info, _) = cli(redis, &["INFO", "stats"], None).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_first_is_heard_before_the_client_sends_a_byte() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"220 mail.test.local ESMTP ready\r\n")
            .await
            .unwrap();
        let mut line = [0u8; 64];
        let n = s.read(&mut line).await.unwrap();
        assert!(line[..n].starts_with(b"QUIT"));
        s.write_all(b"221 bye\r\n").await.unwrap();
    });
    let f = Fixture::new(MESH);
    let (a, _b) = through(&f, "a", "mail", app).await;
    let mut c = TcpStream::connect(local(&a, "mail")).await.unwrap();
    let mut banner = [0u8; 64];
    let n = tokio::time::timeout(LIMIT, c.read(&mut banner))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&banner[..n], b"220 mail.test.local ESMTP ready\r\n");
    c.write_all(b"QUIT\r\n").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(LIMIT, c.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest, b"221 bye\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_is_carried_and_the_other_way_goes_on() {
    // The app answers only once it has read to the end: the client's FIN must reach it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).await.unwrap();
        s.write_all(format!("read {} bytes", all.len()).as_bytes())
            .await
            .unwrap();
    });
    let f = Fixture::new(MESH);
    let (a, _b) = through(&f, "a", "echo", app).await;
    let mut c = TcpStream::connect(local(&a, "echo")).await.unwrap();
    c.write_all(&[7u8; 100_000]).await.unwrap();
    c.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(LIMIT, c.read_to_string(&mut answer))
        .await
        .expect("the FIN did not cross, or the answer did not come back")
        .unwrap();
    assert_eq!(answer, "read 100000 bytes");
}

/// A port nothing listens on: a connection to it is refused at once.
async fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_refuses_the_tunnel_is_passed_over_for_the_next() {
    // Nothing was sent to a copy that refused the connection: the next one is tried, so every
    // connection reaches the app whichever copy the balancer picks first.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut all = Vec::new();
                if s.read_to_end(&mut all).await.is_ok() {
                    let _ = s.write_all(&all).await;
                }
            });
        }
    });
    let f = Fixture::new(MESH);
    let b = start(inbound(f.config("echo"), app)).await;
    let mut c = outbound(f.config("a"), &[]);
    if let Some(cluster) = c.clusters.get_mut("echo")
        && let Target::Mesh { endpoints, .. } = &mut cluster.target
    {
        *endpoints = vec![dead_port().await, b.bound.inbound.unwrap()];
    }
    let a = start(c).await;
    for i in 0..8 {
        let mut c = TcpStream::connect(local(&a, "echo")).await.unwrap();
        let sent = format!("connection {i}");
        c.write_all(sent.as_bytes()).await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = String::new();
        tokio::time::timeout(LIMIT, c.read_to_string(&mut back))
            .await
            .expect("no answer")
            .unwrap();
        assert_eq!(back, sent);
    }
    let series = "hopwise_tcp_connections_total{direction=\"inbound\",service=\"echo\"}";
    wait_for(&b, series, 8.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_are_carried_both_ways() {
    // The app resets the first connection after a byte; it reports how the second one ended.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.unwrap();
        hopwise_proxy::tcp::splice::reset(&s); // SO_LINGER 0
        drop(s);
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 16];
        let _ = s.read(&mut buf).await;
        let end = s.read(&mut buf).await.map_err(|e| e.kind());
        let _ = tx.send(end);
    });
    let f = Fixture::new(MESH);
    let (a, _b) = through(&f, "a", "echo", app).await;

    let mut c = TcpStream::connect(local(&a, "echo")).await.unwrap();
    c.write_all(b"x").await.unwrap();
    let mut buf = [0u8; 8];
    let got = tokio::time::timeout(LIMIT, c.read(&mut buf))
        .await
        .expect("hung");
    assert_eq!(
        got.map_err(|e| e.kind()).unwrap_err(),
        std::io::ErrorKind::ConnectionReset
    );

    let c = TcpStream::connect(local(&a, "echo")).await.unwrap();
    c.try_write(b"y").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    hopwise_proxy::tcp::splice::reset(&c);
    drop(c);
    let end = tokio::time::timeout(LIMIT, rx)
        .await
        .expect("hung")
        .unwrap();
    assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset));
}

/// A tunnel stream by hand, as a proxy of `caller` would open it: mTLS with the tunnel's ALPN,
/// one CONNECT (or `method`) to `authority` of `service`'s proxy. The callee's answer.
async fn tunnel_by_hand(
    f: &Fixture,
    (service, callee): (&str, &Running),
    method: &str,
    authority: &str,
) -> u16 {
    use hopwise_proxy::tls::{CertFiles, CertStore, TUNNEL_ALPN};
    let store = CertStore::open(CertFiles::in_dir(&f.certs(), "a")).unwrap();
    let tls = store
        .client_config(&f.mesh.identity(service), TUNNEL_ALPN)
        .unwrap();
    let tcp = TcpStream::connect(callee.bound.inbound.unwrap())
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from("echo").unwrap();
    let io = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .unwrap();
    let (h2, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(authority)
        .body(())
        .unwrap();
    let mut h2 = h2.ready().await.unwrap();
    let (answer, _send) = h2.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(LIMIT, answer).await.unwrap().unwrap();
    resp.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_reaches_only_the_declared_app_never_another_port_of_its_host() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let f = Fixture::new(MESH);
    let (_a, echo) = through(&f, "a", "echo", app).await;
    // The callee proxy's own admin port, on the same host: a CONNECT naming it still reaches
    // the app (a whole-TCP service's tunnels go to its app whatever they name), never admin.
    let admin = echo.bound.admin.unwrap();
    assert_eq!(
        tunnel_by_hand(
            &f,
            ("echo", &echo),
            "CONNECT",
            &format!("echo:{}", admin.port())
        )
        .await,
        200
    );
    let (_s, peer) = tokio::time::timeout(LIMIT, listener.accept())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(peer.ip(), app.ip());
    // Anything but CONNECT is refused on a tunnel connection.
    assert_eq!(
        tunnel_by_hand(&f, ("echo", &echo), "GET", "http://echo/metrics").await,
        405
    );
    let refused =
        r#"hopwise_tcp_refused_total{direction="inbound",service="echo",reason="not-connect"}"#;
    assert_eq!(value(&echo, refused).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_the_service_did_not_declare_is_refused_by_the_callee() {
    let opaque = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = opaque.local_addr().unwrap().port();
    let f = Fixture::new(&format!(
        "mesh: {{ name: t, trust_domain: test.local }}
services:
  a: {{ calls: {{ kv: {{}} }} }}
  kv: {{ tcp: {{ ports: [{port}] }} }}
"
    ));
    let http_app = backend(echo()).await;
    let kv = start(inbound(f.config("kv"), http_app.addr)).await;
    let admin = kv.bound.admin.unwrap().port();
    // Its proxy's admin port and its HTTP app's port: neither was declared opaque.
    assert_eq!(
        tunnel_by_hand(&f, ("kv", &kv), "CONNECT", &format!("kv:{admin}")).await,
        404
    );
    let app_port = http_app.addr.port();
    assert_eq!(
        tunnel_by_hand(&f, ("kv", &kv), "CONNECT", &format!("kv:{app_port}")).await,
        404
    );
    assert_eq!(
        tunnel_by_hand(&f, ("kv", &kv), "CONNECT", &format!("kv:{port}")).await,
        200
    );
    tokio::time::timeout(LIMIT, opaque.accept())
        .await
        .unwrap()
        .unwrap();
    let refused =
        r#"hopwise_tcp_refused_total{direction="inbound",service="kv",reason="not-opaque"}"#;
    assert_eq!(value(&kv, refused).await, 2.0);
    assert_eq!(http_app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}
