//! Readers for single values of the mesh file: counts, caps that must be positive, durations,
//! timeouts, and `none` where a value can be switched off.

use super::OrNone;
use crate::duration::Dur;
use crate::read::Reader;
use crate::yaml::{Node, Value};

pub(super) fn u32_field(r: &mut Reader, n: &Node, p: &str) -> Option<u32> {
    r.count(n, p, u32::MAX.into()).map(|v| v as u32)
}

/// A port, 1 to 65535.
pub(super) fn port(r: &mut Reader, n: &Node, p: &str) -> Option<u16> {
    let v = r.count(n, p, u64::from(u16::MAX))?;
    if v == 0 {
        r.error(p, n.pos, "port 0 is not a port: write one from 1 to 65535");
        return None;
    }
    Some(v as u16)
}

pub(super) fn positive_u32(r: &mut Reader, n: &Node, p: &str) -> Option<u32> {
    let v = u32_field(r, n, p)?;
    if v == 0 {
        r.error(
            p,
            n.pos,
            "must be at least 1: a cap of 0 refuses every request",
        );
        return None;
    }
    Some(v)
}

pub(super) fn duration(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    match &n.value {
        Value::Str(s) => match s.parse::<Dur>() {
            Ok(d) => Some(d),
            Err(e) => {
                r.error(p, n.pos, e.to_string());
                None
            }
        },
        Value::Int(i) => {
            r.error(
                p,
                n.pos,
                format!("`{i}` has no unit; write it as e.g. `{i}ms` or `{i}s`"),
            );
            None
        }
        _ => {
            r.error(
                p,
                n.pos,
                format!(
                    "expected a duration such as `300ms`, found {}",
                    n.value.kind()
                ),
            );
            None
        }
    }
}

/// A duration where zero makes no sense (a back-off or window of 0).
pub(super) fn positive_duration(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    let d = duration(r, n, p)?;
    if d.0.is_zero() {
        r.error(p, n.pos, "must be longer than zero");
        return None;
    }
    Some(d)
}

/// A timeout: zero would fail everything (Envoy reads 0 as "none"; we ask for the word).
pub(super) fn positive_timeout(r: &mut Reader, n: &Node, p: &str) -> Option<Dur> {
    let d = duration(r, n, p)?;
    if d.0.is_zero() {
        r.error(
            p,
            n.pos,
            "must be longer than zero; to switch the timeout off write `none`",
        );
        return None;
    }
    Some(d)
}

pub(super) fn or_none<T>(
    read: impl FnOnce(&mut Reader, &Node, &str) -> Option<T>,
) -> impl FnOnce(&mut Reader, &Node, &str) -> Option<OrNone<T>> {
    move |r, n, p| match &n.value {
        Value::Str(s) if s == "none" => Some(OrNone::None),
        _ => read(r, n, p).map(OrNone::Some),
    }
}
