//! The access log (`services.<name>.access_log`): one line per request through this proxy,
//! inbound and outbound, for the routes the file names. The lifecycles fill a [`LogEntry`] (a
//! `Box` they hand to the tries by reference, only when the service logs; not an extension of
//! the request, whose first entry allocates a map) as the request goes — route,
//! each try's copy and the condition that started it, a retry not made, the time upstream —
//! and [`LogEntry::finish`] hands the line to a bounded queue ([`LogSink`]): never waits; a
//! full queue drops the line and counts it in `hopwise_access_log_dropped_total`. A writer
//! thread renders the lines (`line.rs`) and writes them to stderr or a file, which it rotates by
//! size (`<file>` → `<file>.1`), in batches: woken by the first line after a quiet spell, it
//! waits [`BATCH`] before it drains the queue, so a busy proxy pays one wake-up and one write
//! per batch instead of one per request. The entry holds only what the request already had
//! (names copied inline, the request's own method, authority and path as refcounted clones):
//! the text is made by the writer, by hand, into one buffer it reuses (`line.rs`). The same entry feeds the live tap (`tap.rs`):
//! while someone taps, every request gets one, and its finished line (JSON) goes to the
//! tappers of its route too.

pub mod line;
pub mod text;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopwise_model::observe::AccessLog;
use hopwise_model::raw::LogFormat;
use http::{HeaderMap, Request, Response};
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use crate::config::ProxyConfig;
use crate::tap::Tap;
use crate::trace::ProxySpan;
use line::{Clock, Line};
use text::{Name, Text};

/// How long the writer lets lines gather after the first one wakes it. The queue must hold a
/// batch: the default 4,096 lines is 400,000 requests a second.
pub const BATCH: Duration = Duration::from_millis(10);

/// A line as the request path leaves it: rendered by the writer, off the request path.
type Queued = (Line, LogFormat);

/// Lines that may wait in the queue as the request left them, sharing its head's buffer
/// (hyper's, 8 KiB or more): past these, a line is detached first ([`Line::detach`]), so a
/// writer that stalls holds at most this many buffers, not one per queued line.
const SHARED_IN_QUEUE: usize = 64;

/// Where finished lines go: a bounded queue to the writer thread.
#[derive(Debug, Clone)]
pub struct LogSink {
    tx: SyncSender<Queued>,
    /// Lines sent and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
    dropped: Counter,
}

impl LogSink {
    fn send(&self, (mut line, format): Queued) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= SHARED_IN_QUEUE {
            line.detach();
        }
        if self.tx.try_send((line, format)).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.inc();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("access_log.to: cannot open {file}: {source}")]
    Open {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the access log's writer: {0}")]
    Start(std::io::Error),
}

/// Opens the log's file (or takes stderr) and starts its writer thread.
pub fn start(log: &AccessLog, dropped: Counter) -> Result<LogSink, LogError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(log.queue.max(1) as usize);
    let queued = Arc::new(AtomicUsize::new(0));
    let taken = queued.clone();
    let mut out = match &log.file {
        Some(f) => Out::file(PathBuf::from(f), log.max_bytes)?,
        None => Out::stderr(),
    };
    std::thread::Builder::new()
        .name("hopwise-access-log".to_owned())
        .spawn(move || out.run(&rx, &taken))
        .map_err(LogError::Start)?;
    Ok(LogSink {
        tx,
        queued,
        dropped,
    })
}

enum Out {
    Stderr(std::io::BufWriter<std::io::Stderr>),
    File {
        path: PathBuf,
        file: std::io::BufWriter<std::fs::File>,
        written: u64,
        max: u64,
    },
}

impl Out {
    fn stderr() -> Out {
        Out::Stderr(std::io::BufWriter::new(std::io::stderr()))
    }

