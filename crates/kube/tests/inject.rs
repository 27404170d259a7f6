//! The injection webhook called by a real kube-apiserver (scripts/kube-testbin's; no mock): the
//! webhook's server on loopback, registered with `registration.rs`'s configuration pointing at
//! it (its CA as the `caBundle`); pods created through the API server and read back as stored.
//! And the server's own answers to what the API server never sends (curl).

// Test helpers: a failure should fail the test loudly, and the timings go to its output.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use hopwise_kube::cert::{self, ServingCert};
use hopwise_kube::inject::{DISABLED, ENABLED, INJECT, INJECTED, Inject};
use hopwise_kube::registration::{self, Target};
use hopwise_kube::testing::ApiServer;
use hopwise_kube::webhook::{self, Limits};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use serde_json::json;

fn inject() -> Inject {
    Inject::new("hopwise:test", "https://hopwise-control.hopwise.svc:7900")
}

/// The webhook on a free loopback port with a fresh certificate for 127.0.0.1.
async fn serve() -> (webhook::Running, ServingCert) {
    let cert = cert::serving(&["127.0.0.1"]).unwrap();
    let tls = webhook::tls(&cert.cert_pem, &cert.key_pem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = webhook::spawn(listener, tls, inject(), Limits::default()).unwrap();
    (running, cert)
}

fn pod(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
    let map = |kv: &[(&str, &str)]| {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": map(labels), "annotations": map(annotations)},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap()
}

fn names(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let spec = pod.spec.as_ref().unwrap();
    let init = spec.init_containers.iter().flatten();
    let volumes = spec.volumes.iter().flatten();
    (
        init.map(|c| c.name.clone()).collect(),
        volumes.map(|v| v.name.clone()).collect(),
    )
}

fn is_injected(pod: &Pod) -> bool {
    let (init, _) = names(pod);
    init == ["hopwise-init", "hopwise-proxy"]
}

async fn namespace(client: &kube::Client, name: &str, labels: &[(&str, &str)]) {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().copied().collect::<BTreeMap<_, _>>()}
    }))
    .unwrap();
    let api = Api::<Namespace>::all(client.clone());
    api.create(&PostParams::default(), &ns).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn the_api_server_injects_pods_that_opted_in_and_only_those() {
    let server = ApiServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = server.client().unwrap();
    let (webhook, cert) = serve().await;
    let url = format!("https://{}{}", webhook.addr(), registration::PATH);
    let config = registration::configuration(&Target::Url(url), &cert.ca_pem, "hopwise");
    let configs = Api::<MutatingWebhookConfiguration>::all(client.clone());
    configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    namespace(&client, "meshed", &[(INJECT, ENABLED)]).await;
    namespace(&client, "plain", &[]).await;
    let meshed = Api::<Pod>::namespaced(client.clone(), "meshed");
    let plain = Api::<Pod>::namespaced(client.clone(), "plain");

    // The API server takes the configuration up within a moment: dry runs until it has.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let t = Instant::now();
    loop {
        let probe = meshed.create(&dry, &pod("probe", &[], &[])).await.unwrap();
        if is_injected(&probe) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never injected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("registration in force after {:?}", t.elapsed());

    let create = async |api: &Api<Pod>, p: Pod| {
        api.create(&PostParams::default(), &p).await.unwrap();
        api.get(p.metadata.name.as_deref().unwrap()).await.unwrap()
    };
    // Opted in by its namespace, and by its own label in a plain namespace.
    let a = create(&meshed, pod("a", &[], &[])).await;
    assert!(is_injected(&a), "{:?}", names(&a));
    let (_, volumes) = names(&a);
    assert_eq!(volumes, ["hopwise-token", "hopwise-cache"]);
    let annotations = a.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[INJECTED], env!("CARGO_PKG_VERSION"));
    let by_label = create(&plain, pod("c", &[(INJECT, ENABLED)], &[])).await;
    assert!(is_injected(&by_label), "{:?}", names(&by_label));
    // The proxy as the API server stored it: a native sidecar, its token for `hopwise`.
    let spec = a.spec.as_ref().unwrap();
    let proxy = &spec.init_containers.as_ref().unwrap()[1];
    assert_eq!(proxy.restart_policy.as_deref(), Some("Always"));
    let token = spec.volumes.as_ref().unwrap()[0]
        .projected
        .as_ref()
        .unwrap();
    let token = token.sources.as_ref().unwrap()[0]
        .service_account_token
        .as_ref();
    assert_eq!(token.unwrap().audience.as_deref(), Some("hopwise"));

    // Left alone: a plain namespace, an annotation or a label opting out.
    let untouched = [
        create(&plain, pod("b", &[], &[])).await,
        create(&meshed, pod("d", &[], &[(INJECT, DISABLED)])).await,
        create(&meshed, pod("e", &[(INJECT, DISABLED)], &[])).await,
    ];
    for p in &untouched {
        assert_eq!(names(p), (vec![], vec![]), "{:?}", p.metadata.name);
        let marked = p
            .metadata
            .annotations
            .iter()
            .flatten()
            .any(|(k, _)| k == INJECTED);
        assert!(!marked);
    }

    // Idempotent: a pod made from the injected one's stored spec is stored as it was sent.
    let mut again = a.clone();
    again.metadata = ObjectMeta {
        name: Some("f".to_owned()),
        annotations: a.metadata.annotations.clone(),
        ..Default::default()
    };
    again.status = None;
    let f = create(&meshed, again).await;
    assert_eq!(names(&f), names(&a));
    assert_eq!(f.spec, a.spec);

    // Refused with the webhook's reason: a pod on the host's network.
    let mut host = pod("g", &[], &[]);
    host.spec.as_mut().unwrap().host_network = Some(true);
    let err = meshed
        .create(&PostParams::default(), &host)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("host's network"), "{text}");
    println!("host network refused: {text}");

    // What a review costs through the API server: dry-run creations with and without it.
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        meshed.create(&dry, &pod("m", &[], &[])).await.unwrap();
        with.push(t.elapsed());
        let t = Instant::now();
        plain.create(&dry, &pod("m", &[], &[])).await.unwrap();
        without.push(t.elapsed());
    }
    with.sort();
    without.sort();
    println!(
        "dry-run pod creation, median of 30: {:?} injected, {:?} not (p90 {:?} / {:?})",
        with[15], without[15], with[27], without[27]
    );
    drop(webhook);
    server.stop().unwrap();
}

