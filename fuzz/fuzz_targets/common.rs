//! Input shared by the header targets: one header a line, `name: value`, as bytes (a value may
//! hold any byte a header value allows, obs-text included). Lines whose name or value `http`
//! refuses are skipped, as a server would have refused them.

use http::header::{HeaderMap, HeaderName, HeaderValue};

pub fn headers(data: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    map
}
