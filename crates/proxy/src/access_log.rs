//! The access log (`services.<name>.access_log`): one line per request through this proxy,
//! inbound and outbound, for the routes the file names. The lifecycles fill an [`LogEntry`] (an
//! `Arc` in the request's extensions, only when the service logs) as the request goes — route,
//! each try's copy and the condition that started it, a retry not made, the time upstream —
//! and [`LogEntry::finish`] hands the line to a bounded queue ([`LogSink`]): never waits; a
//! full queue drops the line and counts it in `hopwise_access_log_dropped_total`. A writer
//! thread renders the lines (`line.rs`) and writes them to stderr or a file, which it rotates by
//! size (`<file>` → `<file>.1`), in batches: woken by the first line after a quiet spell, it
//! waits [`BATCH`] before it drains the queue, so a busy proxy pays one wake-up and one write
//! per batch instead of one per request. The same entry feeds the live tap (`tap.rs`):
//! while someone taps, every request gets one, and its finished line (JSON) goes to the
//! tappers of its route too.

pub mod line;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
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
use line::{Line, logged_path};

/// How long the writer lets lines gather after the first one wakes it. The queue must hold a
/// batch: the default 4,096 lines is 400,000 requests a second.
pub const BATCH: Duration = Duration::from_millis(10);

/// A line as the request path leaves it: rendered by the writer, off the request path.
type Queued = (Line, LogFormat);

/// Where finished lines go: a bounded queue to the writer thread.
#[derive(Debug, Clone)]
pub struct LogSink {
    tx: SyncSender<Queued>,
    dropped: Counter,
}

