"""The run graph: a run's tasks as a DAG laid out in layers, left to right, for inline SVG.

A small layered (Sugiyama-style) layout, which is all a run's DAG needs: a task's layer is its
longest path from a root; an edge that spans several layers passes through a waypoint in each
layer it crosses, so it is drawn around the nodes rather than through them; the nodes and
waypoints of a layer are ordered by the mean position of their neighbours, sweeping a few
times down and up to cut crossings. The task instances of a mapped task share one node.
(grandalf does the same but has not been released since 2023; graphviz needs its own binary.)
"""

from collections import Counter
from dataclasses import dataclass, field

from app.orchestration import states
from app.orchestration.models import TaskInstance

NODE_W, NODE_H = 200, 56
WAYPOINT_H = 8
LAYER_GAP, ROW_GAP, MARGIN = 64, 14, 12
SWEEPS = 4
LABEL_CHARS = 25  # what fits on a node at the stylesheet's font size

# Which state colours a mapped task's node: what needs attention first, then what is moving.
PRIORITY = (states.FAILED, states.INFRA_FAILED, states.UPSTREAM_FAILED, states.UP_FOR_RETRY, states.RUNNING,
            states.QUEUED, states.UP_FOR_RESCHEDULE, states.SCHEDULED, states.NONE, states.SUCCESS)


def clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "…"


@dataclass(eq=False)  # compared by identity: slots link to each other
class Slot:
    """A place in a layer: a task's node, or a waypoint of an edge crossing the layer."""

    layer: int
    height: int
    ups: list["Slot"] = field(default_factory=list)
    downs: list["Slot"] = field(default_factory=list)
    order: float = 0
    x: float = 0
    y: float = 0


@dataclass(eq=False)
class Node(Slot):
    task_id: str = ""
    tis: list[TaskInstance] = field(default_factory=list)

    @property
    def mapped(self) -> bool:
        return any(ti.map_index >= 0 for ti in self.tis)

    @property
    def counts(self) -> list[tuple[str, int]]:
        """How many of its task instances are in each state, in PRIORITY order."""
        found = Counter(ti.state for ti in self.tis)
        return [(st, found[st]) for st in PRIORITY if found[st]] + \
               [(st, n) for st, n in sorted(found.items()) if st not in PRIORITY]

    @property
    def state(self) -> str:
        return self.counts[0][0]

    @property
    def label(self) -> str:
        suffix = f" ×{len(self.tis)}" if self.mapped else ""
        return clip(self.task_id, LABEL_CHARS - len(suffix)) + suffix

    @property
    def detail(self) -> str:
        """The node's second line: the state with the try and epoch, or a mapped task's mix."""
        if self.mapped:
            return clip(", ".join(f"{n} {st}" for st, n in self.counts), LABEL_CHARS + 6)
        ti = self.tis[0]
        return f"{ti.state} · try {ti.try_number} · epoch {ti.attempt_epoch}"

    @property
    def mix(self) -> list[tuple[str, float, float]]:
        """A mapped node's bar: (state, x, width) in proportion to its task instances."""
        segments, x, inner = [], self.x + 8, NODE_W - 16
        for st, n in self.counts:
            width = inner * n / len(self.tis)
            segments.append((st, x, width))
            x += width
        return segments


@dataclass(frozen=True)
class Edge:
    upstream: str
    downstream: str
    path: str  # SVG path data


@dataclass
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float


def _layers(upstream: dict[str, list[str]]) -> dict[str, int]:
    """Each task's longest path from a root. Whatever a cycle keeps from being placed (only a
    restored snapshot could hold one) goes one layer past the rest."""
    layer: dict[str, int] = {}
    pending = dict(upstream)
    while pending:
        ready = {t: ups for t, ups in pending.items() if all(u in layer for u in ups)}
        if not ready:
            last = max(layer.values(), default=-1) + 1
            layer.update(dict.fromkeys(pending, last))
            break
        for t, ups in ready.items():
            layer[t] = max((layer[u] + 1 for u in ups), default=0)
            del pending[t]
    return layer


def _order(layers: list[list[Slot]]) -> None:
    """Order each layer by the mean position of its neighbours in the layer before (sweeping
    down) or after (sweeping up); a slot without such neighbours keeps its place."""
    def sweep(indices: range, neighbours: str) -> None:
        for i in indices:
            for slot in layers[i]:
                near = getattr(slot, neighbours)
                if near:
                    slot.order = sum(n.order for n in near) / len(near)
            layers[i].sort(key=lambda slot: slot.order)
            for position, slot in enumerate(layers[i]):
                slot.order = position

    for layer in layers:
        for position, slot in enumerate(layer):
            slot.order = position
    for _ in range(SWEEPS):
        sweep(range(1, len(layers)), "ups")
        sweep(range(len(layers) - 2, -1, -1), "downs")


def _curve(x0: float, y0: float, x1: float, y1: float) -> str:
    bend = (x1 - x0) / 2
    return f"C{x0 + bend:.0f},{y0:.0f} {x1 - bend:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"


def layout(tis: list[TaskInstance]) -> Graph:
    """The run's graph: one node per task (a mapped task's instances together), laid out."""
    by_task: dict[str, list[TaskInstance]] = {}
    for ti in tis:
        by_task.setdefault(ti.task_id, []).append(ti)
    upstream = {t: sorted({u for ti in group for u in ti.upstream_task_ids if u in by_task and u != t})
                for t, group in by_task.items()}
    layer_of = _layers(upstream)
    nodes = {t: Node(layer_of[t], NODE_H, task_id=t, tis=group) for t, group in sorted(by_task.items())}
    layers: list[list[Slot]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for node in nodes.values():
        layers[node.layer].append(node)
    routes: list[tuple[str, str, list[Slot]]] = []
    for t, ups in upstream.items():
        for u in ups:
            chain: list[Slot] = [nodes[u]]
            for layer in range(nodes[u].layer + 1, nodes[t].layer):
                waypoint = Slot(layer, WAYPOINT_H)
                layers[layer].append(waypoint)
                chain.append(waypoint)
            chain.append(nodes[t])
            for a, b in zip(chain, chain[1:], strict=False):
                a.downs.append(b)
                b.ups.append(a)
            routes.append((u, t, chain))
    _order(layers)

    heights = [sum(slot.height for slot in layer) + ROW_GAP * (len(layer) - 1) for layer in layers]
    tallest = max(heights, default=0)
    for i, layer in enumerate(layers):
        y = MARGIN + (tallest - heights[i]) / 2
        for slot in layer:
            slot.x, slot.y = MARGIN + i * (NODE_W + LAYER_GAP), y
            y += slot.height + ROW_GAP

    edges = []
    for u, t, chain in routes:
        x, y = chain[0].x + NODE_W, chain[0].y + NODE_H / 2
        path = [f"M{x:.0f},{y:.0f}"]
        for waypoint in chain[1:-1]:
            wy = waypoint.y + WAYPOINT_H / 2
            path += [_curve(x, y, waypoint.x, wy), f"L{waypoint.x + NODE_W:.0f},{wy:.0f}"]
            x, y = waypoint.x + NODE_W, wy
        path.append(_curve(x, y, chain[-1].x, chain[-1].y + NODE_H / 2))
        edges.append(Edge(u, t, " ".join(path)))
    width = 2 * MARGIN + len(layers) * NODE_W + max(len(layers) - 1, 0) * LAYER_GAP
    return Graph(list(nodes.values()), edges, width, 2 * MARGIN + tallest)
