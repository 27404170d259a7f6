//! The app's kubelet probes, run on the kubelet's behalf (`hopwise_model::app_probe`; docs
//! kubernetes.md, "Probes"). Injection points an app container's probes at the admin port's
//! `/app-health/<container>/<kind>` and hands this proxy the originals; when the kubelet asks
//! there, the proxy does what the kubelet would have done at the app — an HTTP GET, a TCP
//! connection, a gRPC health check, at the pod's IP — and answers 200 when it passed, else the
//! app's own status (an HTTP probe) or 503 with why. Only what injection wrote is ever run:
//! the request's path picks a probe, never a port, host or path of its own. Each run is bounded
//! by the probe's timeout; nothing is kept between runs.

mod grpc;
mod insecure;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode, header};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use hopwise_model::app_probe::{Action, AppProbe, Header};
pub use hopwise_model::app_probe::{AppProbes, PREFIX};

/// The probes of this proxy's app and where the app is: the pod's IP, where the kubelet would
/// have probed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppProbeTarget {
    pub ip: IpAddr,
    pub probes: AppProbes,
}

/// What a run of a probe says: the status for the kubelet and a line of why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: StatusCode,
    pub message: String,
}

impl Verdict {
    fn passed(message: String) -> Verdict {
        Verdict {
            status: StatusCode::OK,
            message,
        }
    }

    fn failed(message: String) -> Verdict {
        Verdict {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message,
        }
    }
}

/// Runs the probe injection wrote at `path`, if any (`None`: the admin port answers 404).
/// `user_agent` is the kubelet's, passed to an HTTP probe as the kubelet would send it.
pub async fn run(
    target: &AppProbeTarget,
    path: &str,
    user_agent: Option<HeaderValue>,
) -> Option<Verdict> {
    let probe = target.probes.get(path)?;
    let timeout = Duration::from_secs(probe.timeout_seconds.into());
    let ran = tokio::time::timeout(timeout, once(target.ip, probe, user_agent)).await;
    Some(ran.unwrap_or_else(|_| {
        Verdict::failed(format!(
            "the app did not answer within the probe's {} s",
            probe.timeout_seconds
        ))
    }))
}

async fn once(ip: IpAddr, probe: &AppProbe, user_agent: Option<HeaderValue>) -> Verdict {
    match &probe.action {
        Action::Tcp { port } => match connect(ip, *port).await {
            Ok(_) => Verdict::passed(format!("connected to {}", SocketAddr::new(ip, *port))),
            Err(why) => Verdict::failed(why),
        },
        Action::Http {
            port,
            path,
            https,
            headers,
        } => {
            let at = SocketAddr::new(ip, *port);
            match http(at, path, *https, headers, user_agent).await {
                Ok(status) => Verdict {
                    status,
                    message: format!("the app answered {status}"),
                },
                Err(why) => Verdict::failed(why),
            }
        }
        Action::Grpc { port, service } => {
            match grpc::check(connect(ip, *port).await, service).await {
                Ok(()) => Verdict::passed("SERVING".to_owned()),
                Err(why) => Verdict::failed(why),
            }
        }
    }
}

async fn connect(ip: IpAddr, port: u16) -> Result<TcpStream, String> {
    let at = SocketAddr::new(ip, port);
    let tcp = TcpStream::connect(at)
        .await
        .map_err(|e| format!("cannot connect to the app at {at}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// `GET path` at `at` as the kubelet sends it: `Host` the address probed unless the probe's
/// headers name one, its `User-Agent`, `Accept: */*`, then the probe's headers. 200–399 pass
/// (the kubelet's rule): the status is the app's, which the kubelet reads the same way.
async fn http(
    at: SocketAddr,
    path: &str,
    https: bool,
    headers: &[Header],
    user_agent: Option<HeaderValue>,
) -> Result<StatusCode, String> {
    let mut req = Request::get(path)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("the probe's path `{path}`: {e}"))?;
    let h = req.headers_mut();
    if let Ok(host) = HeaderValue::from_str(&at.to_string()) {
        h.insert(header::HOST, host);
    }
    h.insert(
        header::USER_AGENT,
        user_agent.unwrap_or(HeaderValue::from_static("hopwise-probe")),
    );
    h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    for (i, x) in headers.iter().enumerate() {
        // Checked when read; a failure here is a bug, answered as the probe failing.
        let name = HeaderName::from_bytes(x.name.as_bytes());
        let value = HeaderValue::from_str(&x.value);
        let (Ok(name), Ok(value)) = (name, value) else {
            return Err(format!("the probe's header {i} cannot be sent"));
        };
        // The probe's own headers replace the kubelet's defaults (`Host` too), and repeat.
        if !headers[..i]
            .iter()
            .any(|p| p.name.eq_ignore_ascii_case(&x.name))
        {
            h.remove(&name);
        }
        h.append(name, value);
    }
    let tcp = connect(at.ip(), at.port()).await?;
    if https {
        let tls = insecure::connect(at.ip(), tcp).await?;
        send(tls, req).await
    } else {
        send(tcp, req).await
    }
}

async fn send<IO>(io: IO, req: Request<Empty<Bytes>>) -> Result<StatusCode, String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP to the app: {e}"))?;
    // The connection is driven beside the request and dropped with it: `run`'s timeout ends
    // both. It may end (the app closing after its answer) before the answer is taken.
    let answer = sender.send_request(req);
    tokio::pin!(answer);
    let answer = tokio::select! {
        answer = &mut answer => answer,
        ended = conn => match ended {
            Ok(()) => answer.await,
            Err(e) => return Err(format!("HTTP to the app: {e}")),
        },
    };
    answer
        .map(|r| r.status())
        .map_err(|e| format!("HTTP to the app: {e}"))
}

#[cfg(test)]
mod tests;
