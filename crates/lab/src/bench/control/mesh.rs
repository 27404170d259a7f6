//! The benchmark's mesh: `--services` services `svc-000`, `svc-001`, … each calling `shared`
//! (so a copy of `shared` joining changes every subscriber's snapshot), and each even-numbered
//! service also calling the next one (so the registered copies appear in snapshots too); the
//! names and addresses of its copies. Pure.

/// The service every other one calls.
pub(super) const SHARED: &str = "shared";
/// The service whose copies flip health (`svc-001`: only `svc-000` calls it).
pub(super) const PROBE: usize = 1;

/// The mesh file: `services` services calling `shared`; even ones also call the next one.
/// `variant` changes the timeout of every call to `shared` (a configuration change).
pub fn mesh_text(services: usize, variant: usize) -> String {
    let timeout = if variant.is_multiple_of(2) {
        "500ms"
    } else {
        "400ms"
    };
    let mut out = String::from(
        "# hopwise control bench: every service calls `shared`; even ones call the next one too\n\
         mesh: { name: bench, trust_domain: bench.local }\nservices:\n  shared: {}\n",
    );
    for i in 0..services {
        let next = if i.is_multiple_of(2) && i + 1 < services {
            format!(", {}: {{ timeout: 2s }}", service_name(i + 1))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  {}: {{ calls: {{ {SHARED}: {{ timeout: {timeout} }}{next} }} }}\n",
            service_name(i)
        ));
    }
    out
}

pub(super) fn service_name(i: usize) -> String {
    format!("svc-{i:03}")
}

/// The address of registered copy `c` (never reached: the registry only records it).
pub(super) fn copy_addr(c: usize) -> String {
    format!("10.{}.{}.{}:7001", (c >> 16) & 255, (c >> 8) & 255, c & 255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmarks_mesh_passes_check_and_its_variants_differ() {
        for services in [1, 2, 7, 100] {
            let text = mesh_text(services, 0);
            let mesh = hopwise_model::Mesh::from_yaml(&text).unwrap();
            assert_eq!(mesh.services.len(), services + 1);
            let report = hopwise_analyze::check(&mesh, &hopwise_analyze::Options::default());
            assert!(!report.has_errors(), "{services}: {:?}", report.findings);
            assert_ne!(text, mesh_text(services, 1));
            assert_eq!(text, mesh_text(services, 2));
        }
    }

    #[test]
    fn copy_addresses_are_distinct() {
        let mut all: Vec<String> = (0..70_000).map(copy_addr).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 70_000);
    }
}
