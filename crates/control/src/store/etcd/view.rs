//! What one replica knows of the shared store: the [`View`] the watch feeds (changes in
//! revision order, its own late echoes skipped), and what each change means to the plane
//! ([`Effect`]). Secrets under `<prefix>/secret/` are opened as they come in and sealed as they
//! go out ([`View::stored`]), so the view compares values, not ciphertexts. Pure.

use std::collections::BTreeMap;

use super::seal::{self, Keys};
use super::{CopyValue, Key, Layout, ProxyValue, Write, decode_state, encode_state, plan};
use crate::store::State;

/// A change seen on the watch (or in a full read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    /// `None`: deleted (or its lease expired).
    pub value: Option<Vec<u8>>,
    /// The revision of this change.
    pub revision: i64,
}

/// What a change means to the plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The CA, the mesh file or the tokens changed: read [`View::state`] again.
    State,
    /// A copy registered, or its health changed.
    CopyPut {
        service: String,
        lease: u64,
        value: CopyValue,
    },
    /// A copy left (deregistered, or its lease expired).
    CopyGone { lease: u64 },
    /// What a replica (the one holding `lease`) knows of a proxy changed.
    ProxyPut {
        service: String,
        proxy: String,
        lease: u64,
        value: ProxyValue,
    },
    /// A replica's record of a proxy is gone (the replica stopped, or its lease expired).
    ProxyGone {
        service: String,
        proxy: String,
        lease: u64,
    },
}

/// The state as of the last revision seen, fed by the watch. Pure.
#[derive(Debug, Clone)]
pub struct View {
    layout: Layout,
    /// The state keys as stored.
    raw: BTreeMap<String, Vec<u8>>,
    /// Each state key's modification revision (also for deleted keys: the deletion's).
    revs: BTreeMap<String, i64>,
    pub(super) state: State,
    /// The highest revision seen.
    pub(super) revision: i64,
    /// The store key (`None`: secrets are written as they are, which only the tests do).
    keys: Option<Keys>,
    /// Secret keys stored in plaintext or under the previous store key: sealed again under the
    /// current one by [`View::reseal`].
    stale: std::collections::BTreeSet<String>,
    /// Secret keys whose stored value this replica cannot open, and why (their last opened
    /// value, if any, stays in force).
    unreadable: BTreeMap<String, seal::SealError>,
}

impl View {
    /// A view that writes secrets as they are (tests of the layout).
    pub fn new(layout: Layout) -> View {
        View {
            layout,
            raw: BTreeMap::new(),
            revs: BTreeMap::new(),
            state: State::default(),
            revision: 0,
            keys: None,
            stale: Default::default(),
            unreadable: BTreeMap::new(),
        }
    }

    /// A view whose secrets are sealed with `keys`.
    pub fn sealed(layout: Layout, keys: Keys) -> View {
        View {
            keys: Some(keys),
            ..View::new(layout)
        }
    }

    /// A stored secret opened: its value, and whether it is sealed under the current key.
    fn open(&self, key: &str, stored: &[u8]) -> Result<(Vec<u8>, bool), seal::SealError> {
        match (&self.keys, seal::is_sealed(stored)) {
            (Some(keys), true) => keys.open(key, stored),
            (None, true) => Err(seal::no_key(stored)),
            // Written before secrets were sealed: taken in, and sealed at the next reseal.
            (Some(_), false) => Ok((stored.to_vec(), false)),
            (None, false) => Ok((stored.to_vec(), true)),
        }
    }

    /// The bytes to put in etcd for `write`'s value: sealed under `<prefix>/secret/`.
    pub fn stored(&self, write: &Write) -> Result<Option<Vec<u8>>, seal::SealError> {
        match (&write.value, &self.keys) {
            (Some(v), Some(keys)) if self.layout.is_secret(&write.key) => {
                keys.seal(&write.key, v).map(Some)
            }
            (value, _) => Ok(value.clone()),
        }
    }

    /// The writes that seal again, under the current key, the secrets stored in plaintext or
    /// under the previous key (values unchanged).
    pub fn reseal(&self) -> Vec<Write> {
        self.stale
            .iter()
            .filter_map(|k| {
                Some(Write {
                    key: k.clone(),
                    value: Some(self.raw.get(k)?.clone()),
                    expect: self.revs.get(k).copied().unwrap_or(0),
                })
            })
            .collect()
    }

