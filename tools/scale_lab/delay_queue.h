// DelayQueue: the delay_link forwarder's scheduling, without any I/O.
//
// Terms (used in the names below):
//   host      one network namespace, 0..hosts-1.
//   slot      one packet buffer of the pool (`buffers` of them, `buffer_bytes`
//             each, allocated once: nothing is allocated per packet).
//   link      the directed path out of a source host: one FIFO per source.
//   arrival   when the forwarder read the packet from the source's TUN.
//   ready     when the source's NIC has finished serializing it:
//               ready = max(arrival, nic_free) + bytes * 8 / rate,
//               nic_free = ready;
//             without a rate, ready = arrival.
//   deadline  ready + delay: the packet may not leave before it.
//
// With one delay for every link, ready (and so the deadline) only grows
// along a FIFO, so the earliest packet of the whole queue is the earliest
// of the FIFOs' heads.
//
//   DelayQueue::Options options;
//   options.hosts = 2;
//   options.delay_ns = 2'000'000;
//   DelayQueue q(options);
//   int slot = q.Acquire();                 // -1: every buffer is in flight
//   ssize_t n = read(tun_fd[0], q.data(slot), q.buffer_bytes());
//   q.Push(slot, /*src=*/0, /*dst=*/1, n, now_ns);
//   ...
//   int head = q.Earliest();                // -1: empty
//   if (head >= 0 && q.deadline(head) <= now_ns) {
//     write(tun_fd[q.dst(head)], q.data(head), q.bytes(head));
//     q.PopEarliest();                      // frees the slot
//   }
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_DELAY_QUEUE_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_DELAY_QUEUE_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace lockstep {
namespace scale_lab {

class DelayQueue {
 public:
  struct Options {
    int hosts = 2;
    int64_t delay_ns = 0;
    int64_t rate_bps = 0;  // bits per second of each source's NIC; 0: no serialization.
    int buffers = 1024;
    int buffer_bytes = 1500;
  };

  explicit DelayQueue(const Options& options);
  DelayQueue(const DelayQueue&) = delete;
  DelayQueue& operator=(const DelayQueue&) = delete;

  // A free slot to read a packet into, or -1 when every slot is queued.
  int Acquire();
  // Gives back a slot from Acquire() that was not queued (a dropped packet).
  void Release(int slot);

  // Queues `slot` (holding `bytes` bytes from host `src` for host `dst`,
  // read at `arrival_ns`) and returns its deadline.
  int64_t Push(int slot, int src, int dst, int bytes, int64_t arrival_ns);

  // The queued slot with the earliest deadline (ties: the lowest source), or -1.
  int Earliest() const;
  // Removes Earliest() and frees its slot.
  void PopEarliest();

  uint8_t* data(int slot) { return storage_.get() + static_cast<size_t>(slot) * buffer_bytes_; }
  int buffer_bytes() const { return buffer_bytes_; }
  int64_t deadline(int slot) const { return meta_[slot].deadline_ns; }
  int dst(int slot) const { return meta_[slot].dst; }
  int bytes(int slot) const { return meta_[slot].bytes; }
  int queued() const { return queued_; }
  int buffers() const { return static_cast<int>(meta_.size()); }

 private:
  struct Meta {
    int64_t deadline_ns = 0;
    int32_t bytes = 0;
    int32_t dst = 0;
    int32_t next = -1;  // the next slot in its FIFO, or in the free list
  };
  struct Fifo {
    int32_t head = -1;
    int32_t tail = -1;
    int64_t nic_free_ns = 0;
  };

  const int64_t delay_ns_;
  const int64_t rate_bps_;
  const int buffer_bytes_;
  std::unique_ptr<uint8_t[]> storage_;
  std::vector<Meta> meta_;
  std::vector<Fifo> fifos_;
  // The FIFO whose head is Earliest(), or -1 when empty.
  int EarliestFifo() const;

  int32_t free_head_ = -1;
  int queued_ = 0;
};

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_DELAY_QUEUE_H_
