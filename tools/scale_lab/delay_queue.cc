#include "tools/scale_lab/delay_queue.h"

#include <algorithm>
#include <cassert>

namespace lockstep {
namespace scale_lab {

DelayQueue::DelayQueue(const Options& options)
    : delay_ns_(options.delay_ns),
      rate_bps_(options.rate_bps),
      buffer_bytes_(options.buffer_bytes),
      // Zeroed: the pages are touched now, not on the first packets.
      storage_(new uint8_t[static_cast<size_t>(options.buffers) * options.buffer_bytes]()),
      meta_(options.buffers),
      fifos_(options.hosts) {
  for (int i = options.buffers - 1; i >= 0; --i) Release(i);
}

int DelayQueue::Acquire() {
  int slot = free_head_;
  if (slot >= 0) free_head_ = meta_[slot].next;
  return slot;
}

void DelayQueue::Release(int slot) {
  meta_[slot].next = free_head_;
  free_head_ = slot;
}

int64_t DelayQueue::Push(int slot, int src, int dst, int bytes, int64_t arrival_ns) {
  Fifo& fifo = fifos_[src];
  int64_t ready_ns = arrival_ns;
  if (rate_bps_ > 0) {
    // bytes <= 2^16 and 8e9 < 2^33: the product fits in 64 bits.
    int64_t serialization_ns = static_cast<int64_t>(bytes) * 8 * 1'000'000'000 / rate_bps_;
    ready_ns = std::max(arrival_ns, fifo.nic_free_ns) + serialization_ns;
    fifo.nic_free_ns = ready_ns;
  }
  Meta& m = meta_[slot];
  m.deadline_ns = ready_ns + delay_ns_;
  m.bytes = bytes;
  m.dst = dst;
  m.next = -1;
  // Arrivals come from one clock read in order, so a FIFO stays sorted.
  assert(fifo.tail < 0 || meta_[fifo.tail].deadline_ns <= m.deadline_ns);
  if (fifo.tail >= 0) {
    meta_[fifo.tail].next = slot;
  } else {
    fifo.head = slot;
  }
  fifo.tail = slot;
  ++queued_;
  return m.deadline_ns;
}

int DelayQueue::EarliestFifo() const {
  // A scan of the heads: hosts are few (<= 254) and this costs far less than
  // the write() that follows it.
  int best = -1;
  for (int f = 0; f < static_cast<int>(fifos_.size()); ++f) {
    int head = fifos_[f].head;
    if (head >= 0 && (best < 0 || meta_[head].deadline_ns < meta_[fifos_[best].head].deadline_ns)) {
      best = f;
    }
  }
  return best;
}

int DelayQueue::Earliest() const {
  int f = EarliestFifo();
  return f < 0 ? -1 : fifos_[f].head;
}

void DelayQueue::PopEarliest() {
  int f = EarliestFifo();
  if (f < 0) return;
  Fifo& fifo = fifos_[f];
  int slot = fifo.head;
  fifo.head = meta_[slot].next;
  if (fifo.head < 0) fifo.tail = -1;
  --queued_;
  Release(slot);
}

}  // namespace scale_lab
}  // namespace lockstep
