//! The WebSocket handshake (RFC 6455 over HTTP/1.1). It is done here rather
//! than by axum's `WebSocketUpgrade`, which hands over one locked stream:
//! a session reads frames with tungstenite through hyper's upgraded
//! connection, and writes its own frames straight to the [`Socket`]
//! (docs/src/architecture.md, Fan-out).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::socket::Socket;
use crate::reply::json_error;
use chainsieve_rpc::RpcError;

/// The frames a client sends, read by tungstenite.
pub type Reader = WebSocketStream<ReadOnly<TokioIo<Upgraded>>>;

/// A request to open a WebSocket, checked; an extractor whose rejection is
/// the HTTP answer, with a JSON-RPC error saying what was wrong.
pub struct WebSocketRequest {
    accept: HeaderValue,
    on_upgrade: OnUpgrade,
    socket: Socket,
}

impl<S: Send + Sync> FromRequestParts<S> for WebSocketRequest {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let refuse =
            |message: &str| json_error(StatusCode::BAD_REQUEST, RpcError::invalid_request(message));
        if parts.method != Method::GET || !has_token(&parts.headers, header::UPGRADE, "websocket") {
            return Err(refuse(
                "this URL takes JSON-RPC over HTTP POST, or a WebSocket: a GET with `Upgrade: websocket`",
            ));
        }
        if parts.version != Version::HTTP_11
            || !has_token(&parts.headers, header::CONNECTION, "upgrade")
        {
            return Err(refuse(
                "a WebSocket opens over HTTP/1.1 with `Connection: Upgrade`",
            ));
        }
        if parts
            .headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .map(HeaderValue::as_bytes)
            != Some(b"13")
        {
            let mut refused = json_error(
                StatusCode::UPGRADE_REQUIRED,
                RpcError::invalid_request("WebSocket version 13 is the one served"),
            );
            refused.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            return Err(refused);
        }
        let Some(key) = parts.headers.get(header::SEC_WEBSOCKET_KEY) else {
            return Err(refuse("the WebSocket handshake lacks `Sec-WebSocket-Key`"));
        };
        let accept = HeaderValue::try_from(derive_accept_key(key.as_bytes()))
            .map_err(|_| refuse("`Sec-WebSocket-Key` is not a valid header value"))?;
        let Some(on_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
            return Err(refuse("this connection cannot be upgraded"));
        };
        let Some(ConnectInfo(socket)) = parts.extensions.get::<ConnectInfo<Socket>>().cloned()
        else {
            // The router is always served with its sockets (http::serve).
            return Err(json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                RpcError::internal("the server cannot reach this connection's socket"),
            ));
        };
        Ok(Self {
            accept,
            on_upgrade,
            socket,
        })
    }
}

impl WebSocketRequest {
    /// Answers `101 Switching Protocols`; once hyper hands the connection
    /// over, runs `session` with the frames the client sends (read under
    /// `config`'s limits) and the socket to write to. A connection that
    /// breaks during the handover is dropped.
    pub fn accept<F, Fut>(self, config: WebSocketConfig, session: F) -> Response
    where
        F: FnOnce(Reader, Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Self {
            accept,
            on_upgrade,
            socket,
        } = self;
        tokio::spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(error) => {
                    tracing::debug!(%error, "a WebSocket upgrade failed");
                    return;
                }
            };
            let reader = WebSocketStream::from_raw_socket(
                ReadOnly(TokioIo::new(upgraded)),
                Role::Server,
                Some(config),
            )
            .await;
            session(reader, socket).await;
        });
        (
            StatusCode::SWITCHING_PROTOCOLS,
            [
                (header::CONNECTION, HeaderValue::from_static("upgrade")),
                (header::UPGRADE, HeaderValue::from_static("websocket")),
                (header::SEC_WEBSOCKET_ACCEPT, accept),
            ],
            Body::empty(),
        )
            .into_response()
    }
}

/// Whether `name`'s comma-separated values include `token`, in any case.
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| item.trim().eq_ignore_ascii_case(token))
}

/// hyper's upgraded connection, for reading only. What tungstenite writes
/// of its own accord (a pong, the echo of a close) is dropped here: the
/// session's writer sends those on the socket, in order with its frames.
pub struct ReadOnly<R>(R);

impl<R: AsyncRead + Unpin> AsyncRead for ReadOnly<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<R: Unpin> AsyncWrite for ReadOnly<R> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Request;

    use super::*;

    async fn extract(request: Request<()>) -> Result<WebSocketRequest, Response> {
        let (mut parts, ()) = request.into_parts();
        WebSocketRequest::from_request_parts(&mut parts, &()).await
    }

    fn handshake() -> axum::http::request::Builder {
        Request::get("/eth/v1/demo")
            .header(header::UPGRADE, "websocket")
            .header(header::CONNECTION, "keep-alive, Upgrade")
            .header(header::SEC_WEBSOCKET_VERSION, "13")
            .header(header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ==")
    }

    async fn refusal(request: Request<()>) -> (StatusCode, String) {
        let Err(response) = extract(request).await else {
            panic!("refused");
        };
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Every malformed handshake is answered with what was wrong; the
    /// checks pass a well-formed one up to the upgrade itself.
    #[tokio::test]
    async fn a_malformed_handshake_is_refused_with_the_reason() {
        let plain = Request::get("/eth/v1/demo").body(()).expect("request");
        let (status, body) = refusal(plain).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.contains("-32600") && body.contains("Upgrade: websocket"),
            "{body}"
        );

        let mut no_connection = handshake().body(()).expect("request");
        no_connection
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        let (status, body) = refusal(no_connection).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("Connection: Upgrade"), "{body}");

        let mut old = handshake().body(()).expect("request");
        old.headers_mut()
            .insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
        let Err(refused) = extract(old).await else {
            panic!("refused");
        };
        assert_eq!(refused.status(), StatusCode::UPGRADE_REQUIRED);
        assert_eq!(refused.headers()[header::SEC_WEBSOCKET_VERSION], "13");

        let mut keyless = handshake().body(()).expect("request");
        keyless.headers_mut().remove(header::SEC_WEBSOCKET_KEY);
        let (status, body) = refusal(keyless).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("Sec-WebSocket-Key"), "{body}");

        // Well formed, but not on a connection hyper can hand over.
        let (status, body) = refusal(handshake().body(()).expect("request")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("cannot be upgraded"), "{body}");
    }

    #[test]
    fn tokens_are_found_in_lists_in_any_case() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(has_token(&headers, header::CONNECTION, "upgrade"));
        assert!(!has_token(&headers, header::CONNECTION, "close"));
    }
}
