//! The SVG plot of `hopwise bench hops`: p50 latency against hops. Pure except [`write_svg`].

use std::fmt::Write as _;
use std::path::Path;

use super::super::Mode;
use super::{Config, Report};
use crate::error::{LabError, io};

/// The SVG plot: p50 (median of runs) against hops, one line per system and mode (mTLS solid,
/// plain dashed, captured dotted), all starting from the shared 0-hop point.
pub fn svg(r: &Report) -> String {
    let (w, h) = (760.0_f64, 460.0_f64);
    let (left, right, top, bottom) = (70.0, 190.0, 50.0, 55.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let max_hops = r.options.max_hops.max(1) as f64;
    let direct = r
        .configs
        .iter()
        .find(|c| c.config == Config::DIRECT)
        .map(|c| c.p50_us.median);
    let ymax_data = r
        .configs
        .iter()
        .map(|c| c.p50_us.median)
        .fold(0.0_f64, f64::max);
    let step = nice_step(ymax_data / 5.0);
    let ymax = ((ymax_data / step).ceil() * step).max(step);
    let x = |hops: f64| left + pw * hops / max_hops;
    let y = |us: f64| top + ph * (1.0 - us / ymax);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let title = format!(
        "p50 latency against hops ({}, {} worker{}, median of {} run{})",
        if r.options.pinned {
            "pinned to one CPU"
        } else {
            "unpinned"
        },
        r.options.workers,
        if r.options.workers == 1 { "" } else { "s" },
        r.options.runs,
        if r.options.runs == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        left + pw / 2.0,
        escape(&title)
    );
    // Grid and axes.
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0,
            fmt_tick(v)
        );
        v += step;
    }
    for hop in 0..=r.options.max_hops {
        let xx = x(hop as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{hop}</text>"##,
            top + ph,
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">hops (out ─▶ in)</text>"#,
        left + pw / 2.0,
        h - 14.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">p50 latency, µs</text>"#,
        top + ph / 2.0
    );
    // Lines.
    let mut legend_y = top + 10.0;
    for p in &r.per_hop {
        let mut pts: Vec<(f64, f64)> = direct.map(|d| (0.0, d)).into_iter().collect();
        pts.extend(
            r.configs
                .iter()
                .filter(|c| {
                    c.config.system == p.system
                        && c.config.mode == Some(p.mode)
                        && c.config.observe == p.observe
                })
                .map(|c| (c.config.hops as f64, c.p50_us.median)),
        );
        let colour = p.system.colour();
        let label = format!("{}{}", p.mode.name(), p.observe.suffix());
        let dash = match p.mode {
            Mode::Plain => r#" stroke-dasharray="6 4""#,
            Mode::Captured => r#" stroke-dasharray="2 3""#,
            _ => "",
        };
        let path: Vec<String> = pts
            .iter()
            .map(|(hx, us)| format!("{:.1},{:.1}", x(*hx), y(*us)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for (hx, us) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{} {} {} hops: {:.1} µs</title></circle>"#,
                x(*hx),
                y(*us),
                p.system.name(),
                label,
                hx,
                us
            );
        }
        let lx = left + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{} {}: {:.0} µs/hop</text>"#,
            lx + 24.0,
            lx + 30.0,
            legend_y + 4.0,
            p.system.name(),
            label,
            p.p50_us.median
        );
        legend_y += 20.0;
    }
    s.push_str("</svg>\n");
    s
}

pub(super) fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

pub(super) fn fmt_tick(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes [`svg`] to `path`.
pub fn write_svg(r: &Report, path: &Path) -> Result<(), LabError> {
    std::fs::write(path, svg(r)).map_err(io(format!("cannot write the plot {}", path.display())))
}
