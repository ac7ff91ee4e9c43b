//! A subscriber that stops reading is closed with code 1008 and a reason once
//! its outbound queue overflows; other subscribers keep receiving.

use chainsieve_config::{Config, LimitsConfig};
use chainsieve_tests::{TestServer, WsClient, fast_devnet};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_is_closed_and_others_are_unaffected() {
    let config = Config {
        limits: LimitsConfig {
            outbound_queue: 16,
            ..LimitsConfig::default()
        },
        devnet: chainsieve_ingest::devnet::DevnetSettings {
            block_time_ms: Some(60),
            transactions_per_block: 40,
            ..fast_devnet()
        },
        ..Config::default()
    };
    let server = TestServer::started(config).await;

    // The stalled client: a tiny receive buffer, and it never reads after
    // subscribing.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(1024).expect("small buffer");
    let stream = socket.connect(server.addr).await.expect("connect");
    let (mut stalled, _) = tokio_tungstenite::client_async(server.ws_url("eth", "demo"), stream)
        .await
        .expect("upgrade");
    stalled
        .send(Message::text(json!({"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newPendingTransactions", true]}).to_string()))
        .await
        .expect("subscribe");
    let answer = stalled.next().await.expect("an answer").expect("a frame");
    assert!(
        answer.to_text().expect("text").contains("\"result\":\"0x"),
        "{answer}"
    );

    let mut healthy = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let heads = healthy
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribe");
    // Wait (on events) until the server has cut the stalled subscriber.
    while server.state.stats.closed_too_slow() == 0 {
        let (subscription, _) = healthy
            .next_notification()
            .await
            .expect("heads keep coming");
        assert_eq!(subscription, heads);
    }
    // The healthy client is unaffected, and the stalled one's subscription
    // is gone.
    assert_eq!(server.state.subscriptions.len(), 1);
    healthy
        .collect_until(&heads, 3)
        .await
        .expect("heads after the close");

    // The stalled client finds what was queued, then the close frame.
    let mut close = None;
    while let Some(message) = tokio::time::timeout(chainsieve_tests::TIMEOUT, stalled.next())
        .await
        .expect("no hang")
    {
        if let Message::Close(frame) = message.expect("a clean close") {
            close = frame;
            break;
        }
    }
    let frame = close.expect("a close frame with a reason");
    assert_eq!(u16::from(frame.code), 1008);
    assert_eq!(
        frame.reason.as_str(),
        "subscriber too slow: outbound queue full"
    );
}

/// A client that sends requests and never reads the replies overflows its
/// queue with replies alone: it is closed like a slow subscriber (1008,
/// counted), not dropped without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_is_closed_with_a_reason() {
    let config = chainsieve_tests::with_limits(|limits| limits.outbound_queue = 16);
    let server = TestServer::started(config).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(1024).expect("small buffer");
    let stream = socket.connect(server.addr).await.expect("connect");
    let (mut greedy, _) = tokio_tungstenite::client_async(server.ws_url("eth", "demo"), stream)
        .await
        .expect("upgrade");
    // Each request is answered with a whole block; send until the server
    // has given up on this client (the counter is the event waited on).
    let request =
        json!({"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["earliest", true]})
            .to_string();
    let mut sent = 0;
    while server.state.stats.closed_too_slow() == 0 {
        assert!(sent < 1_000_000, "the queue never overflowed");
        let send = greedy.send(Message::text(request.clone()));
        match tokio::time::timeout(chainsieve_tests::TIMEOUT, send).await {
            Ok(Ok(())) => sent += 1,
            // The server closed the socket: it must have counted it first.
            Ok(Err(_)) => break,
            Err(_) => panic!("the server stopped reading without closing"),
        }
    }
    assert_eq!(server.state.stats.closed_too_slow(), 1);
    // The replies the socket took before the queue overflowed come first,
    // then the close. A window of 1 KiB would let them through only at
    // the pace of TCP's zero-window probes (a reply every ~0.8 s, longer
    // than the server waits for its close to be read): the client now
    // reads with a normal buffer.
    socket2::SockRef::from(greedy.get_ref())
        .set_recv_buffer_size(1 << 20)
        .expect("a normal buffer");
    let mut close = None;
    while let Some(message) = tokio::time::timeout(chainsieve_tests::TIMEOUT, greedy.next())
        .await
        .expect("no hang")
    {
        match message {
            Ok(Message::Close(frame)) => {
                close = frame;
                break;
            }
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    let frame = close.expect("a close frame");
    assert_eq!(u16::from(frame.code), 1008);
}

/// A peer that never answers a ping is closed once the next ping is due,
/// with a reason. The client here speaks WebSocket by hand (a library
/// client answers pings whenever it reads), reading frames and answering
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_pings_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = chainsieve_tests::with_limits(|limits| limits.ping_interval_secs = 1);
    let server = TestServer::started(config).await;
    let mut tcp = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let handshake = format!(
        "GET /eth/v1/demo HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    );
    tcp.write_all(handshake.as_bytes())
        .await
        .expect("handshake");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    // Frames after the 101 response; the server's frames are unmasked and
    // short here (ping: no payload; close: code + reason).
    let (pings, close) = loop {
        let n = tokio::time::timeout(chainsieve_tests::TIMEOUT, tcp.read(&mut buffer))
            .await
            .expect("the server acts within the timeout")
            .expect("read");
        assert!(n > 0, "closed without a close frame");
        received.extend_from_slice(&buffer[..n]);
        let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let mut frames = &received[end + 4..];
        let mut pings = 0;
        let mut close = None;
        while frames.len() >= 2 {
            let (opcode, len) = (frames[0] & 0x0f, usize::from(frames[1] & 0x7f));
            if frames.len() < 2 + len {
                break;
            }
            match opcode {
                0x9 => pings += 1,
                0x8 => close = Some(frames[2..2 + len].to_vec()),
                _ => {}
            }
            frames = &frames[2 + len..];
        }
        if let Some(close) = close {
            break (pings, close);
        }
    };
    assert!(pings >= 1, "pinged before being closed");
    assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1008);
    assert_eq!(&close[2..], b"no pong to the last ping");
}

/// A client that answers pings (any WebSocket library that reads does)
/// stays open across many ping intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_answers_pings_stays_open() {
    let config = chainsieve_tests::with_limits(|limits| limits.ping_interval_secs = 1);
    let server = TestServer::started(config).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let mut pings = 0;
    while pings < 3 {
        let message = tokio::time::timeout(chainsieve_tests::TIMEOUT, ws.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("a frame");
        match message {
            // Reading made tungstenite queue the pong; flush sends it.
            Message::Ping(_) => {
                pings += 1;
                ws.flush().await.expect("pong sent");
            }
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => {}
        }
    }
    ws.send(Message::text(
        json!({"jsonrpc": "2.0", "id": 7, "method": "eth_chainId"}).to_string(),
    ))
    .await
    .expect("send");
    loop {
        let message = tokio::time::timeout(chainsieve_tests::TIMEOUT, ws.next())
            .await
            .expect("an answer in time")
            .expect("open")
            .expect("a frame");
        if let Message::Text(text) = message {
            assert!(text.contains("\"result\":\"0x1\""), "{text}");
            break;
        }
    }
}
