//! The whole graph checked once every service and call is resolved: what one service's fields
//! cannot say alone (names that must exist, cycles, the topology, the gateways), each problem
//! with its path and line.

use super::*;

pub(super) fn validate(mesh: &Mesh, diags: &mut Vec<Diagnostic>) {
    // An empty mesh is worth saying only when nothing else explains it.
    if mesh.services.is_empty() && diags.is_empty() {
        let mut d = mesh.diag("services", "the mesh has no services".to_owned());
        d.pos = d.pos.or(Some(crate::diag::Pos { line: 1, column: 1 }));
        diags.push(d);
    }
    observe::check(mesh, diags);
    crate::kubernetes::check_distinct(mesh, diags);
    for call in mesh.calls() {
        let target = format!("services.{}.calls.{}", call.from, call.to);
        if !mesh.services.contains_key(&call.to) {
            let known: Vec<&str> = mesh.services.keys().map(String::as_str).collect();
            // One report per call, not per route.
            if call.route.is_none() || !diags.iter().any(|d| d.path == target) {
                diags.push(mesh.diag(
                    &target,
                    format!(
                        "calls `{}`, which is not a service in this file (services: {})",
                        call.to,
                        known.join(", ")
                    ),
                ));
            }
        }
        let p = &call.policy;
        if let (Some(per_try), Some(timeout)) = (p.per_try_timeout, p.timeout)
            && per_try > timeout
        {
            diags.push(mesh.diag(
                &format!("{}.per_try_timeout", call.path),
                format!(
                    "the per-try timeout {per_try} is longer than the route timeout {timeout}, so it can never fire"
                ),
            ));
        }
        let b = p.retry.backoff;
        if b.max < b.base {
            diags.push(mesh.diag(
                &format!("{}.retries.backoff.max", call.path),
                format!(
                    "the back-off max {} is shorter than its base {}",
                    b.max, b.base
                ),
            ));
        }
        if call.protocol == Protocol::Grpc && call.method != "POST" {
            diags.push(mesh.diag(
                &format!("{}.method", call.path),
                format!("gRPC calls are POST; `{}` cannot be used", call.method),
            ));
        }
    }
    report_cycles(mesh, diags);
    topology::validate(mesh, diags);
    crate::gateway::check(mesh, diags);
    for s in mesh.services.values() {
        let named = match &s.allow {
            Allow::Any => Vec::new(),
            Allow::Only(list) => list.iter().map(|n| ("allow".to_owned(), n)).collect(),
        };
        let in_paths = s
            .allow_paths
            .iter()
            .flat_map(|(p, list)| list.iter().map(move |n| (format!("allow_paths.{p}"), n)));
        for (field, name) in named.into_iter().chain(in_paths) {
            // A ServiceAccount no service runs as was reported by `resolve_allowed_accounts`.
            if !mesh.services.contains_key(name) && crate::kubernetes::account_of(name).is_none() {
                let path = format!("services.{}.{field}", s.name);
                diags.push(mesh.diag(
                    &path,
                    format!("allows `{name}`, which is not a service in this file"),
                ));
            }
        }
    }
}

/// Finds cycles in the call graph; each is reported once, at the call that closes it.
fn report_cycles(mesh: &Mesh, diags: &mut Vec<Diagnostic>) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        mesh: &Mesh,
        name: &str,
        marks: &mut IndexMap<String, Mark>,
        stack: &mut Vec<String>,
        diags: &mut Vec<Diagnostic>,
    ) {
        marks.insert(name.to_owned(), Mark::Open);
        stack.push(name.to_owned());
        if let Some(s) = mesh.services.get(name) {
            let mut seen: Vec<&str> = Vec::new();
            for call in &s.calls {
                if seen.contains(&call.to.as_str()) {
                    continue;
                }
                seen.push(&call.to);
                match marks.get(&call.to).copied() {
                    Some(Mark::New) => visit(mesh, &call.to, marks, stack, diags),
                    Some(Mark::Open) => {
                        let start = stack.iter().position(|s| *s == call.to).unwrap_or(0);
                        let mut cycle = stack[start..].to_vec();
                        cycle.push(call.to.clone());
                        diags.push(mesh.diag(
                            &format!("services.{}.calls.{}", call.from, call.to),
                            format!(
                                "the calls form a cycle: {}; a request could loop forever",
                                cycle.join(" → ")
                            ),
                        ));
                    }
                    _ => {}
                }
            }
        }
        stack.pop();
        marks.insert(name.to_owned(), Mark::Done);
    }
    let mut marks: IndexMap<String, Mark> = mesh
        .services
        .keys()
        .map(|k| (k.clone(), Mark::New))
        .collect();
    let names: Vec<String> = mesh.services.keys().cloned().collect();
    for name in names {
        if marks.get(&name) == Some(&Mark::New) {
            visit(mesh, &name, &mut marks, &mut Vec::new(), diags);
        }
    }
}
