//! The `MutatingWebhookConfiguration` that sends pods to the webhook, and so where opting in is
//! decided: by the API server's own selectors, before the webhook is called. Two webhooks, as
//! Istio registers them, whose selectors never both match one pod: pods of a namespace labelled
//! `hopwise.dev/inject: enabled`, unless the pod is labelled `disabled`; and pods labelled
//! `enabled` in any other namespace. The system namespaces and the control plane's are never
//! sent. Pod creation only; the webhook has no side effects; a webhook that cannot answer fails
//! the pod's creation (`Fail`), since a pod that opted in must not run outside the mesh unseen.
//! `hopwise install` and the tests build it here, so both register the same thing; and the
//! `ValidatingWebhookConfiguration` that sends `Mesh`es to be judged ([`mesh_validation`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::inject::{DISABLED, ENABLED, INJECT};

/// The configuration's name.
pub const NAME: &str = "hopwise-inject";
/// The `Mesh` validation's configuration name.
pub const MESH_VALIDATION: &str = "hopwise-validate-mesh";
/// The path the webhook answers on.
pub const PATH: &str = "/inject";
/// Namespaces never injected, besides the control plane's.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
/// How long the API server waits for an answer (its default and maximum is 10 and 30 s).
pub const TIMEOUT_SECONDS: i32 = 10;

/// Where the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A URL (`https://127.0.0.1:PORT/inject` in the tests); [`PATH`] is not added.
    Url(String),
    /// A Service in the cluster, on `port`, at [`PATH`].
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

/// The configuration for `target`, trusting `ca_pem` (the serving certificate's CA), leaving
/// `control_namespace` alone.
pub fn configuration(
    target: &Target,
    ca_pem: &str,
    control_namespace: &str,
) -> MutatingWebhookConfiguration {
    let client = client(target, ca_pem, PATH);
    let mut skipped: Vec<String> = SYSTEM_NAMESPACES.map(str::to_owned).into();
    skipped.push(control_namespace.to_owned());
    let not_skipped = requirement("kubernetes.io/metadata.name", "NotIn", skipped);
    let webhook = |name: &str, namespace: LabelSelectorRequirement, pod| MutatingWebhook {
        name: name.to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        client_config: client.clone(),
        failure_policy: Some("Fail".to_owned()),
        match_policy: Some("Equivalent".to_owned()),
        namespace_selector: Some(selector(vec![namespace, not_skipped.clone()])),
        object_selector: Some(selector(vec![pod])),
        // Called again when a later webhook changed the pod: injection is idempotent.
        reinvocation_policy: Some("IfNeeded".to_owned()),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned()]),
            resources: Some(vec!["pods".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]),
        side_effects: "None".to_owned(),
        timeout_seconds: Some(TIMEOUT_SECONDS),
        match_conditions: None,
    };
    let one = |v: &str| vec![v.to_owned()];
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(NAME.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/part-of".to_owned(),
                "hopwise".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            webhook(
                "namespace.inject.hopwise.dev",
                requirement(INJECT, "In", one(ENABLED)),
                requirement(INJECT, "NotIn", one(DISABLED)),
            ),
            webhook(
                "pod.inject.hopwise.dev",
                requirement(INJECT, "NotIn", one(ENABLED)),
                requirement(INJECT, "In", one(ENABLED)),
            ),
        ]),
    }
}

/// Where the API server reaches a webhook at `path` of `target`, trusting `ca_pem`.
fn client(target: &Target, ca_pem: &str, path: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        url: match target {
            Target::Url(url) => Some(url.clone()),
            Target::Service { .. } => None,
        },
        service: match target {
            Target::Url(_) => None,
            Target::Service {
                namespace,
                name,
                port,
            } => Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.to_owned()),
                port: Some(*port),
            }),
        },
    }
}

/// The `ValidatingWebhookConfiguration` that sends `Mesh` creations and updates to the webhook
/// (`mesh_resource/admission.rs`; `target` as for [`configuration`], its path
/// `/validate-mesh`). `Ignore` on failure: the control plane judges every generation again, so
/// a webhook that cannot answer only loses the early refusal, never lets a bad file in force.
pub fn mesh_validation(target: &Target, ca_pem: &str) -> ValidatingWebhookConfiguration {
    let group = crate::mesh_resource::GROUP.to_owned();
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(MESH_VALIDATION.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/part-of".to_owned(),
                "hopwise".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "mesh.validate.hopwise.dev".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client(target, ca_pem, crate::mesh_resource::admission::PATH),
            failure_policy: Some("Ignore".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![group]),
                api_versions: Some(vec![crate::mesh_resource::VERSION.to_owned()]),
                operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
                resources: Some(vec![crate::mesh_resource::PLURAL.to_owned()]),
                scope: Some("Cluster".to_owned()),
            }]),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            ..ValidatingWebhook::default()
        }]),
    }
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: Some(values),
    }
}

fn selector(requirements: Vec<LabelSelectorRequirement>) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(requirements),
        match_labels: None,
    }
}
