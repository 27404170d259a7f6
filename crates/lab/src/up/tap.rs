//! `hopwise tap SERVICE [--route R] [--max N]`: the live stream of the requests through a
//! service's proxies, read from each copy's admin endpoint (`GET /tap`, the proxy's `tap.rs`)
//! — the copies of a running `hopwise up` (its `samples.json`), or the admin addresses given.
//! One line per request as it finishes (method, path, status, tries, latency, the caller's
//! identity), until `--max` lines, Ctrl-C, or every proxy's stream ended. A tap that reads too
//! slowly loses lines at the proxy (never holding a request); the proxy says how many, and so
//! does this. The rendering is pure ([`render`]).

use std::io::Write;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::{Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::mpsc;

use super::TapArgs;
use super::fault::{find_run, read_samples};
use crate::error::{LabError, io};

/// What one copy's stream said.
#[derive(Debug)]
enum Event {
    Line(usize, Value),
    Ended(usize),
}

/// The admin endpoints to tap, by copy: `--admin`'s, or the run's copies of the service.
fn admins(args: &TapArgs) -> Result<Vec<(usize, SocketAddr)>, LabError> {
    if !args.admin.is_empty() {
        return Ok(args.admin.iter().copied().enumerate().collect());
    }
    let file = read_samples(&find_run(args.run.as_deref())?)?;
    let Some(svc) = file.services.get(&args.service) else {
        return Err(LabError::Failed(format!(
            "`{}` is not a service of this run (services: {})",
            args.service,
            file.services.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    };
    let found: Vec<(usize, SocketAddr)> = svc
        .copies
        .iter()
        .filter_map(|c| Some((c.copy, c.admin?)))
        .collect();
    if found.is_empty() {
        return Err(LabError::Failed(format!(
            "`{}` has no proxy in this run (a service outside the mesh): nothing to tap",
            args.service
        )));
    }
    Ok(found)
}

/// Opens one copy's tap: an error names the copy and what its proxy said.
async fn open(
    copy: usize,
    admin: SocketAddr,
    route: Option<&str>,
) -> Result<hyper::body::Incoming, LabError> {
    let what = |e: String| LabError::Failed(format!("copy {copy}'s admin endpoint {admin}: {e}"));
    let tcp = tokio::net::TcpStream::connect(admin)
        .await
        .map_err(|e| what(format!("{e}; is its proxy running?")))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| what(e.to_string()))?;
    tokio::spawn(conn);
    let path = match route {
        Some(r) => format!("/tap?route={r}"),
        None => "/tap".to_owned(),
    };
    let req = Request::builder()
        .uri(path)
        .header(header::HOST, admin.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| what(e.to_string()))?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| what(e.to_string()))?;
    if resp.status() != http::StatusCode::OK {
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        let text = body.map_or_else(|_| String::new(), |b| String::from_utf8_lossy(&b).into());
        return Err(what(format!("{status}: {}", text.trim())));
    }
    Ok(resp.into_body())
}

/// Reads one copy's stream to its end, a JSON value per line.
async fn read(copy: usize, mut body: hyper::body::Incoming, tx: mpsc::Sender<Event>) {
    let mut buf = BytesMut::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line = buf.split_to(end + 1);
            if let Ok(v) = serde_json::from_slice::<Value>(&line)
                && tx.send(Event::Line(copy, v)).await.is_err()
            {
                return;
            }
        }
    }
    let _ = tx.send(Event::Ended(copy)).await;
}

/// Runs `hopwise tap …`: the lines go to `out`.
pub fn run(args: &TapArgs, out: &mut dyn Write) -> Result<(), LabError> {
    if args.max == Some(0) {
        return Err(LabError::Failed("--max must be at least 1".into()));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if let Some(r) = args
        .route
        .as_deref()
        .filter(|r| r.is_empty() || !r.chars().all(plain))
    {
        return Err(LabError::Failed(format!(
            "--route `{r}`: a route name (letters, digits, `.`, `_`, `-`)"
        )));
    }
    let admins = admins(args)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start the runtime"))?;
    rt.block_on(async {
        let (tx, mut rx) = mpsc::channel(64);
        for &(copy, admin) in &admins {
            let body = open(copy, admin, args.route.as_deref()).await?;
            tokio::spawn(read(copy, body, tx.clone()));
        }
        drop(tx);
        let copies: Vec<String> = admins.iter().map(|(c, a)| format!("{c} at {a}")).collect();
        crate::progress(&format!(
            "tapping {} (copy {}){}",
            args.service,
            copies.join(", copy "),
            args.max
                .map_or_else(|| "; Ctrl-C stops".to_owned(), |m| format!(" for {m} request(s)"))
        ));
        let mut tally = Tally::default();
        let mut signal = std::pin::pin!(super::signals());
        loop {
            let event = tokio::select! {
                e = rx.recv() => e,
                () = &mut signal => None,
            };
            let Some(event) = event else { break };
            let text = match event {
                Event::Line(copy, v) => tally.line(&args.service, copy, &v, args.json),
                Event::Ended(copy) => format!("{}[{copy}]: the proxy ended the tap\n", args.service),
            };
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(io("cannot write the tap's lines"))?;
            if args.max.is_some_and(|m| tally.requests >= m) {
                break;
            }
        }
        if tally.lost > 0 {
            let _ = writeln!(
                out,
                "{} line(s) lost: this tap read more slowly than requests came (the requests were not held)",
                tally.lost
            );
        }
        Ok(())
    })
}

/// What the tap has shown so far.
#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    lost: u64,
}

