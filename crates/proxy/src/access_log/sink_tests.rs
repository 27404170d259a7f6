//! The queue's sharing bound: with the writer stalled, only the first lines keep the request's
//! buffer; every later one holds its own copy.

use bytes::Bytes;
use http::uri::PathAndQuery;

use super::*;

#[test]
fn past_the_bound_a_queued_line_holds_no_part_of_the_requests_buffer() {
    let buf = Bytes::from(vec![b'/'; 8192]);
    // The writer's end, held here and never read: a stalled writer.
    let (tx, rx) = std::sync::mpsc::sync_channel(SHARED_IN_QUEUE + 10);
    let sink = LogSink {
        tx,
        queued: Arc::new(AtomicUsize::new(0)),
        dropped: Counter::default(),
    };
    for _ in 0..SHARED_IN_QUEUE + 10 {
        let line = Line {
            path: Some(PathAndQuery::from_maybe_shared(buf.slice(..20)).unwrap()),
            ..Line::default()
        };
        sink.send((line, LogFormat::Json));
    }
    // One more than the queue holds: dropped and counted, not waited for.
    sink.send((Line::default(), LogFormat::Json));
    assert_eq!(sink.dropped.get(), 1);
    let shares = |l: &Line| {
        let p = l.path.as_ref().unwrap().as_str().as_ptr();
        buf.as_ptr_range().contains(&p)
    };
    let queued: Vec<Line> = rx.try_iter().map(|(l, _)| l).collect();
    assert_eq!(queued.len(), SHARED_IN_QUEUE + 10);
    assert!(queued[..SHARED_IN_QUEUE].iter().all(shares));
    assert!(!queued[SHARED_IN_QUEUE..].iter().any(shares));
    assert!(
        queued
            .iter()
            .all(|l| l.path.as_ref().unwrap().as_str() == "/".repeat(20))
    );
}
