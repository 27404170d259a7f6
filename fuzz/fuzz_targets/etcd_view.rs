//! The shared store's watch as a replica follows it: a run of etcd changes fed to
//! `store::etcd::View::apply` in batches, one change a line — `p REV KEY VALUE` (a put),
//! `s REV KEY VALUE` (a put of VALUE sealed at KEY under the replicas' store key), `x REV KEY
//! VALUE` (sealed under another key), `d REV KEY` (a delete), `|` (the batch so far is applied);
//! keys and values any text a line holds. Whoever can write etcd reaches this. Never a panic, and:
//! - a copy's or a proxy's change gives exactly its effect (`CopyPut`/`ProxyPut` with the value
//!   `decode` reads, or a problem when it does not; `CopyGone`/`ProxyGone` for a delete), in order;
//! - a state key's change older than the revision the view holds for it is skipped; a secret
//!   that does not open is a problem and is not taken; the state is what `decode_state` reads
//!   from the values taken (opened), and `Effect::State` comes, last, exactly when those values
//!   changed and read; a state that does not read leaves the one before in force;
//! - the revision is the highest seen; the same batch again (the watch's echo) changes no state;
//! - the view's own write (`plan` of a changed state, `committed` at a new revision), reported
//!   late by the watch with the bytes `stored` puts in etcd, is skipped; secrets go out sealed
//!   and open to what was planned.
#![no_main]

use std::collections::BTreeMap;

use hopwise_control::store::etcd::seal::{StoreKey, is_sealed};
use hopwise_control::store::etcd::{
    Change, CopyValue, Effect, Key, Keys, Layout, ProxyValue, View, decode_state,
};
use hopwise_control::store::{Secret, State};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let layout = Layout::new("/hopwise");
    let mut view = View::sealed(layout.clone(), keys(7));
    let mut model = Model::default();
    let mut batch = Vec::new();
    for line in text.lines().chain(["|"]) {
        if line == "|" {
            batch_applied(&mut view, &mut model, &std::mem::take(&mut batch));
        } else if let Some(c) = change(line) {
            batch.push(c);
        }
    }
    own_write_echoed(&mut view);
});

fn keys(byte: u8) -> Keys {
    Keys {
        current: StoreKey::parse(&[byte; 32]).expect("a 32-byte key"),
        previous: None,
    }
}

fn change(line: &str) -> Option<Change> {
    let mut parts = line.splitn(4, ' ');
    let (op, rev, key) = (parts.next()?, parts.next()?, parts.next()?);
    let revision = rev.parse().ok()?;
    let value = parts.next().unwrap_or("").as_bytes();
    let sealed = |with: u8| keys(with).seal(key, value).expect("sealed");
    let value = match op {
        "p" => Some(value.to_vec()),
        "s" => Some(sealed(7)),
        "x" => Some(sealed(9)),
        "d" => None,
        _ => return None,
    };
    Some(Change {
        key: key.to_owned(),
        value,
        revision,
    })
}

/// What the view should hold: the state keys' values taken (opened) and their revisions.
#[derive(Default)]
struct Model {
    raw: BTreeMap<String, Vec<u8>>,
    revs: BTreeMap<String, i64>,
    revision: i64,
}

fn batch_applied(view: &mut View, model: &mut Model, batch: &[Change]) {
    let before = view.state().clone();
    let (expected, problems, changed) = model.apply(view.layout(), batch);
    let (effects, reported) = view.apply(batch);
    let mut expected = expected;
    let mut problems = problems;
    if changed {
        match decode_state(view.layout(), &model.raw) {
            Ok(state) => {
                expected.push(Effect::State);
                assert_eq!(view.state(), &state, "the state is not what its keys read");
            }
            Err(_) => {
                problems += 1;
                assert_eq!(
                    view.state(),
                    &before,
                    "a state that does not read was taken"
                );
            }
        }
    } else {
        assert_eq!(
            view.state(),
            &before,
            "no state key changed, yet the state did"
        );
    }
    assert_eq!(effects, expected);
    assert_eq!(reported.len(), problems, "{reported:?}");
    assert_eq!(view.revision(), model.revision);
    // The watch's echo of the same batch: nothing new.
    let state = view.state().clone();
    let (again, _) = view.apply(batch);
    assert!(!again.contains(&Effect::State), "an echo changed the state");
    assert_eq!(view.state(), &state);
}

