//! The tests' OTLP receiver is the lab's stand-in collector (`hopwise_lab::samples::collector`,
//! on the official protobuf definitions), which `bench hops --tracing` runs too; here only
//! what a failed wait should say.

use std::net::SocketAddr;
use std::time::Duration;

pub use hopwise_lab::samples::collector::{Collector, Got};

/// A receiver that keeps spans, as the tests read them.
#[derive(Clone)]
pub struct Receiver {
    pub addr: Option<SocketAddr>,
    inner: Collector,
}

impl Receiver {
    fn of(inner: Collector) -> Receiver {
        Receiver {
            addr: Some(inner.addr),
            inner,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Got> {
        self.inner.spans()
    }

    /// Waits (10 s at most) until `n` spans have come, then returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Got> {
        let got = self.inner.wait_for(n as u64, Duration::from_secs(10)).await;
        assert!(got.len() >= n, "{} spans of {n}: {got:#?}", got.len());
        got
    }
}

/// OTLP/gRPC: `TraceService/Export` in h2c.
pub async fn grpc_receiver() -> Receiver {
    Receiver::of(Collector::grpc(true).await.unwrap())
}

/// OTLP/HTTP: `POST /v1/traces`, `application/x-protobuf`.
pub async fn http_receiver() -> Receiver {
    Receiver::of(Collector::http(true).await.unwrap())
}

/// Accepts connections and never answers: an exporter's call to it hangs until its timeout.
pub async fn silent_receiver() -> SocketAddr {
    hopwise_lab::samples::collector::silent().await.unwrap()
}
