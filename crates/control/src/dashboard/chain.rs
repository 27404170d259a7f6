//! The order a person reads a mesh in: from its entry services down their calls, depth first,
//! each service's calls in the order the file lists them, so `frontend → checkout` comes before
//! `checkout → pricing` and that before `pricing → inventory`. The charts follow it rather than
//! the alphabet. Pure.

use hopwise_model::Mesh;

/// Every call of `mesh` (caller, callee), once, in chain order: from the entry services first
/// (as the file lists them), then from services nobody calls, then from whatever a cycle left.
pub fn edges(mesh: &Mesh) -> Vec<(String, String)> {
    let called = |name: &str| mesh.calls().any(|c| c.to == name);
    let starts = mesh
        .services
        .values()
        .filter(|s| s.entry.is_some())
        .chain(mesh.services.values().filter(|s| !called(&s.name)))
        .chain(mesh.services.values());
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for s in starts {
        visit(mesh, &s.name, &mut seen, &mut out);
    }
    out
}

fn visit(mesh: &Mesh, service: &str, seen: &mut Vec<String>, out: &mut Vec<(String, String)>) {
    if seen.iter().any(|s| s == service) {
        return;
    }
    seen.push(service.to_owned());
    let Some(s) = mesh.services.get(service) else {
        return;
    };
    for c in &s.calls {
        let edge = (c.from.clone(), c.to.clone());
        if !out.contains(&edge) {
            out.push(edge);
        }
        visit(mesh, &c.to, seen, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(yaml: &str) -> Mesh {
        Mesh::from_yaml(yaml).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn names(v: &[(String, String)]) -> Vec<String> {
        v.iter().map(|(a, b)| format!("{a}>{b}")).collect()
    }

    #[test]
    fn calls_follow_the_chain_from_the_entry_not_the_alphabet() {
        let m = mesh(
            "mesh: {name: t}\n\
             services:\n\
             \x20 inventory: {copies: 1}\n\
             \x20 pricing: {copies: 1, calls: {inventory: {}}}\n\
             \x20 audit: {copies: 1}\n\
             \x20 checkout: {copies: 1, calls: {pricing: {}, audit: {}}}\n\
             \x20 frontend: {copies: 1, entry: {}, calls: {checkout: {}}}\n",
        );
        assert_eq!(
            names(&edges(&m)),
            [
                "frontend>checkout",
                "checkout>pricing",
                "pricing>inventory",
                "checkout>audit"
            ]
        );
    }

    #[test]
    fn a_service_two_callers_share_is_followed_once() {
        let m = mesh(
            "mesh: {name: t}\n\
             services:\n\
             \x20 db: {copies: 1}\n\
             \x20 b: {copies: 1, calls: {db: {}}}\n\
             \x20 a: {copies: 1, calls: {db: {}, b: {}}}\n",
        );
        assert_eq!(names(&edges(&m)), ["a>db", "a>b", "b>db"]);
    }
}
