"""A stage's outputs (streams/outputs.py): records in order, compacted ones coalesced to their
last value, and the bytes they hold counted exactly — however a batch's outputs are merged."""

from __future__ import annotations

from streams.outputs import Outputs


def sent(out: Outputs, steps: list[tuple[str, bytes, bytes | None, bool]]) -> Outputs:
    for topic, key, value, latest in steps:
        if latest:
            out.send_latest(topic, key, value)
        else:
            out.send(topic, key, value)
    return out


def held(out: Outputs) -> int:
    return sum(len(r.key or b"") + len(r.value or b"") for r in out.all())


STEPS = [
    ("decisions", b"m", b"d-1", False),
    ("targets", b"m/c-1", b"updating", True),
    ("targets", b"m/c-2", b"updating", True),
    ("targets", b"m/c-1", b"succeeded!", True),
    ("targets", b"m/c-3", None, True),
    ("assignments", b"c-1", b"{}", False),
]


def test_outputs_extended_into_fresh_ones_are_the_outputs_sent_there() -> None:
    merged = Outputs("dl")
    merged.extend(sent(Outputs("dl"), STEPS))
    direct = sent(Outputs("dl"), STEPS)
    assert merged.all() == direct.all()
    assert merged.size == direct.size == held(direct)


def test_outputs_extended_into_outputs_with_records_coalesce_with_them() -> None:
    first, second = STEPS[:3], STEPS[3:]
    merged = sent(Outputs("dl"), first)
    merged.extend(sent(Outputs("dl"), second))
    direct = sent(Outputs("dl"), STEPS)
    assert merged.records == direct.records
    assert list(merged.latest.items()) == list(direct.latest.items())  # the order of last writes
    assert merged.size == direct.size == held(direct)
