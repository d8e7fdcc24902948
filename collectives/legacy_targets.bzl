"""The labels and include paths `collectives` had before its subpackages.

Every public target that moved into collectives/{store,transport,algorithms,
nccl,bootstrap,testing,hierarchical}/ (or, for DDP's bucket helpers, into ddp/) keeps a target at its old label, `//collectives:NAME`,
whose header at the old path, `collectives/NAME.h`, forwards to the new one:
repositories built against the old names keep building. New code uses the new
labels (README: "Using lockstep from another Bazel repository"). Both come from
the one list below.
"""

load("//bazel:forwarding.bzl", "lockstep_forwarding_targets")

# old name -> (new label, the header it forwards to; "" where the path did not change)
LEGACY_TARGETS = {
    "store": ("//collectives/store:store", "collectives/store/store.h"),
    "hash_store": ("//collectives/store:hash_store", "collectives/store/hash_store.h"),
    "prefix_store": ("//collectives/store:prefix_store", "collectives/store/prefix_store.h"),
    "rank_environment": ("//collectives/bootstrap:rank_environment", "collectives/bootstrap/rank_environment.h"),
    "tcp_store": ("//collectives/store:tcp_store", "collectives/store/tcp_store.h"),
    "transport": ("//collectives/transport:transport", "collectives/transport/transport.h"),
    "tcp_transport": ("//collectives/transport/tcp:tcp_transport", "collectives/transport/tcp/tcp_transport.h"),
    "algorithm": ("//collectives/algorithms:algorithm", "collectives/algorithms/algorithm.h"),
    "ring_all_reduce": ("//collectives/algorithms:ring_all_reduce", "collectives/algorithms/ring_all_reduce.h"),
    "recursive_doubling_all_reduce": ("//collectives/algorithms:recursive_doubling_all_reduce", "collectives/algorithms/recursive_doubling_all_reduce.h"),
    "all_reduce": ("//collectives/algorithms:all_reduce", "collectives/algorithms/all_reduce.h"),
    "reduce_scatter": ("//collectives/algorithms:reduce_scatter", "collectives/algorithms/reduce_scatter.h"),
    "all_gather": ("//collectives/algorithms:all_gather", "collectives/algorithms/all_gather.h"),
    "broadcast": ("//collectives/algorithms:broadcast", "collectives/algorithms/broadcast.h"),
    "reduce": ("//collectives/algorithms:reduce", "collectives/algorithms/reduce.h"),
    "gather": ("//collectives/algorithms:gather", "collectives/algorithms/gather.h"),
    "scatter": ("//collectives/algorithms:scatter", "collectives/algorithms/scatter.h"),
    "barrier": ("//collectives/algorithms:barrier", "collectives/algorithms/barrier.h"),
    "tcp_communicator": ("//collectives/bootstrap:tcp_communicator", "collectives/bootstrap/tcp_communicator.h"),
    "fake_transport": ("//collectives/testing:fake_transport", ""),
    "transport_conformance": ("//collectives/testing:transport_conformance", ""),
    "init_from_env": ("//collectives/bootstrap:init_from_env", "collectives/bootstrap/init_from_env.h"),
    "local_launch": ("//collectives/bootstrap:local_launch", "collectives/bootstrap/local_launch.h"),
    "shm_transport": ("//collectives/transport/shm:shm_transport", "collectives/transport/shm/shm_transport.h"),
    "shm_communicator": ("//collectives/bootstrap:shm_communicator", "collectives/bootstrap/shm_communicator.h"),
    "communicator_factory": ("//collectives/bootstrap:communicator_factory", "collectives/bootstrap/communicator_factory.h"),
    "nccl_communicator": ("//collectives/nccl:nccl_communicator", "collectives/nccl/nccl_communicator.h"),
    "backend_choice": ("//collectives/bootstrap:backend_choice", "collectives/bootstrap/backend_choice.h"),
    "hierarchical_backend": ("//collectives/hierarchical:hierarchical_backend", "collectives/hierarchical/hierarchical_backend.h"),
    # DDP's helpers, where their users are.
    "bucket_assignment": ("//ddp:bucket_assignment", "ddp/bucket_assignment.h"),
    "grad_bucket": ("//ddp:grad_bucket", "ddp/grad_bucket.h"),
    "fused_all_reduce": ("//ddp:fused_all_reduce", "ddp/fused_all_reduce.h"),
}

def collectives_legacy_targets():
    """Declares every old label of LEGACY_TARGETS in the calling package (//collectives)."""
    lockstep_forwarding_targets(LEGACY_TARGETS)
