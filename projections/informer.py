"""The informer loop: list a collection, then watch it from the list's resourceVersion.

What flows through here: a kubernetes-asyncio list function (positional arguments bound,
returning a plain dict) goes in; the handler sees every full listing (`on_list`, after
each list or relist, so it can forget objects deleted while nobody watched) and every
watch event in between (`on_event(type, object)`).

How a real kube-apiserver behaves, and what the loop does about it:

- A watch ends normally after `timeoutSeconds` (or sooner, when the server or a proxy
  closes it). It is resumed from the last resourceVersion seen (events and BOOKMARKs).
- A watch the server closes at once without an event — HTTP 200 and an empty body is how
  kube-apiserver answers a watch it cannot encode, e.g. a metadata-only watch that asked
  for the `...List` form — is an *empty watch*. Resuming it at once would spin (thousands
  of requests a minute); instead the loop waits with exponential backoff and full jitter
  (`policy.initial` doubling up to `relist_backoff`), and after `EMPTY_WATCHES_BEFORE_RELIST`
  empty watches in a row it lists again. One event resets the count.
- A resourceVersion too old for the server (compacted in etcd, or out of the watch cache's
  window) answers 410 Gone, as an HTTP status or as an ERROR event in the stream: the
  loop lists again at once (the first time; with backoff when it repeats) and resumes
  from the new listing's resourceVersion.
- Any other failure (connection refused, 5xx, timeouts) lists again after the backoff.

Watches ask for bookmarks (`allowWatchBookmarks`): the server then sends the current
resourceVersion now and then, so a quiet collection resumes from a recent version rather
than one that is about to be compacted.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import watch

from projections.kube import RetryPolicy, call, describe, status_code

__all__ = ["EMPTY_WATCHES_BEFORE_RELIST", "EventHandler", "ListHandler", "list_and_watch"]

log = logging.getLogger("rollout.kube")

ListHandler = Callable[[list[dict[str, Any]]], Awaitable[None]]
EventHandler = Callable[[str, dict[str, Any]], Awaitable[None]]
ListFunction = Callable[..., Awaitable[Any]]

EMPTY_WATCHES_BEFORE_RELIST = 3
_MIN_HEALTHY_WATCH = 1.0  # seconds: a watch closed sooner without an event is an empty one


class _EmptyWatches(Exception):
    """Several watches in a row closed at once without an event: list again."""


@dataclass
class _Backoff:
    """Capped exponential backoff with full jitter; `failures` counts in a row."""

    initial: float
    maximum: float
    failures: int = 0

    def next_delay(self) -> float:
        self.failures += 1
        return random.uniform(0, min(self.maximum, self.initial * 2 ** min(self.failures, 20)))

    def reset(self) -> None:
        self.failures = 0


async def list_and_watch(
    list_fn: ListFunction,
    *,
    on_list: ListHandler,
    on_event: EventHandler,
    what: str,
    label_selector: str | None = None,
    policy: RetryPolicy | None = None,
    watch_timeout: int = 300,
    relist_backoff: float = 30.0,
    max_failures: int | None = None,
) -> None:
    """Run the informer loop for one collection until cancelled; see the module docstring.

    With `max_failures`, that many failed lists/watches in a row raise the last error, for
    a caller that should reconnect (e.g. with credentials read anew) rather than retry.
    """
    policy = policy or RetryPolicy()
    selector = {"label_selector": label_selector} if label_selector else {}
    backoff = _Backoff(policy.initial, relist_backoff)
    while True:
        try:
            listing = await call(list_fn, policy=policy, what=f"list {what}", **selector)
            await on_list(list(listing.get("items") or []))
            await _watch_from(
                list_fn,
                listing["metadata"]["resourceVersion"],
                on_event=on_event,
                what=what,
                selector=selector,
                policy=policy,
                watch_timeout=watch_timeout,
                backoff=backoff,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if max_failures is not None and backoff.failures + 1 >= max_failures:
                raise
            gone = status_code(error) == 410
            first = backoff.failures == 0
            delay = backoff.next_delay()
            if gone and first:
                delay = 0.0
            if gone:
                log.info("%s: resourceVersion expired (410 Gone); listing again in %.1fs", what, delay)
            elif isinstance(error, _EmptyWatches):
                log.warning("%s: %s; listing again in %.1fs", what, error, delay)
            else:
                log.warning("%s: %s; listing again in %.1fs", what, describe(error), delay)
            await asyncio.sleep(delay)


class RawWatch(watch.Watch):
    """kubernetes_asyncio's `Watch`, without the `ApiClient` it builds for every stream only
    to deserialize events into models: an `ApiClient` builds an SSL context, which loads the
    system's CA bundle — 41 ms of CPU on the 2-core benchmark machine, paid for every watch
    started or resumed (a drift watch and the status watches of each workload cluster, again
    every `watch_timeout`): 14 of the 36 CPU seconds a Kubernetes-sink applier spent on 50
    clusters (`benchmarks/appliers.py`). The informers read each event's `raw_object` and
    nothing else, so events are left undeserialized and there is no client to build."""

    def __init__(self) -> None:  # not super().__init__(): it builds the ApiClient
        self._raw_return_type = None
        self._stop = False
        self._api_client = None  # type: ignore[assignment]  # never used: nothing is deserialized
        self.resource_version = None
        self.resp = None

    def get_return_type(self, func: object) -> str:
        return ""  # no model: `object` stays the raw dict

    async def close(self) -> None:
        if self.resp is not None:
            self.resp.release()
            self.resp = None


async def _watch_from(
    list_fn: ListFunction,
    version: str,
    *,
    on_event: EventHandler,
    what: str,
    selector: dict[str, str],
    policy: RetryPolicy,
    watch_timeout: int,
    backoff: _Backoff,
) -> None:
    """Watch from `version`, resuming after each watch ends; returns only by raising."""
    loop = asyncio.get_running_loop()
    empty = 0
    while True:
        started, events = loop.time(), 0
        async with RawWatch() as stream:
            async for event in stream.stream(
                list_fn,
                resource_version=version,
                timeout_seconds=watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(policy.request_timeout, watch_timeout + policy.request_timeout),
                **selector,
            ):
                events += 1
                kind, obj = event["type"], event["raw_object"]
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind != "BOOKMARK":
                    await on_event(kind, obj)
        if events or loop.time() - started >= min(_MIN_HEALTHY_WATCH, watch_timeout):
            empty = 0
            backoff.reset()
            continue
        empty += 1
        if empty >= EMPTY_WATCHES_BEFORE_RELIST:
            raise _EmptyWatches(f"{empty} watches in a row closed at once without an event")
        delay = backoff.next_delay()
        log.debug("%s: the watch closed at once without an event; watching again in %.2fs", what, delay)
        await asyncio.sleep(delay)
