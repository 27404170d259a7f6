//! `hopwise install`'s manifests applied to a real kube-apiserver (scripts/kube-testbin's; no
//! mock) with the built kubectl's server-side apply, twice, and every object read back; the
//! control plane's ServiceAccount asked what RBAC lets it do.

// Test helpers: a failure should fail the test loudly, and the timings go to its output.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::time::Instant;

use hopwise_kube::install::{self, CONTROL, Install, WEBHOOK_SECRET};
use hopwise_kube::registration;
use hopwise_kube::testing::ApiServer;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;

/// kubectl with `args`, `stdin` written to it; its stdout, or a panic with its stderr.
fn kubectl(server: &ApiServer, args: &[&str], stdin: &str) -> String {
    let out = server.kubectl_with(args, stdin).unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "kubectl {args:?}: {stderr}{stdout}");
    stdout
}

#[tokio::test(flavor = "current_thread")]
async fn the_manifests_apply_server_side_and_read_back() {
    let server = ApiServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let install = Install::new("hopwise", "hopwise:test").unwrap();
    let text = serde_json::to_string_pretty(&install::manifests(&install).unwrap()).unwrap();
    let apply = [
        "apply",
        "--server-side",
        "--field-manager",
        "hopwise",
        "-f",
        "-",
    ];
    for round in ["first", "again"] {
        let t = Instant::now();
        let out = kubectl(&server, &apply, &text);
        println!("{round} apply: {:?}\n{out}", t.elapsed());
        assert_eq!(out.lines().count(), 11, "{out}");
    }

    let client = server.client().unwrap();
    let ns = Api::<Namespace>::all(client.clone())
        .get("hopwise")
        .await
        .unwrap();
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["hopwise.dev/inject"], "disabled");
    Api::<ServiceAccount>::namespaced(client.clone(), "hopwise")
        .get(CONTROL)
        .await
        .unwrap();
    let role = Api::<ClusterRole>::all(client.clone())
        .get(CONTROL)
        .await
        .unwrap();
    let rules = role.rules.unwrap();
    assert!(rules.iter().any(|r| {
        r.resources.iter().flatten().any(|x| x == "tokenreviews") && r.verbs == ["create"]
    }));
    Api::<ClusterRoleBinding>::all(client.clone())
        .get(CONTROL)
        .await
        .unwrap();
    let secret = Api::<Secret>::namespaced(client.clone(), "hopwise")
        .get(WEBHOOK_SECRET)
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data["tls.crt"].0, install.webhook_cert.cert_pem.as_bytes());
    let deployment = Api::<Deployment>::namespaced(client.clone(), "hopwise")
        .get(CONTROL)
        .await
        .unwrap();
    let spec = deployment.spec;
    // The state outlives the pod: a claimed volume, one pod at a time.
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("Recreate"));
    let pod = spec.template.spec.unwrap();
    let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["control", "webhook"]);
    let state = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "state")
        .unwrap();
    let claim = &state.persistent_volume_claim.as_ref().unwrap().claim_name;
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "hopwise")
        .get(claim)
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(claim.access_modes.unwrap(), ["ReadWriteOnce"]);
    assert_eq!(
        claim.resources.unwrap().requests.unwrap()["storage"].0,
        "1Gi"
    );
    assert!(
        pod.containers
            .iter()
            .all(|c| c.image.as_deref() == Some("hopwise:test"))
    );
    let service = Api::<Service>::namespaced(client.clone(), "hopwise")
        .get(CONTROL)
        .await
        .unwrap();
    let spec = service.spec.unwrap();
    let ports: Vec<_> = spec.ports.unwrap().iter().map(|p| p.port).collect();
    assert_eq!(ports, [7900, 443]);
    assert!(spec.cluster_ip.unwrap().starts_with("10.96.0."));
    let webhooks = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(registration::NAME)
        .await
        .unwrap()
        .webhooks
        .unwrap();
    assert_eq!(webhooks.len(), 2);
    for w in &webhooks {
        let c = &w.client_config;
        assert_eq!(
            c.ca_bundle.as_ref().unwrap().0,
            install.webhook_cert.ca_pem.as_bytes()
        );
        let to = c.service.as_ref().unwrap();
        assert_eq!(
            (to.namespace.as_str(), to.name.as_str()),
            ("hopwise", CONTROL)
        );
        assert_eq!(to.path.as_deref(), Some(registration::PATH));
    }

    // What RBAC lets the control plane's ServiceAccount do, asked of the API server.
    let sa = "system:serviceaccount:hopwise:hopwise-control";
    let can = |verb: &str, what: &str| {
        kubectl(&server, &["auth", "can-i", verb, what, "--as", sa], "")
            .trim()
            .to_owned()
    };
    assert_eq!(can("create", "tokenreviews.authentication.k8s.io"), "yes");
    assert_eq!(can("watch", "endpointslices.discovery.k8s.io"), "yes");
    assert_eq!(can("watch", "services"), "yes");
    // (HTTPRoutes are not asked: without the Gateway API's CRDs kubectl cannot name them.)
    // `can-i` exits 1 for "no".
    let mut cmd = server.kubectl();
    let no = cmd
        .args(["auth", "can-i", "delete", "pods", "--as", sa])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
    server.stop().unwrap();
}
