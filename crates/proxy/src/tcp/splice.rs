//! One opaque TCP connection spliced to one HTTP/2 CONNECT stream, both ways, until both ways
//! have ended: a FIN becomes END_STREAM and END_STREAM a FIN (half-close carried), a TCP reset
//! becomes RST_STREAM(CONNECT_ERROR) and any broken stream a TCP reset (RFC 9113 §8.5), and a
//! connection with no byte either way for the idle timeout is closed on both sides. Memory is
//! bounded: one read buffer per way, and nothing is written to the stream beyond the capacity
//! its peer granted. Used by both proxies of a tunnel; what to count is the caller's choice.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::time::Instant;

/// Bytes read from the TCP side at once.
const READ_CHUNK: usize = 16 * 1024;

/// The two halves of one CONNECT stream.
#[derive(Debug)]
pub struct Stream {
    pub send: SendStream<Bytes>,
    pub recv: RecvStream,
}

/// How a spliced connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both ways ended with a FIN / END_STREAM.
    Closed,
    /// The TCP peer reset (or its socket failed): the stream was reset with CONNECT_ERROR.
    TcpReset,
    /// The stream was reset or its connection lost: the TCP peer was reset.
    StreamReset,
    /// No byte either way for the idle timeout: both closed.
    Idle,
}

/// Counters for the two ways: bytes from the TCP side into the stream, and back.
#[derive(Debug, Clone, Copy)]
pub struct Counts<'a> {
    pub from_tcp: &'a Counter,
    pub to_tcp: &'a Counter,
}

/// Splices `tcp` and `stream` until both ways end; `first` is sent into the stream before
/// anything read from `tcp` (bytes read while detecting the protocol). Ends the TCP side as
/// the stream ended (FIN or reset) and the stream as the TCP side did.
pub async fn splice(
    tcp: &mut TcpStream,
    mut stream: Stream,
    first: Bytes,
    idle: Option<Duration>,
    counts: Counts<'_>,
) -> End {
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let end = {
        let (rd, wr) = tcp.split();
        let active = || last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        let up = tcp_to_stream(rd, &mut stream.send, first, counts.from_tcp, &active);
        let down = stream_to_tcp(&mut stream.recv, wr, counts.to_tcp, &active);
        let watch = idle_watch(start, &last, idle);
        both(up, down, watch).await
    };
    match end {
        End::Closed => {}
        End::TcpReset => stream.send.send_reset(Reason::CONNECT_ERROR),
        End::StreamReset => reset(tcp),
        End::Idle => {
            stream.send.send_reset(Reason::CANCEL);
            let _ = tcp.shutdown().await;
        }
    }
    end
}

/// Runs both ways to their ends; the first failure (or the idle watch) ends it all.
async fn both(
    up: impl Future<Output = Result<(), End>>,
    down: impl Future<Output = Result<(), End>>,
    watch: impl Future<Output = ()>,
) -> End {
    tokio::pin!(up, down, watch);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            r = &mut up, if !up_done => match r {
                Ok(()) => up_done = true,
                Err(end) => return end,
            },
            r = &mut down, if !down_done => match r {
                Ok(()) => down_done = true,
                Err(end) => return end,
            },
            () = &mut watch => return End::Idle,
        }
    }
    End::Closed
}

/// A TCP reset: close with SO_LINGER 0, so the peer reads ECONNRESET, not a clean end.
pub fn reset(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO));
}

async fn tcp_to_stream(
    mut rd: ReadHalf<'_>,
    send: &mut SendStream<Bytes>,
    first: Bytes,
    count: &Counter,
    active: &impl Fn(),
) -> Result<(), End> {
    if !first.is_empty() {
        count.inc_by(first.len() as u64);
        send_all(send, first).await?;
    }
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    loop {
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            // A reset while the app is quiet must not wait for its next byte.
            r = poll_fn(|cx| send.poll_reset(cx)) => return Err(match r {
                Ok(Reason::CANCEL) => End::Idle,
                _ => End::StreamReset,
            }),
        };
        match read {
            Ok(0) => {
                return send
                    .send_data(Bytes::new(), true)
                    .map_err(|_| End::StreamReset);
            }
            Ok(n) => {
                active();
                count.inc_by(n as u64);
                send_all(send, buf.split().freeze()).await?;
            }
            Err(_) => return Err(End::TcpReset),
        }
    }
}

