"""Fuzz campaign: every parser of untrusted or damageable input, ≥ 100,000 inputs each.

Not a test (minutes long): the suite keeps short hypothesis runs of the same parsers;
this drives many more inputs through them and prints, per parser, the inputs tried,
the inputs refused with the parser's own documented error, and the exceptions that
escaped (anything else: the goal is 0). The first escapes are shown with their input.

Inputs are mutations of real-looking seeds (bit flips, insertions, deletions,
truncation, splices of hostile tokens: 400-digit integers, 1e400, NaN, NUL, invalid
UTF-8, 5,000-deep nesting) plus, for the JSON parsers, random JSON documents with
hostile numbers in every position. Seeded: the same run gives the same inputs.

Parsers (entry point → documented refusal):

- progress JSON: ``exporter.progress.parse_report`` → ``ReportError``
- log lines: ``logformats.parse_line``/``parse_setup`` → ``fold`` → ``check_report``
  → ``ReportError`` (what the log collector does with one line)
- cgroup files: ``cgroups.parse_cgroup`` and ``hostmemory.parse_memory_stat`` → never
- pod-resources answers: protobuf bytes → ``ListPodResourcesResponse`` →
  ``allocations_from_response`` → ``DecodeError`` (protobuf) only
- Prometheus API answers: ``promparse.decode_response`` → ``parse_vector``/``parse_matrix``
  → ``PromAPIError``
- state file: ``progress_store.parse_state`` → ``StateError``; journal:
  ``progress_journal.read_journal`` → never
- runs CSV (``forecaster.runs_csv.parse_runs``, the evaluate command's parser) →
  ``RunsCsvError``

    python bench/fuzz_campaign.py [--inputs 100000] [--seed 1] [--only NAME]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flag_types import at_least

from gpu_eta.common.progress_bound import MAX_PROGRESS
from gpu_eta.exporter._proto import api_pb2
from gpu_eta.exporter.collectors.cgroup import parse_cgroup
from gpu_eta.exporter.collectors.hostmemory import parse_memory_stat
from gpu_eta.exporter.collectors.podresources import allocations_from_response
from gpu_eta.exporter.logformats import (
    LogState,
    fold,
    last_segment,
    parse_line,
    parse_setup,
    visible,
)
from gpu_eta.exporter.progress import ReportError, check_report, parse_report
from gpu_eta.exporter.progress_journal import encode_line, encode_removal, read_journal
from gpu_eta.exporter.progress_state_file import StateError, parse_state
from gpu_eta.forecaster.promapi import PromAPIError
from gpu_eta.forecaster.promparse import decode_response, parse_matrix, parse_vector
from gpu_eta.forecaster.runs_csv import RunsCsvError, parse_runs

try:
    from google.protobuf.message import DecodeError
except ImportError:  # pragma: no cover
    DecodeError = ValueError  # type: ignore[misc,assignment]

HUGE = "1" + "0" * 400
TOKENS = [
    HUGE, "-" + HUGE, "1e400", "-1e400", "NaN", "Infinity", "-0", "0.0", "-1", "1e15",
    "1e16", "134217727", "9" * 30, "\x00", "\ufeff", "\u2028", "\r", "\n", "\t", " ",
    '"', "\\", "{", "}", "[", "]", ":", ",", "'", "/", "|", "%", "━", "Epoch",
    "GPU_ETA_PROGRESS", "null", "true", "false", '"epoch"', '"epochs"', '"step"',
    '"run_id"', '"metrics"', "[" * 5000, "{" * 3000, "]" * 5000, "é", "\U0001f600",
]  # fmt: skip
BYTE_TOKENS = [t.encode("utf-8") for t in TOKENS] + [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80"]


_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def mutate(rng: random.Random, data: bytes, deep: bool = True) -> bytes:
    """One to four random edits of ``data`` (``deep``: nesting the whole input too)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9 if deep else 8)
        if op == 7:  # a number in place, the document stays valid: 400 digits, 1e400...
            spans = [m.span() for m in _NUMBER.finditer(buf)]
            if spans:
                a, b = rng.choice(spans)
                buf[a:b] = rng.choice(BYTE_TOKENS[:12])
            continue
        if op == 8:  # the whole input nested deeply
            k = rng.choice((50, 1000, 5000))
            buf[:0] = b"[" * k
            buf += b"]" * k
            continue
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:  # bit flip
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # hostile token
            buf[pos:pos] = rng.choice(BYTE_TOKENS)
        elif op == 2 and buf:  # delete a span
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 3:  # truncate
            del buf[pos:]
        elif op == 4 and buf:  # duplicate a span
            j = rng.randrange(len(buf))
            buf[pos:pos] = buf[j : j + rng.randint(1, 64)]
        elif op == 5:  # random bytes
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 6 and buf:  # replace a digit run with a hostile number
            i = rng.randrange(len(buf))
            buf[i : i + 1] = rng.choice(BYTE_TOKENS[:12])
    return bytes(buf)


