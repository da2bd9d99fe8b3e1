"""The Ray backend on a cluster of two nodes (a head and a second node on this machine): the sharded probe runs on
both nodes and gives exactly the local backend's statistics. Slow (starting two Ray nodes takes tens of seconds):
run with ``pytest -m slow tests/test_ray_cluster.py``."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import probe_ar
from lmaudit.probes.backends import use_backend

pytestmark = pytest.mark.slow


@pytest.fixture()
def two_nodes():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_the_probe_runs_on_both_nodes_of_a_cluster_with_the_local_results(two_nodes, tiny_model_dir):
    import ray

    from lmaudit.probes.backends import RayBackend

    handle = load_model(tiny_model_dir, kind="ar")
    texts = TextSet.from_texts(make_texts(24, seed=61), source="cluster-texts")
    local = probe_ar(handle, texts, shard_size=4)
    backend = RayBackend(address=two_nodes.address, workers=2)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2 and backend.workers == 2
    with use_backend(backend, close=False):
        remote = probe_ar(handle, texts, shard_size=4)
        # each worker holds one whole CPU and each node has one: the two workers sit on different nodes
        assert ray.available_resources().get("CPU", 0) == 0
    backend.close()
    for name in ("logp", "top1_logp", "mu", "sigma", "offsets", "zlib_len", "sample_keys"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