    /// The first secret this replica cannot open, and why.
    pub fn unreadable(&self) -> Option<(&str, &seal::SealError)> {
        self.unreadable.iter().next().map(|(k, e)| (k.as_str(), e))
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The revision at which the state key `key` last changed (0: never seen).
    pub fn modified(&self, key: &Key) -> i64 {
        self.revs.get(&self.layout.key(key)).copied().unwrap_or(0)
    }

    /// Applies changes in revision order. A change to a state key older than what the view
    /// holds (a write of this replica that the watch reports late) is skipped. A state key whose
    /// value does not decode is reported and the state before it is kept.
    pub fn apply(&mut self, changes: &[Change]) -> (Vec<Effect>, Vec<String>) {
        let mut effects = Vec::new();
        let mut problems = Vec::new();
        let mut state_changed = false;
        for c in changes {
            self.revision = self.revision.max(c.revision);
            match self.layout.parse(&c.key) {
                None => {}
                Some(Key::Copy { service, lease }) => match &c.value {
                    None => effects.push(Effect::CopyGone { lease }),
                    Some(bytes) => match CopyValue::decode(bytes) {
                        Some(value) => effects.push(Effect::CopyPut {
                            service,
                            lease,
                            value,
                        }),
                        None => problems.push(format!("{}: not a copy's record", c.key)),
                    },
                },
                Some(Key::Proxy {
                    service,
                    proxy,
                    lease,
                }) => match &c.value {
                    None => effects.push(Effect::ProxyGone {
                        service,
                        proxy,
                        lease,
                    }),
                    Some(bytes) => match ProxyValue::decode(bytes) {
                        Some(value) => effects.push(Effect::ProxyPut {
                            service,
                            proxy,
                            lease,
                            value,
                        }),
                        None => problems.push(format!("{}: not a proxy's record", c.key)),
                    },
                },
                Some(_) => {
                    if self.revs.get(&c.key).is_some_and(|&r| r >= c.revision) {
                        continue;
                    }
                    let value = match &c.value {
                        Some(stored) if self.layout.is_secret(&c.key) => {
                            match self.open(&c.key, stored) {
                                Ok((plain, current)) => {
                                    self.unreadable.remove(&c.key);
                                    if current {
                                        self.stale.remove(&c.key);
                                    } else {
                                        self.stale.insert(c.key.clone());
                                    }
                                    Some(plain)
                                }
                                // Its revision is not taken: a write of ours over it would
                                // not be guarded by a value this replica never understood.
                                Err(e) => {
                                    problems.push(format!("{}: {e}", c.key));
                                    self.unreadable.insert(c.key.clone(), e);
                                    continue;
                                }
                            }
                        }
                        other => {
                            self.unreadable.remove(&c.key);
                            self.stale.remove(&c.key);
                            other.clone()
                        }
                    };
                    self.revs.insert(c.key.clone(), c.revision);
                    let before = self.raw.get(&c.key);
                    if before == value.as_ref() {
                        continue;
                    }
                    match &value {
                        Some(v) => self.raw.insert(c.key.clone(), v.clone()),
                        None => self.raw.remove(&c.key),
                    };
                    state_changed = true;
                }
            }
        }
        if state_changed {
            match decode_state(&self.layout, &self.raw) {
                Ok(state) => {
                    self.state = state;
                    effects.push(Effect::State);
                }
                Err((key, reason)) => problems.push(format!(
                    "{key} is not a hopwise record ({reason}); keeping the state before it"
                )),
            }
        }
        (effects, problems)
    }

    /// Deletions, at revision `at`, of the state keys the view holds that are not `present`
    /// (a full read after the watch broke).
    pub fn missing(&self, present: &std::collections::BTreeSet<&str>, at: i64) -> Vec<Change> {
        self.raw
            .keys()
            .filter(|k| !present.contains(k.as_str()))
            .map(|k| Change {
                key: k.clone(),
                value: None,
                revision: at,
            })
            .collect()
    }

    /// The writes that make `next` the state.
    pub fn plan(&self, next: &State) -> Vec<Write> {
        plan(&self.raw, &encode_state(&self.layout, next), &self.revs)
    }

    /// Records writes that etcd accepted at `revision`.
    pub fn committed(&mut self, writes: &[Write], next: State, revision: i64) {
        for w in writes {
            self.stale.remove(&w.key);
            self.unreadable.remove(&w.key);
            match &w.value {
                Some(v) => self.raw.insert(w.key.clone(), v.clone()),
                None => self.raw.remove(&w.key),
            };
            self.revs.insert(w.key.clone(), revision);
        }
        self.state = next;
        self.revision = self.revision.max(revision);
    }
}
