//! The test API server harness against the real etcd and kube-apiserver (built by
//! scripts/kube-testbin; no mock): objects written through its client are read back, a watch
//! sees what is created after it started, a client without a certificate is refused, and after
//! the harness stops or drops no process of it is left and its directory is gone, and a test
//! process killed outright takes both with it.

// Test helpers: a failure should fail the test loudly, and the timings go to its output.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::pin::pin;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hopwise_kube::testing::{ApiServer, Pids};
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use tokio_stream::{Stream, StreamExt};

fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 8080,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The watch's next event, within 20 s.
async fn next<S>(events: &mut S) -> Event<Service>
where
    S: Stream<Item = watcher::Result<Event<Service>>> + Unpin,
{
    let event = tokio::time::timeout(Duration::from_secs(20), events.next()).await;
    event
        .expect("an event within 20 s")
        .expect("the stream goes on")
        .unwrap()
}

fn name_of(s: &Service) -> &str {
    s.metadata.name.as_deref().unwrap_or_default()
}

/// Starts the harness, saying how long it took.
async fn start() -> ApiServer {
    let t = Instant::now();
    let server = ApiServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("started in {:.2?} at {}", t.elapsed(), server.url());
    server
}

/// The processes of ours still running, by pid: those of `pids` still named etcd or
/// kube-apiserver (a pid reused by another program does not count), and any etcd or
/// kube-apiserver that is a child of this process.
fn left(pids: Pids) -> BTreeMap<u32, String> {
    let ours = |name: &str| name == "etcd" || name == "kube-apiserver";
    let me = std::process::id().to_string();
    let mut left = BTreeMap::new();
    for pid in [pids.etcd, pids.apiserver] {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if ours(comm.trim()) {
            left.insert(pid, comm.trim().to_owned());
        }
    }
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so read after the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        let (pid, comm) = (stat[..open].trim(), &stat[open + 1..close]);
        if ppid == Some(me.as_str()) && ours(comm) {
            left.insert(pid.parse().unwrap(), comm.to_owned());
        }
    }
    left
}

/// Stops the harness and checks that nothing of it is left.
fn stop(server: ApiServer) {
    let (pids, dir): (Pids, PathBuf) = (server.pids(), server.dir().unwrap().to_owned());
    let stopped = server.stop().unwrap();
    eprintln!("stopped: {stopped:?}");
    let (apiserver, etcd) = (stopped.apiserver.unwrap(), stopped.etcd.unwrap());
    assert!(
        !apiserver.killed && !etcd.killed,
        "both should exit on SIGTERM: {stopped:?}"
    );
    assert_eq!(left(pids), BTreeMap::new());
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[tokio::test]
async fn a_namespace_and_a_service_are_created_and_read_back() {
    let server = start().await;
    let client = server.client().unwrap();
    let t = Instant::now();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let shop = Namespace {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &shop)
        .await
        .unwrap();
    let read = namespaces.get("shop").await.unwrap();
    assert_eq!(read.metadata.name.as_deref(), Some("shop"));
    assert!(
        read.metadata.uid.is_some(),
        "stored by the server: {read:?}"
    );

    let services: Api<Service> = Api::namespaced(client, "shop");
    services
        .create(&PostParams::default(), &service("pricing"))
        .await
        .unwrap();
    let read = services.get("pricing").await.unwrap();
    let spec = read.spec.unwrap();
    assert_eq!(spec.ports.unwrap()[0].port, 8080);
    // A ClusterIP from --service-cluster-ip-range 10.96.0.0/24: the server allocated it.
    let ip = spec.cluster_ip.unwrap();
    assert!(ip.starts_with("10.96.0."), "{ip}");
    let listed = services.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items.iter().map(name_of).collect::<Vec<_>>(),
        ["pricing"]
    );
    eprintln!("requests took {:.2?}", t.elapsed());

    stop(server);
}

