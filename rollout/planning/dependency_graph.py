"""The module dependency graph as users apply it: cycles are refused before publishing.

A journal partition only sees its own modules, so the engine cannot tell that `a` depends
on `b` on one partition and `b` on `a` on another: `rollout apply` and `rollout plan`
check the graph of the modules being applied together with the ones the module-status
topic knows (`dependsOn` is in each module's status), with the standard library's
`graphlib`. Two applies racing each other could still close a cycle; the modules then
wait for each other (`blocked` in their status) until one of them is applied without it.

A `dependsOn` naming a module that exists nowhere (not applied with it, not known to the
module-status topic) is legal — dependencies may be applied later, in another apply — but
the dependent stays blocked on every cluster until it is: `missing_dependencies` names
them, and apply, plan and status say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from graphlib import CycleError, TopologicalSorter


class DependencyCycle(ValueError):
    """`cycle`: the modules around it, the first repeated at the end."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__(f"dependency cycle: {' → '.join(cycle)}; a module's dependsOn must not lead back to it")


def check_acyclic(graph: Mapping[str, Iterable[str]]) -> None:
    """Raise DependencyCycle if `graph` (module → the modules it depends on) has a cycle."""
    sorter: TopologicalSorter[str] = TopologicalSorter({name: list(deps) for name, deps in graph.items()})
    try:
        sorter.prepare()
    except CycleError as error:
        found = list(error.args[1])  # graphlib gives [n1, n2, ..., n1] along dependency edges
        start = found.index(min(found[:-1]))
        loop = found[start:-1] + found[:start] + [found[start]]
        raise DependencyCycle(_along_dependencies(loop, graph)) from None


def missing_dependencies(graph: Mapping[str, Iterable[str]], modules: Iterable[str]) -> dict[str, list[str]]:
    """Each of `modules` → the dependencies it names that are not modules of `graph`
    (module → the modules it depends on); modules missing none are left out."""
    missing = {name: [d for d in graph.get(name, ()) if d not in graph] for name in modules}
    return {name: dependencies for name, dependencies in missing.items() if dependencies}


def _along_dependencies(loop: list[str], graph: Mapping[str, Iterable[str]]) -> list[str]:
    """`loop` in the direction of dependsOn (module → its dependency)."""
    if len(loop) > 2 and loop[1] not in set(graph.get(loop[0], ())):
        loop = list(reversed(loop))
    return loop
