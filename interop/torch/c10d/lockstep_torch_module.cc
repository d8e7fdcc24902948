// The Python module `lockstep_torch`: importing it registers lockstep as
// the torch.distributed backend "lockstep" (process_group_lockstep.h).
//
//   import torch.distributed as dist
//   import lockstep_torch
//   dist.init_process_group("lockstep", init_method="env://")
//
// Built against the python3-torch it is loaded into (Debian's 1.13): the
// module shares pybind11's type registry with torch._C, so the process
// group it returns is a torch.distributed.ProcessGroup.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <functional>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "interop/torch/c10d/process_group_lockstep.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<::c10d::ProcessGroup> CreateProcessGroup(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                                            int size, std::chrono::duration<double> timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  c10::intrusive_ptr<lockstep::ProcessGroupLockstep> group =
      lockstep::ProcessGroupLockstep::Create(store, rank, size, ms);
  // Python drops the group (destroy_process_group, a new_group going out
  // of scope) holding the GIL; the communicator's threads may need it to
  // finish what they complete, so it is released while they are joined.
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

}  // namespace

PYBIND11_MODULE(lockstep_torch, m) {
  m.doc() = "lockstep's collectives as the torch.distributed backend \"lockstep\" (registered on import)";
  // torch.distributed first: it registers the c10d types this module's
  // signatures use (Store, ProcessGroup).
  py::module_ dist = py::module_::import("torch.distributed");

  py::class_<lockstep::ProcessGroupLockstep, ::c10d::ProcessGroup, c10::intrusive_ptr<lockstep::ProcessGroupLockstep>>(
      m, "ProcessGroupLockstep",
      "A torch.distributed ProcessGroup over lockstep's collectives; made by "
      "torch.distributed.init_process_group(\"lockstep\") and new_group(backend=\"lockstep\")")
      .def_property_readonly("transport", &lockstep::ProcessGroupLockstep::transport,
                             "The transport lockstep chose for this group: \"host over shm\", \"host over tcp\" or "
                             "\"hierarchical(shm+tcp)\"");

  m.def("create_process_group", &CreateProcessGroup, py::arg("store"), py::arg("rank"), py::arg("world_size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The backend's creator, as torch.distributed calls it: (store, rank, world_size, timeout)");

  // Registered once per interpreter; importing the module again (or a
  // second copy of it) finds the backend there already.
  py::object backend = dist.attr("Backend");
  py::dict plugins = backend.attr("_plugins");
  if (!plugins.contains("LOCKSTEP")) {
    backend.attr("register_backend")("lockstep", m.attr("create_process_group"));
  }
}
