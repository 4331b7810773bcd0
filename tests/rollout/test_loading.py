"""Safe loading: whatever bytes a file holds, loading ends fast with the manifests or with
problems naming file, document, object and field — never a traceback, a hang, gigabytes, or
a malformed manifest accepted (issue 9's list of what 445 generated files got through)."""

from __future__ import annotations

import time

import pytest

from rollout.api.loading import MAX_REASON, ManifestError, load_manifests
from rollout.api.yaml_documents import Limits

CLUSTER = b"""apiVersion: rollout.dev/v1alpha1
kind: Cluster
metadata: {name: prod-eu-1, namespace: fleet, labels: {env: prod}}
"""
MODULE = """apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: podinfo, namespace: fleet}
spec:
  selector: {matchLabels: {env: prod}}
  sync: {source: {git: {url: URL, version: {tag: TAG}}}}
  rollout:
    progressDeadline: DEADLINE
    stages:
      - {name: canary, maxConcurrency: CONCURRENCY, requireApproval: APPROVAL}
"""
GOOD = {
    "URL": "https://github.com/stefanprodan/podinfo",
    "TAG": "6.7.0",
    "DEADLINE": "10m",
    "CONCURRENCY": "1",
    "APPROVAL": "false",
}


def module(**changes: str) -> bytes:
    text = MODULE
    for key, value in {**GOOD, **changes}.items():
        text = text.replace(key, value)
    return text.encode()


def problems(data: bytes, limits: Limits | None = None) -> list[str]:
    with pytest.raises(ManifestError) as raised:
        load_manifests(data, file="fleet.yaml", limits=limits or Limits())
    return [str(problem) for problem in raised.value.problems]


def test_the_good_module_loads() -> None:
    [loaded] = load_manifests(module(), file="fleet.yaml")
    assert (loaded.where, loaded.manifest.spec.sync.revision) == ("fleet.yaml: document 1 (Module/podinfo)", "6.7.0")


def test_utf16_with_a_byte_order_mark_is_named_as_such() -> None:
    assert problems(CLUSTER.decode().encode("utf-16")) == [
        "fleet.yaml: encoded as UTF-16 (byte-order mark); save it as UTF-8"
    ]


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    assert len(load_manifests(b"\xef\xbb\xbf" + CLUSTER, file="fleet.yaml")) == 1


def test_bytes_that_are_not_utf8_are_named_with_their_position() -> None:
    data = CLUSTER.replace(b"prod-eu-1", b"prod-\xff\xfe")
    offset = data.index(b"\xff")
    assert problems(data) == [
        f"fleet.yaml: byte {offset} (line 3, column 23): byte 0xff is not UTF-8 (manifests are UTF-8)"
    ]


def test_a_nul_byte_suggests_utf16_without_a_byte_order_mark() -> None:
    [problem] = problems(CLUSTER.decode().encode("utf-16-le"))
    assert problem == "fleet.yaml: byte 1 (line 1, column 2): NUL byte; is it UTF-16 without a BOM?"


@pytest.mark.parametrize(
    "text",
    [
        "kind: " + "[" * 500 + "]" * 500,
        "kind: " + "[" * 5000 + "]" * 5000,  # past libyaml's own flow limit (1,000): it stops scanning
        "".join("  " * i + f"k{i}:\n" for i in range(500)),
    ],
    ids=["flow", "flow-past-libyaml-limit", "block"],
)
def test_deep_nesting_is_refused_at_the_depth_limit(text: str) -> None:
    [problem] = problems(text.encode())
    assert problem.startswith("fleet.yaml: document 1: line ") and problem.endswith("nested more than 32 levels deep")


def test_a_billion_laughs_is_refused_at_once() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        previous, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    lines.append("kind: *i")
    started = time.monotonic()
    [problem] = problems("\n".join(lines).encode())
    assert time.monotonic() - started < 0.5
    assert "aliases expand the document beyond 100000 nodes" in problem


def test_a_few_aliases_are_fine() -> None:
    text = CLUSTER.decode().replace("labels: {env: prod}", "labels: &l {env: prod}, annotations: *l")
    [loaded] = load_manifests(text.encode(), file="fleet.yaml")
    assert loaded.manifest.metadata.annotations == {"env": "prod"}


def test_a_recursive_alias_is_refused() -> None:
    [problem] = problems(b"kind: &x [1, *x]\n")
    assert problem == "fleet.yaml: document 1: kind[1]: a recursive alias (an anchor used inside itself)"


