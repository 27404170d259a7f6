//! One trace laid out as a waterfall: its spans in parent order (each after its parent, siblings
//! by start), each placed on the trace's time line, and each span's time split into **the
//! proxies' time** and **the app's time** of everything under it. Pure: no clock, no I/O.
//!
//! The split, bottom up. A span's *own* time is its duration less the time its children cover:
//! - an outbound request's own time (less its tries) is its proxy's;
//! - a try's own time (less the called side's inbound span) is the wire and the proxies around
//!   it; a try with no span from the called side (an app outside the mesh, or a span lost) is
//!   the called side's, the app's, and marked `unseen` — unless it never connected;
//! - an inbound span's own time (less the app's outbound calls) is the app's, except what the
//!   span says the inbound proxy itself took: its duration less `hopwise.app_time_ns` (the
//!   wait for the app's answer). A span without it (an older proxy) counts it all as the app's.
//!
//! The time the children cover is shared out as the children's own splits are, so each row's
//! proxies' time plus app's time is its duration, and the root's is the whole request's.
//!
//! Each proxy reads its own clock, so a child may seem to start before its parent or end after
//! it (clock skew between processes). A child is drawn inside its parent: shifted as its parent
//! was, then moved (never stretched) into the parent's interval; `shift_ns` says by how much.
//! Nothing is ever negative.

use std::collections::HashMap;

use serde::Serialize;

use super::traces::{Direction, Span};

/// One row of the waterfall: the span, and where and how it is drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub span: Span,
    pub depth: usize,
    pub duration_ns: u64,
    /// Where it is drawn: from the trace's start, and how long (at most its parent's length).
    pub offset_ns: u64,
    pub drawn_ns: u64,
    /// How far it was moved to sit inside its parent (clock skew), + later, − earlier.
    pub shift_ns: i64,
    pub proxy_ns: u64,
    pub app_ns: u64,
    /// Its parent is not in the store (not sampled there, lost, or not a proxy's).
    pub orphan: bool,
    /// A try with no span from the called side.
    pub unseen: bool,
}

/// A trace's waterfall.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waterfall {
    pub start_unix_nano: u64,
    /// From the earliest start to the latest drawn end.
    pub duration_ns: u64,
    pub rows: Vec<Row>,
}

/// A child as its parent's split sees it: where it is drawn `(start, length)`, and its own
/// `(proxies' ns, app's ns)`.
type Part = ((u64, u64), (u64, u64));

/// The spans in parent order: `(index, depth, parent index)`. Roots are the spans whose parent
/// is not here; spans on a parent cycle (never from a proxy) come last, as roots.
fn order(spans: &[Span]) -> Vec<(usize, usize, Option<usize>)> {
    let by_id: HashMap<u64, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id, i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    let mut roots = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.parent.and_then(|p| by_id.get(&p)) {
            Some(&p) if p != i => children[p].push(i),
            _ => roots.push(i),
        }
    }
    let by_start = |v: &mut Vec<usize>| v.sort_by_key(|&i| (spans[i].start, spans[i].span_id));
    by_start(&mut roots);
    children.iter_mut().for_each(by_start);
    let mut seen = vec![false; spans.len()];
    let mut out = Vec::with_capacity(spans.len());
    let visit = |root: usize, out: &mut Vec<_>, seen: &mut Vec<bool>| {
        let mut stack = vec![(root, 0, None)];
        while let Some((i, depth, parent)) = stack.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            out.push((i, depth, parent));
            stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1, Some(i))));
        }
    };
    for r in roots {
        visit(r, &mut out, &mut seen);
    }
    for i in 0..spans.len() {
        if !seen[i] {
            visit(i, &mut out, &mut seen);
        }
    }
    out
}

