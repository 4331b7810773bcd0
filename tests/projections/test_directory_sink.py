"""The directory sink: snapshots become files, kept exactly equal to the latest snapshot."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.crds import SchemaError
from projections.flux_yaml import dump_objects as _dump
from projections.render import FluxRenderer
from projections.sinks import Sink, SinkResult
from projections.sinks import directory as directory_sink
from projections.sinks.directory import STATE_FILE, DirectorySink
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync


def sync(module: str, tag: str = "1.0.0", substitute: dict[str, str] | None = None) -> dict[str, Any]:
    record = Sync.model_validate(
        {
            "source": {"git": {"url": f"https://example.com/{module}", "version": {"tag": tag}}},
            "package": {"kustomize": {"path": "./deploy", "substitute": substitute or {}}},
        }
    )
    return AssignedSync(module=module, module_namespace="fleet", revision=tag, sync=record).model_dump(by_alias=True)


def snapshot(
    version: int,
    *syncs: dict[str, Any],
    kind: str = "ProxyAssemblage",
    cluster: str = "prod-eu-1",
    namespace: str = "fleet",
) -> Assemblage:
    return Assemblage.model_validate(
        {
            "kind": kind,
            "metadata": {"name": cluster, "namespace": namespace},
            "version": version,
            "spec": {"syncs": list(syncs)},
        }
    )


@pytest.fixture
def sink(tmp_path: Path) -> DirectorySink:
    return DirectorySink(tmp_path / "out", FluxRenderer())


def files(root: Path) -> list[str]:
    """Every file and directory under root, relative, except the state file."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != STATE_FILE)


def documents(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(path.read_text()))


def test_directory_sink_is_a_sink(sink: DirectorySink) -> None:
    assert isinstance(sink, Sink)


def test_proxy_snapshot_writes_one_file_per_sync_with_source_then_kustomization(sink: DirectorySink) -> None:
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("ingress")))
    assert result == SinkResult(kind="ProxyAssemblage", cluster="prod-eu-1", version=1, written=2)
    assert files(sink.root) == [
        "proxy",
        "proxy/prod-eu-1",
        "proxy/prod-eu-1/ingress.yaml",
        "proxy/prod-eu-1/podinfo.yaml",
    ]
    source, kustomization = documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")
    assert (source["kind"], kustomization["kind"]) == ("GitRepository", "Kustomization")
    assert source["metadata"]["namespace"] == "flux-system"
    assert list(source) == ["apiVersion", "kind", "metadata", "spec"]  # the template's order, not sorted


def test_file_content_is_exactly_what_the_renderer_produced(sink: DirectorySink) -> None:
    assemblage = snapshot(1, sync("podinfo", substitute={"A": "x\n---\ny: &a *a # {{ z }}"}))
    sink.write("ProxyAssemblage", "prod-eu-1", assemblage)
    expected = sink.renderer.render(assemblage, assemblage.spec.syncs[0])
    assert documents(sink.root / "proxy/prod-eu-1/podinfo.yaml") == expected


def test_remote_snapshot_is_written_under_the_cluster_namespace(sink: DirectorySink) -> None:
    sink.write("RemoteAssemblage", "prod-eu-1", snapshot(1, sync("flux"), kind="RemoteAssemblage"))
    assert files(sink.root) == ["remote", "remote/fleet", "remote/fleet/prod-eu-1", "remote/fleet/prod-eu-1/flux.yaml"]
    _, kustomization = documents(sink.root / "remote/fleet/prod-eu-1/flux.yaml")
    assert kustomization["spec"]["kubeConfig"]["secretRef"]["name"] == "prod-eu-1-kubeconfig"


def test_remote_and_proxy_of_the_same_cluster_are_independent(sink: DirectorySink) -> None:
    sink.write("RemoteAssemblage", "prod-eu-1", snapshot(1, sync("flux"), kind="RemoteAssemblage"))
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    sink.write("ProxyAssemblage", "prod-eu-1", None)
    remote = ["remote", "remote/fleet", "remote/fleet/prod-eu-1", "remote/fleet/prod-eu-1/flux.yaml"]
    assert files(sink.root) == ["proxy", *remote]


def test_syncs_removed_from_the_snapshot_are_pruned(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("ingress")))
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))
    assert (result.written, result.unchanged, result.pruned) == (0, 1, 1)
    assert files(sink.root) == ["proxy", "proxy/prod-eu-1", "proxy/prod-eu-1/podinfo.yaml"]


def test_empty_snapshot_removes_the_cluster_directory(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2))
    assert result.pruned == 1
    assert files(sink.root) == ["proxy"]


