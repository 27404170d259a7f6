//! `egress: pass`: a captured connection to an address outside the mesh carried there as it
//! is, bytes both ways, each side's end of stream passed on as a half-close. Bounded in time
//! (the connect, and `idle`: closed once neither side sent anything for that long), and in
//! memory (one buffer per direction; the capture listener's cap bounds the connections).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

/// Each direction's buffer.
const BUF: usize = 16 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connect: Duration,
    pub idle: Duration,
}

/// Connects to `dst` and carries bytes between it and `app` until both sides ended.
pub async fn splice(app: TcpStream, dst: SocketAddr, limits: Limits) -> io::Result<()> {
    let far = tokio::time::timeout(limits.connect, TcpStream::connect(dst))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = far.set_nodelay(true);
    let (mut app_r, mut app_w) = app.into_split();
    let (mut far_r, mut far_w) = far.into_split();
    let start = Instant::now();
    // Milliseconds from `start` to the last byte either way (an atomic: the future is Send).
    let last = AtomicU64::new(0);
    let both = async {
        tokio::try_join!(
            pump(&mut app_r, &mut far_w, start, &last),
            pump(&mut far_r, &mut app_w, start, &last)
        )
        .map(drop)
    };
    let idle = async {
        loop {
            let quiet = start
                .elapsed()
                .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
            if quiet >= limits.idle {
                return;
            }
            tokio::time::sleep(limits.idle - quiet).await;
        }
    };
    tokio::select! {
        r = both => r,
        () = idle => Err(io::Error::new(io::ErrorKind::TimedOut, "idle")),
    }
}

/// One direction until its end of stream, passed on as a half-close; each read noted in `last`.
async fn pump(
    r: &mut OwnedReadHalf,
    w: &mut OwnedWriteHalf,
    start: Instant,
    last: &AtomicU64,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.shutdown().await;
        }
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        w.write_all(&buf[..n]).await?;
    }
}
