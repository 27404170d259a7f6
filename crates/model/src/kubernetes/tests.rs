use crate::Mesh;
use crate::diag::problem_at;

fn mesh(text: &str) -> Mesh {
    Mesh::from_yaml(text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_service_on_kubernetes_has_its_service_accounts_identity() {
    let m = mesh(
        "mesh: { trust_domain: shop.example, kubernetes: { namespace: shop } }
services:
  web: { calls: { pricing: {} } }
  pricing: { kubernetes: { service_account: pricing-sa } }
  audit: { kubernetes: { namespace: ops } }
",
    );
    assert_eq!(m.identity("web"), "spiffe://shop.example/ns/shop/sa/web");
    assert_eq!(
        m.identity("pricing"),
        "spiffe://shop.example/ns/shop/sa/pricing-sa"
    );
    assert_eq!(m.identity("audit"), "spiffe://shop.example/ns/ops/sa/audit");
    assert_eq!(
        m.service_of_identity("spiffe://shop.example/ns/shop/sa/pricing-sa"),
        Some("pricing")
    );
    assert_eq!(
        m.service_of_identity("spiffe://shop.example/ns/shop/sa/pricing"),
        None,
        "the service's name is not its identity once it names a ServiceAccount"
    );
    assert_eq!(
        m.service_of_identity("spiffe://shop.example/ns/ops/sa/web"),
        None
    );
}

#[test]
fn without_kubernetes_identities_stay_per_service_and_a_mesh_may_mix() {
    let m = mesh(
        "services:
  web: { calls: { pricing: {} } }
  pricing: { kubernetes: {} }
",
    );
    assert_eq!(m.identity("web"), "spiffe://hopwise.local/service/web");
    assert_eq!(
        m.identity("pricing"),
        "spiffe://hopwise.local/ns/default/sa/pricing"
    );
    assert_eq!(
        m.service_of_identity("spiffe://hopwise.local/service/web"),
        Some("web")
    );
}

#[test]
fn names_kubernetes_would_refuse_are_errors_at_their_line() {
    let text = "mesh: { kubernetes: { namespace: Shop } }
services:
  web:
    kubernetes: { service_account: -web }
  pricing_v2: {}
  fee: { external: { address: 127.0.0.1:9 }, kubernetes: {} }
";
    let e = Mesh::from_yaml(text).unwrap_err().0;
    let (line, message) = problem_at(&e, "mesh.kubernetes.namespace");
    assert_eq!(line, Some(1));
    assert!(message.contains("`Shop` is not a Kubernetes namespace"));
    let (line, _) = problem_at(&e, "services.web.kubernetes.service_account");
    assert_eq!(line, Some(4));
    let (_, message) = problem_at(&e, "services.pricing_v2");
    assert!(
        message.contains("write `kubernetes: { service_account"),
        "{message}"
    );
    assert!(
        problem_at(&e, "services.fee.kubernetes")
            .1
            .contains("external")
    );
}

#[test]
fn two_services_of_one_service_account_are_refused() {
    let e = Mesh::from_yaml(
        "mesh: { kubernetes: {} }
services:
  web: { kubernetes: { service_account: shared } }
  api:
    kubernetes: { service_account: shared }
",
    )
    .unwrap_err()
    .0;
    let (line, message) = problem_at(&e, "services.api.kubernetes");
    assert_eq!(line, Some(5));
    assert!(message.contains("`api` and `web` both run as ServiceAccount `shared`"));
}

#[test]
fn allow_may_name_a_service_account_and_means_the_service_that_runs_as_it() {
    let m = mesh(
        "mesh: { trust_domain: shop.example, kubernetes: { namespace: shop } }
services:
  web: { calls: { pricing: {} }, kubernetes: { service_account: storefront } }
  batch: { calls: { pricing: {} }, kubernetes: { namespace: jobs } }
  pricing:
    allow: [ns/shop/sa/storefront, batch]
    allow_paths: { /admin: [ns/jobs/sa/batch] }
",
    );
    let pricing = &m.services["pricing"];
    assert_eq!(
        pricing.allow,
        crate::Allow::Only(vec!["web".into(), "batch".into()])
    );
    assert_eq!(
        pricing.allow_paths,
        [("/admin".to_owned(), vec!["batch".to_owned()])]
    );
    assert_eq!(super::account_of("ns/shop/sa/web"), Some(("shop", "web")));
    assert_eq!(super::account_of("web"), None);
    assert_eq!(super::account_of("ns/Shop/sa/web"), None);
}

#[test]
fn allowing_a_service_account_no_service_runs_as_is_an_error_at_its_list() {
    let e = Mesh::from_yaml(
        "mesh: { kubernetes: { namespace: shop } }
services:
  web: { calls: { pricing: {} } }
  pricing:
    allow: [ns/shop/sa/web, ns/shop/sa/intruder]
    allow_paths: { /admin: [ns/ops/sa/web] }
",
    )
    .unwrap_err()
    .0;
    assert_eq!(e.len(), 2, "{e:?}");
    let (line, message) = problem_at(&e, "services.pricing.allow");
    assert_eq!(line, Some(5));
    assert!(message.contains("`ns/shop/sa/intruder`"), "{message}");
    assert!(
        message.contains("no service of this file runs as"),
        "{message}"
    );
    let (_, message) = problem_at(&e, "services.pricing.allow_paths./admin");
    assert!(message.contains("`ns/ops/sa/web`"), "{message}");
}