def test_tombstone_removes_the_cluster_directory(sink: DirectorySink) -> None:
    sink.write("RemoteAssemblage", "prod-eu-1", snapshot(1, sync("flux"), sync("cni"), kind="RemoteAssemblage"))
    sink.write("RemoteAssemblage", "prod-eu-2", snapshot(1, sync("flux"), kind="RemoteAssemblage", cluster="prod-eu-2"))
    result = sink.write("RemoteAssemblage", "prod-eu-1", None)
    assert result == SinkResult(kind="RemoteAssemblage", cluster="prod-eu-1", version=None, pruned=2)
    assert files(sink.root) == ["remote", "remote/fleet", "remote/fleet/prod-eu-2", "remote/fleet/prod-eu-2/flux.yaml"]
    sink.write("RemoteAssemblage", "prod-eu-2", None)
    assert files(sink.root) == ["remote"]


def test_tombstone_of_an_unknown_cluster_is_harmless(sink: DirectorySink) -> None:
    assert sink.write("ProxyAssemblage", "never-seen", None).pruned == 0


def test_cluster_moved_to_another_namespace_leaves_nothing_behind(sink: DirectorySink) -> None:
    sink.write("RemoteAssemblage", "prod-eu-1", snapshot(1, sync("flux"), kind="RemoteAssemblage", namespace="old"))
    result = sink.write("RemoteAssemblage", "prod-eu-1", snapshot(2, sync("flux"), kind="RemoteAssemblage"))
    assert (result.written, result.pruned) == (1, 1)
    assert files(sink.root) == ["remote", "remote/fleet", "remote/fleet/prod-eu-1", "remote/fleet/prod-eu-1/flux.yaml"]


# --- redelivery and versions -------------------------------------------------------------------------


def test_stale_snapshot_is_ignored(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(5, sync("podinfo", tag="2.0.0")))
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(4, sync("podinfo", tag="1.0.0"), sync("old")))
    assert result == SinkResult(kind="ProxyAssemblage", cluster="prod-eu-1", version=4, stale=True)
    assert files(sink.root) == ["proxy", "proxy/prod-eu-1", "proxy/prod-eu-1/podinfo.yaml"]
    source, _ = documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")
    assert source["spec"]["ref"]["tag"] == "2.0.0"


def test_versions_are_remembered_across_sink_instances(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(5, sync("podinfo")))
    restarted = DirectorySink(sink.root, FluxRenderer())
    assert restarted.write("ProxyAssemblage", "prod-eu-1", snapshot(3)).stale
    assert list(restarted.written_versions()) == [("ProxyAssemblage", "prod-eu-1", 5)]
    state = json.loads((sink.root / STATE_FILE).read_text())
    assert state["snapshots"]["ProxyAssemblage/prod-eu-1"]["version"] == 5


def test_versions_are_tracked_per_kind_and_cluster(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(9, sync("podinfo")))
    assert not sink.write("ProxyAssemblage", "prod-eu-2", snapshot(1, sync("podinfo"), cluster="prod-eu-2")).stale
    remote = snapshot(1, sync("flux"), kind="RemoteAssemblage")
    assert not sink.write("RemoteAssemblage", "prod-eu-1", remote).stale


def test_redelivered_same_version_is_applied_again_without_rewriting(sink: DirectorySink) -> None:
    assemblage = snapshot(3, sync("podinfo"), sync("ingress"))
    sink.write("ProxyAssemblage", "prod-eu-1", assemblage)
    path = sink.root / "proxy/prod-eu-1/podinfo.yaml"
    before = path.stat()
    result = sink.write("ProxyAssemblage", "prod-eu-1", assemblage)
    assert (result.written, result.unchanged, result.pruned, result.stale) == (0, 2, 0, False)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_tombstone_always_applies_and_a_new_life_starts_fresh(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(7, sync("podinfo")))
    sink.write("ProxyAssemblage", "prod-eu-1", None)
    assert files(sink.root) == ["proxy"]
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    assert (result.stale, result.written) == (False, 1)


def test_changed_sync_is_rewritten_and_unchanged_ones_are_skipped(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("ingress")))
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="1.1.0"), sync("ingress")))
    assert (result.written, result.unchanged, result.pruned) == (1, 1, 0)
    source, kustomization = documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")
    assert source["spec"]["ref"]["tag"] == "1.1.0"
    assert kustomization["metadata"]["annotations"]["rollout.dev/revision"] == "1.1.0"


# --- atomicity and validation -------------------------------------------------------------------------