    fn file(path: PathBuf, max: u64) -> Result<Out, LogError> {
        let err = |source| LogError::Open {
            file: path.clone(),
            source,
        };
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        let written = f.metadata().map_err(err)?.len();
        Ok(Out::File {
            path,
            file: std::io::BufWriter::new(f),
            written,
            max,
        })
    }

    /// Writes lines until every sender is gone, a batch at a time; flushes whenever the queue
    /// is empty. While it sleeps nobody waits on the queue, so a send is no system call.
    fn run(&mut self, rx: &Receiver<Queued>, queued: &AtomicUsize) {
        // One buffer for every line, and the calendar of the last second written.
        let mut buf = Vec::with_capacity(1024);
        let mut clock = Clock::default();
        let mut write = |out: &mut Out, (line, format): Queued| {
            queued.fetch_sub(1, Ordering::Relaxed);
            buf.clear();
            line.render(format, &mut clock, &mut buf);
            out.write(&buf);
        };
        while let Ok(first) = rx.recv() {
            std::thread::sleep(BATCH);
            write(self, first);
            loop {
                match rx.try_recv() {
                    Ok(line) => write(self, line),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.flush();
                        return;
                    }
                }
            }
            self.flush();
        }
    }

    fn write(&mut self, line: &[u8]) {
        match self {
            Out::Stderr(err) => {
                let _ = err.write_all(line);
            }
            Out::File {
                path,
                file,
                written,
                max,
            } => {
                let len = line.len() as u64;
                if *written > 0 && *written + len > *max {
                    let _ = file.flush();
                    let mut old = path.clone().into_os_string();
                    old.push(".1");
                    let reopened = std::fs::rename(&*path, &old).and_then(|()| {
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&*path)
                    });
                    match reopened {
                        Ok(f) => {
                            *file = std::io::BufWriter::new(f);
                            *written = 0;
                        }
                        Err(e) => {
                            tracing::warn!("access log: cannot rotate {}: {e}", path.display())
                        }
                    }
                }
                if file.write_all(line).is_ok() {
                    *written += len;
                }
            }
        }
    }

    fn flush(&mut self) {
        let _ = match self {
            Out::Stderr(err) => err.flush(),
            Out::File { file, .. } => file.flush(),
        };
    }
}

/// One logged request while it runs; it borrows the log's settings and queue from the
/// lifecycle (no reference counts to take and drop per request).
#[derive(Debug)]
pub struct LogEntry<'c> {
    /// The service's `access_log`, when it has one.
    log: Option<&'c AccessLog>,
    /// The log's queue, when the service logs.
    sink: Option<&'c LogSink>,
    /// The tappers, when someone tapped as the request arrived.
    tap: Option<Arc<Tap>>,
    started: Instant,
    /// Set by the request's one task as it goes; the lock is never contended.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    line: Line,
    /// The time spent waiting for upstream (or the app).
    upstream: Duration,
}

/// The access-log hook: a [`LogEntry`] for the request when this service logs or someone taps
/// (after the trace hook, whose span's trace id it takes), returned to be filled and finished.
/// Neither: one branch and one atomic load.
pub fn begin<'c, B>(
    config: &'c ProxyConfig,
    sink: Option<&'c LogSink>,
    tap: &Arc<Tap>,
    direction: &'static str,
    caller: Option<&Arc<str>>,
    span: Option<&ProxySpan>,
    req: &Request<B>,
) -> Option<Box<LogEntry<'c>>> {
    let log = config.access_log.as_ref();
    let sink = sink.filter(|_| log.is_some());
    let tap = tap.on().then(|| tap.clone());
    if sink.is_none() && tap.is_none() {
        return None;
    }
    let line = Line {
        time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        direction,
        service: Name::new(&config.service),
        caller: caller.cloned(),
        method: req.method().clone(),
        authority: authority(req),
        path: req.uri().path_and_query().cloned(),
        query: log.is_some_and(|l| l.query),
        bytes_in: header_number(req.headers(), &http::header::CONTENT_LENGTH),
        trace_id: span.map(ProxySpan::trace_id),
        span_id: span.map(ProxySpan::span_id),
        ..Line::default()
    };
    Some(Box::new(LogEntry {
        log,
        sink,
        tap,
        started: Instant::now(),
        state: Mutex::new(State {
            line,
            upstream: Duration::ZERO,
        }),
    }))
}