/// Sends `data` within the capacity the peer grants: never more buffered than its window.
async fn send_all(send: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), End> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(_)) | None => return Err(End::StreamReset),
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        send.send_data(chunk, false).map_err(|_| End::StreamReset)?;
    }
    Ok(())
}

async fn stream_to_tcp(
    recv: &mut RecvStream,
    mut wr: WriteHalf<'_>,
    count: &Counter,
    active: &impl Fn(),
) -> Result<(), End> {
    loop {
        match recv.data().await {
            None => {
                // END_STREAM: the far side's FIN, passed on; our other way goes on.
                let _ = wr.shutdown().await;
                return Ok(());
            }
            Some(Ok(data)) => {
                active();
                let n = data.len();
                count.inc_by(n as u64);
                wr.write_all(&data).await.map_err(|_| End::TcpReset)?;
                let _ = recv.flow_control().release_capacity(n);
            }
            // CANCEL is the far side closing an idle connection; anything else is a reset.
            Some(Err(e)) if e.reason() == Some(Reason::CANCEL) => {
                let _ = wr.shutdown().await;
                return Err(End::Idle);
            }
            Some(Err(_)) => return Err(End::StreamReset),
        }
    }
}

/// Resolves once no byte moved either way for `idle` (never without one).
pub(crate) async fn idle_watch(start: Instant, last: &AtomicU64, idle: Option<Duration>) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    loop {
        let at = start + Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
        if Instant::now() >= at {
            return;
        }
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use tokio::net::TcpListener;

    /// Both ends of one CONNECT stream over an in-memory HTTP/2 connection.
    async fn stream_pair() -> (Stream, Stream) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(b).await.unwrap();
            let (req, mut respond) = conn.accept().await.unwrap().unwrap();
            let send = respond.send_response(Response::new(()), false).unwrap();
            tokio::spawn(async move { while conn.accept().await.is_some() {} });
            Stream {
                send,
                recv: req.into_body(),
            }
        });
        let (client, conn) = h2::client::handshake(a).await.unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .method(Method::CONNECT)
            .uri("echo:1")
            .body(())
            .unwrap();
        let (answer, send) = client
            .ready()
            .await
            .unwrap()
            .send_request(req, false)
            .unwrap();
        let recv = answer.await.unwrap().into_body();
        (Stream { send, recv }, server.await.unwrap())
    }

    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (a, l.accept().await.unwrap().0)
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_quiet_for_the_idle_timeout_is_closed_on_both_sides() {
        let (mut far, near) = stream_pair().await;
        let (mut app, mut ours) = tcp_pair().await;
        let (c1, c2) = (Counter::default(), Counter::default());
        let idle = Duration::from_secs(3600);
        let spliced = tokio::spawn(async move {
            let counts = Counts {
                from_tcp: &c1,
                to_tcp: &c2,
            };
            splice(&mut ours, near, Bytes::new(), Some(idle), counts).await
        });
        // A byte each way, then nothing for an hour (of tokio's paused clock).
        app.write_all(b"a").await.unwrap();
        assert_eq!(
            far.recv.data().await.unwrap().unwrap(),
            Bytes::from_static(b"a")
        );
        far.send.send_data(Bytes::from_static(b"b"), false).unwrap();
        let mut one = [0u8; 1];
        app.read_exact(&mut one).await.unwrap();
        let ended = tokio::time::timeout(idle * 2, spliced).await;
        assert_eq!(
            ended.expect("not closed after the idle timeout").unwrap(),
            End::Idle
        );
        // The app reads an end, not a reset; the far side a CANCEL, not CONNECT_ERROR.
        let mut rest = Vec::new();
        assert_eq!(app.read_to_end(&mut rest).await.unwrap(), 0);
        let err = far.recv.data().await.unwrap().unwrap_err();
        assert_eq!(err.reason(), Some(Reason::CANCEL));
    }
}
