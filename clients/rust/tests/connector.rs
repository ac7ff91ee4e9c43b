//! The connector under alloy against a scripted server on a real socket.

use alloy_provider::{Provider, ProviderBuilder};
use chainsieve_client::ResumingConnect;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// A server that answers the head cursor and one `eth_subscribe`, then
/// sends `burst` pending-transaction notifications at once; answers the
/// subscribe's parameters it got.
async fn scripted(burst: u64) -> (String, tokio::task::JoinHandle<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("ws://{}", listener.local_addr().expect("its address"));
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("a connection");
        let mut socket = tokio_tungstenite::accept_async(stream)
            .await
            .expect("a handshake");
        loop {
            let Some(Ok(Message::Text(text))) = socket.next().await else {
                panic!("a request");
            };
            let request: Value = serde_json::from_str(&text).expect("JSON");
            let answer = match request["method"].as_str() {
                Some("chainsieve_headCursor") => json!("eth:7@3:4294967295:ab"),
                Some("eth_subscribe") => json!("0x1"),
                other => panic!("unexpected {other:?}"),
            };
            let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer});
            socket
                .send(Message::text(reply.to_string()))
                .await
                .expect("sent");
            if request["method"] == "eth_subscribe" {
                for n in 0..burst {
                    let notification = json!({"jsonrpc": "2.0", "method": "eth_subscription", "params": {
                        "subscription": "0x1",
                        "result": format!("0x{n:064x}"),
                        "cursor": format!("eth:{}:0:ab", 8 + n),
                    }});
                    socket
                        .feed(Message::text(notification.to_string()))
                        .await
                        .expect("queued");
                }
                socket.flush().await.expect("sent");
                return request["params"].clone();
            }
        }
    });
    (url, server)
}

/// A burst far past alloy's own channel of 16 reaches an application that
/// reads it only afterwards, through a stream (which would skip what
/// overflowed), all of it and in order; the subscription started at the
/// head cursor.
#[tokio::test]
async fn a_burst_past_alloys_channel_reaches_a_late_reader_whole() {
    const BURST: u64 = 500;
    let (url, server) = scripted(BURST).await;
    let provider = ProviderBuilder::new()
        .connect_pubsub_with(ResumingConnect::new(url))
        .await
        .expect("connected");
    let subscription = provider
        .subscribe_pending_transactions()
        .await
        .expect("subscribed");
    let params = server.await.expect("the server ran");
    assert_eq!(
        params,
        json!(["newPendingTransactions", {"resumeFrom": "eth:7@3:4294967295:ab"}])
    );
    // Read only once alloy holds the whole burst (with a channel of 16 it
    // never would).
    let buffered = async {
        while (subscription.len() as u64) < BURST {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), buffered)
        .await
        .expect("alloy holds the whole burst");
    let got: Vec<_> = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        subscription
            .into_stream()
            .take(BURST as usize)
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the whole burst in time");
    let expected: Vec<_> = (0..BURST)
        .map(|n| {
            format!("0x{n:064x}")
                .parse::<alloy_primitives::B256>()
                .expect("a hash")
        })
        .collect();
    assert_eq!(got, expected);
}