/// The request's authority: the URI's (parsed by hyper), else `Host` when it is one — a peer's
/// `Host` is its own text, written into a line only when it cannot pass for other fields.
fn authority<B>(req: &Request<B>) -> Option<Text> {
    match req.uri().authority() {
        Some(a) => Some(Text::Authority(a.clone())),
        None => {
            let host = req.headers().get(http::header::HOST)?;
            text::is_authority(host.as_bytes()).then(|| Text::Header(host.clone()))
        }
    }
}

/// A header's value read as a number (`content-length`, `grpc-status`), if it is one.
pub(crate) fn header_number<T: std::str::FromStr>(
    h: &HeaderMap,
    name: &http::HeaderName,
) -> Option<T> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

impl LogEntry<'_> {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The route matched, and outbound the upstream.
    pub fn route(&self, upstream: Option<&str>, route: &str) {
        let l = &mut self.state().line;
        l.upstream = upstream.map(Name::new);
        l.route = Some(Name::new(route));
    }

    /// Outbound: the callee's own route and rule that took the request.
    pub fn rule(&self, route: &str, rule: Option<&str>) {
        let l = &mut self.state().line;
        l.http_route = Some(Name::new(route));
        l.rule = rule.map(Name::new);
    }

    /// A try ended at `copy`; `started_by`: the retry condition that made it.
    pub fn tried(&self, copy: Option<SocketAddr>, started_by: Option<&'static str>) {
        let l = &mut self.state().line;
        l.tries += 1;
        l.copy = copy;
        l.retries.extend(started_by);
    }

    /// A retry a condition allowed was not made, and why.
    pub fn skipped(&self, reason: Option<&'static str>) {
        self.state().line.retry_skipped = reason;
    }

    /// The time spent waiting for upstream (or the app).
    pub fn upstream(&self, time: Duration) {
        self.state().upstream = time;
    }

    /// The answer's head is out: the line goes to the writer if its route is logged, and to
    /// the tappers of its route.
    pub fn finish<B: http_body::Body>(&self, resp: &Response<B>) {
        self.close(|l| {
            l.status = resp.status().as_u16();
            l.grpc_status = header_number(resp.headers(), &crate::error::GRPC_STATUS);
            l.local_reply = crate::error::LocalReply::of(resp);
            l.bytes_out = resp.body().size_hint().exact();
        });
    }

    /// The caller went first (`recorded.rs` says `how`): the line says so, with status 0 (no
    /// answer was sent), as Envoy's does.
    pub fn ended(&self, how: &'static str) {
        self.close(|l| {
            l.status = 0;
            l.ended = Some(how);
        });
    }

    /// Fills the line's end with `answer` and sends it where it goes.
    fn close(&self, answer: impl FnOnce(&mut Line)) {
        let log = self.log;
        let total = self.started.elapsed();
        let mut state = self.state();
        let upstream = state.upstream;
        let l = &mut state.line;
        let route = l.route.as_ref().map(Name::as_str);
        let logged = log.filter(|log| log.logs(route.unwrap_or("-")));
        if logged.is_none() && self.tap.is_none() {
            return;
        }
        answer(l);
        l.duration_us = total.as_micros() as u64;
        l.proxy_us = total.saturating_sub(upstream).as_micros() as u64;
        if let Some(tap) = &self.tap {
            tap.publish(l.route.as_ref().map(Name::as_str), || l.json_line());
        }
        if let (Some(log), Some(sink)) = (logged, self.sink) {
            sink.send((std::mem::take(l), log.format));
        }
    }
}

#[cfg(test)]
#[path = "access_log/sink_tests.rs"]
mod sink_tests;
