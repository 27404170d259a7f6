//! [`SpanData`] as OTLP's messages (`opentelemetry-proto`): one resource (the proxy: its
//! service's name and its copy's, `service.instance.id`), one scope (`hopwise-proxy`), the spans. Pure.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};

use super::{Kind, SpanData, Value};

/// One export call's message for `spans` of the proxy of `service`'s copy `instance`.
pub fn request(service: &str, instance: &str, spans: Vec<SpanData>) -> ExportTraceServiceRequest {
    let resource = Resource {
        attributes: vec![
            kv("service.name", Value::Str(service.to_owned())),
            kv("service.instance.id", Value::Str(instance.to_owned())),
            kv("hopwise.proxy", Value::Str("sidecar".to_owned())),
        ],
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: "hopwise-proxy".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope),
                spans: spans.into_iter().map(span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn span(s: SpanData) -> Span {
    let kind = match s.kind {
        Kind::Server => span::SpanKind::Server,
        Kind::Client => span::SpanKind::Client,
    };
    let code = if s.error {
        status::StatusCode::Error
    } else {
        status::StatusCode::Unset
    };
    Span {
        trace_id: s.trace_id.to_bytes().to_vec(),
        span_id: s.span_id.to_bytes().to_vec(),
        parent_span_id: s.parent.map(|p| p.to_bytes().to_vec()).unwrap_or_default(),
        // W3C's sampled flag: every exported span was sampled.
        flags: 0x01,
        name: s.name,
        kind: kind as i32,
        start_time_unix_nano: s.start,
        end_time_unix_nano: s.end,
        attributes: s.attributes.into_iter().map(|(k, v)| kv(k, v)).collect(),
        status: Some(Status {
            code: code as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn kv(key: &str, value: Value) -> KeyValue {
    let value = match value {
        Value::Str(s) => any_value::Value::StringValue(s),
        Value::Int(i) => any_value::Value::IntValue(i),
    };
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use hopwise_api::trace_context::{SpanId, TraceId};
    use prost::Message;

    use super::*;

    #[test]
    fn a_span_becomes_the_official_message_and_survives_the_wire() {
        let trace_id = TraceId::random();
        let (span_id, parent) = (SpanId::random(), SpanId::random());
        let data = SpanData {
            trace_id,
            span_id,
            parent: Some(parent),
            name: "a → b/quote".to_owned(),
            kind: Kind::Client,
            start: 10,
            end: 25,
            attributes: vec![
                ("http.response.status_code", Value::Int(503)),
                ("hopwise.route", Value::Str("quote".to_owned())),
            ],
            error: true,
        };
        let bytes = request("a", "a[0]", vec![data]).encode_to_vec();
        let back = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        let rs = &back.resource_spans[0];
        let service = &rs.resource.as_ref().unwrap().attributes[0];
        assert_eq!(service.key, "service.name");
        let s = &rs.scope_spans[0].spans[0];
        assert_eq!(s.trace_id, trace_id.to_bytes());
        assert_eq!(s.span_id, span_id.to_bytes());
        assert_eq!(s.parent_span_id, parent.to_bytes());
        assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (10, 25));
        assert_eq!(s.kind, span::SpanKind::Client as i32);
        assert_eq!(
            s.status.as_ref().unwrap().code,
            status::StatusCode::Error as i32
        );
        assert_eq!(s.attributes.len(), 2);
        assert_eq!(
            s.attributes[0].value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(503))
        );
    }
}
