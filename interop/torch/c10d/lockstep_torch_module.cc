// The Python module `lockstep_torch`: importing it registers lockstep as
// the torch.distributed backend "lockstep" (process_group_lockstep.h).
//
//   import torch.distributed as dist
//   import lockstep_torch
//   dist.init_process_group("lockstep", init_method="env://")
//
// Built against the torch it is loaded into (Debian's 1.13 by Bazel, any
// 1.13 or 2.x by python/setup.py): the module shares pybind11's type
// registry with torch._C, so what it returns is a torch.distributed
// ProcessGroup (1.13) or a Backend that PyTorch's ProcessGroup holds for
// CPU tensors (2.x, registered with devices=["cpu"]). Registered with
// extended_api=True on both: the creator gets the group's name and global
// ranks too.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "interop/torch/c10d/process_group_lockstep.h"
#include "interop/torch/c10d/torch_version.h"

namespace py = pybind11;

namespace {

// Python drops the group (destroy_process_group, a new_group going out of
// scope) holding the GIL; the communicator's threads may need it to finish
// what they complete, so it is released while they are joined.
c10::intrusive_ptr<lockstep::ProcessGroupLockstep> ReleasingTheGil(
    c10::intrusive_ptr<lockstep::ProcessGroupLockstep> group) {
  group->SetTeardown([](const std::function<void()>& destroy) {
    if (PyGILState_Check() != 0) {
      py::gil_scoped_release release;
      destroy();
    } else {
      destroy();
    }
  });
  return group;
}

// The creator torch.distributed calls (extended_api=True): the group's
// store, rank, size, timeout, name and global ranks. `backend_options` is
// init_process_group's pg_options, which lockstep has none of.
c10::intrusive_ptr<lockstep::ProcessGroupLockstep> CreateBackend(const ::c10d::DistributedBackendOptions& options,
                                                                 const py::object& backend_options) {
  TORCH_CHECK(backend_options.is_none(),
              "lockstep: init_process_group's pg_options must be None for backend "
              "\"lockstep\" (it has no options of that kind; set LOCKSTEP_* environment variables instead)");
  return ReleasingTheGil(lockstep::ProcessGroupLockstep::Create(options));
}

// The plain creator (store, rank, world_size, timeout), for callers of
// lockstep_torch.create_process_group.
c10::intrusive_ptr<lockstep::ProcessGroupLockstep> CreateProcessGroup(const c10::intrusive_ptr<::c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::duration<double> timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return ReleasingTheGil(lockstep::ProcessGroupLockstep::Create(store, rank, size, ms));
}

}  // namespace

PYBIND11_MODULE(lockstep_torch, m) {
  m.doc() = "lockstep's collectives as the torch.distributed backend \"lockstep\" (registered on import)";
  // torch.distributed first: it registers the c10d types this module's
  // signatures use (Store, ProcessGroup).
  py::module_ dist = py::module_::import("torch.distributed");

  // The base is the class PyTorch's bindings registered: ProcessGroup on
  // 1.13, Backend on 2.x (torch_version.h).
  py::class_<lockstep::ProcessGroupLockstep, lockstep::TorchBackendBase,
             c10::intrusive_ptr<lockstep::ProcessGroupLockstep>>(
      m, "ProcessGroupLockstep",
      "lockstep's collectives as a torch.distributed backend; made by "
      "torch.distributed.init_process_group(\"lockstep\") and new_group(backend=\"lockstep\")")
      .def_property_readonly("transport", &lockstep::ProcessGroupLockstep::transport,
                             "The transport lockstep chose for this group: \"host over shm\", \"host over tcp\" or "
                             "\"hierarchical(shm+tcp)\"")
      .def_property_readonly("group_name", &lockstep::ProcessGroupLockstep::group_name,
                             "torch.distributed's name of this group")
      .def_property_readonly("global_ranks", &lockstep::ProcessGroupLockstep::global_ranks,
                             "The global rank of each rank of this group, in group-rank order");

  m.attr("torch_build_version") = lockstep::kTorchBuildVersion;
  m.def("create_backend", &CreateBackend, py::arg("options"), py::arg("backend_options") = py::none(),
        py::call_guard<py::gil_scoped_release>(),
        "The backend's creator, as torch.distributed calls it with extended_api=True: "
        "(_DistributedBackendOptions, pg_options)");
  m.def("create_process_group", &CreateProcessGroup, py::arg("store"), py::arg("rank"), py::arg("world_size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The backend's creator, as torch.distributed calls it: (store, rank, world_size, timeout)");

  // Registered once per interpreter; importing the module again (or a
  // second copy of it) finds the backend there already.
  py::object backend = dist.attr("Backend");
  py::dict plugins = backend.attr("_plugins");
  if (!plugins.contains("LOCKSTEP")) {
    py::object register_backend = backend.attr("register_backend");
#if LOCKSTEP_TORCH_BACKEND_API
    register_backend("lockstep", m.attr("create_backend"), py::arg("extended_api") = true,
                     py::arg("devices") = std::vector<std::string>{"cpu"});
#else
    register_backend("lockstep", m.attr("create_backend"), py::arg("extended_api") = true);
#endif
  }
}
