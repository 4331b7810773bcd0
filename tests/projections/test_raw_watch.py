"""The informers' watch (projections/informer.py `RawWatch`): events as the API server sent
them, and no ApiClient — hence no SSL context loading the CA bundle — per watch started."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import watch as library_watch

from projections.informer import RawWatch


def test_a_watch_builds_no_api_client(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> None:
        raise AssertionError("an ApiClient was built")

    monkeypatch.setattr(library_watch, "ApiClient", refused)
    stream = RawWatch()
    asyncio.run(stream.close())


def test_an_event_is_the_raw_object_and_its_resource_version_is_followed() -> None:
    stream = RawWatch()
    obj = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "app", "resourceVersion": "42"},
    }
    event = stream.unmarshal_event(json.dumps({"type": "MODIFIED", "object": obj}), stream.get_return_type(None))
    assert event["type"] == "MODIFIED"
    assert event["raw_object"] == obj and event["object"] == obj
    assert stream.resource_version == "42"


def test_an_error_event_is_still_raised_with_its_status() -> None:
    stream = RawWatch()
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old resource version"}}
    with pytest.raises(ApiException) as raised:
        stream.unmarshal_event(json.dumps(gone), stream.get_return_type(None))
    assert raised.value.status == 410
