"""A web3.py persistent WebSocket provider that survives its socket.

It sits where web3.py reads and writes frames (``socket_send``,
``socket_recv``), so ``AsyncWeb3``'s subscription API and every request work
unchanged. It keeps the cursor of the last notification of every
subscription handed to the application; when the socket drops (a reset, the
server restarting, a missed ping), it opens it again after a backoff with
jitter, subscribes again with the same parameters plus ``resumeFrom`` that
cursor, and maps the server's new subscription id to the one the
application holds. What the server replays, then what comes live, reaches
the application exactly once and in order, removals included (the book's
Clients chapter, docs/src/clients.md).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
import inspect
import itertools
import json
import logging
from typing import Any, Literal

from websockets.exceptions import ConnectionClosed

from web3.exceptions import PersistentConnectionClosedOK
from web3.providers.persistent import WebSocketProvider

from .backoff import Backoff, backoff_delay
from .cursors import CursorStore, subscription_key

OnRefused = Literal["stop", "fromBlock"]

#: Options of an ``eth_subscribe`` call's last parameter.
OPTIONS = ("resumeFrom", "fromBlock", "finality")

#: Methods that may take effect twice if sent again after a drop.
NOT_REPEATABLE = frozenset({"eth_sendRawTransaction", "eth_sendTransaction"})

#: Codes of a refusal or an ending that a resume from the last cursor
#: cures, after a backoff (the nodes could not give a block, or the
#: restarted server has not read the cursor's block again yet).
RETRYABLE = frozenset({-32002})


class ResumeRefusedError(Exception):
    """The server refused to resume, or ended, a subscription: events may be
    missing from here on unless the application reads them otherwise."""

    def __init__(
        self, code: int, server_message: str, subscription: str, cursor: str | None
    ) -> None:
        self.code = code
        self.server_message = server_message
        self.subscription = subscription
        self.cursor = cursor
        since = f" from cursor {cursor}" if cursor else ""
        super().__init__(
            f"chainsieve refused to resume subscription {subscription}{since} "
            f"({code}): {server_message}"
        )


def cursor_block(cursor: str) -> int | None:
    """The block a cursor names (``<chain>:<position>@<block>:<index>:<tag>``)."""
    parts = cursor.split(":")
    place = parts[-3] if len(parts) >= 3 else ""
    _, at, block = place.partition("@")
    return int(block) if at and block.isdigit() else None


@dataclass
class _Subscription:
    """One subscription of the application."""

    #: The id the application holds: the server's first one.
    id: str
    #: The topic and filter, without the options object.
    params: list[Any]
    finality: Any
    #: ``("cursor", c)``, ``("fromBlock", hex)`` or ``("now", None)``.
    resume: tuple[str, Any]
    key: str
    ended: bool = False


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ResumingWebSocketProvider(WebSocketProvider):
    """``WebSocketProvider`` that reconnects and resumes by itself.

    ``backoff``: reconnection delays (exponential, capped, with jitter).
    ``heartbeat``: ``(interval, timeout)`` in seconds of the WebSocket pings
    that find a dead connection (``None`` turns them off).
    ``on_error``: called (sync or async) with a :class:`ResumeRefusedError`
    when the server refuses a resume or ends a subscription; without one,
    the error is raised where the application reads its subscriptions.
    ``on_refused``: then the subscription stops (``"stop"``) or is made
    again from the start of its last cursor's block (``"fromBlock"``).
    ``store``: where cursors are kept so the application resumes after its
    own restart (in memory only without one).
    """

    logger = logging.getLogger("chainsieve_client")

    def __init__(
        self,
        endpoint_uri: str,
        *,
        backoff: Backoff | None = None,
        heartbeat: tuple[float, float] | None = (15.0, 5.0),
        on_error: Callable[[ResumeRefusedError], Awaitable[None] | None] | None = None,
        on_refused: OnRefused = "stop",
        store: CursorStore | None = None,
        websocket_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        pings = {"ping_interval": None, "ping_timeout": None}
        if heartbeat is not None:
            pings = {"ping_interval": heartbeat[0], "ping_timeout": heartbeat[1]}
        super().__init__(
            endpoint_uri, websocket_kwargs={**pings, **(websocket_kwargs or {})}, **kwargs
        )
        self.backoff = backoff or Backoff()
        self.on_error = on_error
        self.on_refused = on_refused
        self.store = store
        #: How many times the socket was opened again.
        self.reconnections = 0
        #: By the id the application holds.
        self._subscriptions: dict[str, _Subscription] = {}
        #: The server's ids on the current socket, to the application's.
        self._server_ids: dict[str, str] = {}
        #: Requests sent and not answered: id → (method, params, the
        #: subscription a subscribe of ours makes again, or None); sent
        #: again on the next socket (those not repeatable fail instead).
        self._in_flight: dict[Any, tuple[str, list[Any], _Subscription | None]] = {}
        #: Our own calls' answers (the head cursor), by id.
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        #: Messages to hand to web3.py before reading the socket again.
        self._queued: deque[dict[str, Any]] = deque()
        self._ids = itertools.count(1)
        #: Bumped on each new socket: a retry of an older one is dropped.
        self._generation = 0
        #: Set while a socket is open (the application's sends wait on it).
        self._open = asyncio.Event()
        self._closing = False

    @property
    def subscription_count(self) -> int:
        """How many subscriptions are active (made, and neither ended nor
        unsubscribed)."""
        return len(self._subscriptions)

    # -- what web3.py calls -- #

    async def _provider_specific_connect(self) -> None:
        self._closing = False
        await super()._provider_specific_connect()
        self._open.set()

    async def _provider_specific_disconnect(self) -> None:
        self._closing = True
        self._open.clear()
        await super()._provider_specific_disconnect()

    async def socket_send(self, request_data: bytes) -> None:
        request = json.loads(request_data)
        if isinstance(request, dict) and request.get("method") == "eth_subscribe":
            request["params"] = await self._first_params(list(request["params"]))
        elif isinstance(request, dict) and request.get("method") == "eth_unsubscribe":
            request["params"] = self._unsubscribed(list(request["params"]))
        if isinstance(request, dict) and "id" in request:
            self._in_flight[request["id"]] = (
                request["method"],
                request.get("params", []),
                None,
            )
        await self._send(request)

    async def socket_recv(self) -> Any:
        while True:
            if self._queued:
                return self._queued.popleft()
            try:
                message = json.loads(await self._ws.recv())
            except (ConnectionClosed, OSError) as error:
                if self._closing:
                    raise PersistentConnectionClosedOK(
                        user_message="the chainsieve session was closed"
                    ) from error
                await self._reconnect(error)
                continue
            handed = await self._received(message)
            if handed is not None:
                return handed

    # -- subscriptions -- #

    async def _first_params(self, params: list[Any]) -> list[Any]:
        """The application's ``eth_subscribe`` parameters with the resume
        point the subscription starts from: a stored cursor, the one it
        gave, or the log's head cursor (so a drop before the first
        notification loses nothing either)."""
        given: dict[str, Any] = {}
        if len(params) > 1 and _is_options(params[-1]):
            given = dict(params.pop())
        key = subscription_key(params, given.get("finality"))
        stored = await _maybe_await(self.store.load(key)) if self.store else None
        if stored:
            given.pop("fromBlock", None)
            given["resumeFrom"] = stored
        elif "resumeFrom" not in given and "fromBlock" not in given:
            start = await self._starting_point(given.get("finality"))
            if start[0] == "cursor":
                given["resumeFrom"] = start[1]
            elif start[0] == "fromBlock":
                given["fromBlock"] = start[1]
        return [*params, given] if given else params

    async def _starting_point(self, finality: Any) -> tuple[str, Any]:
        """Where a new subscription resumes from before its first
        notification: the log's head cursor (docs/src/api.md, The head
        cursor), or for a finality subscription the block after the chain's
        last one of that grade."""
        if isinstance(finality, str):
            block = await self._call("eth_getBlockByNumber", [finality, False])
            number = (block.get("result") or {}).get("number")
            return ("fromBlock", hex(int(number, 16) + 1)) if number else ("now", None)
        answer = await self._call("chainsieve_headCursor", [])
        if answer.get("result"):
            return ("cursor", answer["result"])
        # A server without head cursors (-32601): from the first
        # notification on.
        return ("now", None)

    def _unsubscribed(self, params: list[Any]) -> list[Any]:
        """Ends the application's subscription; the server's current id
        goes out in its place."""
        held = params[0] if params else None
        subscription = self._subscriptions.pop(held, None)
        if subscription is None:
            return params
        subscription.ended = True
        for server_id, app_id in list(self._server_ids.items()):
            if app_id == held:
                del self._server_ids[server_id]
                return [server_id]
        return params

    def _adopt(self, request: tuple[str, list[Any], _Subscription | None], server_id: str) -> None:
        """A subscribe answered: the application's first one becomes a
        subscription whose id is this one, one of ours is mapped to it."""
        _, params, made_again = request
        if made_again is not None:
            if made_again.ended:
                return
            self._server_ids[server_id] = made_again.id
            return
        params = list(params)
        given = dict(params.pop()) if len(params) > 1 and _is_options(params[-1]) else {}
        if "resumeFrom" in given:
            resume: tuple[str, Any] = ("cursor", given["resumeFrom"])
        elif "fromBlock" in given:
            resume = ("fromBlock", given["fromBlock"])
        else:
            resume = ("now", None)
        subscription = _Subscription(
            id=server_id,
            params=params,
            finality=given.get("finality"),
            resume=resume,
            key=subscription_key(params, given.get("finality")),
        )
        self._subscriptions[server_id] = subscription
        self._server_ids[server_id] = server_id

    async def _make_again(self, subscription: _Subscription) -> None:
        """``eth_subscribe`` from the subscription's resume point, on this
        socket; the answer maps the new id to the application's."""
        options: dict[str, Any] = {}
        kind, value = subscription.resume
        if kind == "cursor":
            options["resumeFrom"] = value
        elif kind == "fromBlock":
            options["fromBlock"] = value
        if subscription.finality is not None:
            options["finality"] = subscription.finality
        params = [*subscription.params, options] if options else list(subscription.params)
        request_id = f"chainsieve:{next(self._ids)}"
        self._in_flight[request_id] = ("eth_subscribe", params, subscription)
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": "eth_subscribe", "params": params})

    def _retry_later(self, subscription: _Subscription) -> None:
        """Makes the subscription again after a backoff, if the socket is
        still the same."""
        generation = self._generation

        async def retry() -> None:
            await asyncio.sleep(backoff_delay(self.backoff, 0))
            if generation == self._generation and not subscription.ended:
                await self._make_again(subscription)

        asyncio.get_running_loop().create_task(retry())

    async def _refused(self, subscription: _Subscription, error: dict[str, Any]) -> None:
        """The server would not resume (or ended) the subscription."""
        if subscription.ended:
            return
        code = int(error.get("code", -32603))
        if code in RETRYABLE:
            self._retry_later(subscription)
            return
        kind, value = subscription.resume
        cursor = value if kind == "cursor" else None
        refusal = ResumeRefusedError(code, str(error.get("message", "")), subscription.id, cursor)
        block = cursor_block(cursor) if cursor else None
        if self.on_refused == "fromBlock" and block is not None:
            subscription.resume = ("fromBlock", hex(block))
            await self._make_again(subscription)
        else:
            subscription.ended = True
            self._subscriptions.pop(subscription.id, None)
        if self.on_error is None:
            raise refusal
        await _maybe_await(self.on_error(refusal))

    # -- the socket -- #

    async def _received(self, message: Any) -> Any:
        """What of `message` goes on to web3.py (None: nothing)."""
        if not isinstance(message, dict):
            return message
        if message.get("method") == "eth_subscription":
            return await self._notification(message)
        request_id = message.get("id")
        if request_id in self._answers:
            self._in_flight.pop(request_id, None)
            self._answers.pop(request_id).set_result(message)
            return None
        request = self._in_flight.pop(request_id, None)
        if request is None or request[0] != "eth_subscribe":
            return message
        made_again = request[2]
        if "result" in message:
            self._adopt(request, message["result"])
        elif made_again is not None:
            await self._refused(made_again, message.get("error") or {})
        return None if made_again is not None else message

    async def _notification(self, message: dict[str, Any]) -> dict[str, Any] | None:
        params = message.get("params") or {}
        app_id = self._server_ids.get(params.get("subscription"))
        subscription = self._subscriptions.get(app_id) if app_id else None
        if subscription is None or subscription.ended:
            return None
        if "error" in params:
            # The server ended it (its replay fell behind, or the nodes
            # failed it): it holds nothing of it any more.
            del self._server_ids[params["subscription"]]
            await self._refused(subscription, params["error"])
            return None
        cursor = params.get("cursor")
        if cursor is not None:
            subscription.resume = ("cursor", cursor)
        message = {**message, "params": {**params, "subscription": subscription.id}}
        if cursor is not None and self.store is not None:
            # Saved as it is handed over: web3.py queues it for the
            # application next.
            await _maybe_await(self.store.save(subscription.key, cursor))
        return message

    async def _send(self, request: dict[str, Any]) -> None:
        """Sends on the open socket; when there is none (or it drops), the
        request stays in flight and goes on the next one."""
        await self._open.wait()
        try:
            await super().socket_send(json.dumps(request).encode())
        except (ConnectionClosed, OSError):
            pass

    async def _call(self, method: str, params: list[Any]) -> dict[str, Any]:
        """A request of ours, answered past web3.py."""
        request_id = f"chainsieve:{next(self._ids)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = answer
        self._in_flight[request_id] = (method, params, None)
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await answer

    async def _reconnect(self, cause: BaseException) -> None:
        """Opens the socket again (backoff with jitter between tries), sends
        again what was in flight, and makes every subscription again from
        its resume point."""
        self._open.clear()
        self._generation += 1
        self.logger.info("connection to %s lost (%s); reconnecting", self.endpoint_uri, cause)
        attempt = 0
        while True:
            await asyncio.sleep(backoff_delay(self.backoff, attempt))
            attempt += 1
            try:
                await WebSocketProvider._provider_specific_connect(self)
                break
            except (OSError, ConnectionClosed, asyncio.TimeoutError) as error:
                self.logger.info("reconnecting to %s: %s", self.endpoint_uri, error)
            except Exception as error:  # an HTTP answer instead of a handshake
                self.logger.info("reconnecting to %s: %s", self.endpoint_uri, error)
        self.reconnections += 1
        self._server_ids.clear()
        in_flight, self._in_flight = self._in_flight, {}
        self._open.set()
        for request_id, (method, params, made_again) in in_flight.items():
            if made_again is not None:
                continue
            if method in NOT_REPEATABLE:
                self._queued.append(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {
                            "code": -32603,
                            "message": f"the connection to chainsieve dropped before {method} "
                            "was answered; it may or may not have taken effect",
                        },
                    }
                )
                continue
            self._in_flight[request_id] = (method, params, None)
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        for subscription in list(self._subscriptions.values()):
            if not subscription.ended:
                await self._make_again(subscription)


def _is_options(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(key in OPTIONS for key in value)
