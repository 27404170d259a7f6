//! One upgraded connection spliced to the next hop's, both ways, until both ways ended: an end
//! of stream on one side is passed on as a shutdown of the other's write side (half-close: the
//! other way goes on), a failure on either side ends both, and no byte either way for the idle
//! timeout closes both. Memory: one 16 KiB buffer per way. The bytes are counted on opaque
//! TCP's counters ([`crate::metrics::tcp`]); what to count is the caller's choice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::tcp::splice::idle_watch;

/// Bytes read from one side at once.
const READ_CHUNK: usize = 16 * 1024;

/// How a spliced connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both ways ended with an end of stream.
    Closed,
    /// A side failed (reset, broken TLS): both closed.
    Failed,
    /// No byte either way for the idle timeout: both closed.
    Idle,
}

/// The counters of the two ways: from the caller's side to the callee's, and back.
#[derive(Debug, Clone, Copy)]
pub struct Counts<'a> {
    pub to_callee: &'a Counter,
    pub to_caller: &'a Counter,
}

/// Splices `caller` (the side the upgrade came from) and `callee` until both ways end, a side
/// fails, or nothing moved for `idle`.
pub async fn splice<A, B>(caller: A, callee: B, idle: Option<Duration>, counts: Counts<'_>) -> End
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let active = || last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    let (mut caller_rd, mut caller_wr) = tokio::io::split(caller);
    let (mut callee_rd, mut callee_wr) = tokio::io::split(callee);
    let up = one_way(&mut caller_rd, &mut callee_wr, counts.to_callee, &active);
    let down = one_way(&mut callee_rd, &mut caller_wr, counts.to_caller, &active);
    let end = tokio::select! {
        r = async { tokio::try_join!(up, down) } => match r {
            Ok(_) => End::Closed,
            Err(()) => End::Failed,
        },
        () = idle_watch(start, &last, idle) => End::Idle,
    };
    if end == End::Idle {
        // Told apart from a failure: each side reads an end of stream.
        let _ = caller_wr.shutdown().await;
        let _ = callee_wr.shutdown().await;
    }
    end
}

/// Copies `from` into `to` until `from` ends (then `to`'s write side is shut: the half-close
/// passed on) or either fails.
async fn one_way<R, W>(
    from: &mut R,
    to: &mut W,
    count: &Counter,
    active: &impl Fn(),
) -> Result<(), ()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = from.read(&mut buf).await.map_err(|_| ())?;
        if n == 0 {
            return to.shutdown().await.map_err(|_| ());
        }
        active();
        count.inc_by(n as u64);
        to.write_all(&buf[..n]).await.map_err(|_| ())?;
        // TLS buffers a record until flushed: an interactive protocol must not wait for more.
        to.flush().await.map_err(|_| ())?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_half_close_is_passed_on_and_the_other_way_goes_on() {
        let (mut app, caller) = tokio::io::duplex(1024);
        let (callee, mut far) = tokio::io::duplex(1024);
        let (c1, c2) = (Counter::default(), Counter::default());
        let spliced = tokio::spawn(async move {
            let counts = Counts {
                to_callee: &c1,
                to_caller: &c2,
            };
            let end = splice(caller, callee, None, counts).await;
            (end, c1.get(), c2.get())
        });
        app.write_all(b"ping").await.unwrap();
        app.shutdown().await.unwrap();
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ping", "the far side read the bytes, then the end");
        far.write_all(b"pong!").await.unwrap();
        far.shutdown().await.unwrap();
        let mut back = Vec::new();
        app.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong!", "the answer still came after the half-close");
        assert_eq!(spliced.await.unwrap(), (End::Closed, 4, 5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_is_closed_after_the_idle_timeout() {
        let (mut app, caller) = tokio::io::duplex(1024);
        let (callee, mut far) = tokio::io::duplex(1024);
        let idle = Duration::from_secs(60);
        let spliced = tokio::spawn(async move {
            let (c1, c2) = (Counter::default(), Counter::default());
            let counts = Counts {
                to_callee: &c1,
                to_caller: &c2,
            };
            splice(caller, callee, Some(idle), counts).await
        });
        app.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        far.read_exact(&mut one).await.unwrap();
        let ended = tokio::time::timeout(idle * 2, spliced).await;
        assert_eq!(ended.expect("still open").unwrap(), End::Idle);
        let mut rest = Vec::new();
        assert_eq!(
            app.read_to_end(&mut rest).await.unwrap(),
            0,
            "an end, not an error"
        );
        assert_eq!(far.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