/// curl's status and body for a request to the webhook.
fn curl(url: &str, ca: &std::path::Path, args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["-w", "\n%{http_code}", url])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_what_is_no_review_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (webhook, cert) = serve().await;
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert.ca_pem).unwrap();
    let url = format!("https://{}{}", webhook.addr(), registration::PATH);
    let json = ["-H", "content-type: application/json"];
    let post = |body: &str| {
        let mut args = json.to_vec();
        args.extend(["--data-binary", body]);
        curl(&url, &ca, &args)
    };
    let cases = [
        (post("{not json"), "400", "not JSON"),
        (
            post("{\"kind\":\"Pod\"}"),
            "400",
            "not an admission.k8s.io/v1 AdmissionReview",
        ),
        (
            post(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#),
            "400",
            "no request uid",
        ),
        (curl(&url, &ca, &[]), "405", "POST"),
        (
            curl(&url, &ca, &["--data-binary", "{}"]),
            "415",
            "application/json",
        ),
        (
            curl(&url.replace("/inject", "/other"), &ca, &[]),
            "404",
            "only /inject",
        ),
    ];
    for ((status, body), want_status, says) in cases {
        assert_eq!(status, want_status, "{body}");
        assert!(body.contains(says), "{body}");
    }
    // Past the body's bound: refused without reading it all.
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; Limits::default().body + 1]).unwrap();
    let at_big = format!("@{}", big.display());
    let (status, body) = curl(&url, &ca, &["-H", json[1], "--data-binary", &at_big]);
    assert_eq!(status, "413", "{body}");
    // A review whose pod cannot be read: 200, refused, its uid kept.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE", "userInfo": {},
                    "object": {"spec": {"containers": "none"}}}
    });
    let (status, body) = post(&review.to_string());
    assert_eq!(status, "200", "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["uid"], "u-1");
    assert_eq!(answer["response"]["allowed"], false);
    let why = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(why.contains("cannot be read"), "{why}");
}
