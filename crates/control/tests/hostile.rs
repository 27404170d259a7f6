//! The control port against a client without credentials, over real TLS on 127.0.0.1: HTTP/2
//! frames written by hand (a well-behaved h2 client would respect the server's limits, which is
//! the point of not using one). Each test fails without the limit it checks
//! (`hopwise_control::conn::Limits`); waits are generous deadlines, not timing assertions.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hopwise_control::client;
use hopwise_control::conn::Limits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

mod support;
use support::{dial, start};

/// Long enough never to fire on a slow machine.
const DEADLINE: Duration = Duration::from_secs(10);

const SETTINGS: u8 = 0x4;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const REFUSED_STREAM: u32 = 0x7;
const ENHANCE_YOUR_CALM: u32 = 0xb;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const STATUS: &str = "/hopwise.control.v1.Control/Status";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// HPACK: each header a literal without indexing, with a new name (no table state).
fn header_block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        out.push(u8::try_from(name.len()).unwrap());
        out.extend(name.as_bytes());
        out.push(u8::try_from(value.len()).unwrap());
        out.extend(value.as_bytes());
    }
    out
}

fn request(path: &str) -> Vec<u8> {
    header_block(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "hopwise-control"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ])
}

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    fn code(&self) -> u32 {
        // RST_STREAM: the code; GOAWAY: last stream id, then the code.
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    /// A SETTINGS frame's value of `id`.
    fn setting(&self, id: u16) -> Option<u32> {
        self.payload.chunks(6).find_map(|s| {
            (u16::from_be_bytes([s[0], s[1]]) == id)
                .then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
        })
    }
}

async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head).await?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream,
        payload,
    })
}

/// Writes the preface and empty SETTINGS, reads the server's SETTINGS and acknowledges them.
async fn handshake(tls: &mut TlsStream<TcpStream>) -> Frame {
    tls.write_all(PREFACE).await.unwrap();
    tls.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    loop {
        let f = read_frame(tls).await.unwrap();
        if f.kind == SETTINGS && f.flags & ACK == 0 {
            tls.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
            return f;
        }
    }
}

