//! A measurement, not a check (issue 30, "Scale"): `hopwise control --kubernetes` against a
//! real kube-apiserver holding 1,000 Services' EndpointSlices of 10 endpoints each (10,000 pod
//! endpoints), with 10,000 copies registered and 10,000 proxies subscribed (100 of each of 100
//! caller services, every caller calling `s-0000` and ten services of its own), each merging
//! the deltas it is sent and acknowledging every snapshot as `hopwise proxy` does, 50 on one
//! TLS connection. Prints the time from an EndpointSlice change (one endpoint of `s-0000`
//! turned not ready, then ready) to every subscriber's snapshot, the control plane's CPU per
//! change, and its memory before and after. The slices are written as the EndpointSlice
//! controller would (no pods: the controller's cost is not ours).
//!
//! `HOPWISE_BIN=target/release/hopwise cargo nextest run -p hopwise --test kube_scale
//! --run-ignored only --no-capture`

#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use hopwise_control::pb;
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::task::JoinSet;

const CALLERS: usize = 100;
/// Proxies of each caller service, each with a stream of its own.
const PROXIES: usize = 100;
const SUBSCRIBERS: usize = CALLERS * PROXIES;
/// Streams on one connection (h2 allows the control port 100 at once: room for the `Ack`s).
const PER_CONNECTION: usize = 50;
const SERVICES: usize = 1_000;
const ENDPOINTS: usize = 10;
const ROUNDS: usize = 20;

fn service(i: usize) -> String {
    format!("s-{i:04}")
}

fn ip(service: usize, endpoint: usize) -> String {
    format!(
        "10.{}.{}.{}",
        1 + service / 250,
        service % 250,
        1 + endpoint
    )
}

fn mesh() -> String {
    let mut m = String::from(
        "mesh: { trust_domain: shop.local, kubernetes: { namespace: shop }, capture: { range: 100.64.0.0/10 } }\nservices:\n",
    );
    for c in 0..CALLERS {
        let calls: Vec<String> = std::iter::once(0)
            .chain((0..10).map(|k| 1 + (c * 10 + k) % (SERVICES - 1)))
            .map(|s| format!("{}: {{}}", service(s)))
            .collect();
        writeln!(m, "  c-{c:03}: {{ calls: {{ {} }} }}", calls.join(", ")).unwrap();
    }
    for s in 0..SERVICES {
        writeln!(m, "  {}: {{}}", service(s)).unwrap();
    }
    m
}