impl LogSink {
    fn send(&self, line: Queued) {
        if self.tx.try_send(line).is_err() {
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
    let mut out = match &log.file {
        Some(f) => Out::file(PathBuf::from(f), log.max_bytes)?,
        None => Out::Stderr,
    };
    std::thread::Builder::new()
        .name("hopwise-access-log".to_owned())
        .spawn(move || out.run(&rx))
        .map_err(LogError::Start)?;
    Ok(LogSink { tx, dropped })
}

enum Out {
    Stderr,
    File {
        path: PathBuf,
        file: std::io::BufWriter<std::fs::File>,
        written: u64,
        max: u64,
    },
}

impl Out {
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
    fn run(&mut self, rx: &Receiver<Queued>) {
        while let Ok(first) = rx.recv() {
            std::thread::sleep(BATCH);
            self.write(&first);
            loop {
                match rx.try_recv() {
                    Ok(line) => self.write(&line),
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

    fn write(&mut self, (line, format): &Queued) {
        let line = line.render(*format);
        match self {
            Out::Stderr => {
                let _ = std::io::stderr().write_all(line.as_bytes());
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
                if file.write_all(line.as_bytes()).is_ok() {
                    *written += len;
                }
            }
        }
    }

    fn flush(&mut self) {
        if let Out::File { file, .. } = self {
            let _ = file.flush();
        }
    }
}

/// One logged request while it runs.
#[derive(Debug)]
pub struct LogEntry {
    config: Arc<ProxyConfig>,
    /// The log's queue, when the service logs.
    sink: Option<LogSink>,
    /// The tappers, when someone tapped as the request arrived.
    tap: Option<Arc<Tap>>,
    started: Instant,
    line: Mutex<Line>,
    upstream_time: Mutex<Duration>,
}

/// The access-log hook: an [`LogEntry`] for the request when this service logs or someone taps
/// (after the trace hook, whose trace id it takes), kept in the extensions and returned to be
/// finished. Neither: one branch and one atomic load.
pub fn begin<B>(
    config: &Arc<ProxyConfig>,
    sink: Option<&LogSink>,
    tap: &Arc<Tap>,
    direction: &'static str,
    caller: Option<&str>,
    req: &mut Request<B>,
) -> Option<Arc<LogEntry>> {
    let log = config.access_log.as_ref();
    let sink = sink.filter(|_| log.is_some());
    let tap = tap.on().then(|| tap.clone());
    if sink.is_none() && tap.is_none() {
        return None;
    }
    let query = log.is_some_and(|l| l.query);
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let line = Line {
        time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        direction,
        service: config.service.clone(),
        caller: caller.map(str::to_owned),
        method: req.method().to_string(),
        authority: authority(req),
        path: logged_path(path, query),
        bytes_in: header_number(req.headers(), &http::header::CONTENT_LENGTH),
        trace_id: req
            .extensions()
            .get::<ProxySpan>()
            .map(|s| s.trace_id().to_string()),
        ..Line::default()
    };
    let entry = Arc::new(LogEntry {
        config: config.clone(),
        sink: sink.cloned(),
        tap,
        started: Instant::now(),
        line: Mutex::new(line),
        upstream_time: Mutex::new(Duration::ZERO),
    });
    req.extensions_mut().insert(entry.clone());
    Some(entry)
}

fn authority<B>(req: &Request<B>) -> Option<String> {
    let from_uri = req.uri().authority().map(|a| a.as_str().to_owned());
    from_uri.or_else(|| {
        let host = req.headers().get(http::header::HOST)?;
        Some(host.to_str().ok()?.to_owned())
    })
}

/// A header's value read as a number (`content-length`, `grpc-status`), if it is one.
pub(crate) fn header_number<T: std::str::FromStr>(
    h: &HeaderMap,
    name: &http::HeaderName,
) -> Option<T> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

impl LogEntry {
    pub fn of(extensions: &http::Extensions) -> Option<&Arc<LogEntry>> {
        extensions.get::<Arc<LogEntry>>()
    }

    fn line(&self) -> std::sync::MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The route matched, and outbound the upstream.
    pub fn route(&self, upstream: Option<&str>, route: &str) {
        let mut l = self.line();
        l.upstream = upstream.map(str::to_owned);
        l.route = Some(route.to_owned());
    }

    /// A try ended at `copy`; `started_by`: the retry condition that made it.
    pub fn tried(&self, copy: Option<SocketAddr>, started_by: Option<&'static str>) {
        let mut l = self.line();
        l.tries += 1;
        l.copy = copy.map(|c| c.to_string());
        l.retries.extend(started_by);
    }

    /// A retry a condition allowed was not made, and why.
    pub fn skipped(&self, reason: Option<&'static str>) {
        self.line().retry_skipped = reason;
    }

    /// The time spent waiting for upstream (or the app).
    pub fn upstream(&self, time: Duration) {
        *self.upstream_time.lock().unwrap_or_else(|p| p.into_inner()) = time;
    }

    /// The answer's head is out: the line goes to the writer if its route is logged, and to
    /// the tappers of its route.
    pub fn finish<B: http_body::Body>(&self, resp: &Response<B>) {
        let log = self.config.access_log.as_ref();
        let total = self.started.elapsed();
        let upstream = *self.upstream_time.lock().unwrap_or_else(|p| p.into_inner());
        let mut l = self.line();
        let logged = log.filter(|log| log.logs(l.route.as_deref().unwrap_or("-")));
        if logged.is_none() && self.tap.is_none() {
            return;
        }
        l.status = resp.status().as_u16();
        l.grpc_status = header_number(resp.headers(), &crate::error::GRPC_STATUS);
        l.local_reply = resp
            .headers()
            .get(hopwise_api::names::ERROR)
            .and_then(|v| Some(v.to_str().ok()?.to_owned()));
        l.bytes_out = resp.body().size_hint().exact();
        l.duration_us = total.as_micros() as u64;
        l.proxy_us = total.saturating_sub(upstream).as_micros() as u64;
        if let Some(tap) = &self.tap {
            tap.publish(l.route.as_deref(), || l.render(LogFormat::Json));
        }
        if let (Some(log), Some(sink)) = (logged, &self.sink) {
            sink.send((std::mem::take(&mut *l), log.format));
        }
    }
}
