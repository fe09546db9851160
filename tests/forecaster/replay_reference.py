"""The queue replay's sweep stated plainly: the reference its fast form is checked against.

``one_sample`` has ``queue_replay._one_sample``'s signature and does what its docstring
says without any of its shortcuts: at ``now`` and at every moment units free, every
waiting pod is tried in queue order (priority, then index: a pod arriving joins behind
the pods of its priority and above) on every node it may use. It starts from the same
``_QueuePlan`` (the items, their shapes, which may start, each shape's nodes and pools,
the arrivals; not the per-shape queues and indexes only the fast form uses) and draws
from the same primitives (``_running_now``, ``_choose``, ``_pick``, the durations), so
both must give the very same starts. Slow: for the tests and
``bench/queue_replay_speed.py`` only.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Mapping, Sequence

from gpu_eta.forecaster import queue_replay as qr


def one_sample(
    nodes: Sequence[qr.Node],
    node_index: Mapping[str, int],
    holders: Sequence[qr.Holder],
    plan: qr._QueuePlan,
    max_arrivals: int,
    placement: str,
    now: float,
    horizon: float,
    hist: qr._Durations,
    rng: random.Random,
) -> list[float]:
    free, events = qr._running_now(nodes, node_index, holders, now, horizon, hist, rng)
    seq = len(events)
    items, pools = plan.items, plan.pools
    start = [math.inf] * len(items)
    shape_of = list(plan.shapes)
    cands = [plan.nodes_of.get(shape, ()) for shape in shape_of]
    waiting = list(plan.waiting)
    order = [-it.priority for it in items]  # a pod's place: (-priority, index)
    real_waiting = len(waiting)
    total_rate = sum(a.rate_per_second for a, _, _ in plan.arrivals)
    next_arrival = now + rng.expovariate(total_rate) if total_rate > 0 else math.inf
    n_future = 0
    t = now
    while real_waiting:
        still = []
        for i in waiting:
            units = shape_of[i][1]
            best, pool = qr._choose(free, cands[i], pools[shape_of[i]], units, placement, rng)
            if best < 0:
                still.append(i)
                continue
            if i < len(items):
                start[i] = t
                real_waiting -= 1
                if isinstance(items[i], qr.Request):
                    continue
            free[best][pool] -= units
            end = t + hist.draw(rng) + hist.release(rng)
            if end <= horizon:
                heapq.heappush(events, (end, seq, best, pool, units))
                seq += 1
        waiting = still
        t = min(events[0][0] if events else math.inf, next_arrival)
        if t > horizon:
            break
        if next_arrival <= t:  # behind the pods of its priority and above
            arrival, cand, shape = qr._pick(plan.arrivals, rng.random() * total_rate)
            shape_of.append(shape)
            cands.append(cand)
            order.append(-arrival.priority)
            bisect.insort(waiting, len(shape_of) - 1, key=lambda j: (order[j], j))
            n_future += 1
            next_arrival = t + rng.expovariate(total_rate)
            if n_future >= max_arrivals:
                next_arrival = math.inf
        while events and events[0][0] == t:
            _, _, k, pool, units = heapq.heappop(events)
            free[k][pool] = free[k].get(pool, 0) + units
    return start


def pod_by_pod_sample(
    nodes: Sequence[qr.Node],
    node_index: Mapping[str, int],
    holders: Sequence[qr.Holder],
    plan: qr._QueuePlan,
    max_arrivals: int,
    placement: str,
    now: float,
    horizon: float,
    hist: qr._Durations,
    rng: random.Random,
) -> list[float]:
    """``one_sample`` with two shortcuts, the peer of ``bench/queue_replay_speed.py``:
    every waiting pod is still visited at every sweep, but a pod that waited since the
    last one is tried only on its candidate nodes whose units freed (each pod filters
    its own list: O(events × pods × nodes)), and a shape that failed is not tried again
    in that sweep."""
    free, events = qr._running_now(nodes, node_index, holders, now, horizon, hist, rng)
    seq = len(events)
    items, pools = plan.items, plan.pools
    start = [math.inf] * len(items)
    shape_of = list(plan.shapes)
    cands = [plan.nodes_of.get(shape, ()) for shape in shape_of]
    waiting = list(plan.waiting)
    order = [-it.priority for it in items]  # a pod's place: (-priority, index)
    real_waiting = len(waiting)
    total_rate = sum(a.rate_per_second for a, _, _ in plan.arrivals)
    next_arrival = now + rng.expovariate(total_rate) if total_rate > 0 else math.inf
    n_future = 0
    t = now
    fresh = set(waiting)
    changed: set[int] = set()
    while real_waiting:
        still = []
        blocked: set[qr.Shape] = set()
        blocked_all: set[qr.Shape] = set()
        for i in waiting:
            shape = shape_of[i]
            is_fresh = i in fresh
            if shape in blocked_all or (not is_fresh and shape in blocked):
                still.append(i)
                continue
            nodes_now = cands[i] if is_fresh else [k for k in cands[i] if k in changed]
            best, pool = qr._choose(free, nodes_now, pools[shape], shape[1], placement, rng)
            if best < 0:
                (blocked_all if is_fresh else blocked).add(shape)
                still.append(i)
                continue
            if i < len(items):
                start[i] = t
                real_waiting -= 1
                if isinstance(items[i], qr.Request):
                    continue
            free[best][pool] -= shape[1]
            end = t + hist.draw(rng) + hist.release(rng)
            if end <= horizon:
                heapq.heappush(events, (end, seq, best, pool, shape[1]))
                seq += 1
        waiting = still
        fresh = set()
        changed = set()
        t = min(events[0][0] if events else math.inf, next_arrival)
        if t > horizon:
            break
        if next_arrival <= t:  # behind the pods of its priority and above
            arrival, cand, shape = qr._pick(plan.arrivals, rng.random() * total_rate)
            shape_of.append(shape)
            cands.append(cand)
            order.append(-arrival.priority)
            bisect.insort(waiting, len(shape_of) - 1, key=lambda j: (order[j], j))
            fresh.add(len(shape_of) - 1)
            n_future += 1
            next_arrival = t + rng.expovariate(total_rate)
            if n_future >= max_arrivals:
                next_arrival = math.inf
        while events and events[0][0] == t:
            _, _, k, pool, units = heapq.heappop(events)
            free[k][pool] = free[k].get(pool, 0) + units
            changed.add(k)
    return start
