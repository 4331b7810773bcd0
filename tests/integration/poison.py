"""Seeded poison: bad values for every input topic, and a publisher that reports where
each one landed.

`generate(seed, per_topic)` returns, for each input role (intents, clusters, status,
ticks), `per_topic` values the router must reject — each a `Poison` naming its category.
The same seed always gives the same values (and keys), so a failure can be replayed:

    .venv/bin/python -m tests.integration.poison --seed 7 --show 20

Categories (every one appears on every topic; `HUGE_PER_TOPIC` values near the broker's
message size limit on each topic, the rest drawn in turn):

* not-json        garbage text, truncated events, trailing garbage, bare NaN/Infinity, b""
* random-bytes    random bytes that are not UTF-8 (first byte ≥ 0x80)
* invalid-utf8    an event of the topic's own type with invalid UTF-8 inside a string
* lone-surrogate  an event of the topic's own type with a `\\ud800`-style escape in a string
* not-an-object   JSON arrays and scalars (an event wrapped in a list among them)
* deep-nesting    5,000 levels of arrays/objects, alone or inside an event; 100,000 `[`
* bad-type        objects without `type`, with a non-string, unknown or 5,000-char type
* wrong-topic     a valid event of another input topic's type (a Tick on intents, …)
* fleet-seen      FleetSeen — written by the router into the journal, never an input
* schema-invalid  the topic's own type with invalid fields (names, enums, extra fields,
                  Tick.now NaN/Infinity/1e400/-1/0/1e12, …)
* huge            ~900 KB values: text, random bytes, control characters, a shallow
                  array of numbers, an event with a huge invalid field, multi-byte text
* tombstone       no value at all (None)

Nothing here is valid on its topic (`tests/integration/test_poison.py` asserts that each
produces exactly one dead letter and nothing else).
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.settings import kafka_client_options

ROLES = ("intents", "clusters", "status", "ticks")
HUGE_BYTES = 900 * 1024  # the local broker's message.max.bytes is Kafka's default, 1 MiB + 12
HUGE_PER_TOPIC = 4
NOW = 1_700_000_000.0  # a plausible tick time (2023)


@dataclass(frozen=True)
class Poison:
    role: str
    category: str
    key: bytes | None
    value: bytes | None

    def describe(self) -> str:
        shown = "None" if self.value is None else repr(self.value[:80])
        size = 0 if self.value is None else len(self.value)
        return f"{self.role}/{self.category} ({size} bytes): {shown}"


@dataclass(frozen=True)
class Published:
    """Where a record landed."""

    topic: str
    partition: int
    offset: int


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# -- valid events, as plain dicts (so they can be broken field by field) --------------------


def cluster_dict(name: str, *, labels: dict[str, str] | None = None, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "fleet", "labels": labels or {"env": "fuzz"}},
        "status": {"controlPlaneReady": ready, "kubeconfigSecret": True},
    }


def module_dict(name: str, *, env: str = "fuzz", tag: str = "1.0.0") -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "Module",
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "selector": {"matchLabels": {"env": env}},
            "sync": {
                "source": {"git": {"url": "https://github.com/example/fuzz", "version": {"tag": tag}}},
                "package": {"kustomize": {"path": "./deploy"}},
            },
            "rollout": {"stages": [{"name": "all", "maxConcurrency": "100%"}]},
        },
    }


def own_events(rng: random.Random) -> dict[str, list[Callable[[], dict[str, Any]]]]:
    """Per role, makers of valid events of that role's types (fresh ids each call)."""

    def ident() -> str:
        return "".join(rng.choices(string.hexdigits.lower(), k=32))

    def name() -> str:
        return "fz-" + "".join(rng.choices(string.ascii_lowercase + string.digits, k=rng.randint(1, 12)))

    return {
        "intents": [
            lambda: {"type": "ModuleApplied", "id": ident(), "module": module_dict(name(), env="nowhere")},
            lambda: {"type": "ModuleDeleted", "id": ident(), "kind": "Module", "name": name()},
            lambda: {"type": "RolloutCommanded", "id": ident(), "module": name(), "command": "pause"},
        ],
        "clusters": [
            lambda: {"type": "ClusterObserved", "id": ident(), "cluster": cluster_dict(name(), labels={"env": "x"})},
            lambda: {"type": "ClusterRemoved", "id": ident(), "name": name()},
        ],
        "status": [
            lambda: {
                "type": "SyncStatusReported",
                "id": ident(),
                "cluster": name(),
                "module": name(),
                "revision": "1.0.0",
                "state": rng.choice(["succeeded", "failed", "updating"]),
            }
        ],
        "ticks": [lambda: {"type": "Tick", "id": ident(), "now": NOW + rng.random()}],
    }