def test_writes_are_atomic_and_leave_no_temporary_files(sink: DirectorySink, monkeypatch: pytest.MonkeyPatch) -> None:
    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src: str, dst: str) -> None:
        replaced.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    target = sink.root / "proxy/prod-eu-1/podinfo.yaml"
    (temp, destination), (state_temp, state) = replaced
    assert destination == str(target) and Path(temp).parent == target.parent
    assert state == str(sink.root / STATE_FILE) and Path(state_temp).parent == sink.root
    leftovers = [p for p in sink.root.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_failed_write_leaves_the_old_file_and_no_temporary_file(
    sink: DirectorySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    target = sink.root / "proxy/prod-eu-1/podinfo.yaml"
    before = target.read_bytes()

    def failing_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="2.0.0")))
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert [p for p in sink.root.rglob("*") if p.name.endswith(".tmp")] == []
    assert list(sink.written_versions()) == [("ProxyAssemblage", "prod-eu-1", 1)]


def test_temporary_file_left_by_a_crash_is_cleaned_up(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    crash_leftover = sink.root / "proxy/prod-eu-1/.podinfo.yaml.abc123.tmp"
    crash_leftover.write_text("partial")
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))
    assert not crash_leftover.exists()


def test_invalid_object_writes_nothing(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "kustomization.yaml.j2").write_text(
        '{% extends "builtin/kustomization.yaml.j2" %}\n'
        "{% block extra_spec %}\n{% if module == 'broken' %}\n  timeout: soon\n{% endif %}\n{% endblock %}\n"
    )
    sink = DirectorySink(tmp_path / "out", FluxRenderer(templates))
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    before = {p: p.read_bytes() for p in sink.root.rglob("*") if p.is_file()}
    with pytest.raises(SchemaError) as caught:
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("aaa"), sync("broken")))
    assert caught.value.fields == ["spec.timeout"]
    assert {p: p.read_bytes() for p in sink.root.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("module", ["../escape", "a/b", "UPPER", ".hidden"])
def test_module_names_that_are_not_safe_paths_are_refused(sink: DirectorySink, module: str) -> None:
    with pytest.raises(ValueError, match="not a DNS-1123 label"):
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync(module)))
    assert not sink.root.exists()


def test_cluster_names_that_are_not_safe_paths_are_refused(sink: DirectorySink) -> None:
    with pytest.raises(ValueError, match="not a DNS-1123 label"):
        sink.write("ProxyAssemblage", "../x", None)


def test_snapshot_delivered_under_another_key_is_refused(sink: DirectorySink) -> None:
    with pytest.raises(ValueError, match="key and value disagree"):
        sink.write("RemoteAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    with pytest.raises(ValueError, match="key and value disagree"):
        sink.write("ProxyAssemblage", "prod-eu-2", snapshot(1, sync("podinfo")))


def test_two_syncs_for_one_module_are_refused(sink: DirectorySink) -> None:
    with pytest.raises(ValueError, match="two syncs for module 'podinfo'"):
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("podinfo", tag="2")))


def test_corrupt_state_file_is_reported_with_its_path(sink: DirectorySink) -> None:
    sink.root.mkdir(parents=True)
    (sink.root / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=STATE_FILE):
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.text(), max_size=3))
def test_any_substitute_text_survives_the_file_round_trip(tmp_path: Path, substitute: dict[str, str]) -> None:
    sink = DirectorySink(tmp_path / "roundtrip", FluxRenderer())
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo", substitute=substitute)))
    _, kustomization = documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")
    assert kustomization["spec"].get("postBuild", {}).get("substitute", {}) == substitute


# --- batches and the state file -------------------------------------------------------------------


def test_a_batch_remembers_versions_before_it_ends_and_writes_the_state_file_at_its_end(sink: DirectorySink) -> None:
    with sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(5, sync("podinfo", tag="2.0.0")))
        assert not (sink.root / STATE_FILE).exists()
        assert sink.write("ProxyAssemblage", "prod-eu-1", snapshot(4, sync("podinfo"))).stale
        assert list(sink.written_versions()) == [("ProxyAssemblage", "prod-eu-1", 5)]
    state = json.loads((sink.root / STATE_FILE).read_text())
    assert state == {"format": 1, "snapshots": {"ProxyAssemblage/prod-eu-1": {"namespace": "fleet", "version": 5}}}


