//! `hopwise control --kubernetes` against a real kube-apiserver (issue 30, identity): a pod's
//! projected ServiceAccount token, minted by the API server's TokenRequest and bound to the pod,
//! gets a certificate for `spiffe://<td>/ns/<namespace>/sa/<account>` — the identity the review
//! names, never the CSR — and then registers and subscribes as the service that runs as that
//! ServiceAccount. A token for another audience, of a ServiceAccount no service runs as, made up,
//! or of a pod deleted since is refused; a join token still works beside them. With the API
//! server gone, lease calls ride on their last review and issuance is refused as unavailable.

#![allow(clippy::unwrap_used)]

#[path = "kube_support/mod.rs"]
mod kube_support;

use std::time::{Duration, Instant};

use hopwise_control::pb;
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use x509_parser::extensions::GeneralName;

async fn create_pod(kube: &kube::Client, name: &str, account: &str) -> Pod {
    let pod = kube_support::app_pod(name, account);
    Api::<Pod>::namespaced(kube.clone(), "shop")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

fn issue(token: &str) -> pb::IssueRequest {
    kube_support::issue_request(token, "web-1")
}

fn uri_sans(pem: &str) -> Vec<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    san.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::URI(u) => (*u).to_owned(),
            other => panic!("a name other than the identity: {other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_service_account_token_gets_its_identity_and_nothing_else() {
    let api = ApiServer::start().await.unwrap();
    let kube = api.client().unwrap();
    kube_support::namespace(&kube, "shop").await;
    let accounts = Api::<ServiceAccount>::namespaced(kube.clone(), "shop");
    for name in ["web", "intruder"] {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        accounts.create(&PostParams::default(), &sa).await.unwrap();
    }
    let web_pod = create_pod(&kube, "web-1", "web").await;
    let intruder_pod = create_pod(&kube, "intruder-1", "intruder").await;
    let web = kube_support::bound_token(&kube, "web", &web_pod, "hopwise", Some(3600)).await;
    let web_2_pod = create_pod(&kube, "web-2", "web").await;
    let web_2 = kube_support::bound_token(&kube, "web", &web_2_pod, "hopwise", Some(3600)).await;

    let control = kube_support::Control::start(&api);
    let mut c = control.client().await;

    // The pod's token: a certificate for its ServiceAccount's identity, and nothing else in it.
    let issued = c.issue(issue(&web)).await.unwrap().into_inner();
    assert_eq!(issued.identity, "spiffe://shop.local/ns/shop/sa/web");
    assert_eq!(
        uri_sans(&issued.cert_chain_pem),
        ["spiffe://shop.local/ns/shop/sa/web"]
    );
    // The same token registers a copy of `web` and subscribes to `web`'s configuration.
    let registered = c
        .register(pb::RegisterRequest {
            token: web.clone(),
            inbound_addr: "127.0.0.1:4143".into(),
            ttl_ms: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut stream = kube_support::subscribe(&mut c, &web, "web", "web-1")
        .await
        .unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.service, "web");
    // Asking for another service's configuration with it is refused.
    let err = kube_support::subscribe(&mut c, &web, "api", "web-1")
        .await
        .unwrap_err();
    assert!(err.message().starts_with("wrong-service"), "{err:?}");

    // A second pod's copy registers too (its review then serves its lease calls).
    let second = c
        .register(pb::RegisterRequest {
            token: web_2.clone(),
            inbound_addr: "127.0.0.2:4143".into(),
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    // Another audience's token of the same pod: the API server refuses it for ours.
    let other_audience =
        kube_support::bound_token(&kube, "web", &web_pod, "vault", Some(3600)).await;
    let err = c.issue(issue(&other_audience)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().starts_with("token-refused"), "{err:?}");
    // A ServiceAccount no service of the mesh runs as.
    let intruder =
        kube_support::bound_token(&kube, "intruder", &intruder_pod, "hopwise", Some(3600)).await;
    let err = c.issue(issue(&intruder)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().starts_with("no-service-runs-as"), "{err:?}");
    assert!(err.message().contains("ns/shop/sa/intruder"), "{err:?}");
    let err = c
        .renew(pb::LeaseRequest {
            token: intruder.clone(),
            lease_id: registered.lease_id,
        })
        .await
        .unwrap_err();
    assert!(err.message().starts_with("no-service-runs-as"), "{err:?}");
    // Made up.
    let err = c.issue(issue("eyJhbGciOi.not-a.token")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // A join token still works beside them, for its own service's identity.
    let api_token = control.token("api");
    let issued = c.issue(issue(&api_token)).await.unwrap().into_inner();
    assert_eq!(issued.identity, "spiffe://shop.local/ns/shop/sa/api");

    // The pod is deleted: its token gets no certificate any more.
    Api::<Pod>::namespaced(kube.clone(), "shop")
        .delete("web-1", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        match c.issue(issue(&web)).await {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(_) => panic!("a deleted pod's token still got a certificate after 20 s"),
        }
    };
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().starts_with("token-refused"), "{err:?}");

    // The API server goes away: lease calls ride on their last review (the plane keeps
    // serving), issuance is refused as unavailable, so the proxy tries again later.
    api.stop().unwrap();
    c.renew(pb::LeaseRequest {
        token: web_2.clone(),
        lease_id: second.lease_id,
    })
    .await
    .unwrap();
    let err = c.issue(issue(&web_2)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().starts_with("review-unavailable"), "{err:?}");
    drop(stream);
}