def hostile_number(rng: random.Random) -> object:
    return rng.choice(
        [
            int(HUGE),
            -int(HUGE),
            10**308 * 10,
            1e308,
            -1.0,
            0,
            0.5,
            2**63,
            2**64 + 1,
            MAX_PROGRESS + 1,
            float("nan"),
            float("inf"),
            3,
            7.5,
            True,
            None,
            "12",
            [],
            {},
        ]
    )


def random_json(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 4 else 3)
    if kind == 0:
        return hostile_number(rng)
    if kind == 1:
        return rng.choice(["", "x", "run-1", "main", "\x00", "A" * 300, HUGE, "é"])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4):
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["epoch", "epochs", "step", "steps", "batch_size", "run_id", "run_start",
            "container", "event", "metrics", "loss", "status", "data", "resultType",
            "result", "metric", "value", "values", "version", "progress", "journal_seq",
            "namespace", "pod", "source", "last_report_timestamp", "run_start_timestamp"]  # fmt: skip
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def dumps(value: object) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


# -- seeds ---------------------------------------------------------------------------

PROGRESS_SEEDS = [
    b'{"epoch": 3, "epochs": 10, "step": 300, "steps": 1000, "batch_size": 64}',
    b'{"run_id": "r-1", "event": "start", "epochs": 5, "run_start": 1790000000}',
    b'{"epoch": 1, "metrics": {"loss": 0.5, "accuracy": 0.9}, "container": "main"}',
    b'{"event": "end", "epoch": 10, "epochs": 10}',
]
LOG_SEEDS = [
    "Epoch 3/15",
    "50000/50000 [==============================] - 10s 199us/sample - loss: 1.55",
    "12/12 ━━━━━━━━━━━━━━━━━━━━ 1s 59ms/step - accuracy: 0.34 - loss: 0.98",
    "Epoch 2/10:  45%|████▌     | 450/1000 [00:10<00:12, 45.0it/s, loss=0.2]",
    "Epoch 2: 100%|██████████| 8/8 [00:00<00:00, 86.72it/s, v_num=0, train_loss=0.63]",
    "Epoch 2/2 ━━━━━━━━━━━━━━━━━━━━ 8/8 0:00:00 • 0:00:00 86.72it/s v_num: 0",
    "{'loss': 0.6345, 'learning_rate': 4.5e-05, 'epoch': 1.5}",
    "  Num Epochs = 3",
    "  Total optimization steps = 24",
    'GPU_ETA_PROGRESS {"epoch": 3, "epochs": 10}',
    "12/12 - 0s - 8ms/step - accuracy: 0.58 - loss: 0.69",
    " - 1s - loss: 0.17 - acc: 0.93",
]
CGROUP_SEEDS = [
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_"
    "90ef_1234_567890abcdef.slice/cri-containerd-" + "ab" * 32 + ".scope\n",
    "12:memory:/kubepods/besteffort/pod1234abcd-5678-90ef-1234-567890abcdef/" + "cd" * 32 + "\n"
    "11:cpu,cpuacct:/kubepods/besteffort/pod1234abcd-5678-90ef-1234-567890abcdef/"
    + "cd" * 32
    + "\n",
    "0::/system.slice/docker-" + "ef" * 32 + ".scope\n",
    "0::/user.slice/user-0.slice/session-1.scope\n",
]
MEMSTAT_SEEDS = [
    "anon 1048576\nfile 4096\ninactive_file 2048\nactive_file 1024\n",
    "cache 4096\nrss 1048576\ntotal_inactive_file 2048\n",
]