fn slice(s: usize, not_ready: Option<usize>) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(service(s)),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_owned(),
                service(s),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(
            (0..ENDPOINTS)
                .map(|e| Endpoint {
                    addresses: vec![ip(s, e)],
                    conditions: Some(EndpointConditions {
                        ready: Some(not_ready != Some(e)),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// VmRSS and the CPU time (user + system) of `pid`.
fn usage(pid: u32) -> (u64, Duration) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // 100 ticks a second on Linux's x86-64.
    (rss_kib, Duration::from_millis(ticks * 10))
}

async fn bounded<T: Send + 'static>(tasks: Vec<impl Future<Output = T> + Send + 'static>) {
    let mut set = JoinSet::new();
    for t in tasks {
        if set.len() >= 32 {
            set.join_next().await.unwrap().unwrap();
        }
        set.spawn(t);
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// When each subscriber was last sent `want` endpoints of `s-0000` (once all have been).
async fn sees(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, usize, Instant)>,
    want: usize,
) -> Vec<Instant> {
    let mut seen = vec![None; SUBSCRIBERS];
    while seen.iter().any(Option::is_none) {
        let (k, n, at) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("every subscriber within 60 s")
            .unwrap();
        if n == want {
            seen[k].get_or_insert(at);
        } else {
            seen[k] = None;
        }
    }
    seen.into_iter().map(Option::unwrap).collect()
}

/// One simulated proxy.
struct Proxy {
    client: hopwise_control::client::Client,
    token: String,
    service: String,
    name: String,
}

impl Proxy {
    /// Its stream, deltas asked for.
    async fn subscribe(&self) -> tonic::Streaming<pb::Snapshot> {
        let request = pb::SubscribeRequest {
            service: self.service.clone(),
            token: self.token.clone(),
            proxy: self.name.clone(),
            deltas: true,
            ..Default::default()
        };
        let mut c = self.client.clone();
        c.subscribe(request).await.unwrap().into_inner()
    }
}

/// `proxy`'s stream until it ends: each snapshot merged onto the last, acknowledged, and
/// `s-0000`'s endpoint count told with when it arrived.
async fn follow(
    idx: usize,
    proxy: Proxy,
    mut stream: tonic::Streaming<pb::Snapshot>,
    tx: tokio::sync::mpsc::UnboundedSender<(usize, usize, Instant)>,
) {
    let mut c = proxy.client.clone();
    let mut last: Option<pb::Snapshot> = None;
    while let Ok(Some(message)) = stream.message().await {
        let at = Instant::now();
        let mut snapshot = match &last {
            Some(base) if message.base_version > 0 => {
                hopwise_control::plane::delta::apply(base, message).unwrap()
            }
            _ => message,
        };
        // Not read here, and 10,000 copies of a 1,100-service file would be most of the
        // test's memory (a registry change's delta never carries it).
        snapshot.mesh_yaml = None;
        let n = (snapshot.upstreams.iter())
            .find(|u| u.service == "s-0000")
            .map_or(0, |u| u.endpoints.len());
        let ack = pb::AckRequest {
            service: proxy.service.clone(),
            version: snapshot.version,
            accepted: true,
            token: proxy.token.clone(),
            proxy: proxy.name.clone(),
            cert_ca_generation: snapshot.ca_generation,
            trust_bundle_applied: true,
            ..Default::default()
        };
        let _ = c.ack(ack).await;
        last = Some(snapshot);
        if tx.send((idx, n, at)).is_err() {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: HOPWISE_BIN=… --run-ignored only --no-capture"]
async fn an_endpoint_slice_change_reaches_every_subscriber() {
    let api = ApiServer::start().await.unwrap();
    let kube = api.client().unwrap();
    kube_support::namespace(&kube, "shop").await;
    let control = kube_support::Control::start_with(&api, &mesh());
    let (rss_start, _) = usage(control.pid);

    // The slices, as the EndpointSlice controller would write them.
    let slices = Api::<EndpointSlice>::namespaced(kube.clone(), "shop");
    let t = Instant::now();
    bounded(
        (0..SERVICES)
            .map(|s| {
                let slices = slices.clone();
                async move {
                    slices
                        .create(&PostParams::default(), &slice(s, None))
                        .await
                        .unwrap();
                }
            })
            .collect(),
    )
    .await;
    let wrote_slices = t.elapsed();

    // The copies, registered and healthy as their proxies would make them.
    let c = control.client().await;
    let t = Instant::now();
    bounded(
        (0..SERVICES * ENDPOINTS)
            .map(|i| {
                let (mut c, token) = (c.clone(), control.token(&service(i / ENDPOINTS)));
                async move {
                    let register = pb::RegisterRequest {
                        token: token.clone(),
                        inbound_addr: format!("{}:4143", ip(i / ENDPOINTS, i % ENDPOINTS)),
                        ttl_ms: 3_600_000,
                        ..Default::default()
                    };
                    let lease = c.register(register).await.unwrap().into_inner();
                    let health = pb::SetHealthRequest {
                        token,
                        lease_id: lease.lease_id,
                        healthy: true,
                    };
                    c.set_health(health).await.unwrap();
                }
            })
            .collect(),
    )
    .await;
    let registered = t.elapsed();

    // The callers' proxies: each stream read in a task of its own, telling when `s-0000`'s
    // endpoint count changes.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, usize, Instant)>();
    // Each connection opened just before its streams (the control port closes one that makes
    // no request within 5 s), each stream open before the next is asked for.
    let t = Instant::now();
    let mut streams = JoinSet::new();
    let mut client = None;
    for idx in 0..SUBSCRIBERS {
        if idx % PER_CONNECTION == 0 {
            client = Some(control.client().await);
        }
        let caller = format!("c-{:03}", idx / PROXIES);
        let proxy = Proxy {
            client: client.clone().unwrap(),
            token: control.token(&caller),
            name: format!("{caller}-{}", idx % PROXIES),
            service: caller,
        };
        let stream = proxy.subscribe().await;
        streams.spawn(follow(idx, proxy, stream, tx.clone()));
    }
    sees(&mut rx, ENDPOINTS).await;
    let subscribed = t.elapsed();
    let (rss_loaded, cpu_before) = usage(control.pid);

    // The API server's share: when a watch of the test's own sees each change.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let watched = slices.clone();
    streams.spawn(async move {
        use kube::runtime::watcher::{self, Event};
        use tokio_stream::StreamExt;
        let config = watcher::Config::default().fields("metadata.name=s-0000");
        let stream = watcher::watcher(watched, config);
        tokio::pin!(stream);
        while let Some(e) = stream.next().await {
            if let Ok(Event::Apply(_)) = e
                && seen_tx.send(Instant::now()).is_err()
            {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    while seen_rx.try_recv().is_ok() {}
    let mut watch = Vec::new();
    let mut last = Vec::new();
    let mut every = Vec::new();
    for round in 0..ROUNDS {
        let (body, want) = if round % 2 == 0 {
            (slice(0, Some(3)), ENDPOINTS - 1)
        } else {
            (slice(0, None), ENDPOINTS)
        };
        // Apart by more than the pacing window (`api/pace.rs`, 50 ms), so each change is a
        // lone one, sent at once, as a change after a quiet spell is.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = Instant::now();
        slices
            .patch(
                &service(0),
                &PatchParams::apply("scale").force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap();
        let at = sees(&mut rx, want).await;
        let event = seen_rx.recv().await.unwrap();
        watch.push(event.duration_since(sent));
        let times: Vec<Duration> = at.iter().map(|t| t.duration_since(sent)).collect();
        last.push(*times.iter().max().unwrap());
        every.extend(times);
    }
    let (rss_after, cpu_after) = usage(control.pid);
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "{SERVICES} Services, {} endpoints, {} copies, {SUBSCRIBERS} subscribers",
        SERVICES * ENDPOINTS,
        SERVICES * ENDPOINTS
    );
    println!(
        "slices written in {wrote_slices:?}, copies registered in {registered:?}, every subscriber's first snapshot in {subscribed:?}"
    );
    println!(
        "a slice change to every subscriber (the last of {SUBSCRIBERS}), {ROUNDS} changes: p50 {:?} p90 {:?} max {:?}",
        pct(&mut last, 0.5),
        pct(&mut last, 0.9),
        pct(&mut last, 1.0)
    );
    println!(
        "of which the API server's watch (a watch of the test's own): p50 {:?} max {:?}",
        pct(&mut watch, 0.5),
        pct(&mut watch, 1.0)
    );
    println!(
        "to each subscriber: p50 {:?} p99 {:?}",
        pct(&mut every, 0.5),
        pct(&mut every, 0.99)
    );
    println!(
        "control plane CPU per change: {:?}",
        (cpu_after - cpu_before) / ROUNDS as u32
    );
    println!("VmRSS: started {rss_start} KiB, loaded {rss_loaded} KiB, after {rss_after} KiB");
    streams.abort_all();
}
