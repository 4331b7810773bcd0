"""A seeded generator of malformed manifest files: mutations of the example manifests.

`malformed_files(count, seed)` returns `count` cases, cycling through every mutation below
with random parameters, each a file that MUST be refused. A case carries the words the
refusal must contain besides the file's name: the document (`(Module/podinfo)`) and field
path for a field mutation, the kind of problem for a structural one.

    bytes       not UTF-8, UTF-16/32 with and without BOM, NUL, control characters, random
                bytes, a byte flipped in apiVersion or kind
    structure   deep nesting (flow and block), alias bombs, recursive aliases, duplicate
                keys, tabs, truncation, a list instead of a mapping, too many documents,
                empty files, huge scalars and integers, an object twice, shared names
    fields      names, label keys and values, Git tags, URLs, durations, counts and
                booleans of the wrong type, unknown fields, kinds and API versions

Deterministic for a seed: a failing case is reproduced by its name (`0042-bad-field`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODULES = (EXAMPLES / "modules.yaml").read_text()
CLUSTERS = (EXAMPLES / "clusters.yaml").read_text()
BOOTSTRAP = (EXAMPLES / "bootstrap.yaml").read_text()
PODINFO = "(Module/podinfo)"
PROD_EU_1 = "(Cluster/prod-eu-1)"
FLUX = "(BootstrapModule/flux-install)"


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    expect: tuple[str, ...]  # words the refusal must contain, besides the file's name


@dataclass(frozen=True)
class FieldMutation:
    """Replace `old` (first occurrence) in `text` by `template` filled with a bad value."""

    text: str
    old: str
    template: str
    bad: tuple[str, ...]
    identity: str | None  # None: the mutation changes the document's name
    field: str


TAGS = ('"6.7.0\\n"', '"v1\\0"', '"v1\\u202e2"', '"a b"', "a..b", '""', "x.lock", "-x", "true", "12", "[a]", "a~1")
URLS = (
    "https://",
    "https:///path",
    "ftp://host/repo",
    "git@github.com:org/repo",
    '"https://exa mple.com/x"',
    "https://host:99999/x",
    '"https://host/\\t"',
    "http:/host",
    "42",
    "oci://host/repo",
    '"https://host/x\\n"',
)
DURATIONS = ("0s", "0ms", "5 minutes", '"-1s"', "10y", "99999h", "true", "10", '"10m\\n"')
NAMES = ('"podinfo\\n"', "PodInfo", "-podinfo", "pod_info", "a" * 64, "123", '""', "[x]", '"pod info"')
LABELS = ('"prod\\n"', '"a b"', "[x]", "x" * 64, "-x", "true", '"é"')
FIELDS = (
    FieldMutation(MODULES, "{tag: 6.7.0}", "{tag: BAD}", TAGS, PODINFO, "spec.sync.source.git.version"),
    FieldMutation(
        MODULES,
        "url: https://github.com/stefanprodan/podinfo",
        "url: BAD",
        URLS,
        PODINFO,
        "spec.sync.source.git.url",
    ),
    FieldMutation(MODULES, "progressDeadline: 10m", "progressDeadline: BAD", DURATIONS, PODINFO, "progressDeadline"),
    FieldMutation(MODULES, "minSuccessTime: 5m", "minSuccessTime: BAD", DURATIONS[2:], PODINFO, "minSuccessTime"),
    FieldMutation(
        MODULES,
        "maxConcurrency: 1\n",
        "maxConcurrency: BAD\n",
        ("true", "0", '"150%"', "1.5", "-1", '"ten"', "[1]", '"1"', '"0%"'),
        PODINFO,
        "spec.rollout.stages[0].maxConcurrency",
    ),
    FieldMutation(
        MODULES,
        "requireApproval: true",
        "requireApproval: BAD",
        ('"yes"', "1", "[true]", '"on"', '"true"', "2"),
        PODINFO,
        "spec.rollout.stages[2].requireApproval",
    ),
    FieldMutation(MODULES, "name: podinfo,", "name: BAD,", NAMES, None, "metadata.name"),
    FieldMutation(MODULES, "{matchLabels: {env: prod}}", "{matchLabels: {env: BAD}}", LABELS, PODINFO, "spec.selector"),
    FieldMutation(MODULES, "onFailure: Rollback", "onFailure: BAD", ("Retry", "true", "[Halt]"), PODINFO, "onFailure"),
    FieldMutation(
        MODULES,
        "sortingLabelKey: rollout.dev/order",
        "sortingLabelKey: BAD",
        ('"bad key"', "a/b/c", '"/x"', "-x", "12"),
        PODINFO,
        "spec.rollout.sortingLabelKey",
    ),
    FieldMutation(
        MODULES, "  rollout:\n    stages:", "  BAD: 1\n  rollout:\n    stages:", ("surprise", "Sync"), PODINFO, "spec."
    ),
    FieldMutation(
        MODULES,
        "{name: REGION, fromLabel: region}",
        "{name: BAD, fromLabel: region}",
        ("CLUSTER_NAME", "1X", '"a-b"', "true"),
        PODINFO,
        "spec",
    ),
    FieldMutation(CLUSTERS, "name: prod-eu-1", "name: BAD", NAMES, None, "metadata.name"),
    FieldMutation(
        CLUSTERS,
        "status: {controlPlaneReady: true",
        "status: {controlPlaneReady: BAD",
        ('"yes"', "1", '"true"', "[true]"),
        PROD_EU_1,
        "status.controlPlaneReady",
    ),
    FieldMutation(
        CLUSTERS,
        "labels: {env: prod, region: eu,",
        "labels: {env: BAD, region: eu,",
        LABELS,
        PROD_EU_1,
        "metadata.labels",
    ),
    FieldMutation(CLUSTERS, "kind: Cluster", "kind: BAD", ("Clusters", "cluster", "42", "[Cluster]"), None, "kind"),
    FieldMutation(
        CLUSTERS,
        "apiVersion: rollout.dev/v1alpha1",
        "apiVersion: BAD",
        ("rollout.dev/v1", "v1", '"rollout.dev/v1alpha1\\n"', "1"),
        PROD_EU_1,
        "apiVersion",
    ),
    FieldMutation(
        BOOTSTRAP, "url: https://github.com/fluxcd/flux2", "url: BAD", URLS, FLUX, "spec.sync.source.git.url"
    ),
    FieldMutation(
        BOOTSTRAP,
        "version: {tag: v2.7.3}",
        "version: BAD",
        ("{branch: main}", "{tag: v1, revision: abc}", "{revision: abc123}", "{}", "v2.7.3"),
        FLUX,
        "spec.sync.source.git.version",
    ),
)


def bad_field(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    mutation = rng.choice(FIELDS)
    value = rng.choice(mutation.bad)
    text = mutation.text.replace(mutation.old, mutation.template.replace("BAD", value), 1)
    if mutation.identity is None:
        return text.encode(), (mutation.field,)
    return text.encode(), (f"document {_number(mutation)} {mutation.identity}", mutation.field)


def _number(mutation: FieldMutation) -> int:
    """The number of the document `mutation.old` is in (1-based, as the loader counts)."""
    position = mutation.text.index(mutation.old)
    number = 0
    for event in yaml.parse(mutation.text):
        if isinstance(event, yaml.DocumentStartEvent):
            if event.start_mark.index > position:
                break
            number += 1
    return number


def any_example(rng: random.Random) -> str:
    return rng.choice((MODULES, CLUSTERS, BOOTSTRAP))


def not_utf8(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    data = any_example(rng).encode()
    at = rng.randrange(len(data))
    return data[:at] + bytes([rng.choice((0x80, 0xBF, 0xC0, 0xFE, 0xFF))]) + data[at:], ("is not UTF-8",)


def other_encoding(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    text = any_example(rng)
    encoding = rng.choice(("utf-16", "utf-32", "utf-16-le", "utf-16-be", "utf-32-le"))
    expect = "byte-order mark" if encoding in ("utf-16", "utf-32") else "NUL byte"
    return text.encode(encoding), (expect,)


def random_bytes(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    return rng.randbytes(rng.randrange(1, 3000)), ()


def control_character(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    text = any_example(rng)
    at = text.index("kind: ") + 6
    return (text[:at] + chr(rng.choice((1, 7, 8, 0x1B, 0x7F))) + text[at:]).encode(), ("document",)


def flipped_byte(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    data = bytearray(any_example(rng).encode())
    target = rng.choice((b"rollout.dev/v1alpha1", b"kind: "))
    start = data.index(target) + (6 if target == b"kind: " else 0)
    at = start + rng.randrange(6)
    data[at] = rng.choice([b for b in range(256) if b != data[at]])
    return bytes(data), ()


def deep_nesting(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    depth = rng.choice((33, 100, 500, 5000, 100_000))
    if rng.random() < 0.5:
        nested = "[" * depth + "]" * depth
        return f"{CLUSTERS}\n---\nkind: {nested}\n".encode(), ("nested more than",)
    depth = min(depth, 2000)
    return ("".join("  " * i + f"k{i}:\n" for i in range(depth))).encode(), ("nested more than",)


def alias_bomb(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    width, depth = rng.randrange(2, 10), rng.randrange(2, 10)
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, depth):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    field = rng.choice(("kind", "metadata", "spec"))
    lines.append(f"{field}: *a{depth - 1}")
    return "\n".join(lines).encode(), ("document 1",)


def recursive_alias(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    shape = rng.choice(("&x [1, *x]", "&x {a: *x}", "&x [[[*x]]]"))
    return f"apiVersion: rollout.dev/v1alpha1\nkind: Cluster\nmetadata: {shape}\n".encode(), ("recursive alias",)


def duplicate_key(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    text, line = rng.choice(
        (
            (CLUSTERS, "kind: Cluster\n"),
            (CLUSTERS, "  namespace: fleet\n"),
            (MODULES, "kind: Module\n"),
            (MODULES, "    progressDeadline: 10m\n"),
            (BOOTSTRAP, "        path: ./manifests/install\n"),
        )
    )
    replacement = line + line.replace("10m", "20m").replace("fleet", "other")
    return text.replace(line, replacement, 1).encode(), ("duplicate key",)


def tab_indented(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    text = any_example(rng)
    lines = text.split("\n")
    indented = [i for i, line in enumerate(lines) if line.startswith("  ") and not line.lstrip().startswith("#")]
    index = rng.choice(indented)
    lines[index] = "\t" + lines[index].lstrip()
    return "\n".join(lines).encode(), ("not valid YAML",)


def truncated(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    text = any_example(rng)
    return (text[: rng.randrange(len(text))] + "\n  [unclosed, {x: \n").encode(), ("not valid YAML",)


def not_a_mapping(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    body = rng.choice(("- a\n- b\n", "just a string\n", "42\n", "[1, 2]\n", "true\n"))
    return (CLUSTERS + "\n---\n" + body).encode(), ("a manifest is a mapping",)


def too_many_documents(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    return ("---\n" * rng.randrange(10_001, 12_000)).encode(), ("more than 10000 documents",)


def no_documents(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    return rng.choice((b"", b"\n", b"---\n---\n", b"# only a comment\n", b"   \n\n")), ("no documents",)


def huge_scalar(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    size = rng.choice((300_000, 1_000_000, 3_000_000, 5_000_000))
    value = "v" + "x" * size
    text = rng.choice((MODULES.replace("{tag: 6.7.0}", f"{{tag: {value}}}"), CLUSTERS.replace("prod-eu-1", value, 1)))
    return text.encode(), ()


def huge_integer(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    digits = "9" * rng.randrange(4301, 50_000)
    return MODULES.replace("maxConcurrency: 1\n", f"maxConcurrency: {digits}\n").encode(), ("4300 digits",)


def repeated_object(rng: random.Random) -> tuple[bytes, tuple[str, ...]]:
    if rng.random() < 0.5:
        return (CLUSTERS + "\n---\n" + CLUSTERS).encode(), ("apply each object once",)
    shared = MODULES.replace("kind: Module", "kind: BootstrapModule", 1) + "\n---\n" + MODULES
    return shared.encode(), ("has the same name",)


MUTATIONS: tuple[Callable[[random.Random], tuple[bytes, tuple[str, ...]]], ...] = (
    bad_field,
    bad_field,
    bad_field,
    bad_field,
    not_utf8,
    other_encoding,
    random_bytes,
    control_character,
    flipped_byte,
    deep_nesting,
    alias_bomb,
    recursive_alias,
    duplicate_key,
    tab_indented,
    truncated,
    not_a_mapping,
    no_documents,
    huge_scalar,
    huge_integer,
    repeated_object,
)
RARE = {too_many_documents: 40}  # slower cases: one in this many


def malformed_files(count: int, seed: int = 9) -> list[Case]:
    """`count` malformed files, cycling through the mutations with parameters from `seed`."""
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        mutation = MUTATIONS[index % len(MUTATIONS)]
        for rare, every in RARE.items():
            if index % every == every - 1:
                mutation = rare
        data, expect = mutation(rng)
        cases.append(Case(f"{index:04d}-{mutation.__name__.replace('_', '-')}", data, expect))
    return cases
