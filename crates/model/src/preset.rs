//! Named presets: real products' defaults, reproduced so users can see (and rehearse) what they
//! do, and `hopwise`, our safe default. Sources: `../shared/semantics.md` §3, §4, §7 and the
//! seed "What a service mesh costs".

use schemars::JsonSchema;
use serde::Serialize;

use crate::backoff::Backoff;
use crate::duration::Dur;
use crate::policy::{Balancer, Budget, GrpcCode, Limits, Outlier, Policy, Retry, RetryOn};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Ours: a timeout on every call, retries only where nothing was processed (and never
    /// multiplied by the proxies above), a 20 % budget, finite caps.
    Hopwise,
    /// Istio 1.31: 2 retries on `connect-failure,refused-stream,unavailable,cancelled,
    /// retriable-status-codes` (no codes), no timeout, every cap 4294967295, 10 s connect timeout.
    Istio,
    /// Envoy's own defaults: 15 s route timeout, no retry policy, caps 1024/1024/1024/3.
    Envoy,
    /// Linkerd: no retries and no timeouts unless configured; no per-upstream caps except the
    /// proxy's in-flight limit (100 000).
    Linkerd,
}

impl Preset {
    pub const ALL: [(&'static str, Preset); 4] = [
        ("hopwise", Preset::Hopwise),
        ("istio", Preset::Istio),
        ("envoy", Preset::Envoy),
        ("linkerd", Preset::Linkerd),
    ];

    pub fn name(self) -> &'static str {
        Preset::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("?", |(n, _)| n)
    }

    pub fn policy(self) -> Policy {
        // Ours guard repetition; the products' do not (semantics.md §10.3).
        let ours = self == Preset::Hopwise;
        let retry = |count, on: &[RetryOn], only_if_safe| Retry {
            count,
            on: on.iter().copied().collect(),
            status_codes: Default::default(),
            backoff: Backoff::ENVOY,
            only_if_safe,
            honor_idempotency_key: ours,
            single_hop: ours,
            // Linkerd's 64 KiB for us and Linkerd; Envoy's per-connection buffer otherwise.
            max_replay_bytes: if matches!(self, Preset::Hopwise | Preset::Linkerd) {
                64 * 1024
            } else {
                1024 * 1024
            },
        };
        match self {
            Preset::Hopwise => Policy {
                timeout: Some(Dur::from_millis(10_000)),
                per_try_timeout: None,
                connect_timeout: Dur::from_millis(1_000),
                retry: retry(
                    2,
                    &[
                        RetryOn::ConnectFailure,
                        RetryOn::RefusedStream,
                        RetryOn::ResetBeforeRequest,
                    ],
                    true,
                ),
                budget: Some(Budget {
                    ratio: 0.2,
                    min_per_second: 10,
                    window: Dur::from_millis(10_000),
                }),
                limits: Limits {
                    max_connections: 1024,
                    max_pending: 128,
                    max_requests: 1024,
                    max_retries: 3,
                },
                grpc_status_on_timeout: GrpcCode::DeadlineExceeded,
                propagate_deadline: true,
                outlier: Some(Outlier {
                    consecutive_gateway_failures: 5,
                    base_ejection_time: Dur::from_millis(30_000),
                    // Envoy's 10 % ejects nothing below ten copies; we allow half.
                    max_ejection_percent: 50,
                }),
                balancer: Balancer::LeastRequests,
            },
            Preset::Istio => Policy {
                timeout: None,
                per_try_timeout: None,
                connect_timeout: Dur::from_millis(10_000),
                retry: retry(
                    2,
                    &[
                        RetryOn::ConnectFailure,
                        RetryOn::RefusedStream,
                        RetryOn::Unavailable,
                        RetryOn::Cancelled,
                        RetryOn::RetriableStatusCodes,
                    ],
                    false,
                ),
                budget: None,
                limits: Limits {
                    max_connections: Limits::UNLIMITED,
                    max_pending: Limits::UNLIMITED,
                    max_requests: Limits::UNLIMITED,
                    max_retries: Limits::UNLIMITED,
                },
                grpc_status_on_timeout: GrpcCode::Unavailable,
                propagate_deadline: false,
                outlier: None,
                balancer: Balancer::LeastRequests,
            },
            Preset::Envoy => Policy {
                timeout: Some(Dur::from_millis(15_000)),
                per_try_timeout: None,
                connect_timeout: Dur::from_millis(5_000),
                retry: retry(0, &[], false),
                budget: None,
                limits: Limits {
                    max_connections: 1024,
                    max_pending: 1024,
                    max_requests: 1024,
                    max_retries: 3,
                },
                grpc_status_on_timeout: GrpcCode::Unavailable,
                propagate_deadline: false,
                outlier: None,
                balancer: Balancer::RoundRobin,
            },
            Preset::Linkerd => Policy {
                timeout: None,
                per_try_timeout: None,
                connect_timeout: Dur::from_millis(1_000),
                retry: retry(0, &[], false),
                budget: None,
                limits: Limits {
                    max_connections: Limits::UNLIMITED,
                    max_pending: Limits::UNLIMITED,
                    max_requests: 100_000,
                    max_retries: Limits::UNLIMITED,
                },
                grpc_status_on_timeout: GrpcCode::DeadlineExceeded,
                propagate_deadline: false,
                outlier: None,
                balancer: Balancer::PeakEwma,
            },
        }
    }
}
