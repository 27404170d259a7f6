use super::*;

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4999))
}

fn tracing_of(text: &str) -> hopwise_model::observe::Tracing {
    Mesh::from_yaml(text).unwrap().observe.tracing.unwrap()
}

const SHOP: &str = "# a comment\nmesh:\n  name: shop\nservices:\n  a: {}\n";

#[test]
fn a_file_without_tracing_is_traced_at_the_ratio_to_the_dashboard() {
    let s = served(SHOP, addr(), 0.25);
    let t = tracing_of(&s.text);
    assert_eq!(t.collector.as_deref(), Some("127.0.0.1:4999"));
    assert_eq!(t.ratio, 0.25);
    assert!(
        s.text.starts_with("# a comment\nmesh:\n  tracing:\n"),
        "{}",
        s.text
    );
    assert!(s.note.contains("to the dashboard"), "{}", s.note);
    // Without a `mesh:` block, one is added.
    let t = tracing_of(&served("services:\n  a: {}\n", addr(), 1.0).text);
    assert_eq!(
        (t.collector.as_deref(), t.ratio),
        (Some("127.0.0.1:4999"), 1.0)
    );
}

#[test]
fn tracing_without_a_collector_gets_the_dashboards_and_keeps_its_sampling() {
    let text = "mesh:\n    name: shop\n    tracing:\n        sampling: 5%   # a few\n        protocol: grpc\nservices:\n  a: {}\n";
    let s = served(text, addr(), 1.0);
    let t = tracing_of(&s.text);
    assert_eq!(t.collector.as_deref(), Some("127.0.0.1:4999"));
    assert!((t.ratio - 0.05).abs() < 1e-9);
}

#[test]
fn the_users_collector_is_kept_and_said() {
    let text = "mesh:\n  name: shop\n  tracing: { collector: 'otel:4317' }\nservices:\n  a: {}\n";
    let s = served(text, addr(), 1.0);
    assert_eq!(s.text, text);
    assert!(s.note.contains("otel:4317"), "{}", s.note);
}

#[test]
fn a_form_it_cannot_extend_is_served_as_written_with_a_note() {
    let text = "mesh:\n  name: shop\n  tracing: { sampling: 1% }\nservices:\n  a: {}\n";
    let s = served(text, addr(), 1.0);
    assert_eq!(s.text, text);
    assert!(s.note.contains("cannot extend"), "{}", s.note);
    // --traces 0 and no mesh.tracing: nothing changes.
    assert_eq!(served(SHOP, addr(), 0.0).text, SHOP);
}

#[test]
fn ratios_and_percentages() {
    assert_eq!(parse_ratio("10%"), Ok(0.1));
    assert_eq!(parse_ratio("0.5"), Ok(0.5));
    assert!(parse_ratio("2").is_err());
    assert!(parse_ratio("x").is_err());
}