def podresources_seeds() -> list[bytes]:
    out = []
    for n in (1, 3):
        resp = api_pb2.ListPodResourcesResponse()
        for i in range(n):
            pod = resp.pod_resources.add(name=f"pod-{i}", namespace="ml")
            c = pod.containers.add(name="main")
            c.devices.add(resource_name="nvidia.com/gpu", device_ids=[f"GPU-{i:08d}", "0"])
            c.devices.add(resource_name="nvidia.com/mig-1g.5gb", device_ids=["MIG-1"])
        out.append(resp.SerializeToString())
    return out


PROM_SEEDS = [
    dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": "ml", "pod": "p"}, "value": [1790000000.5, "3"]}]}}),
    dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"pod": "p"}, "values": [[1790000000, "1"], [1790000015, "2"]]}]}}),
    dumps({"status": "success", "data": {"resultType": "scalar", "result": [1790000000, "1"]}}),
    dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}),
]  # fmt: skip

STATE_ROW = {
    "namespace": "ml", "pod": "p", "container": "main", "run_id": "r1", "source": "http",
    "run_start_timestamp": 1790000000.0, "last_report_timestamp": 1790000100.0,
    "epoch": 2.0, "epochs": 10.0, "step": None, "steps": None, "batch_size": 64.0,
    "epoch_end_timestamp": 1790000090.0, "metrics": {"loss": 0.5},
}  # fmt: skip
STATE_SEEDS = [
    dumps({"version": 1, "journal_seq": 7, "progress": [STATE_ROW, dict(STATE_ROW, pod="q")]}),
    dumps({"version": 1, "progress": []}),
]
JOURNAL_SEEDS = [
    encode_line(1, STATE_ROW)
    + encode_line(2, dict(STATE_ROW, epoch=3.0))
    + encode_removal(3, ("ns", "p", "main", "http"))
]
CSV_SEEDS = [
    "run_id,epochs_planned,epoch,timestamp_seconds\nr1,3,0,1000\nr1,3,1,1060\nr1,3,2,1120\nr1,3,3,1180\n",
    "run_id,epochs_planned,epoch,timestamp_seconds,batch_size,gpu_model\n"
    "a,2,0,0,64,T4\na,2,1,10,64,T4\nb,2,0,5,32,A100\nb,2,1,9,32,A100\nb,2,2,20,32,A100\n",
]


# -- targets -------------------------------------------------------------------------


def t_progress(data: bytes) -> None:
    parse_report(data, now=1_790_000_000.0)


def t_log(data: bytes) -> None:
    text = visible(last_segment(data.decode("utf-8", "replace")))
    match = parse_line(text)
    if match is None and " = " in text:
        match = parse_setup(text)
    if match is not None:
        _, report = fold(LogState(), None, match)
        if report is not None:
            check_report(report)


