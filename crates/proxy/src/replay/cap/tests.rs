//! The bounds on a paused clock: a body fed through a channel by a task that sleeps between
//! frames as a slow client would.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::{BodyCap, BodyRefused, Capped};

/// A body whose frames are what the channel brings; it ends when the sender goes.
struct Chan(mpsc::Receiver<Bytes>);

impl Body for Chan {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

const CAP: BodyCap = BodyCap {
    max: 10,
    idle: Duration::from_secs(30),
};

/// A capped body fed `chunks`, each after its pause; the sender stays until `hold_open` is over.
fn feed(chunks: Vec<(u64, &'static str)>, hold_open: u64) -> Capped<Chan> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        for (pause, text) in chunks {
            tokio::time::sleep(Duration::from_secs(pause)).await;
            let _ = tx.send(Bytes::from_static(text.as_bytes())).await;
        }
        tokio::time::sleep(Duration::from_secs(hold_open)).await;
    });
    Capped::new(Chan(rx), CAP)
}

/// Every frame until the end or the first error.
async fn read(mut body: Capped<Chan>) -> (String, Option<BodyRefused>) {
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => text.push_str(std::str::from_utf8(f.data_ref().unwrap()).unwrap()),
            Err(e) => return (text, e.downcast_ref::<BodyRefused>().copied()),
        }
    }
    assert!(body.is_end_stream());
    (text, None)
}

#[tokio::test(start_paused = true)]
async fn a_body_within_its_bounds_passes_whole_however_slowly_it_comes() {
    // 29 s between frames, each under the 30 s allowance, 10 bytes in all.
    let body = feed(vec![(0, "abc"), (29, "defg"), (29, "hij")], 0);
    assert_eq!(read(body).await, ("abcdefghij".to_owned(), None));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_streams_past_its_size_is_cut_at_the_frame_that_crosses_it() {
    let body = feed(vec![(0, "abcdef"), (1, "ghijk"), (1, "never")], 60);
    assert_eq!(
        read(body).await,
        ("abcdef".to_owned(), Some(BodyRefused::TooLarge(10)))
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_ends_at_its_allowance_counted_from_its_last_frame() {
    let start = tokio::time::Instant::now();
    // A frame at 20 s moves the allowance on: the stall is called at 50 s, not 30 s.
    let body = feed(vec![(0, "ab"), (20, "cd")], 3600);
    assert_eq!(
        read(body).await,
        ("abcd".to_owned(), Some(BodyRefused::Stalled(CAP.idle)))
    );
    assert_eq!(start.elapsed(), Duration::from_secs(50));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_starts_ends_at_its_allowance() {
    let start = tokio::time::Instant::now();
    let body = feed(vec![], 3600);
    assert_eq!(
        read(body).await,
        (String::new(), Some(BodyRefused::Stalled(CAP.idle)))
    );
    assert_eq!(start.elapsed(), CAP.idle);
}
