// BatchSource: where the training loop (train_loop.h) takes its batches
// from, each with its input (field 0) already on the training device.
// Internal to //trainers:train_loop.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> source,
//                             BatchSource::Create(loader, Device::Cuda(0), /*prefetch=*/true));
//   LOCKSTEP_RETURN_IF_ERROR(loader.StartEpoch(epoch, first));
//   LOCKSTEP_RETURN_IF_ERROR(source->Reset());
//   while (true) {
//     LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, source->Next());
//     if (!batch) break;  // the epoch's end
//     ...                 // batch->fields[0] is on the device; the step runs
//   }
//
//   * CPU: the loader's batches as they come; its workers already prefetch
//     (num_workers x prefetch_factor batches made ahead).
//   * CUDA, prefetch: Next hands out the batch whose copy it started one call
//     earlier, after making the legacy default stream (where the kernels and
//     stream-less copies run) wait for that copy's event on the device; then
//     it takes the following batch from the loader and starts copying its
//     input from pinned memory (DataLoaderOptions::pin_memory) to the device
//     on its own non-blocking stream, recording an event. So the copy of
//     batch k+1 runs while the caller's step k computes and communicates,
//     and no kernel reads it before it has landed. The host batch stays
//     alive until the copy is known to be done (the pinned memory is not
//     handed out again under a running copy). Each micro-batch's labels
//     stay on the host (the loss is computed there).
//   * CUDA without prefetch: the input is copied when the batch is handed
//     out, and the copy completes first.
// A batch taken from the loader ahead of time and never handed out (the run
// stopped at max_steps) is dropped; the loader is discarded with it.
#ifndef LOCKSTEP_TRAINERS_DEVICE_PREFETCH_H_
#define LOCKSTEP_TRAINERS_DEVICE_PREFETCH_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda/cuda_runtime.h"
#include "core/device.h"
#include "core/tensor.h"
#include "data/data_loader.h"

namespace lockstep {
namespace train_loop_internal {

class BatchSource {
 public:
  // `loader` must outlive the source; `prefetch` matters for CUDA only.
  static absl::StatusOr<std::unique_ptr<BatchSource>> Create(DataLoader& loader, Device device, bool prefetch);
  ~BatchSource();

  // After each DataLoader::StartEpoch: drops what was taken ahead.
  absl::Status Reset();
  // The next batch, its input on the device; nullopt at the epoch's end.
  absl::StatusOr<std::optional<Batch>> Next();

  // What rank 0 prints at the start ("data: ...").
  static std::string Describe(Device device, bool prefetch, int num_workers, int prefetch_factor);

 private:
  // A batch taken from the loader and the copy of its input in flight.
  struct Slot {
    std::optional<Batch> host;
    Tensor device_input;
    std::optional<cuda::Event> copied;
    bool filled = false;  // Next took it from the loader (host empty: the epoch's end)
  };

  BatchSource(DataLoader& loader, Device device) : loader_(loader), device_(device) {}
  // Takes the loader's next batch into `slot` and starts its copy.
  absl::Status Fill(Slot& slot);
  // Waits until the slot's copy is done, then empties it.
  absl::Status Drain(Slot& slot);

  DataLoader& loader_;
  const Device device_;
  bool prefetch_ = false;
  std::optional<cuda::Stream> stream_;
  Slot slots_[2];
  int ready_ = 0;  // The slot Next hands out next.
};

}  // namespace train_loop_internal
}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_DEVICE_PREFETCH_H_
