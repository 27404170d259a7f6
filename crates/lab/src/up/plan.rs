//! What `hopwise up` runs for a mesh file, and on which ports. Pure: the mesh and a source of
//! free ports in, the processes out (the caller hands it ports it holds for the run).
//!
//! - a service with `sample: chain|leaf`: per copy, the sample app and its proxy;
//! - a service with `sample: fee` (external): one fee app on the port of its `address`;
//! - a service with `run` (the user's own command): per copy, the command and its proxy;
//! - a service without either whose copies give `app`: its proxy only (the user runs the app);
//! - an external service without `sample`: nothing (it runs elsewhere);
//! - a gateway (`gateway:`, or the one `up` adds, [`super::gateway`]): its proxy alone, at its
//!   listener, with an admin port.
//!
//! Addresses written in the file are used as written; the rest come from the port source.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use hopwise_model::{Mesh, Protocol, Run, SampleKind};

/// Everything one `up` runs, in the mesh file's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub services: Vec<Planned>,
    /// Where load goes: the first entry service that runs here.
    pub entry: Option<String>,
    /// The front door: the first gateway with a plain listener (the URL `up` prints).
    pub gateway: Option<PlannedGateway>,
}

/// A gateway's proxy: no app, no inbound port (nothing in the mesh calls it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedGateway {
    pub name: String,
    /// Its plain HTTP listener.
    pub http: SocketAddr,
    pub admin: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub name: String,
    /// `None`: the user's own app (its command, or only its proxy, runs).
    pub sample: Option<SampleKind>,
    /// The user's own command, run per copy ([`super::command`]).
    pub run: Option<Run>,
    pub protocol: Protocol,
    pub copies: Vec<PlannedCopy>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCopy {
    pub copy: usize,
    /// Where the app is reached from the host (a captured copy: its namespace's address,
    /// while it listens on its own loopback on the same port, [`super::captured`]).
    pub app: SocketAddr,
    /// The sample's fault knobs; `None` for a user's app.
    pub knobs: Option<SocketAddr>,
    /// The sidecar; `None` for a service outside the mesh (the fee).
    pub proxy: Option<ProxyPorts>,
    /// Run in its own network namespace ([`super::captured`]).
    pub captured: bool,
    /// The services a captured copy's app calls by name (theirs resolves in its namespace).
    pub by_name: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPorts {
    pub inbound: SocketAddr,
    pub admin: SocketAddr,
    /// A local port per service called, in call order; the app calls them there.
    pub upstreams: Vec<(String, SocketAddr)>,
}

/// Why a mesh file cannot be run by `up`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "services.{0}: no `sample`, no `run` and no `copies[].app`: `hopwise up` has nothing to run for it (add `sample: chain` or `sample: leaf`, your command as `run: [...]`, or the address of your app under `copies`)"
    )]
    NoApp(String),
    #[error(
        "services.{0}.copies[{1}]: no `app`, and the service has no `sample` or `run`: give every copy its app's address"
    )]
    CopyWithoutApp(String, usize),
    #[error(
        "services.{service}: copy {copy} has no address in mesh.capture.range ({range}) to run captured in: widen the range"
    )]
    NoCaptureRoom {
        service: String,
        copy: usize,
        range: String,
    },
    #[error(
        "services.{service}.external.address: `{address}` is not a local port `up` can serve the fee on ({why})"
    )]
    FeeAddress {
        service: String,
        address: String,
        why: &'static str,
    },
}

impl Planned {
    /// The path its proxies probe, when `up` knows it: a sample's, or a command's declared
    /// one. `up` then waits for its copies to be healthy, not only registered (a user's app
    /// may answer the proxy's default `/` as it likes).
    pub fn health_path(&self) -> Option<&str> {
        match (&self.sample, &self.run) {
            (Some(_), _) => Some(crate::samples::apps::HEALTH_PATH),
            (None, Some(run)) => run.health_path.as_deref(),
            (None, None) => None,
        }
    }
}