/// Reads until the server ends the connection; `true` if it did within `within`.
async fn closed_within(r: &mut (impl AsyncRead + Unpin), within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let read_to_end = async {
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read_to_end).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_opening_2000_streams_is_refused_past_the_limit() {
    let limits = Limits::default();
    let plant = start(limits).await;
    let mut tls = dial(plant.running.addr, &plant.bundle).await.unwrap();
    let settings = handshake(&mut tls).await;
    // SETTINGS_MAX_CONCURRENT_STREAMS.
    assert_eq!(settings.setting(0x3), Some(limits.streams_per_connection));

    let (mut r, mut w) = tokio::io::split(tls);
    // 2,000 requests opened and never finished, ignoring the advertised limit.
    let writer = tokio::spawn(async move {
        let block = request(STATUS);
        for i in 0..2000u32 {
            let f = frame(HEADERS, END_HEADERS, 2 * i + 1, &block);
            if w.write_all(&f).await.is_err() {
                return;
            }
        }
        let _ = w.flush().await;
        // Keep the write half open: the read half decides.
        std::future::pending::<()>().await;
    });
    let (mut refused, mut goaway) = (0usize, None);
    let outcome = tokio::time::timeout(DEADLINE, async {
        while let Ok(f) = read_frame(&mut r).await {
            match f.kind {
                RST_STREAM if f.code() == REFUSED_STREAM => refused += 1,
                GOAWAY => {
                    goaway = Some(f.code());
                    break;
                }
                _ => {}
            }
        }
    })
    .await;
    writer.abort();
    assert!(
        outcome.is_ok(),
        "no refusal within {DEADLINE:?}: {refused} streams refused, GOAWAY {goaway:?}"
    );
    // Every refusal counts toward the resets h2 allows, so the connection ends (GOAWAY
    // ENHANCE_YOUR_CALM, unless the socket's reset, with 2,000 requests unread, overtakes it)
    // once they are spent.
    assert!(refused > 0, "no stream was refused");
    assert!(refused <= limits.local_error_resets + 1, "{refused}");
    assert!(
        matches!(goaway, None | Some(ENHANCE_YOUR_CALM)),
        "{goaway:?}"
    );
    drop(r);
    plant.running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_the_server_must_reset_past_the_limit_end_the_connection() {
    let limits = Limits {
        local_error_resets: 10,
        ..Limits::default()
    };
    let plant = start(limits).await;
    let mut tls = dial(plant.running.addr, &plant.bundle).await.unwrap();
    handshake(&mut tls).await;
    // Malformed requests (no :method): each one a stream the server resets (PROTOCOL_ERROR),
    // one after another, so the concurrency limit never applies.
    let block = header_block(&[(":scheme", "https"), (":path", STATUS)]);
    let (mut resets, mut goaway) = (0usize, None);
    let outcome = tokio::time::timeout(DEADLINE, async {
        'requests: for i in 0..50u32 {
            let id = 2 * i + 1;
            if tls
                .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, id, &block))
                .await
                .is_err()
            {
                break;
            }
            // Until this stream's reset, or the end.
            loop {
                match read_frame(&mut tls).await {
                    Ok(f) if f.kind == RST_STREAM && f.stream == id => {
                        resets += 1;
                        break;
                    }
                    Ok(f) if f.kind == GOAWAY => {
                        goaway = Some(f.code());
                        break 'requests;
                    }
                    Ok(_) => {}
                    Err(_) => break 'requests,
                }
            }
        }
    })
    .await;
    assert!(outcome.is_ok(), "the server stopped answering");
    assert_eq!(goaway, Some(ENHANCE_YOUR_CALM), "after {resets} resets");
    assert!(resets <= limits.local_error_resets, "{resets}");
    drop(tls);
    plant.running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_request_are_closed() {
    let limits = Limits {
        first_request: Duration::from_millis(200),
        ..Limits::default()
    };
    let plant = start(limits).await;
    let addr = plant.running.addr;
    let bound = Duration::from_secs(5);
    // Nothing after the handshake.
    let mut silent = dial(addr, &plant.bundle).await.unwrap();
    assert!(
        closed_within(&mut silent, bound).await,
        "silent: still open"
    );
    // Half the preface.
    let mut half = dial(addr, &plant.bundle).await.unwrap();
    half.write_all(&PREFACE[..10]).await.unwrap();
    assert!(closed_within(&mut half, bound).await, "half: still open");
    // The preface and SETTINGS, but no request.
    let mut settled = dial(addr, &plant.bundle).await.unwrap();
    handshake(&mut settled).await;
    assert!(
        closed_within(&mut settled, bound).await,
        "no request: still open"
    );

    // A real client's calls are served: the deadline holds only while nothing is in flight.
    let dir = plant.dir.path();
    let server = client::Server::from_state(&addr.to_string(), dir).unwrap();
    let status = client::status(&server).await.unwrap();
    assert_eq!(status.mesh, "shop");
    drop((silent, half, settled));
    plant.running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_finishes_times_out() {
    let limits = Limits {
        request_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let plant = start(limits).await;
    let mut tls = dial(plant.running.addr, &plant.bundle).await.unwrap();
    handshake(&mut tls).await;
    // The request's headers, and never its message.
    tls.write_all(&frame(HEADERS, END_HEADERS, 1, &request(STATUS)))
        .await
        .unwrap();
    let answered = tokio::time::timeout(DEADLINE, async {
        loop {
            let f = read_frame(&mut tls).await.unwrap();
            if f.stream == 1 && (f.kind == HEADERS || f.kind == RST_STREAM) {
                return;
            }
        }
    })
    .await;
    assert!(answered.is_ok(), "the stalled request was never answered");
    drop(tls);
    plant.running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_per_address_cap_are_refused() {
    let limits = Limits {
        connections_per_address: 3,
        ..Limits::default()
    };
    let plant = start(limits).await;
    let addr = plant.running.addr;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(dial(addr, &plant.bundle).await.unwrap());
    }
    // The fourth is closed at accept: its handshake fails.
    let fourth = tokio::time::timeout(DEADLINE, dial(addr, &plant.bundle)).await;
    assert!(
        matches!(fourth, Ok(Err(_))),
        "a fourth connection was served"
    );
    // One closes: a new one is served again (once the server has seen it go).
    drop(open.pop());
    let again = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Ok(mut tls) = dial(addr, &plant.bundle).await {
                tls.write_all(PREFACE).await.unwrap();
                tls.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
                // Served means answered (a refused one reads end of file).
                if read_frame(&mut tls).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(again.is_ok(), "no connection served after one closed");
    drop(open);
    plant.running.shutdown().await.unwrap();
}
