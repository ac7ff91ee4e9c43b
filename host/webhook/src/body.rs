//! A delivery's body: the webhook, chain and topic, the delivery's id,
//! and its notifications, each exactly the `params` a socket's
//! subscriber gets (spliced from the event's shared notice, as a frame
//! is).

use bytes::Bytes;

use chainsieve_fanout::Notice;

/// `{"webhook":…,"chain":…,"topic":…,"delivery":…,"notifications":[…]}`.
pub fn encode(
    webhook: &str,
    chain: &str,
    topic: &str,
    delivery: &str,
    notices: &[Notice],
) -> Bytes {
    let size: usize = notices.iter().map(|n| n.payload().len() + 160).sum();
    let mut out = Vec::with_capacity(size + 256);
    out.extend_from_slice(b"{\"webhook\":");
    string(webhook, &mut out);
    out.extend_from_slice(b",\"chain\":");
    string(chain, &mut out);
    out.extend_from_slice(b",\"topic\":");
    string(topic, &mut out);
    out.extend_from_slice(b",\"delivery\":");
    string(delivery, &mut out);
    out.extend_from_slice(b",\"notifications\":[");
    for (n, notice) in notices.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        notice.write_params(webhook, &mut out);
    }
    out.extend_from_slice(b"]}");
    out.into()
}

fn string(text: &str, out: &mut Vec<u8>) {
    // Writing a str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn the_body_holds_each_notification_as_its_params() {
        let notices = [
            Notice::new(r#"{"number":"0x1"}"#, Some("eth:1:0:00000000000000aa")),
            Notice::new(r#"{"number":"0x2"}"#, Some("eth:2:0:00000000000000bb")),
        ];
        let body = encode(
            "0xab",
            "eth",
            "my\"topic",
            "eth:2:0:00000000000000bb",
            &notices,
        );
        let body: Value = serde_json::from_slice(&body).expect("valid JSON");
        assert_eq!(
            body,
            json!({
                "webhook": "0xab",
                "chain": "eth",
                "topic": "my\"topic",
                "delivery": "eth:2:0:00000000000000bb",
                "notifications": [
                    {"subscription": "0xab", "result": {"number": "0x1"}, "cursor": "eth:1:0:00000000000000aa"},
                    {"subscription": "0xab", "result": {"number": "0x2"}, "cursor": "eth:2:0:00000000000000bb"},
                ],
            })
        );
    }
}
