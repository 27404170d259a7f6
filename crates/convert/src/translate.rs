//! Objects → the translation, by kind: Istio's VirtualService and DestinationRule, Linkerd's
//! ServiceProfile, the Gateway API's HTTPRoute and GRPCRoute, and core Services (the protocol
//! their ports declare, as Istio reads it: a port named `grpc`/`grpc-*` or with `appProtocol:
//! grpc`; Linkerd's annotations); Istio's mesh configuration (the `istio` ConfigMap, an
//! IstioOperator, a MeshConfig file) for its default retry policy. Every other kind is listed as
//! skipped, never refused.

use hopwise_model::Protocol;
use hopwise_model::yaml::Value;

use crate::ir::{Field, Flavor, Route, Skipped, Translation};
use crate::names::key;
use crate::node::{Ctx, get};
use crate::objects::Object;
use crate::problem::Problem;
use crate::{gateway, istio, linkerd, meshconfig};

/// Every object translated or listed as skipped; problems collected.
pub fn translate(objects: &[Object], problems: &mut Vec<Problem>) -> Translation {
    let mut t = Translation::default();
    for o in objects {
        let mut cx = Ctx {
            file: o.file.to_owned(),
            object: o.label(),
            problems,
        };
        match (o.group(), o.kind) {
            ("networking.istio.io", "VirtualService") => istio::virtual_service(&mut t, o, &mut cx),
            ("networking.istio.io", "DestinationRule") => {
                istio::destination_rule(&mut t, o, &mut cx)
            }
            ("linkerd.io", "ServiceProfile") => linkerd::service_profile(&mut t, o, &mut cx),
            ("gateway.networking.k8s.io" | "policy.linkerd.io", "HTTPRoute" | "GRPCRoute") => {
                gateway::route(&mut t, o, &mut cx)
            }
            ("", "Service") => service(&mut t, o, &mut cx),
            ("", "ConfigMap") => meshconfig::config_map(&mut t, o, &mut cx),
            ("", "MeshConfig") => meshconfig::mesh_config(&mut t, o, &mut cx),
            ("install.istio.io", "IstioOperator") => meshconfig::operator(&mut t, o, &mut cx),
            (_, kind) => t.skipped.push(Skipped {
                at: cx.at(o.node, ""),
                why: format!("{kind} is not read (it holds no timeout, retry or cap)"),
            }),
        }
    }
    t
}

/// A core Service: the protocol of its ports, and Linkerd's annotations on it.
fn service(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    let mut grpc = None;
    if let Some(ports) = get(o.node, "spec").and_then(|s| get(s, "ports")) {
        let items = cx.list(ports, "spec.ports");
        let mut all = !items.is_empty();
        for (i, p) in items.iter().enumerate() {
            let word = |k: &str| match get(p, k).map(|n| &n.value) {
                Some(Value::Str(s)) => Some(s.to_ascii_lowercase()),
                _ => None,
            };
            let is_grpc = word("appProtocol").is_some_and(|a| a.starts_with("grpc"))
                || word("name").is_some_and(|n| n == "grpc" || n.starts_with("grpc-"));
            all &= is_grpc;
            if is_grpc && grpc.is_none() {
                grpc = Some(cx.at(p, &format!("spec.ports[{i}]")));
            }
        }
        if !all {
            grpc = None;
        }
    }
    let annotated = linkerd::annotated(o);
    if annotated {
        t.saw(Flavor::Linkerd);
        let mut base = Route::new(cx.at(o.node, ""));
        linkerd::annotations(&mut base, o, cx);
        t.host(&key(o.name, o.namespace)).base = Some(base);
    }
    if let Some(at) = grpc {
        t.host(&key(o.name, o.namespace)).protocol = Some(Field {
            value: Protocol::Grpc,
            at,
        });
    }
    t.read.push(cx.at(o.node, ""));
}
