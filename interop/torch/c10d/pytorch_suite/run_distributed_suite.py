"""PyTorch 1.13's own distributed test suite (torch/testing/_internal/
distributed/distributed_test.py, `DistributedTest._DistTestBase`) on a
backend, in the shape of PyTorch's test/distributed/test_distributed_spawn.py
(which Debian does not ship):

    BACKEND=lockstep WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) \\
        PYTHONPATH=<dir of lockstep_torch.so>:interop/torch/c10d/pytorch_suite \\
        /usr/bin/python3 interop/torch/c10d/pytorch_suite/run_distributed_suite.py [-v] [-k PATTERN ...]

With `--json FILE` it runs the tests itself (those whose names contain a
-k PATTERN, or are PATTERN without its trailing "$", or all) and writes every test's status, skip reason or error,
and duration to FILE (compare_suite.py reads it).

For a third-party backend the suite's feature sets are empty and its skip
decorators are evaluated when distributed_test is imported, so "lockstep"
joins the "plugin", "ddp" and "subgroup" sets here, before that import (in
the parent and in every spawned rank: they import this module again).
Tests that name a backend literally ("gloo", "nccl") still skip. To run
those that name gloo, BACKEND=gloo LOCKSTEP_AS_GLOO=1 runs the suite with
every group a lockstep group (see below); compare_suite.py reports both runs.
"""
import os
import sys

import torch.distributed as dist



class _ShardMetadataFix:
    """torch 1.13's torch/distributed/_shard/sharded_tensor/metadata.py declares
    `field(default=TensorProperties())`, which Python 3.11's dataclasses refuse
    ("mutable default ... use default_factory"): every DDP test that imports
    torch.distributed._shard errors out, on gloo as on any backend. This import
    hook loads that one module with default_factory instead, for every run
    alike, so that those DDP tests run."""

    NAME = "torch.distributed._shard.sharded_tensor.metadata"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        loader = spec.loader

        class Loader(importlib.machinery.SourceFileLoader):
            def get_data(self, filename):
                data = super().get_data(filename)
                if filename.endswith(".py"):
                    data = data.replace(b"field(default=TensorProperties())", b"field(default_factory=TensorProperties)")
                return data

            def path_stats(self, filename):  # no cached bytecode of the unpatched source
                raise OSError

        spec.loader = Loader(loader.name, loader.path)
        return spec


sys.meta_path.insert(0, _ShardMetadataFix())

BACKEND = os.environ["BACKEND"]
AS_GLOO = os.environ.get("LOCKSTEP_AS_GLOO") == "1"
if BACKEND == "lockstep":
    import lockstep_torch  # noqa: F401  registers the backend
    from torch.testing._internal.common_distributed import DistTestCases
    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("lockstep")
elif AS_GLOO:
    # BACKEND=gloo LOCKSTEP_AS_GLOO=1: the suite's gates and branches see
    # "gloo" (so the tests that name gloo literally run), but every group is
    # a lockstep group: the creation calls are redirected. Inside
    # torch.distributed, get_backend answers "gloo" for them (its
    # monitored_barrier admits gloo only); the tests' own dist.get_backend()
    # still says "lockstep", so they do not look for gloo's profiler events.
    assert BACKEND == "gloo", "LOCKSTEP_AS_GLOO=1 goes with BACKEND=gloo"
    import lockstep_torch  # noqa: F401
    import torch.distributed.distributed_c10d as c10d

    def _as_lockstep(backend):
        return "lockstep" if backend is None or str(backend).lower() == "gloo" else backend

    _init, _new_group, _get_backend = c10d.init_process_group, c10d.new_group, c10d.get_backend

    def init_process_group(backend, *args, **kwargs):
        return _init(_as_lockstep(backend), *args, **kwargs)

    def new_group(ranks=None, timeout=c10d.default_pg_timeout, backend=None, pg_options=None):
        return _new_group(ranks, timeout, _as_lockstep(backend), pg_options)

    def get_backend(group=None):
        backend = _get_backend(group)
        return "gloo" if backend == "lockstep" else backend

    for module in (c10d, dist):
        module.init_process_group, module.new_group = init_process_group, new_group
    c10d.get_backend = get_backend

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def run_to_json(path, patterns):
    """Runs the suite (tests whose name contains any of `patterns`; all if
    none) and writes one record per test: name, status (passed, failed,
    error, skipped), the skip reason or the error's last lines, seconds."""
    import json
    import time
    import traceback
    import unittest

    records = []

    class Recorder(unittest.TextTestResult):
        def startTest(self, test):
            self._started = time.monotonic()
            super().startTest(test)

        def _record(self, test, status, detail=""):
            records.append({"name": test._testMethodName, "status": status, "detail": detail,
                            "seconds": round(time.monotonic() - self._started, 2)})

        def addSuccess(self, test):
            super().addSuccess(test)
            self._record(test, "passed")

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._record(test, "skipped", reason)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._record(test, "failed", "".join(traceback.format_exception(*err))[-1500:])

        def addError(self, test, err):
            super().addError(test, err)
            self._record(test, "error", "".join(traceback.format_exception(*err))[-1500:])

    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if patterns:  # "name$": that test only; else every test containing it.
        names = [n for n in names if any(n == p[:-1] if p.endswith("$") else p in n for p in patterns)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    unittest.TextTestRunner(resultclass=Recorder, verbosity=1, stream=sys.stderr).run(suite)
    with open(path, "w") as f:
        json.dump({"backend": BACKEND, "world_size": int(os.environ["WORLD_SIZE"]), "tests": records}, f, indent=1)


if __name__ == "__main__":
    assert dist.is_available()
    if "--json" in sys.argv:
        i = sys.argv.index("--json")
        patterns = [sys.argv[j + 1] for j in range(len(sys.argv) - 1) if sys.argv[j] == "-k"]
        run_to_json(sys.argv[i + 1], patterns)
    else:
        run_tests()