#[tokio::test]
async fn a_watch_sees_a_service_created_after_it_started() {
    let server = start().await;
    let services: Api<Service> = Api::default_namespaced(server.client().unwrap());
    let mut events = pin!(watcher::watcher(
        services.clone(),
        watcher::Config::default()
    ));

    // The list that starts the watch (the apiserver's own `kubernetes` Service, or nothing
    // yet: its controller makes it after /readyz), then the watch proper.
    let mut listed = Vec::new();
    loop {
        match next(&mut events).await {
            Event::InitApply(s) => listed.push(name_of(&s).to_owned()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert!(!listed.iter().any(|n| n == "pricing"), "{listed:?}");

    let t = Instant::now();
    services
        .create(&PostParams::default(), &service("pricing"))
        .await
        .unwrap();
    loop {
        match next(&mut events).await {
            Event::Apply(s) if name_of(&s) == "pricing" => break,
            other => eprintln!("before it: {other:?}"),
        }
    }
    eprintln!(
        "the watch saw it {:.2?} after the create began",
        t.elapsed()
    );

    stop(server);
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let server = start().await;
    let anonymous = kube::Client::try_from(server.anonymous_config()).unwrap();
    let err = Api::<Namespace>::all(anonymous)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert!(matches!(status.code, 401 | 403), "{status:?}");
    eprintln!("refused: {} {}", status.code, status.message);

    // The same server lists them for the tests' user.
    let namespaces = Api::<Namespace>::all(server.client().unwrap());
    let names: Vec<_> = namespaces.list(&ListParams::default()).await.unwrap().items;
    assert!(
        names
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );

    stop(server);
}

#[tokio::test]
async fn dropping_the_harness_with_a_watch_open_stops_both_and_removes_its_directory() {
    let server = start().await;
    let (pids, dir) = (server.pids(), server.dir().unwrap().to_owned());
    assert_eq!(left(pids).len(), 2, "both running before the drop");
    // A watch still open: the apiserver must not wait for its client to end it.
    let services: Api<Service> = Api::default_namespaced(server.client().unwrap());
    let mut events = pin!(watcher::watcher(services, watcher::Config::default()));
    while !matches!(next(&mut events).await, Event::InitDone) {}

    let t = Instant::now();
    drop(server);
    eprintln!("dropped in {:.2?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the apiserver outlived its SIGTERM"
    );
    assert_eq!(left(pids), BTreeMap::new());
    assert!(!dir.exists(), "{} is left", dir.display());
}

/// Not a test of its own: the process `a_killed_test_process_takes_both_with_it` kills.
#[tokio::test]
#[ignore = "run by a_killed_test_process_takes_both_with_it"]
async fn a_harness_in_a_process_to_kill() {
    let server = start().await;
    let p = server.pids();
    println!(
        "harness {} {} {}",
        p.etcd,
        p.apiserver,
        server.dir().unwrap().display()
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[test]
fn a_killed_test_process_takes_both_with_it() {
    let mut test = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_harness_in_a_process_to_kill",
            "--ignored",
            "--nocapture",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(test.stdout.take().unwrap());
    let line = out
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("harness "));
    let line = line.expect("the harness started in the other process");
    let fields: Vec<&str> = line.split(' ').collect();
    let pids = Pids {
        etcd: fields[1].parse().unwrap(),
        apiserver: fields[2].parse().unwrap(),
    };
    assert_eq!(left(pids).len(), 2, "both running: {line}");

    // SIGKILL: no Drop runs; the kernel's parent-death signal is all that is left.
    let t = Instant::now();
    test.kill().unwrap();
    test.wait().unwrap();
    while !left(pids).is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("both gone {:.2?} after the SIGKILL", t.elapsed());
    assert_eq!(left(pids), BTreeMap::new());
    // What a killed process cannot do itself: remove its directory.
    std::fs::remove_dir_all(fields[3]).unwrap();
}