impl Plan {
    /// Plans `mesh`; `port` gives a free 127.0.0.1 address each time it is called.
    pub fn new(mesh: &Mesh, port: &mut dyn FnMut() -> SocketAddr) -> Result<Plan, PlanError> {
        let mut services = Vec::new();
        let mut gateway = None;
        for s in mesh.services.values() {
            if let Some(g) = &s.gateway {
                // Only the first with a plain listener runs: it is the URL `up` prints.
                if let (None, Some(http)) = (&gateway, g.http) {
                    gateway = Some(PlannedGateway {
                        name: s.name.clone(),
                        http,
                        admin: port(),
                    });
                }
                continue;
            }
            if let Some(e) = &s.external {
                if s.sample == Some(SampleKind::Fee) {
                    services.push(Planned {
                        name: s.name.clone(),
                        sample: s.sample,
                        run: None,
                        protocol: s.protocol,
                        copies: vec![PlannedCopy {
                            copy: 0,
                            app: local_address(&s.name, &e.address)?,
                            knobs: Some(port()),
                            proxy: None,
                            captured: false,
                            by_name: Vec::new(),
                        }],
                    });
                }
                continue;
            }
            let runs_here = s.sample.is_some() || s.run.is_some();
            if !runs_here && s.copies.iter().all(|c| c.app.is_none()) {
                return Err(PlanError::NoApp(s.name.clone()));
            }
            let listed = if s.copies.is_empty() {
                vec![Default::default()]
            } else {
                s.copies.clone()
            };
            let mut copies = Vec::new();
            for (i, c) in listed.iter().enumerate() {
                let app = match c.app {
                    Some(a) => a,
                    None if runs_here => port(),
                    None => return Err(PlanError::CopyWithoutApp(s.name.clone(), i)),
                };
                let mut upstreams: Vec<(String, SocketAddr)> = Vec::new();
                for call in &s.calls {
                    if upstreams.iter().any(|(n, _)| *n == call.to) {
                        continue;
                    }
                    let addr = c
                        .upstreams
                        .get(&call.to)
                        .copied()
                        .unwrap_or_else(&mut *port);
                    upstreams.push((call.to.clone(), addr));
                }
                copies.push(PlannedCopy {
                    copy: i,
                    app,
                    knobs: s.sample.map(|_| port()),
                    proxy: Some(ProxyPorts {
                        inbound: c.inbound.unwrap_or_else(&mut *port),
                        admin: c.admin.unwrap_or_else(&mut *port),
                        upstreams,
                    }),
                    captured: false,
                    by_name: Vec::new(),
                });
            }
            services.push(Planned {
                name: s.name.clone(),
                sample: s.sample,
                run: s.run.clone(),
                protocol: s.protocol,
                copies,
            });
        }
        let entry = mesh
            .entries()
            .iter()
            .find(|e| {
                services
                    .iter()
                    .any(|p| p.name == e.name && e.external.is_none())
            })
            .map(|e| e.name.clone());
        Ok(Plan {
            services,
            entry,
            gateway,
        })
    }

    /// The service `up` puts a gateway in front of: the first entry that runs here.
    pub fn entry_of(mesh: &Mesh) -> Option<String> {
        let runs = |s: &&hopwise_model::Service| {
            s.external.is_none()
                && s.gateway.is_none()
                && (s.sample.is_some()
                    || s.run.is_some()
                    || s.copies.iter().any(|c| c.app.is_some()))
        };
        mesh.entries()
            .into_iter()
            .find(runs)
            .map(|s| s.name.clone())
    }

    pub fn service(&self, name: &str) -> Option<&Planned> {
        self.services.iter().find(|s| s.name == name)
    }

    /// How many ports [`Plan::new`] may ask for, at most (to reserve them in one go).
    pub fn ports_needed(mesh: &Mesh) -> usize {
        mesh.services
            .values()
            .map(|s| {
                let copies = s.copies.len().max(1);
                // app, knobs, inbound, admin, and one per callee
                copies * (4 + s.calls.len())
            })
            .sum::<usize>()
            // the gateway `up` may add: its listener and admin port
            + 2
    }
}

