//! Replicas sharing etcd: the changes their watch brings put in force ([`Plane::follow`],
//! [`Plane::resync`]), and this replica's records of its proxies written for the others.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use hopwise_model::Mesh;

use super::mode::{Mode, SHARED_LEASE_HORIZON, put_copy, revision};
use super::{Plane, ca_of};
use crate::registry::LeaseId;
use crate::store::etcd::{Change, Effect, Key};

/// What a batch of changes seen on the shared store did to this replica.
#[derive(Debug, Default)]
pub struct Followed {
    /// Something proxies may be sent changed: wake the streams it concerns
    /// ([`Plane::take_wake`]).
    pub publish: bool,
    /// Tokens changed: write the token files.
    pub tokens: bool,
    /// The trust bundle changed: write `ca.pem`.
    pub bundle: bool,
    /// Records that could not be read (kept as before), for the log.
    pub problems: Vec<String>,
}

/// Shared store: the records of proxies this replica is to write, attached to its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyWrites {
    pub lease: u64,
    /// Keys and values.
    pub puts: Vec<(String, Vec<u8>)>,
    /// Keys of records to delete (proxies whose records were pruned).
    pub deletes: Vec<String>,
}

impl Plane {
    /// Shared store: the revision at which the CA last changed. Snapshots from that version on,
    /// sent by any replica, carry its trust bundle: every replica's view is in revision order,
    /// and versions are the revision it is at. (Not the revision this replica's view reached
    /// when it took the change in: that may be later than any version the others' proxies
    /// were sent, and `reissue` would wait for a snapshot nobody sends.)
    pub(super) fn ca_revision(&self) -> Option<u64> {
        let view = self.store.etcd()?.view();
        Some(revision(view.modified(&Key::Ca))).filter(|r| *r > 0)
    }

    /// Shared store: the etcd lease this replica's records of proxies are attached to, newly
    /// granted (every record is written again: a lost lease took them with it), or lost.
    pub fn set_replica_lease(&mut self, lease: Option<u64>) {
        self.replica_lease = lease;
        if lease.is_some() {
            self.reshare_proxies();
        }
    }

    /// Shared store: every record of a proxy is to be written again (a write failed).
    pub fn reshare_proxies(&mut self) {
        self.mode.reshare(self.proxies.keys().cloned());
    }

    /// Shared store: what changed about `proxy` is to be written.
    pub(super) fn share(&mut self, service: &str, proxy: &str) {
        self.mode.share((service.to_owned(), proxy.to_owned()));
    }

    /// Shared store: the records of proxies to write now — keys and values, attached to the
    /// lease returned — each proxy's latest facts once. Empty without a lease (they wait).
    pub fn take_proxy_writes(&mut self) -> Option<ProxyWrites> {
        let lease = self.replica_lease?;
        let layout = self.store.etcd()?.view().layout().clone();
        let Mode::Shared(records) = &mut self.mode else {
            return None;
        };
        let dirty = std::mem::take(&mut records.dirty);
        let pruned = std::mem::take(&mut records.pruned);
        let puts = dirty
            .into_iter()
            .filter_map(|key| {
                let facts = self.proxies.get(&key)?.facts(&self.replica);
                let (service, proxy) = key;
                let key = layout.key(&Key::Proxy {
                    service,
                    proxy,
                    lease,
                });
                Some((key, facts.encode()))
            })
            .collect();
        let deletes = pruned
            .into_iter()
            .map(|(service, proxy)| {
                layout.key(&Key::Proxy {
                    service,
                    proxy,
                    lease,
                })
            })
            .collect();
        Some(ProxyWrites {
            lease,
            puts,
            deletes,
        })
    }

    /// A record of a proxy seen on the shared store ([`proxies::Remote::learn`]).
    pub(super) fn learn_proxy(&mut self, effect: &Effect) {
        self.remote.learn(self.replica_lease, effect);
    }