def test_duplicate_keys_are_refused_with_both_lines() -> None:
    text = module().decode().replace("  selector:", "  sync: {}\n  selector:")
    [problem] = problems(text.encode())
    assert problem == (
        "fleet.yaml: document 1 (Module/podinfo): spec: duplicate key 'sync' (lines 5 and 7); "
        "YAML would silently keep only the last one"
    )


def test_file_and_document_size_limits() -> None:
    limits = Limits(file_bytes=1000, document_bytes=200)
    assert problems(CLUSTER * 10, limits) == [
        "fleet.yaml: larger than the 1000 bytes limit of a manifest file; split it"
    ]
    [problem] = problems(module(), limits)
    assert problem.startswith("fleet.yaml: document 1 (Module/podinfo): the document is ")
    assert problem.endswith("over the limit of 200 bytes per document")


def test_a_huge_value_makes_a_short_message() -> None:
    [problem] = problems(module(TAG="v" + "x" * 200_000))
    assert len(problem) < MAX_REASON + 100
    assert "spec.sync.source.git.version: tag must be 1-255 characters" in problem


def test_a_huge_integer_is_a_problem_not_a_traceback() -> None:
    [problem] = problems(module(CONCURRENCY="9" * 5000))
    assert problem == "fleet.yaml: document 1 (Module/podinfo): an integer with more than 4300 digits"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"TAG": '"v1\\0"'}, "spec.sync.source.git.version", "U+0000"),
        ({"TAG": '"v1\\nv2"'}, "spec.sync.source.git.version", "U+000A"),
        ({"TAG": '"v1\\u202e2v"'}, "spec.sync.source.git.version", "U+202E"),
        ({"TAG": '"v1 two"'}, "spec.sync.source.git.version", "not a Git ref name"),
        ({"TAG": "v1..2"}, "spec.sync.source.git.version", "not a Git ref name"),
        ({"URL": "https://"}, "spec.sync.source.git.url", "has no host"),
        ({"URL": "https:///path"}, "spec.sync.source.git.url", "has no host"),
        ({"URL": "https://host:99999/x"}, "spec.sync.source.git.url", "malformed"),
        ({"URL": "ftp://host/x"}, "spec.sync.source.git.url", "must start with http://, https://, ssh://"),
        ({"DEADLINE": "0s"}, "spec.rollout.progressDeadline", "longer than 0s"),
        ({"DEADLINE": "9000h"}, "spec.rollout.progressDeadline", "longer than a year"),
        ({"CONCURRENCY": "true"}, "spec.rollout.stages[0].maxConcurrency", "not True"),
        ({"CONCURRENCY": "1.5"}, "spec.rollout.stages[0].maxConcurrency", "not 1.5"),
        ({"APPROVAL": '"yes"'}, "spec.rollout.stages[0].requireApproval", "valid boolean, not a string"),
        ({"APPROVAL": "1"}, "spec.rollout.stages[0].requireApproval", "valid boolean, not an integer"),
    ],
)
def test_malformed_fields_are_refused_naming_the_field(changes: dict[str, str], field: str, words: str) -> None:
    [problem] = problems(module(**changes))
    assert problem.startswith(f"fleet.yaml: document 1 (Module/podinfo): {field}: "), problem
    assert words in problem


@pytest.mark.parametrize("name", ['"prod\\n"', '"prod\\r\\n"', "prod-"])
def test_a_name_with_a_trailing_newline_is_not_a_name(name: str) -> None:
    [problem] = problems(CLUSTER.replace(b"prod-eu-1", name.encode()))
    assert ": metadata.name: " in problem and "is not a DNS-1123 label" in problem


def test_every_document_is_numbered_from_one_and_every_problem_reported() -> None:
    data = b"---\n".join([CLUSTER, b"", CLUSTER.replace(b"prod-eu-1", b"Bad"), module(DEADLINE="0s")])
    found = problems(data)
    assert [p.split(": ")[1] for p in found] == ["document 3 (Cluster/Bad)", "document 4 (Module/podinfo)"]


def test_a_syntax_error_names_the_document_and_line() -> None:
    [problem] = problems(CLUSTER + b"---\nkind: [unclosed\n")
    assert problem.startswith("fleet.yaml: document 2: not valid YAML: line 6, column 1:")  # lines of the file


@pytest.mark.parametrize("key", ['"/env"', '"a b"', '"-env"', '"env/"'])
def test_a_label_key_that_kubernetes_refuses_is_refused(key: str) -> None:
    [problem] = problems(CLUSTER.replace(b"{env: prod}", b"{" + key.encode() + b": prod}"))
    assert problem.startswith("fleet.yaml: document 1 (Cluster/prod-eu-1): metadata.labels: label key "), problem