# -- the generator -----------------------------------------------------------------------


class _Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.own = own_events(self.rng)

    def event(self, role: str) -> dict[str, Any]:
        return self.rng.choice(self.own[role])()

    def key(self) -> bytes | None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            return None
        if roll < 0.10:
            return rng.randbytes(rng.randint(1, 64))  # not UTF-8, most likely
        if roll < 0.13:
            return ("k" * rng.randint(600, 3000)).encode()  # longer than a dead letter keeps
        if roll < 0.16:
            return "".join(chr(rng.randint(0, 31)) for _ in range(40)).encode()  # control characters
        return f"key-{rng.randint(0, 10_000)}".encode()

    # Each category: role -> value (bytes or None)

    def not_json(self, role: str) -> bytes:
        rng = self.rng
        whole = dumps(self.event(role))
        return rng.choice(
            [
                lambda: "".join(rng.choices(string.printable, k=rng.randint(1, 300))).encode(),
                lambda: whole[: rng.randint(1, len(whole) - 1)],  # truncated
                lambda: whole + b"}garbage",
                lambda: b"{not json",
                lambda: b"{'type': 'Tick'}",
                lambda: rng.choice([b"NaN", b"Infinity", b"-Infinity", b"[NaN]"]),
                lambda: b"",
                lambda: b"   \n\t ",
                lambda: b"{" + b'"a":1,' * rng.randint(1, 50),
                lambda: b'{"type":"Tick","now":' + b"9" * 5000 + b"}",  # over Python's int digit limit
            ]
        )()

    def random_bytes(self, role: str) -> bytes:
        data = bytearray(self.rng.randbytes(self.rng.randint(1, 3000)))
        data[0] = self.rng.randint(0x80, 0xFF)  # never starts as ASCII JSON
        return bytes(data)

    def invalid_utf8(self, role: str) -> bytes:
        rng = self.rng
        event = self.event(role)
        event["id"] = "MARK"
        bad = rng.choice([b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe9t\xe9"])
        return dumps(event).replace(b"MARK", b"id-" + bad + b"-x")

    def lone_surrogate(self, role: str) -> bytes:
        event = self.event(role)
        surrogate = self.rng.choice(["\\ud800", "\\udfff", "\\udbff", "x\\udc00y"])
        field = {"status": "message"}.get(role, "id")
        event[field] = "MARK"
        return dumps(event).replace(b"MARK", surrogate.encode())

    def not_an_object(self, role: str) -> bytes:
        rng = self.rng
        return rng.choice(
            [
                lambda: b"[]",
                lambda: dumps([rng.random() for _ in range(rng.randint(1, 20))]),
                lambda: b"null",
                lambda: b"true",
                lambda: b"false",
                lambda: str(rng.randint(-(10**9), 10**9)).encode(),
                lambda: b"-0.5",
                lambda: dumps("".join(rng.choices(string.ascii_letters, k=rng.randint(0, 100)))),
                lambda: dumps([self.event(role)]),  # a valid event, wrapped in a list
            ]
        )()

    def deep_nesting(self, role: str) -> bytes:
        rng = self.rng
        depth = rng.choice([5000, 5000, 1000, 65])
        nested = rng.choice(
            [
                lambda: b"[" * depth + b"]" * depth,
                lambda: b'{"a":' * depth + b"1" + b"}" * depth,
                lambda: b'[{"a":' * (depth // 2) + b"0" + b"}]" * (depth // 2),
                lambda: b"[" * 100_000,
            ]
        )()
        if rng.random() < 0.5:
            return nested
        event = self.event(role)
        event["extra"] = "MARK"  # deep inside an otherwise valid event
        return dumps(event).replace(b'"MARK"', nested)

    def bad_type(self, role: str) -> bytes:
        rng = self.rng
        event = self.event(role)
        choice = rng.randint(0, 6)
        if choice == 0:
            event.pop("type")
        elif choice == 1:
            event["type"] = None
        elif choice == 2:
            event["type"] = rng.randint(-5, 5)
        elif choice == 3:
            event["type"] = event["type"].lower()
        elif choice == 4:
            event["type"] = rng.choice(["Nope", "Module", "ClusterObservedX", "tick", ""])
        elif choice == 5:
            event["type"] = [event["type"]]
        else:
            event["type"] = "T" * 5000
        return dumps(event)

    def wrong_topic(self, role: str) -> bytes:
        other = self.rng.choice([r for r in ROLES if r != role])
        return dumps(self.event(other))

    def fleet_seen(self, role: str) -> bytes:
        return dumps(
            {
                "type": "FleetSeen",
                "id": f"fleet-{self.rng.randint(0, 99)}",
                "partition": self.rng.randint(0, 3),
                "position": self.rng.randint(0, 10**9),
            }
        )

    def schema_invalid(self, role: str) -> bytes:
        rng = self.rng
        event = self.event(role)
        if rng.random() < 0.1:
            event["unexpected"] = True  # extra fields are forbidden
            return dumps(event)
        if rng.random() < 0.1:
            event["id"] = rng.choice([None, 5, [], {}])
            return dumps(event)
        kind = event["type"]
        if kind == "Tick":
            bad = rng.choice(
                [
                    "NaN",
                    "Infinity",
                    "-Infinity",
                    "1e400",
                    "-1e400",
                    "-1",
                    "0",
                    "1e12",
                    "7.3e9",
                    '"inf"',
                    '"NaN"',
                    "null",
                    '"soon"',
                    "[1]",
                ]
            )
            event["now"] = "MARK"
            return dumps(event).replace(b'"MARK"', bad.encode())
        if kind == "ModuleApplied":
            module = event["module"]
            fault = rng.randint(0, 4)
            if fault == 0:
                module["metadata"]["name"] = "Bad_Name"
            elif fault == 1:
                del module["spec"]
            elif fault == 2:
                event["fleet"] = {"-1": 5}
            elif fault == 3:
                module["spec"]["rollout"]["stages"][0]["maxConcurrency"] = "150%x"
            else:
                module["kind"] = "Deployment"
        elif kind == "ModuleDeleted":
            event[rng.choice(["kind", "name"])] = rng.choice(["Thing", "Bad_Name", "", "-x-"])
        elif kind == "RolloutCommanded":
            event["command"] = rng.choice(["explode", "", "PAUSE"])
        elif kind == "ClusterObserved":
            fault = rng.randint(0, 2)
            if fault == 0:
                event["cluster"]["metadata"]["name"] = "Prod_1"
            elif fault == 1:
                del event["cluster"]
            else:
                event["cluster"]["status"]["controlPlaneReady"] = "maybe"
        elif kind == "ClusterRemoved":
            event["name"] = rng.choice(["", "UPPER", "a" * 300])
        elif kind == "SyncStatusReported":
            fault = rng.randint(0, 3)
            if fault == 0:
                event["state"] = "exploded"
            elif fault == 1:
                event["cluster"] = "Not A Name"
            elif fault == 2:
                del event["revision"]
            else:
                event["generation"] = "first"
        return dumps(event)

    def huge(self, role: str, index: int) -> bytes:
        rng = self.rng
        size = HUGE_BYTES - rng.randint(0, 4096)
        kind = index % 6
        if kind == 0:
            return b"x" * size
        if kind == 1:
            data = bytearray(rng.randbytes(size))
            data[0] = 0xFF
            return bytes(data)
        if kind == 2:
            return b"\x01" * size  # every byte escapes to 6 in JSON
        if kind == 3:
            return b"[" + b"1," * (size // 2 - 1) + b"1]"
        event = self.event(role)
        event["extra"] = "MARK"  # an otherwise valid event with a huge forbidden field
        filler = b"z" * size if kind == 4 else "\u00e9\u4e2d\U0001f600".encode() * (size // 9)
        return dumps(event).replace(b"MARK", filler)

    def tombstone(self, role: str) -> None:
        return None


CATEGORIES: tuple[str, ...] = (
    "not-json",
    "random-bytes",
    "invalid-utf8",
    "lone-surrogate",
    "not-an-object",
    "deep-nesting",
    "bad-type",
    "wrong-topic",
    "fleet-seen",
    "schema-invalid",
    "tombstone",
)


def generate(seed: int, per_topic: int = 1000, *, huge: int = HUGE_PER_TOPIC) -> dict[str, list[Poison]]:
    """`per_topic` bad values per input role (`huge` of them near the size limit)."""
    gen = _Generator(seed)
    out: dict[str, list[Poison]] = {}
    for role in ROLES:
        values: list[Poison] = []
        for index in range(huge):
            values.append(Poison(role, "huge", gen.key(), gen.huge(role, index + ROLES.index(role))))
        for index in range(per_topic - huge):
            category = (
                CATEGORIES[index % len(CATEGORIES)] if index < 2 * len(CATEGORIES) else gen.rng.choice(CATEGORIES)
            )
            make = getattr(gen, category.replace("-", "_"))
            key = gen.key()
            value = make(role)
            if value is None and key is None:  # Kafka takes no record without key and value
                key = b"tombstone"
            values.append(Poison(role, category, key, value))
        gen.rng.shuffle(values)
        out[role] = values
    return out


# -- publishing --------------------------------------------------------------------------


async def publish(
    bootstrap: str,
    topic: str,
    messages: Sequence[tuple[bytes | None, bytes | None]],
    *,
    max_request_size: int = 2 * 1024 * 1024,
) -> list[Published]:
    """Send (key, value) pairs in order (idempotent, acks=all); where each one landed."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        max_request_size=max_request_size,
        linger_ms=5,
        max_batch_size=512 * 1024,
        **kafka_client_options(),
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=value) for key, value in messages]
        await producer.flush()
        results = [await future for future in futures]
    finally:
        await producer.stop()
    return [Published(r.topic, r.partition, r.offset) for r in results]


async def read_values(bootstrap: str, topic: str) -> list[bytes | None]:
    """Every value in `topic` (read_committed, up to the end offsets taken at the start).

    Not `infra.client.read_all`: that decodes keys as UTF-8, and dead letters keep the
    rejected input's key, whatever bytes it was."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **kafka_client_options(),
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic} does not exist")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        values: list[bytes | None] = []
        remaining = {tp for tp in tps if await consumer.position(tp) < end[tp]}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, messages in batch.items():
                values.extend(m.value for m in messages if m.offset < end[tp])
                if await consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
        return values
    finally:
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--show", type=int, default=10, help="print the first N values per topic")
    args = parser.parse_args()
    for role, values in generate(args.seed, args.per_topic).items():
        counts: dict[str, int] = {}
        for value in values:
            counts[value.category] = counts.get(value.category, 0) + 1
        print(f"{role}: {len(values)} values, {counts}")
        for value in values[: args.show]:
            print("  ", value.describe())


if __name__ == "__main__":
    main()