/// The fee's `address` as a local socket address (`localhost` is 127.0.0.1).
fn local_address(service: &str, address: &str) -> Result<SocketAddr, PlanError> {
    let bad = |why| PlanError::FeeAddress {
        service: service.to_owned(),
        address: address.to_owned(),
        why,
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
    if port == 0 {
        return Err(bad("port 0"));
    }
    let ip = match host.trim_matches(['[', ']']) {
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h
            .parse::<IpAddr>()
            .map_err(|_| bad("not localhost or an IP address"))?,
    };
    if !ip.is_loopback() {
        return Err(bad("not a loopback address"));
    }
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports 20000, 20001, … in order, so the plan can be read off exactly.
    fn counter() -> impl FnMut() -> SocketAddr {
        let mut next = 20_000u16;
        move || {
            next += 1;
            SocketAddr::from(([127, 0, 0, 1], next - 1))
        }
    }

    fn plan(yaml: &str) -> Result<Plan, PlanError> {
        let mesh = Mesh::from_yaml(yaml)
            .map_err(|d| d.render("test"))
            .unwrap_or_else(|e| {
                panic!("{e}");
            });
        Plan::new(&mesh, &mut counter())
    }

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn the_shop_runs_a_sample_and_a_proxy_per_copy() {
        let text = include_str!("../../../../examples/shop/mesh.yaml");
        let p = plan(text).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<(&str, usize)> = p
            .services
            .iter()
            .map(|s| (s.name.as_str(), s.copies.len()))
            .collect();
        assert_eq!(
            names,
            [
                ("frontend", 1),
                ("checkout", 1),
                ("pricing", 2),
                ("inventory", 1)
            ]
        );
        assert_eq!(p.entry.as_deref(), Some("frontend"));
        // frontend: app, its upstream port for checkout, knobs, inbound, admin — in that order.
        let f = &p.services[0].copies[0];
        assert_eq!(f.app, a(20_000));
        let proxy = f.proxy.clone().unwrap_or_else(|| panic!("no proxy"));
        assert_eq!(proxy.upstreams, [("checkout".to_owned(), a(20_001))]);
        assert_eq!(f.knobs, Some(a(20_002)));
        assert_eq!((proxy.inbound, proxy.admin), (a(20_003), a(20_004)));
        let pricing = &p.services[2];
        assert_eq!(pricing.protocol, Protocol::Grpc);
        assert_eq!(pricing.sample, Some(SampleKind::Chain));
        assert_eq!(pricing.copies[1].copy, 1);
        // Every address distinct.
        let mut all: Vec<SocketAddr> = p
            .services
            .iter()
            .flat_map(|s| s.copies.iter())
            .flat_map(|c| {
                let mut v = vec![c.app];
                v.extend(c.knobs);
                if let Some(x) = &c.proxy {
                    v.extend([x.inbound, x.admin]);
                    v.extend(x.upstreams.iter().map(|(_, a)| *a));
                }
                v
            })
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(n <= Plan::ports_needed(&Mesh::from_yaml(text).unwrap_or_else(|_| panic!())));
    }

    #[test]
    fn addresses_in_the_file_are_kept_and_the_fee_serves_on_its_own() {
        let text = include_str!("../../../../examples/library/mesh.yaml");
        let p = plan(text).unwrap_or_else(|e| panic!("{e}"));
        let loan = &p.services[0].copies[0];
        assert_eq!(loan.app, a(8753));
        let proxy = loan.proxy.clone().unwrap_or_else(|| panic!("no proxy"));
        assert_eq!(proxy.admin, a(8758));
        assert_eq!(proxy.upstreams, [("fee".to_owned(), a(8754))]);
        let fee = &p.services[1];
        assert_eq!(fee.sample, Some(SampleKind::Fee));
        assert_eq!(fee.copies[0].app, a(8751));
        assert!(fee.copies[0].proxy.is_none() && fee.copies[0].knobs.is_some());
        assert_eq!(p.entry.as_deref(), Some("loan"));
    }

    #[test]
    fn a_users_app_gets_only_a_proxy_and_must_say_where_it_is() {
        let p = plan(
            "services:\n  a: { copies: [{ app: 127.0.0.1:9000 }], calls: { b: {} } }\n  b: { sample: leaf, copies: 2 }\n  x: { external: { address: x.example:1 } }\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.services[0].sample, None);
        assert_eq!(p.services[0].copies[0].knobs, None);
        assert_eq!(
            p.services.len(),
            2,
            "the external service runs nothing here"
        );
        assert_eq!(
            plan("services:\n  a: {}\n").err(),
            Some(PlanError::NoApp("a".into()))
        );
        assert_eq!(
            plan("services:\n  a: { copies: [{ app: 127.0.0.1:9000 }, {}] }\n").err(),
            Some(PlanError::CopyWithoutApp("a".into(), 1))
        );
        let far = plan(
            "services:\n  a: { sample: chain, calls: { f: {} } }\n  f: { sample: fee, external: { address: fee.example:443, tls: {} } }\n",
        );
        assert!(matches!(far, Err(PlanError::FeeAddress { .. })), "{far:?}");
    }
}
