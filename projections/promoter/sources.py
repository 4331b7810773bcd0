"""The versions a source offers: OCI tags, a Helm repository's chart versions, Git tags.

    PromotionSourceStatus (kind, url, chart, secretRef, insecure) ──► list_versions ──► tags

* oci (`source.oci`, and `source.helm` with an `oci://` URL: repository `<path>/<chart>`) —
  the OCI distribution API's tag list, `GET /v2/<repository>/tags/list?n=1000`, following
  `Link: <...>; rel="next"` pages; plain HTTP when the source is `insecure`. A 401 with
  `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered the way registries
  expect (Docker Hub, GHCR, Harbor, ECR's and ACR's token endpoints): a token fetched from
  the realm — with the Secret's basic credentials when there is one — and the request
  again with it. `Basic` challenges get the credentials directly.
* helm (`https://` repository) — `GET <url>/index.yaml`, the versions of `entries[chart]`,
  with basic auth from the Secret's `username` / `password`.
* git — `git ls-remote --tags --refs <url>`: the tag names. Credentials (`username` /
  `password` of an http(s) source) go to git as an `http.extraHeader` through
  `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` environment variables, never
  on the command line (where `ps` would show them); `GIT_TERMINAL_PROMPT=0` so a missing
  credential fails instead of waiting for a prompt. ssh sources use the promoter's own ssh
  setup (no Secret is read for them).

Credentials: a source names a Secret (`secretRef.name`, the same the Flux objects use); the
promoter reads it from `--secrets-dir DIR`, where each Secret is mounted as a directory
`DIR/<name>/<key>` — what a Kubernetes Secret volume looks like (the chart mounts the
Secrets listed in `promoter.secrets`). Keys read: `username` + `password`, or
`.dockerconfigjson` (its `auths[<registry host>]`: `auth`, or `username` + `password`). A
Secret that is not mounted is an error for that module (logged), never a silent anonymous
request. Nothing read from a Secret is logged or put on Kafka.

Every request has a timeout (REQUEST_TIMEOUT); a source that cannot be read raises
`SourceError` with what went wrong, and the promoter moves on to the next module.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from rollout.wire.status import PromotionSourceStatus

REQUEST_TIMEOUT = 20.0
MAX_PAGES = 100  # tag-list pages of 1000 tags: at most 100,000 tags a repository
MAX_INDEX_BYTES = 64 * 1024 * 1024  # a Helm index larger than this is refused (bitnami's is ~15 MB)
GIT_TIMEOUT = 60.0
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


class SourceError(Exception):
    """The source's versions could not be read; the message says why."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def basic(self) -> aiohttp.BasicAuth:
        return aiohttp.BasicAuth(self.username, self.password)

    def header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"


def read_credentials(secrets_dir: Path | None, name: str | None, host: str) -> Credentials | None:
    """The credentials of Secret `name` mounted under `secrets_dir` (None: the source names no Secret)."""
    if name is None:
        return None
    if secrets_dir is None:
        raise SourceError(f"the source names Secret {name!r}, and the promoter has no --secrets-dir to read it from")
    folder = secrets_dir / name
    if not folder.is_dir():
        raise SourceError(f"Secret {name!r} is not mounted at {folder}")
    username, password = folder / "username", folder / "password"
    if username.is_file() and password.is_file():
        return Credentials(username.read_text().strip(), password.read_text().strip())
    config = folder / ".dockerconfigjson"
    if config.is_file():
        return _docker_credentials(config, host, name)
    raise SourceError(f"Secret {name!r} has neither username and password nor .dockerconfigjson")


def _docker_credentials(path: Path, host: str, name: str) -> Credentials:
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (ValueError, AttributeError):
        raise SourceError(f"Secret {name!r}: .dockerconfigjson is not JSON with 'auths'") from None
    entry = auths.get(host) or auths.get(f"https://{host}") or auths.get(f"http://{host}")
    if not isinstance(entry, dict):
        raise SourceError(f"Secret {name!r}: .dockerconfigjson has no credentials for {host}")
    if entry.get("auth"):
        username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return Credentials(username, password)
    return Credentials(str(entry.get("username", "")), str(entry.get("password", "")))


async def list_versions(
    session: aiohttp.ClientSession, source: PromotionSourceStatus, secrets_dir: Path | None
) -> list[str]:
    """The tags (OCI, Git) or chart versions (Helm index) `source` offers now."""
    if source.kind == "git":
        host = urllib.parse.urlsplit(source.url).hostname or ""
        return await git_tags(source.url, read_credentials(secrets_dir, source.secret_ref, host))
    if source.kind == "helm" and not source.url.startswith("oci://"):
        host = urllib.parse.urlsplit(source.url).hostname or ""
        credentials = read_credentials(secrets_dir, source.secret_ref, host)
        return await helm_versions(session, source.url, source.chart or "", credentials)
    reference = source.url.removeprefix("oci://").rstrip("/")
    if source.kind == "helm":
        reference = f"{reference}/{source.chart}"
    host, _, repository = reference.partition("/")
    credentials = read_credentials(secrets_dir, source.secret_ref, host)
    scheme = "http" if source.insecure else "https"
    return await oci_tags(session, f"{scheme}://{host}", repository, credentials)


