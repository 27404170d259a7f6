//! The front door `up` runs (issue 29): the shop is reached as a client outside the mesh
//! reaches it, through a gateway, at one URL. A file with a gateway of its own keeps it (the
//! first one's plain listener is the URL). Otherwise `up` serves the control plane a copy of
//! the file with one added: `services.gateway` (`gateway-2`, … when the name is taken), plain
//! HTTP on a port of the run, every request to the entry service, called with the entry's own
//! timeout — so `check`, the control plane, the proxies and the dashboard see it as any
//! service, with its own identity. Pure: text in, text out, the result read back by the
//! model's parser (a file it cannot edit is served as written, without a gateway, and says so).

use std::net::SocketAddr;

use hopwise_model::Mesh;

use super::traces::{block, child_indent, with_lines};

/// The file as `up` serves it, and its front door.
#[derive(Debug, Clone, PartialEq)]
pub struct Fronted {
    pub text: String,
    /// The gateway service and its plain listener, if the served file has one.
    pub gateway: Option<(String, SocketAddr)>,
    /// What `up` says about it.
    pub note: String,
}

/// What `up` puts in front of the file, applied again at each edit of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Front {
    /// The service it sends to ([`super::plan::Plan::entry_of`]).
    pub entry: Option<String>,
    /// Its plain listener, a port of the run.
    pub listen: SocketAddr,
}

impl Front {
    pub fn apply(&self, text: &str) -> Fronted {
        fronted(text, self.entry.as_deref(), self.listen)
    }
}

/// `text` with a gateway in front of `entry` listening on `listen`, unless it has one.
pub fn fronted(text: &str, entry: Option<&str>, listen: SocketAddr) -> Fronted {
    let as_written = |gateway, note: &str| Fronted {
        text: text.to_owned(),
        gateway,
        note: note.to_owned(),
    };
    let Ok(mesh) = Mesh::from_yaml(text) else {
        return as_written(None, "");
    };
    let own = mesh.services.values().find_map(|s| {
        let http = s.gateway.as_ref()?.http?;
        Some((s.name.clone(), http))
    });
    if let Some(own) = own {
        return as_written(Some(own), "gateway: the file's own");
    }
    let Some(entry) = entry.and_then(|e| mesh.services.get(e)) else {
        return as_written(None, "gateway: none (no entry service runs here)");
    };
    let name = (1..)
        .map(|i| match i {
            1 => "gateway".to_owned(),
            i => format!("gateway-{i}"),
        })
        .find(|n| !mesh.services.contains_key(n))
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = block(&lines, "services", 0, 0) else {
        return as_written(
            None,
            "gateway: none (`services` is not a block `up` can extend)",
        );
    };
    let pad = " ".repeat(child_indent(&lines, at));
    let call = match entry.entry.and_then(|e| e.timeout) {
        Some(t) => format!("{{ timeout: {t} }}"),
        None => "{}".to_owned(),
    };
    let added = [
        format!("{pad}# added by `hopwise up`: the front door (docs/up.md)"),
        format!("{pad}{name}:"),
        format!("{pad}  gateway: {{ http: {{ listen: '{listen}' }} }}"),
        format!(
            "{pad}  routes: {{ front: {{ rules: [{{ backends: [{{ service: {} }}] }}] }} }}",
            entry.name
        ),
        format!("{pad}  calls: {{ {}: {call} }}", entry.name),
    ];
    let edited = with_lines(&lines, Some(at), &added);
    if !Mesh::from_yaml(&edited)
        .is_ok_and(|m| m.services.get(&name).is_some_and(|s| s.gateway.is_some()))
    {
        return as_written(
            None,
            "gateway: none (the file could not be extended with one)",
        );
    }
    let refused = match &entry.allow {
        hopwise_model::Allow::Only(list) if !list.contains(&name) => format!(
            " — but services.{}.allow does not name `{name}`: add it, or its requests are refused (403)",
            entry.name
        ),
        _ => String::new(),
    };
    Fronted {
        text: edited,
        gateway: Some((name.clone(), listen)),
        note: format!("gateway: `{name}` in front of {}{refused}", entry.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 4998))
    }

    #[test]
    fn the_shop_gets_a_gateway_in_front_of_its_entry_with_the_entrys_timeout() {
        let text = include_str!("../../../../examples/shop/mesh.yaml");
        let f = fronted(text, Some("frontend"), at());
        assert_eq!(f.gateway, Some(("gateway".to_owned(), at())), "{}", f.note);
        let mesh = Mesh::from_yaml(&f.text).unwrap();
        let g = &mesh.services["gateway"];
        assert_eq!(g.gateway.as_ref().and_then(|g| g.http), Some(at()));
        let call = &g.calls[0];
        assert_eq!(call.to, "frontend");
        assert_eq!(
            call.policy.timeout.map(|t| t.to_string()),
            Some("3s".to_owned())
        );
        // Everything else as written, and frontend still an entry of the mesh.
        assert!(f.text.contains(text.lines().last().unwrap()));
        assert!(mesh.entries().iter().any(|s| s.name == "frontend"));
    }

    #[test]
    fn a_files_own_gateway_is_kept_and_a_taken_name_is_not_reused() {
        let own = "services:\n  edge:\n    gateway: { http: { listen: '127.0.0.1:8080' } }\n    routes: { r: { rules: [{ backends: [{ service: a }] }] } }\n    calls: { a: {} }\n  a: {}\n";
        let f = fronted(own, Some("a"), at());
        assert_eq!(f.text, own);
        assert_eq!(
            f.gateway,
            Some(("edge".to_owned(), "127.0.0.1:8080".parse().unwrap()))
        );
        let taken = "services:\n  gateway: {}\n  a: { allow: [gateway] }\n";
        let f = fronted(taken, Some("a"), at());
        assert_eq!(
            f.gateway.map(|g| g.0),
            Some("gateway-2".to_owned()),
            "{}",
            f.note
        );
        assert!(
            f.note.contains("allow does not name `gateway-2`"),
            "{}",
            f.note
        );
        let none = fronted("services:\n  a: {}\n", None, at());
        assert_eq!(
            (none.gateway, none.text.as_str()),
            (None, "services:\n  a: {}\n")
        );
    }
}
