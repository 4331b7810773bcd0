"""What the engine publishes per cluster: RemoteAssemblage and ProxyAssemblage snapshots.

An assemblage is the set of syncs assigned to one cluster. BootstrapModules land in the
cluster's RemoteAssemblage (applied from the management cluster through the cluster's
kubeconfig secret); Modules land in its ProxyAssemblage (applied inside the workload
cluster). Each snapshot is a full document — consumers never need history — with a
`version` that only grows; an empty assemblage is published as a tombstone instead.

Sync records carry the substitute map with bindings already expanded for that cluster, so
appliers render Flux objects without knowing anything about modules or selectors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rollout.api.manifests import API_VERSION, Sync

AssemblageKind = Literal["RemoteAssemblage", "ProxyAssemblage"]
ModuleKind = Literal["Module", "BootstrapModule"]

ASSEMBLAGE_FOR: dict[str, AssemblageKind] = {
    "BootstrapModule": "RemoteAssemblage",
    "Module": "ProxyAssemblage",
}


class AssignedSync(BaseModel):
    """The sync record of one module inside one cluster's assemblage."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    module: str
    module_namespace: str = Field(alias="moduleNamespace")
    revision: str
    # the module generation assigned (appliers annotate it; status reports echo it back);
    # None in records written before generations were carried
    generation: int | None = None
    sync: Sync


class AssemblageMetadata(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str


class AssemblageSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    syncs: list[AssignedSync] = Field(default_factory=list)


class Assemblage(BaseModel):
    """A full RemoteAssemblage or ProxyAssemblage snapshot for one cluster."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: AssemblageKind
    metadata: AssemblageMetadata
    version: int
    spec: AssemblageSpec

    @property
    def cluster(self) -> str:
        return self.metadata.name