def t_cgroup(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    parse_cgroup(text)
    parse_memory_stat(text)


def t_podresources(data: bytes) -> None:
    resp = api_pb2.ListPodResourcesResponse.FromString(data)
    allocations_from_response(resp)


def t_prom(data: bytes) -> None:
    payload = decode_response(data, 200)
    if payload.get("resultType") == "matrix":
        parse_matrix(payload, "q")
    else:
        parse_vector(payload, "q")


def t_state(data: bytes) -> None:
    try:
        parse_state(data)
    finally:
        read_journal(data)


def t_csv(data: bytes) -> None:
    parse_runs(io.StringIO(data.decode("utf-8", "replace"), newline=""))


TARGETS: dict[str, tuple[Callable[[bytes], None], tuple[type[BaseException], ...], list[bytes], bool]] = {
    # name: (target, documented refusals, seeds, random JSON documents too)
    "progress JSON": (t_progress, (ReportError,), PROGRESS_SEEDS, True),
    "log lines": (t_log, (ReportError,), [s.encode() for s in LOG_SEEDS], False),
    "cgroup files": (t_cgroup, (), [s.encode() for s in CGROUP_SEEDS + MEMSTAT_SEEDS], False),
    "pod-resources answers": (t_podresources, (DecodeError,), podresources_seeds(), False),
    "Prometheus API answers": (t_prom, (PromAPIError,), PROM_SEEDS, True),
    "state file + journal": (t_state, (StateError,), STATE_SEEDS + JOURNAL_SEEDS, True),
    "runs CSV (evaluate's parser)": (t_csv, (RunsCsvError,), [s.encode() for s in CSV_SEEDS], False),
}  # fmt: skip


def campaign(name: str, n: int, seed: int) -> dict:
    target, refusals, seeds, with_json = TARGETS[name]
    rng = random.Random(f"{seed}:{name}")
    refused = escaped = 0
    examples: list[str] = []
    kinds: dict[str, int] = {}
    started = time.perf_counter()
    for i in range(n):
        r = rng.random()
        if with_json and r < 0.3:
            data = dumps(random_json(rng))
            if name == "Prometheus API answers" and r < 0.15:
                data = dumps({"status": "success", "data": {"resultType": rng.choice(
                    ["vector", "matrix", "scalar"]), "result": random_json(rng, 3)}})  # fmt: skip
            elif name == "state file + journal" and r < 0.15:
                data = dumps({"version": 1, "progress": [random_json(rng, 3) for _ in range(3)]})
        else:
            data = rng.choice(seeds)
            if i % 3:  # stack mutations for depth
                for _ in range(rng.randint(1, 3)):
                    data = mutate(rng, data, deep=with_json)
            else:
                data = mutate(rng, data, deep=with_json)
        try:
            target(data)
        except refusals:
            refused += 1
        except Exception as err:  # an escape: the finding this campaign looks for
            escaped += 1
            kind = f"{type(err).__name__}: {str(err).splitlines()[0][:80] if str(err) else ''}"
            kinds[kind] = kinds.get(kind, 0) + 1
            if len(examples) < 3:
                where = traceback.extract_tb(err.__traceback__)[-1]
                examples.append(
                    f"{kind} at {Path(where.filename).name}:{where.lineno} on {data[:120]!r}"
                )
    return {
        "name": name,
        "inputs": n,
        "refused": refused,
        "escaped": escaped,
        "seconds": time.perf_counter() - started,
        "examples": examples,
        "kinds": kinds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=at_least(1), default=100_000, help="inputs per parser")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=sorted(TARGETS), help="one parser only")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(1000)  # the default: what the services run with
    results = [
        campaign(name, args.inputs, args.seed)
        for name in TARGETS
        if args.only is None or name == args.only
    ]
    print("| parser | inputs tried | refused (documented error) | exceptions escaped | inputs/s |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        rate = r["inputs"] / r["seconds"] if r["seconds"] else float("nan")
        print(
            f"| {r['name']} | {r['inputs']:,} | {r['refused']:,} | {r['escaped']:,} | {rate:,.0f} |"
        )
    for r in results:
        for kind, count in sorted(r["kinds"].items(), key=lambda kv: -kv[1]):
            print(f"  {r['name']}: {count} × {kind}")
        for example in r["examples"]:
            print(f"    e.g. {example}")
    return 1 if any(r["escaped"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
