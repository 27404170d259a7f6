//! Services by namespace. Kubernetes names a service by its name *and* namespace, so two
//! namespaces may each have a `reviews`; a host written as a short name (`reviews`) is in the
//! namespace of the object that writes it, and `reviews.bookinfo`, `reviews.bookinfo.svc` and
//! `reviews.bookinfo.svc.cluster.local` all name the same service. The translators key each
//! host as `name.namespace` ([`key`]); [`settle`] then gives every service its name in the mesh
//! file: its own where one namespace has it, `reviews_bookinfo` where several do (a mesh file's
//! service name is lowercase letters, digits, `-` and `_`), and rewrites the calls to match.
//! A call that names `reviews` when several namespaces have one is refused at its line.

use hopwise_model::read::valid_name;
use indexmap::IndexMap;

use crate::calls::Calls;
use crate::ir::{Host, Translation};
use crate::problem::Problem;

/// A host (`reviews`, `reviews.bookinfo.svc.cluster.local`) written in an object of namespace
/// `ns`, as a key: `reviews.bookinfo`, or `reviews` where no namespace is known. A DNS name
/// outside the cluster's (`api.example.com`) is its first label.
pub fn key(host: &str, ns: Option<&str>) -> String {
    let labels: Vec<&str> = host.split('.').collect();
    let (name, ns) = match labels.as_slice() {
        [name] => (*name, ns),
        [name, ns] | [name, ns, "svc", ..] => (*name, Some(*ns)),
        [name, ..] => (*name, None),
        [] => (host, ns),
    };
    match ns {
        Some(ns) if !ns.is_empty() => format!("{name}.{ns}"),
        _ => name.to_owned(),
    }
}

fn split(key: &str) -> (&str, Option<&str>) {
    match key.split_once('.') {
        Some((n, ns)) => (n, Some(ns)),
        None => (key, None),
    }
}

/// Each key's service name in the mesh file.
struct Naming {
    /// Per short name, the namespaces that have it, in the order met.
    spaces: IndexMap<String, Vec<String>>,
}

impl Naming {
    fn new<'k>(keys: impl Iterator<Item = &'k str>) -> Naming {
        let mut spaces: IndexMap<String, Vec<String>> = IndexMap::new();
        for k in keys {
            let (name, ns) = split(k);
            let list = spaces.entry(name.to_owned()).or_default();
            if let Some(ns) = ns
                && !list.iter().any(|n| n == ns)
            {
                list.push(ns.to_owned());
            }
        }
        Naming { spaces }
    }

    /// The service `key` names, or why it names none.
    fn name(&self, key: &str) -> Result<String, String> {
        let (name, ns) = split(key);
        let spaces = self.spaces.get(name).map_or(&[][..], Vec::as_slice);
        let out = match (ns, spaces) {
            (Some(ns), [_, _, ..]) => format!("{name}_{ns}"),
            (None, [_, _, ..]) => {
                return Err(format!(
                    "`{name}` is a service in namespaces {}: write which one (`{name}.{}`)",
                    spaces.join(", "),
                    spaces[0]
                ));
            }
            _ => name.to_owned(),
        };
        if valid_name(&out) {
            Ok(out)
        } else {
            Err(format!(
                "`{out}` is not a service name a mesh file can hold (lowercase letters, digits, `-`, `_`; 63 at most)"
            ))
        }
    }
}

/// The translation and calls with every service under its mesh-file name.
pub fn settle(t: Translation, calls: Calls, problems: &mut Vec<Problem>) -> (Translation, Calls) {
    let mut names: Vec<&str> = t.hosts.keys().map(String::as_str).collect();
    names.extend(
        calls
            .calls
            .iter()
            .flat_map(|c| [c.from.as_str(), c.to.as_str()]),
    );
    names.extend(calls.entries.iter().map(|e| e.service.as_str()));
    let naming = Naming::new(names.into_iter());
    let mut hosts: IndexMap<String, Host> = IndexMap::new();
    let Translation {
        hosts: old,
        mesh_default,
        read,
        skipped,
        seen,
    } = t;
    for (k, h) in old {
        // A host no call can name (it is ambiguous) keeps its key; nothing reaches it.
        let name = naming.name(&k).unwrap_or(k);
        match hosts.get_mut(&name) {
            Some(into) => merge(into, h),
            None => {
                hosts.insert(name, h);
            }
        }
    }
    let mut calls = calls;
    let mut fail = |at: &crate::node::At, m: String| {
        problems.push(Problem {
            file: at.file.clone(),
            pos: Some(at.pos),
            object: None,
            message: m,
        })
    };
    for c in &mut calls.calls {
        for s in [&mut c.from, &mut c.to] {
            match naming.name(s) {
                Ok(n) => *s = n,
                Err(m) => fail(&c.at, m),
            }
        }
    }
    for e in &mut calls.entries {
        match naming.name(&e.service) {
            Ok(n) => e.service = n,
            Err(m) => fail(&e.at, m),
        }
    }
    let t = Translation {
        hosts,
        mesh_default,
        read,
        skipped,
        seen,
    };
    (t, calls)
}

/// Two keys of one service (an object without a namespace, and one with the only namespace).
fn merge(into: &mut Host, h: Host) {
    into.routes.extend(h.routes);
    into.base = into.base.take().or(h.base);
    into.destination = into.destination.take().or(h.destination);
    into.protocol = into.protocol.take().or(h.protocol);
    for (k, v) in h.subsets {
        into.subsets.entry(k).or_insert(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_name_and_its_dns_names_are_one_key() {
        for host in [
            "reviews.bookinfo.svc.cluster.local",
            "reviews.bookinfo.svc",
            "reviews.bookinfo",
        ] {
            assert_eq!(key(host, Some("other")), "reviews.bookinfo");
        }
        assert_eq!(key("reviews", Some("bookinfo")), "reviews.bookinfo");
        assert_eq!(key("reviews", None), "reviews");
        assert_eq!(key("api.example.com", Some("bookinfo")), "api");
    }

    #[test]
    fn names_are_qualified_only_where_namespaces_share_one() {
        let n =
            Naming::new(["reviews.bookinfo", "reviews.staging", "ratings.bookinfo"].into_iter());
        assert_eq!(n.name("reviews.staging").unwrap(), "reviews_staging");
        assert_eq!(n.name("ratings").unwrap(), "ratings");
        assert_eq!(n.name("ratings.bookinfo").unwrap(), "ratings");
        assert!(n.name("reviews").unwrap_err().contains("bookinfo, staging"));
    }
}
