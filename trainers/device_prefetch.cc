#include "trainers/device_prefetch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace lockstep {
namespace train_loop_internal {

absl::StatusOr<std::unique_ptr<BatchSource>> BatchSource::Create(DataLoader& loader, Device device, bool prefetch) {
  std::unique_ptr<BatchSource> source(new BatchSource(loader, device));
  source->prefetch_ = prefetch && device.is_cuda();
  if (source->prefetch_) {
    LOCKSTEP_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(device.index()));
    source->stream_.emplace(std::move(stream));
    for (Slot& slot : source->slots_) {
      LOCKSTEP_ASSIGN_OR_RETURN(cuda::Event event, cuda::Event::Create(device.index()));
      slot.copied.emplace(std::move(event));
    }
  }
  return source;
}

BatchSource::~BatchSource() {
  // A copy still in flight reads pinned memory and writes a device tensor:
  // it lands before either is freed.
  for (Slot& slot : slots_) Drain(slot).IgnoreError();
}

absl::Status BatchSource::Reset() {
  for (Slot& slot : slots_) LOCKSTEP_RETURN_IF_ERROR(Drain(slot));
  ready_ = 0;
  return absl::OkStatus();
}

absl::Status BatchSource::Drain(Slot& slot) {
  if (slot.host && slot.copied) LOCKSTEP_RETURN_IF_ERROR(slot.copied->Synchronize());
  slot.host.reset();
  slot.device_input = Tensor();
  slot.filled = false;
  return absl::OkStatus();
}

absl::Status BatchSource::Fill(Slot& slot) {
  LOCKSTEP_RETURN_IF_ERROR(Drain(slot));
  LOCKSTEP_ASSIGN_OR_RETURN(slot.host, loader_.Next());
  slot.filled = true;
  if (!slot.host || slot.host->fields.empty()) return absl::OkStatus();
  const Tensor& input = slot.host->fields[0];
  LOCKSTEP_ASSIGN_OR_RETURN(slot.device_input, Tensor::Empty(input.shape(), input.dtype(), device_));
  LOCKSTEP_RETURN_IF_ERROR(slot.device_input.CopyFromAsync(input, *stream_));
  return slot.copied->Record(&*stream_);
}

absl::StatusOr<std::optional<Batch>> BatchSource::Next() {
  if (!prefetch_) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader_.Next());
    if (batch && !device_.is_cpu() && !batch->fields.empty()) {
      LOCKSTEP_ASSIGN_OR_RETURN(batch->fields[0], batch->fields[0].To(device_));
    }
    return batch;
  }
  Slot& ready = slots_[ready_];
  if (!ready.filled) LOCKSTEP_RETURN_IF_ERROR(Fill(ready));  // The epoch's first batch.
  if (!ready.host) return std::optional<Batch>();
  // The kernels that read the input run on the legacy default stream: it
  // waits for the copy on the device (the host goes on).
  LOCKSTEP_RETURN_IF_ERROR(ready.copied->BlockStream(nullptr));
  Batch out = *ready.host;
  if (!out.fields.empty()) out.fields[0] = ready.device_input;
  ready_ = 1 - ready_;
  // The following batch's copy runs while the caller's step does.
  LOCKSTEP_RETURN_IF_ERROR(Fill(slots_[ready_]));
  return std::optional<Batch>(std::move(out));
}

std::string BatchSource::Describe(Device device, bool prefetch, int num_workers, int prefetch_factor) {
  std::string host =
      num_workers > 0
          ? absl::StrFormat("%d DataLoader worker%s make%s up to %d batches ahead", num_workers,
                            num_workers == 1 ? "" : "s", num_workers == 1 ? "s" : "", num_workers * prefetch_factor)
          : std::string("batches are made in the training thread when needed (--num_workers=0: none ahead)");
  if (device.is_cpu()) return absl::StrCat("data: ", host, num_workers > 0 ? " on the CPU while the step runs" : "");
  if (!prefetch) {
    return absl::StrCat("data: ", host, " in pinned memory; each batch's input is copied to ", device.ToString(),
                        " when it is used (device prefetch off)");
  }
  return absl::StrCat("data: ", host, " in pinned memory; the next batch's input is copied to ", device.ToString(),
                      " on a side stream while the step runs, ordered before use by an event (device prefetch)");
}

}  // namespace train_loop_internal
}  // namespace lockstep
