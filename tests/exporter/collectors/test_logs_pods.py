"""gpu_eta.exporter.collectors.logs: pods that leave the pod list, and pods recreated
under a gone pod's name.

A Job with ``ttlSecondsAfterFinished: 0`` (or Argo's ``podGC``) is deleted seconds
after its exit, while the kubelet keeps its log files a while longer: its last lines
(the final epoch, the end marker) are written after the last poll that listed it.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.exporter.collectors.logreplay import POD, T0, cri

NEW = PodMeta(POD.namespace, POD.name, "1111-new-uid", ip="127.0.0.3")
CLOCK = T0.timestamp() + 10**6


def at(seconds: float, output: bytes) -> bytes:
    """``output`` as containerd records written ``seconds`` after T0."""
    return cri(output, "stderr", start=T0 + dt.timedelta(seconds=seconds))


def pod_dir(root: Path, pod: PodMeta) -> Path:
    d = root / f"{pod.namespace}_{pod.name}_{pod.uid}" / "trainer"
    d.mkdir(parents=True, exist_ok=True)
    return d


class Node:
    """A collector over ``root`` whose pod list and monotonic time the test sets."""

    def __init__(self, root: Path, pods: list[PodMeta], grace: float = 120.0) -> None:
        self.pods = pods
        self.now = 0.0
        self.col = LogProgressCollector(
            root,
            ProgressStore(),
            lambda: list(self.pods),
            gone_grace_seconds=grace,
            clock=lambda: CLOCK,
            timer=lambda: self.now,
        )

    def poll(self) -> None:
        """A collection: the logs read, then the store's ``retain`` (the scheduler's)."""
        self.col.poll()
        self.col.store.retain({(p.namespace, p.name): p.uid for p in self.pods}, CLOCK)


LIGHTNING_EPOCH_0 = b"Epoch 0: 100%|##########| 8/8 [00:01<00:00, 8.0it/s, train_loss=0.6]\n"
LIGHTNING_EPOCH_1 = b"Epoch 1: 100%|##########| 8/8 [00:02<00:00, 8.0it/s, train_loss=0.4]\n"
END = b'GPU_ETA_PROGRESS {"event": "end"}\n'


def test_the_last_lines_of_a_pod_deleted_since_the_last_poll_are_read(tmp_path):
    d = pod_dir(tmp_path, POD)
    (d / "0.log").write_bytes(at(0, LIGHTNING_EPOCH_0))
    node = Node(tmp_path, [POD])
    node.poll()
    with open(d / "0.log", "ab") as fh:  # the job's last lines, then its pod is deleted
        fh.write(at(2, LIGHTNING_EPOCH_1) + at(3, END))
    node.pods.clear()
    node.now = 5.0
    node.poll()
    (p,) = node.col.store.snapshot()
    assert (p.epoch, p.step) == (2, 16)
    assert p.ended_timestamp is not None


def test_a_gone_pods_directory_is_read_for_the_grace_then_forgotten(tmp_path):
    d = pod_dir(tmp_path, POD)
    (d / "0.log").write_bytes(at(0, LIGHTNING_EPOCH_0))
    node = Node(tmp_path, [POD], grace=60.0)
    node.poll()
    node.pods.clear()
    node.now = 10.0
    node.poll()  # gone since now
    assert node.col._followers
    with open(d / "0.log", "ab") as fh:
        fh.write(at(2, LIGHTNING_EPOCH_1))
    node.now = 69.0
    node.poll()
    assert node.col.store.get(POD.namespace, POD.name, "trainer", "log").epoch == 2
    with open(d / "0.log", "ab") as fh:
        fh.write(at(4, b"Epoch 2: 100%|##########| 8/8 [00:02<00:00, 8.0it/s]\n"))
    node.now = 70.0
    node.poll()  # the grace is over: not read, and its state is dropped
    assert node.col.store.get(POD.namespace, POD.name, "trainer", "log").epoch == 2
    assert not node.col._followers and not node.col._states and not node.col._last_time


def test_a_gone_pods_directory_removed_by_the_kubelet_drops_its_state(tmp_path):
    d = pod_dir(tmp_path, POD)
    (d / "0.log").write_bytes(at(0, LIGHTNING_EPOCH_0))
    node = Node(tmp_path, [POD])
    node.poll()
    node.pods.clear()
    node.poll()
    shutil.rmtree(d.parent)
    node.now = 1.0
    node.poll()
    assert not node.col._followers and not node.col._states and not node.col._gone


def test_with_no_grace_a_gone_pod_is_not_read(tmp_path):
    d = pod_dir(tmp_path, POD)
    (d / "0.log").write_bytes(at(0, LIGHTNING_EPOCH_0))
    node = Node(tmp_path, [POD], grace=0.0)
    node.poll()
    with open(d / "0.log", "ab") as fh:
        fh.write(at(2, LIGHTNING_EPOCH_1))
    node.pods.clear()
    node.poll()  # the store drops it at this collection: nothing to read it for
    assert node.col.store.get(POD.namespace, POD.name, "trainer", "log").epoch == 1
    assert not node.col._followers


def test_a_pod_recreated_under_the_name_ends_its_predecessors_reading(tmp_path):
    old = pod_dir(tmp_path, POD)
    (old / "0.log").write_bytes(at(0, LIGHTNING_EPOCH_0))
    node = Node(tmp_path, [POD])
    node.poll()
    node.pods[:] = []
    node.poll()
    node.pods[:] = [NEW]
    with open(old / "0.log", "ab") as fh:  # the predecessor's, never the new pod's
        fh.write(at(2, LIGHTNING_EPOCH_1))
    node.poll()
    assert node.col.counts()["matched"] == 1 and not node.col.store.snapshot()


def test_a_pod_recreated_under_the_name_starts_from_a_fresh_state(tmp_path):
    """A StatefulSet pod recreated under the same name: its bare bar is its own run,
    not a step of its predecessor's epoch 2 of 3."""
    pod_dir(tmp_path, POD).joinpath("0.log").write_bytes(
        at(0, b"Epoch 1/3: 100%|##########| 10/10 [00:01<00:00, 9.0it/s]\n")
        + at(1, b"Epoch 2/3:  50%|#####     | 5/10 [00:01<00:01, 9.0it/s]\n")
    )
    node = Node(tmp_path, [POD])
    node.poll()
    node.pods[:] = [NEW]  # recreated, and its job printed, between two collections
    pod_dir(tmp_path, NEW).joinpath("0.log").write_bytes(
        at(100, b" 30%|###       | 300/1000 [00:30<01:10, 10.0it/s]\n")
    )
    node.poll()  # what it read is filed with the predecessor's row, which retain drops
    with open(pod_dir(tmp_path, NEW) / "0.log", "ab") as fh:
        fh.write(at(130, b" 60%|######    | 600/1000 [01:00<00:40, 10.0it/s]\n"))
    node.poll()
    p = node.col.store.get(NEW.namespace, NEW.name, "trainer", "log")
    assert (p.epoch, p.epochs, p.step, p.steps) == (None, None, 600, 1000)


def test_a_keras_pod_recreated_under_the_name_is_not_read_in_its_predecessors_epoch(tmp_path):
    pod_dir(tmp_path, POD).joinpath("0.log").write_bytes(
        at(0, "Epoch 3/10\n8/8 ━━━━━━━━━━━━━━━━━━━━ 1s 59ms/step - loss: 0.9\n".encode())
    )
    node = Node(tmp_path, [POD])
    node.poll()
    node.pods[:] = [NEW]
    pod_dir(tmp_path, NEW).joinpath("0.log").write_bytes(
        at(150, "8/8 ━━━━━━━━━━━━━━━━━━━━ 1s 59ms/step - loss: 0.7\n".encode())
    )
    node.poll()
    with open(pod_dir(tmp_path, NEW) / "0.log", "ab") as fh:  # its one epoch, redrawn
        fh.write(at(151, "8/8 ━━━━━━━━━━━━━━━━━━━━ 1s 59ms/step - loss: 0.6\n".encode()))
    node.poll()
    p = node.col.store.get(NEW.namespace, NEW.name, "trainer", "log")
    assert (p.epoch, p.epochs, p.step) == (1, None, 8)
