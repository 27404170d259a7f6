//! An HTTPRoute as the API server holds it, read into the mesh file's words; its status.

use serde_json::json;

use super::*;

fn route(rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "namespace": "shop", "name": "api-split", "generation": 3 },
        "spec": {
            "parentRefs": [
                { "group": "", "kind": "Service", "name": "api", "port": 80 },
                { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge" },
            ],
            "hostnames": ["api"],
            "rules": rules,
        },
    })
}

#[test]
fn a_gamma_route_reads_in_the_mesh_files_words() {
    let r = read(&route(json!([{
        "name": "beta",
        "matches": [{ "headers": [{ "name": "x-beta", "value": "1" }],
                      "queryParams": [{ "type": "Exact", "name": "v", "value": "2" }] }],
        "filters": [
            { "type": "RequestHeaderModifier", "requestHeaderModifier": { "set": [{ "name": "x-r", "value": "b" }] } },
            { "type": "RequestMirror", "requestMirror": { "backendRef": { "name": "api-v2", "port": 80 }, "percent": 10 } },
        ],
        "backendRefs": [
            { "name": "api", "port": 80, "weight": 90 },
            { "group": "", "kind": "Service", "name": "api-v2", "port": 80, "weight": 10 },
        ],
        "timeouts": { "request": "2s", "backendRequest": "500ms" },
    }])))
    .unwrap();
    assert_eq!(
        (r.namespace.as_str(), r.name.as_str()),
        ("shop", "api-split")
    );
    assert_eq!(r.parents, ["api"], "the Gateway parent is not the mesh's");
    assert_eq!(
        r.route,
        json!({
            "hostnames": ["api"],
            "rules": [{
                "name": "beta",
                "matches": [{ "headers": [{ "name": "x-beta", "value": "1" }],
                              "query_params": [{ "type": "Exact", "name": "v", "value": "2" }] }],
                "filters": [
                    { "type": "RequestHeaderModifier", "request_header_modifier": { "set": [{ "name": "x-r", "value": "b" }] } },
                    { "type": "RequestMirror", "request_mirror": { "backend": { "service": "api-v2" }, "percent": 10 } },
                ],
                "backends": [{ "service": "api", "weight": 90 }, { "service": "api-v2", "weight": 10 }],
                "timeouts": { "request": "2s", "backend_request": "500ms" },
            }],
        })
    );
}

#[test]
fn references_the_mesh_cannot_follow_are_refused_by_name() {
    let other_ns = route(json!([{ "backendRefs": [{ "name": "api", "namespace": "ops" }] }]));
    assert!(read(&other_ns).unwrap_err().contains("another namespace"));
    let not_service = route(
        json!([{ "backendRefs": [{ "kind": "ServiceImport", "group": "multicluster.x-k8s.io", "name": "api" }] }]),
    );
    assert!(
        read(&not_service)
            .unwrap_err()
            .contains("only a core Service")
    );
}

#[test]
fn the_status_names_each_service_parent_with_both_conditions_at_the_generation() {
    let r = route(json!([]));
    let body = status(&r, &Outcome::Invalid("`hopwise check`: no".into()));
    let parents = body["status"]["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 1);
    assert_eq!(parents[0]["parentRef"]["name"], "api");
    assert_eq!(parents[0]["controllerName"], CONTROLLER);
    let accepted = &parents[0]["conditions"][0];
    assert_eq!(
        (&accepted["type"], &accepted["status"], &accepted["reason"]),
        (
            &json!("Accepted"),
            &json!("False"),
            &json!("UnsupportedValue")
        )
    );
    assert_eq!(accepted["observedGeneration"], 3);
    assert!(
        accepted["lastTransitionTime"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let ok = status(&r, &Outcome::Accepted);
    assert_eq!(
        ok["status"]["parents"][0]["conditions"][1]["status"],
        "True"
    );
}