impl Tally {
    fn line(&mut self, service: &str, copy: usize, v: &Value, json: bool) -> String {
        if let Some(n) = v.get("dropped").and_then(Value::as_u64) {
            self.lost += n;
        } else {
            self.requests += 1;
        }
        if json {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.insert("tapped_copy".into(), copy.into());
            }
            return format!("{v}\n");
        }
        render(service, copy, v)
    }
}

/// One line of the text form: `pricing[1] inbound quote  GET /quote/7  200  tries 1  1.52 ms
/// from spiffe://…`; a loss notice for `{"dropped":N}`.
pub fn render(service: &str, copy: usize, v: &Value) -> String {
    if let Some(n) = v.get("dropped").and_then(Value::as_u64) {
        return format!("{service}[{copy}]: {n} line(s) lost (this tap read too slowly)\n");
    }
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-");
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let direction = s("direction");
    let to = match v.get("upstream").and_then(Value::as_str) {
        Some(u) => format!(" → {u}"),
        None => String::new(),
    };
    let ms =
        n("duration_us").map_or_else(|| "-".to_owned(), |us| format!("{:.2}", us as f64 / 1000.0));
    let mut line = format!(
        "{service}[{copy}] {direction}{to} {}  {} {}  {}  tries {}  {ms} ms",
        s("route"),
        s("method"),
        s("path"),
        // No answer was sent: say how the request ended instead of a status.
        match v.get("ended").and_then(Value::as_str) {
            Some(how) => format!("no answer ({how})"),
            None => n("status").map_or_else(|| "-".to_owned(), |c| c.to_string()),
        },
        n("tries").unwrap_or(0),
    );
    if let Some(caller) = v.get("caller").and_then(Value::as_str) {
        line.push_str(&format!("  from {caller}"));
    }
    if let Some(reply) = v.get("local_reply").and_then(Value::as_str) {
        line.push_str(&format!("  local reply: {reply}"));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_as_the_request_went() {
        let v = serde_json::json!({
            "direction": "inbound", "route": "quote", "method": "GET", "path": "/quote/7?…",
            "status": 200, "tries": 1, "duration_us": 1520,
            "caller": "spiffe://shop.local/service/checkout", "local_reply": null,
        });
        assert_eq!(
            render("pricing", 1, &v),
            "pricing[1] inbound quote  GET /quote/7?…  200  tries 1  1.52 ms  from spiffe://shop.local/service/checkout\n"
        );
        let out = serde_json::json!({
            "direction": "outbound", "upstream": "inventory", "route": "inventory",
            "method": "POST", "path": "/x", "status": 503, "tries": 3, "duration_us": 250_000,
            "local_reply": "per-try-timeout",
        });
        assert_eq!(
            render("pricing", 0, &out),
            "pricing[0] outbound → inventory inventory  POST /x  503  tries 3  250.00 ms  local reply: per-try-timeout\n"
        );
        let gone = serde_json::json!({
            "direction": "inbound", "route": "quote", "method": "GET", "path": "/q",
            "status": 0, "tries": 0, "duration_us": 200_000, "ended": "caller-gone",
        });
        assert_eq!(
            render("pricing", 0, &gone),
            "pricing[0] inbound quote  GET /q  no answer (caller-gone)  tries 0  200.00 ms\n"
        );
    }

    #[test]
    fn losses_are_counted_apart_from_requests() {
        let mut t = Tally::default();
        let lost = t.line("a", 0, &serde_json::json!({"dropped": 7}), false);
        assert_eq!(lost, "a[0]: 7 line(s) lost (this tap read too slowly)\n");
        let json = t.line("a", 2, &serde_json::json!({"status": 200}), true);
        assert_eq!(json, "{\"status\":200,\"tapped_copy\":2}\n");
        assert_eq!((t.requests, t.lost), (1, 7));
    }
}