def test_a_batch_cut_short_by_a_failure_still_records_what_it_wrote(sink: DirectorySink) -> None:
    with pytest.raises(ValueError, match="key and value disagree"), sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(3, sync("podinfo")))
        sink.write("ProxyAssemblage", "prod-eu-2", snapshot(1, sync("podinfo")))
    assert list(DirectorySink(sink.root, FluxRenderer()).written_versions()) == [("ProxyAssemblage", "prod-eu-1", 3)]


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def counting_syncfs(monkeypatch: pytest.MonkeyPatch, *, result: int = 0) -> list[int]:
    """The real syncfs, counted (or, with `result` != 0, a failing one: a disk that is full)."""
    real = directory_sink._syncfs_call()
    assert real is not None, "these tests run on Linux, whose C library has syncfs"
    calls: list[int] = []

    def syncfs(fd: int) -> int:
        calls.append(fd)
        return real(fd) if result == 0 else result

    monkeypatch.setattr(directory_sink, "_syncfs_call", lambda: syncfs)
    return calls


def counting_fsync(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real = os.fsync
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_batch_publishes_its_files_when_it_ends_and_not_before(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    existing = sink.root / "proxy/prod-eu-1/podinfo.yaml"
    before = existing.read_bytes()
    with sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="2.0.0")))
        sink.write("ProxyAssemblage", "prod-eu-2", snapshot(1, sync("podinfo"), cluster="prod-eu-2"))
        assert existing.read_bytes() == before
        assert not (sink.root / "proxy/prod-eu-2/podinfo.yaml").exists()
    assert documents(existing)[0]["spec"]["ref"] == {"tag": "2.0.0"}
    assert documents(sink.root / "proxy/prod-eu-2/podinfo.yaml")[0]["spec"]["ref"] == {"tag": "1.0.0"}
    assert temporaries(sink.root) == []


def test_a_batch_makes_all_its_files_durable_with_two_filesystem_syncs_not_two_fsyncs_each(
    sink: DirectorySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = counting_syncfs(monkeypatch)
    fsynced = counting_fsync(monkeypatch)
    with sink.batch():
        for number in range(1, 6):
            cluster = f"prod-eu-{number}"
            sink.write("ProxyAssemblage", cluster, snapshot(1, sync("podinfo"), sync("redis"), cluster=cluster))
    assert len(syncs) == 2  # the staged files, then their renames
    assert len(fsynced) == 2  # the state file and its directory, written once after the files
    assert len(list(sink.root.rglob("*.yaml"))) == 10


def test_a_batch_whose_files_cannot_be_made_durable_publishes_nothing_and_records_no_version(
    sink: DirectorySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    existing = sink.root / "proxy/prod-eu-1/podinfo.yaml"
    before = existing.read_bytes()
    counting_syncfs(monkeypatch, result=-1)
    with pytest.raises(OSError, match="syncfs"), sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="2.0.0")))
        sink.write("ProxyAssemblage", "prod-eu-2", snapshot(1, sync("podinfo"), cluster="prod-eu-2"))
    monkeypatch.undo()
    assert existing.read_bytes() == before and not (sink.root / "proxy/prod-eu-2").exists()
    assert temporaries(sink.root) == []
    assert list(sink.written_versions()) == [("ProxyAssemblage", "prod-eu-1", 1)]
    redelivered = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="2.0.0")))
    assert (redelivered.stale, redelivered.written) == (False, 1)
    assert documents(existing)[0]["spec"]["ref"] == {"tag": "2.0.0"}


def test_without_syncfs_a_batch_fsyncs_each_staged_file_and_directory(
    sink: DirectorySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directory_sink, "_syncfs_call", lambda: None)
    fsynced = counting_fsync(monkeypatch)
    with sink.batch():
        for number in range(1, 4):
            cluster = f"prod-eu-{number}"
            sink.write("ProxyAssemblage", cluster, snapshot(1, sync("podinfo"), cluster=cluster))
    assert len(fsynced) == 3 + 3 + 2  # each file, each cluster's directory, the state file and root
    assert len(list(sink.root.rglob("*.yaml"))) == 3 and temporaries(sink.root) == []


def test_a_tombstone_in_a_batch_drops_the_files_staged_before_it(sink: DirectorySink) -> None:
    with sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("redis")))
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))
        assert temporaries(sink.root) != []
        sink.write("ProxyAssemblage", "prod-eu-1", None)
    assert files(sink.root) == ["proxy"] and list(sink.written_versions()) == []


def test_a_batch_writing_a_cluster_twice_publishes_its_last_snapshot(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    with sink.batch():
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo", tag="2.0.0"), sync("redis")))
        back = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(3, sync("podinfo")))
    assert back.unchanged == 1  # the file on disk already holds it: the staged 2.0.0 is dropped
    assert files(sink.root) == ["proxy", "proxy/prod-eu-1", "proxy/prod-eu-1/podinfo.yaml"]
    assert documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")[0]["spec"]["ref"] == {"tag": "1.0.0"}
    assert list(sink.written_versions()) == [("ProxyAssemblage", "prod-eu-1", 3)]