impl Model {
    /// The effects of the copies' and proxies' changes, the problems among them and the state
    /// keys', and whether a state key's value changed.
    fn apply(&mut self, layout: &Layout, batch: &[Change]) -> (Vec<Effect>, usize, bool) {
        let (mut effects, mut problems, mut changed) = (Vec::new(), 0, false);
        for c in batch {
            self.revision = self.revision.max(c.revision);
            match (layout.parse(&c.key), &c.value) {
                (None, _) => {}
                (Some(Key::Copy { lease, .. }), None) => effects.push(Effect::CopyGone { lease }),
                (Some(Key::Copy { service, lease }), Some(v)) => match CopyValue::decode(v) {
                    Some(value) => effects.push(Effect::CopyPut {
                        service,
                        lease,
                        value,
                    }),
                    None => problems += 1,
                },
                (
                    Some(Key::Proxy {
                        service,
                        proxy,
                        lease,
                    }),
                    None,
                ) => effects.push(Effect::ProxyGone {
                    service,
                    proxy,
                    lease,
                }),
                (
                    Some(Key::Proxy {
                        service,
                        proxy,
                        lease,
                    }),
                    Some(v),
                ) => match ProxyValue::decode(v) {
                    Some(value) => effects.push(Effect::ProxyPut {
                        service,
                        proxy,
                        lease,
                        value,
                    }),
                    None => problems += 1,
                },
                (Some(_), value) => match self.taken(layout, c, value.as_deref()) {
                    Err(()) => problems += 1,
                    Ok(None) => {}
                    Ok(Some(now)) => changed |= now,
                },
            }
        }
        (effects, problems, changed)
    }

    /// A state key's change: `Err` when its secret does not open (not taken), `Ok(None)` when
    /// older than what is held, else whether the value held changed.
    fn taken(
        &mut self,
        layout: &Layout,
        c: &Change,
        value: Option<&[u8]>,
    ) -> Result<Option<bool>, ()> {
        if self.revs.get(&c.key).is_some_and(|&r| r >= c.revision) {
            return Ok(None);
        }
        let value = match value {
            Some(v) if layout.is_secret(&c.key) && is_sealed(v) => {
                Some(keys(7).open(&c.key, v).map_err(|_| ())?.0)
            }
            other => other.map(<[u8]>::to_vec),
        };
        self.revs.insert(c.key.clone(), c.revision);
        if self.raw.get(&c.key) == value.as_ref() {
            return Ok(Some(false));
        }
        match value {
            Some(v) => self.raw.insert(c.key.clone(), v),
            None => self.raw.remove(&c.key),
        };
        Ok(Some(true))
    }
}

/// This replica writes a changed state (a new admin token); etcd accepts it at the next
/// revision and the watch reports it late, as stored: skipped, and the secret went out sealed.
fn own_write_echoed(view: &mut View) {
    let mut next: State = view.state().clone();
    next.admin_token = Some(Secret("hopwise-admin-fuzz".into()));
    let writes = view.plan(&next);
    let at = view.revision().saturating_add(1);
    let mut echo = Vec::new();
    for w in &writes {
        let stored = view.stored(w).expect("sealed");
        if let (true, Some(plain), Some(out)) = (view.layout().is_secret(&w.key), &w.value, &stored)
        {
            assert_eq!(&keys(7).open(&w.key, out).expect("opens").0, plain);
        }
        echo.push(Change {
            key: w.key.clone(),
            value: stored,
            revision: at,
        });
    }
    view.committed(&writes, next.clone(), at);
    assert!(view.plan(&next).is_empty(), "written, yet planned again");
    let (effects, problems) = view.apply(&echo);
    assert!(
        !effects.contains(&Effect::State),
        "its own echo changed the state"
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(view.state(), &next);
}