    /// Takes in changes seen on the shared store (the watch, in revision order): the view, the
    /// registry, and — when the CA, the mesh file or the tokens changed — what is in force.
    /// The version becomes the revision. Nothing happens with the embedded store.
    pub fn follow(&mut self, changes: &[Change], now: Instant, wall: SystemTime) -> Followed {
        let mut out = Followed::default();
        let Some(e) = self.store.etcd_mut() else {
            return out;
        };
        let (effects, problems) = e.view_mut().apply(changes);
        let rev = revision(e.view().revision());
        out.problems = problems;
        let far = now + SHARED_LEASE_HORIZON;
        for effect in effects {
            match effect {
                Effect::State => self.reload_shared(rev, wall, &mut out),
                put @ Effect::CopyPut { .. } => {
                    put_copy(&mut self.registry, put, far);
                    out.publish = true;
                }
                Effect::CopyGone { lease } => {
                    self.registry.deregister(LeaseId(lease));
                    out.publish = true;
                }
                // Nothing a proxy is sent: no stream wakes.
                proxy @ (Effect::ProxyPut { .. } | Effect::ProxyGone { .. }) => {
                    self.learn_proxy(&proxy);
                }
            }
        }
        self.changes = self.changes.max(rev);
        out
    }

    /// After the watch was broken: the whole prefix as read now (`changes`, at `at`). Keys the
    /// view holds that are gone, and copies that are gone, are removed.
    pub fn resync(
        &mut self,
        changes: Vec<Change>,
        at: i64,
        now: Instant,
        wall: SystemTime,
    ) -> Followed {
        let Some(e) = self.store.etcd() else {
            return Followed::default();
        };
        let layout = e.view().layout().clone();
        let present: std::collections::BTreeSet<&str> =
            changes.iter().map(|c| c.key.as_str()).collect();
        let mut all = e.view().missing(&present, at);
        for (id, c) in self.registry.copies() {
            let key = layout.key(&Key::Copy {
                service: c.service.clone(),
                lease: id.0,
            });
            if !present.contains(key.as_str()) {
                all.push(Change {
                    key,
                    value: None,
                    revision: at,
                });
            }
        }
        for (service, proxy, lease) in self.remote.keys() {
            let key = layout.key(&Key::Proxy {
                service: service.to_owned(),
                proxy: proxy.to_owned(),
                lease,
            });
            if !present.contains(key.as_str()) {
                all.push(Change {
                    key,
                    value: None,
                    revision: at,
                });
            }
        }
        all.extend(changes);
        self.follow(&all, now, wall)
    }

    /// The CA, the mesh file or the tokens changed in the shared store: put them in force.
    pub(super) fn reload_shared(&mut self, rev: u64, wall: SystemTime, out: &mut Followed) {
        let state = self.store.state().clone();
        let place = self.store.location();
        let text_in_force = self.mesh_text_in_force.clone();
        if let Some(m) = &state.mesh
            && m.text != text_in_force
        {
            match Mesh::from_yaml(&m.text) {
                Ok(mesh) => {
                    self.mesh = Arc::new(mesh);
                    self.mesh_text_in_force = m.text.clone();
                    self.everyone();
                    self.reoverlay();
                    out.publish = true;
                }
                Err(d) => out.problems.push(format!(
                    "the mesh file stored in {place} (version {}) is not valid, keeping the one \
                     in force:\n{}",
                    m.version,
                    d.render(&m.source)
                )),
            }
        }
        let bundle_before = self.ca.trust_bundle_pem();
        let signer_before = self.ca.signer_pem().to_owned();
        if state.ca.is_some() {
            match ca_of(&state, None, &self.mesh.name, &place, wall) {
                Ok((ca, _, _)) => {
                    let bundle = ca.trust_bundle_pem();
                    if bundle != bundle_before
                        || ca.signer_pem() != signer_before
                        || state.ca_generation != self.ca_generation
                    {
                        self.ca = Arc::new(ca);
                        self.ca_generation = state.ca_generation;
                        self.everyone();
                        out.publish = true;
                    }
                    if bundle != bundle_before {
                        self.bundle_version = self.ca_revision().unwrap_or(rev);
                        out.bundle = true;
                    }
                }
                Err(e) => out.problems.push(format!(
                    "the CA stored in {place}: {e}; keeping the one in force"
                )),
            }
        }
        if state.tokens != self.tokens_seen {
            self.tokens_seen = state.tokens.clone();
            out.tokens = true;
            // A rotated token: the streams opened with the old one must end here too.
            self.everyone();
            out.publish = true;
        }
    }
}
