//! The page, embedded in the binary: plain HTML, CSS and JavaScript with an inline SVG graph —
//! no build step, nothing fetched from outside (the dashboard works without internet).

pub const INDEX_HTML: &str = include_str!("assets/index.html");
pub const APP_JS: &str = include_str!("assets/app.js");
/// The charts over time (`/api/timeline`), drawn as inline SVG.
pub const CHARTS_JS: &str = include_str!("assets/charts.js");
pub const STYLE_CSS: &str = include_str!("assets/style.css");
/// The recent traces and the chosen one's waterfall (`/api/traces`), drawn in the DOM.
pub const TRACES_JS: &str = include_str!("assets/traces.js");