async def oci_tags(
    session: aiohttp.ClientSession, registry: str, repository: str, credentials: Credentials | None
) -> list[str]:
    """Every tag of `repository` on `registry` (the distribution API's paged tag list)."""
    tags: list[str] = []
    url: str | None = f"{registry}/v2/{repository}/tags/list?n=1000"
    token: str | None = None
    for _ in range(MAX_PAGES):
        if url is None:
            return tags
        headers = {"Authorization": token} if token else {}
        async with session.get(url, headers=headers) as response:
            if response.status == 401 and token is None:
                token = await _authorize(session, response.headers.get("WWW-Authenticate", ""), credentials)
                continue  # the same page again, authorized
            if response.status != 200:
                raise SourceError(f"{registry}: tags of {repository}: HTTP {response.status}")
            body = await response.json(content_type=None)
            link = response.headers.get("Link", "")
        tags.extend(tag for tag in (body.get("tags") or []) if isinstance(tag, str))
        found = NEXT_LINK.search(link)
        url = urllib.parse.urljoin(registry, found.group(1)) if found else None
    raise SourceError(f"{registry}: {repository} has more than {MAX_PAGES} pages of tags")


async def _authorize(session: aiohttp.ClientSession, challenge: str, credentials: Credentials | None) -> str:
    """The Authorization header a registry's 401 challenge asks for."""
    scheme, _, parameters = challenge.partition(" ")
    if scheme.lower() == "basic":
        if credentials is None:
            raise SourceError("the registry asks for credentials, and the source names no secretRef")
        return credentials.header()
    if scheme.lower() != "bearer":
        raise SourceError(f"the registry asks for {scheme or 'an unknown'} authentication")
    fields = dict(CHALLENGE.findall(parameters))
    realm = fields.pop("realm", None)
    if realm is None:
        raise SourceError("the registry's Bearer challenge names no realm")
    auth = credentials.basic() if credentials is not None else None
    async with session.get(realm, params=fields, auth=auth) as response:
        if response.status != 200:
            raise SourceError(f"the registry's token endpoint answered HTTP {response.status}")
        body = await response.json(content_type=None)
    token = body.get("token") or body.get("access_token")
    if not isinstance(token, str):
        raise SourceError("the registry's token endpoint gave no token")
    return f"Bearer {token}"


async def helm_versions(
    session: aiohttp.ClientSession, url: str, chart: str, credentials: Credentials | None
) -> list[str]:
    """The versions of `chart` in the Helm repository at `url` (its index.yaml)."""
    index_url = url.rstrip("/") + "/index.yaml"
    auth = credentials.basic() if credentials is not None else None
    async with session.get(index_url, auth=auth) as response:
        if response.status != 200:
            raise SourceError(f"{index_url}: HTTP {response.status}")
        if (response.content_length or 0) > MAX_INDEX_BYTES:
            raise SourceError(f"{index_url}: larger than {MAX_INDEX_BYTES} bytes")
        text = await response.content.read(MAX_INDEX_BYTES + 1)
    if len(text) > MAX_INDEX_BYTES:
        raise SourceError(f"{index_url}: larger than {MAX_INDEX_BYTES} bytes")
    try:
        index = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SourceError(f"{index_url}: not YAML: {error}") from None
    entries = index.get("entries") if isinstance(index, dict) else None
    if not isinstance(entries, dict):
        raise SourceError(f"{index_url}: not a Helm repository index (no entries)")
    versions = entries.get(chart) or []
    return [str(entry["version"]) for entry in versions if isinstance(entry, dict) and "version" in entry]


async def git_tags(url: str, credentials: Credentials | None) -> list[str]:
    """The tags of the Git repository at `url` (`git ls-remote --tags --refs`)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    if credentials is not None:
        env.update(
            {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: {credentials.header()}",
            }
        )
    process = await asyncio.create_subprocess_exec(
        "git",
        "ls-remote",
        "--tags",
        "--refs",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise SourceError(f"{url}: git ls-remote took longer than {GIT_TIMEOUT:g}s") from None
    if process.returncode != 0:
        raise SourceError(f"{url}: git ls-remote failed: {err.decode(errors='replace').strip()[:300]}")
    tags = []
    for line in out.decode(errors="replace").splitlines():
        _, _, ref = line.partition("\t")
        if ref.startswith("refs/tags/"):
            tags.append(ref.removeprefix("refs/tags/"))
    return tags