/// Lays `spans` (one trace's) out.
pub fn layout(spans: &[Span]) -> Waterfall {
    let order = order(spans);
    // Pre-order: where each span is drawn, (start, length), in Unix ns.
    let mut drawn: Vec<(u64, u64)> = vec![(0, 0); spans.len()];
    for &(i, _, parent) in &order {
        let s = &spans[i];
        let dur = s.end - s.start;
        drawn[i] = match parent {
            None => (s.start, dur),
            Some(p) => place(s.start, dur, spans[p].start, drawn[p]),
        };
    }
    // Post-order (reverse pre-order): each span's split from its children's.
    let mut split: Vec<(u64, u64)> = vec![(0, 0); spans.len()];
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    for &(i, _, parent) in &order {
        if let Some(p) = parent {
            kids[p].push(i);
        }
    }
    for &(i, _, _) in order.iter().rev() {
        let parts: Vec<Part> = kids[i].iter().map(|&c| (drawn[c], split[c])).collect();
        split[i] = split_of(&spans[i], drawn[i], &parts);
    }
    let start = order.iter().map(|&(i, _, _)| drawn[i].0).min().unwrap_or(0);
    let end = order
        .iter()
        .map(|&(i, _, _)| drawn[i].0 + drawn[i].1)
        .max()
        .unwrap_or(start);
    let rows = order
        .iter()
        .map(|&(i, depth, parent)| {
            row(
                &spans[i],
                depth,
                parent.is_none() && spans[i].parent.is_some(),
                kids[i].is_empty(),
                (start, drawn[i]),
                split[i],
            )
        })
        .collect();
    Waterfall {
        start_unix_nano: start,
        duration_ns: end - start,
        rows,
    }
}

/// A child's drawn `(start, length)` inside its parent's: shifted as the parent was, then
/// moved into it; never longer than the parent.
fn place(start: u64, dur: u64, parent_start: u64, (p_at, p_len): (u64, u64)) -> (u64, u64) {
    let len = dur.min(p_len);
    let shifted = i128::from(start) + (i128::from(p_at) - i128::from(parent_start));
    let latest = i128::from(p_at + p_len - len);
    let at = shifted.clamp(i128::from(p_at), latest);
    (u64::try_from(at).unwrap_or(p_at), len)
}

/// How much of `(at, len)` the union of `children` covers.
fn covered((at, len): (u64, u64), children: &[Part]) -> u64 {
    let end = at + len;
    let mut spans: Vec<(u64, u64)> = children
        .iter()
        .map(|((s, l), _)| ((*s).clamp(at, end), (s + l).clamp(at, end)))
        .filter(|(s, e)| e > s)
        .collect();
    spans.sort_unstable();
    let (mut total, mut reach) = (0, at);
    for (s, e) in spans {
        let s = s.max(reach);
        if e > s {
            total += e - s;
            reach = e;
        }
    }
    total
}

/// `(proxies' ns, app's ns)` of a span, summing to its duration.
fn split_of(s: &Span, drawn: (u64, u64), children: &[Part]) -> (u64, u64) {
    let dur = s.end - s.start;
    let under = covered(drawn, children).min(dur);
    let own = dur - under;
    let (p, a) = children
        .iter()
        .fold((0u128, 0u128), |(p, a), (_, (cp, ca))| {
            (p + u128::from(*cp), a + u128::from(*ca))
        });
    // The covered time shared as the children's own splits are (all proxies' when they are
    // empty).
    let under_proxy = (u128::from(under) * p)
        .checked_div(p + a)
        .unwrap_or(u128::from(under));
    let under_proxy = u64::try_from(under_proxy).unwrap_or(under);
    let under_app = under - under_proxy;
    let own_is_proxy = match s.direction {
        Direction::Outbound => true,
        Direction::Inbound => false,
        Direction::Try => !children.is_empty() || s.outcome.as_deref() == Some("connect-failure"),
    };
    // The inbound proxy's own part: what it did besides waiting for its app.
    let inbound_proxy = match (s.direction, s.app_time_ns) {
        (Direction::Inbound, Some(app)) => dur.saturating_sub(app).min(own),
        _ => 0,
    };
    if own_is_proxy {
        (own + under_proxy, under_app)
    } else {
        (inbound_proxy + under_proxy, own - inbound_proxy + under_app)
    }
}

fn row(
    s: &Span,
    depth: usize,
    orphan: bool,
    leaf: bool,
    (trace_start, (at, len)): (u64, (u64, u64)),
    (proxy_ns, app_ns): (u64, u64),
) -> Row {
    Row {
        span: s.clone(),
        depth,
        duration_ns: s.end - s.start,
        offset_ns: at - trace_start,
        drawn_ns: len,
        shift_ns: i64::try_from(i128::from(at) - i128::from(s.start)).unwrap_or(0),
        proxy_ns,
        app_ns,
        orphan,
        unseen: s.direction == Direction::Try
            && leaf
            && s.outcome.as_deref() != Some("connect-failure"),
    }
}

#[cfg(test)]
#[path = "waterfall_tests.rs"]
pub(crate) mod tests;