def test_a_removed_state_file_lets_the_next_snapshot_of_every_cluster_apply(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(5, sync("podinfo", tag="2.0.0")))
    (sink.root / STATE_FILE).unlink()  # what the corrupt-state error tells the user to do
    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(4, sync("podinfo", tag="1.0.0")))
    assert (result.stale, result.written) == (False, 1)


def test_a_state_file_corrupted_while_the_sink_runs_is_reported(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    (sink.root / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=STATE_FILE):
        sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))


_ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126))  # libyaml's path
_TEXT = st.one_of(st.text(), _ASCII)
_SCALARS = st.one_of(_TEXT, st.integers(), st.booleans(), st.none())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_TEXT, _VALUES, max_size=4), min_size=1, max_size=2))
def test_files_are_byte_for_byte_what_pyyaml_writes(objects: list[dict[str, Any]]) -> None:
    expected = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True).encode("utf-8")
    assert _dump(objects) == expected


def test_a_rendered_snapshot_file_is_byte_for_byte_what_pyyaml_writes(sink: DirectorySink) -> None:
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo", substitute={"A": "x y", "B": "ü"})))
    objects = documents(sink.root / "proxy/prod-eu-1/podinfo.yaml")
    expected = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True).encode("utf-8")
    assert (sink.root / "proxy/prod-eu-1/podinfo.yaml").read_bytes() == expected


class CountingRenderer(FluxRenderer):
    def __init__(self) -> None:
        super().__init__()
        self.rendered: list[str] = []

    def render_yaml(self, assemblage: Assemblage, sync: Any) -> bytes:
        self.rendered.append(sync.module)
        return super().render_yaml(assemblage, sync)


def test_a_snapshot_renders_only_the_syncs_that_changed_since_the_last(tmp_path: Path) -> None:
    renderer = CountingRenderer()
    sink = DirectorySink(tmp_path / "out", renderer)
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo"), sync("ingress")))
    renderer.rendered.clear()

    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo"), sync("ingress", tag="2.0.0")))

    assert renderer.rendered == ["ingress"]
    assert (result.written, result.unchanged) == (1, 1)
    fresh = DirectorySink(tmp_path / "fresh", FluxRenderer())
    fresh.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo"), sync("ingress", tag="2.0.0")))
    for name in ("podinfo.yaml", "ingress.yaml"):
        assert (tmp_path / "out/proxy/prod-eu-1" / name).read_bytes() == (
            tmp_path / "fresh/proxy/prod-eu-1" / name
        ).read_bytes()


def test_a_file_changed_on_disk_is_written_again_though_its_sync_did_not_change(tmp_path: Path) -> None:
    renderer = CountingRenderer()
    sink = DirectorySink(tmp_path / "out", renderer)
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    written = sorted((tmp_path / "out").rglob("podinfo.yaml"))[0]
    original = written.read_bytes()
    written.write_text("edited by hand\n")

    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))

    assert result.written == 1 and written.read_bytes() == original


def test_a_file_rewritten_on_disk_with_content_of_the_same_size_is_written_again(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path / "out", FluxRenderer())
    sink.write("ProxyAssemblage", "prod-eu-1", snapshot(1, sync("podinfo")))
    written = tmp_path / "out/proxy/prod-eu-1/podinfo.yaml"
    original = written.read_bytes()
    written.write_bytes(original.replace(b"podinfo", b"PODINFO"))  # same size, in place

    result = sink.write("ProxyAssemblage", "prod-eu-1", snapshot(2, sync("podinfo")))

    assert result.written == 1 and written.read_bytes() == original


def test_the_same_sync_object_in_a_snapshot_with_other_metadata_is_rendered_again(tmp_path: Path) -> None:
    renderer = CountingRenderer()
    sink = DirectorySink(tmp_path / "out", renderer)
    first = snapshot(1, sync("podinfo"), kind="RemoteAssemblage", namespace="team-a")
    sink.write("RemoteAssemblage", "prod-eu-1", first)
    moved = Assemblage.model_validate(
        {**first.model_dump(by_alias=True), "metadata": {"name": "prod-eu-1", "namespace": "team-b"}, "version": 2}
    ).model_copy(update={"spec": first.spec})  # the very same sync objects
    renderer.rendered.clear()

    sink.write("RemoteAssemblage", "prod-eu-1", moved)

    assert renderer.rendered == ["podinfo"]
    assert files(sink.root) == [
        "remote",
        "remote/team-b",
        "remote/team-b/prod-eu-1",
        "remote/team-b/prod-eu-1/podinfo.yaml",
    ]
