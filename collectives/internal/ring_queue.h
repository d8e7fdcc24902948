// RingQueue: a FIFO of movable objects in one growing circular buffer.
// Internal to collectives.
//
// The communicator's queue of operations: std::deque gives each of its
// large items a node of its own, so every queued operation cost a heap
// allocation and a free; here the buffer only grows (doubling), and an
// operation queued and taken allocates nothing.
//
//   RingQueue<Item> q;
//   q.push_back(std::move(item));
//   q.insert(0, std::move(urgent));  // Before everything queued.
//   Item next = q.pop_front();
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_RING_QUEUE_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_RING_QUEUE_H_

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace lockstep {
namespace communicator_internal {

template <typename T>
class RingQueue {
 public:
  RingQueue() = default;
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;
  ~RingQueue() {
    while (size_ > 0) Slot(--size_)->~T();
    if (data_ != nullptr) std::allocator<T>().deallocate(data_, capacity_);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // The first element; the queue must not be empty.
  T& front() { return *Slot(0); }

  void push_back(T&& value) {
    if (size_ == capacity_) Grow();
    ::new (static_cast<void*>(Slot(size_))) T(std::move(value));
    ++size_;
  }

  // Inserts before the element at `index` (0: the front; size(): the back).
  void insert(size_t index, T&& value) {
    push_back(std::move(value));
    for (size_t i = size_ - 1; i > index; --i) std::swap(*Slot(i), *Slot(i - 1));
  }

  // Removes the first element and returns it; the queue must not be empty.
  T pop_front() {
    T* first = Slot(0);
    T value(std::move(*first));
    first->~T();
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
    return value;
  }

 private:
  T* Slot(size_t i) const { return data_ + ((head_ + i) & (capacity_ - 1)); }

  void Grow() {
    const size_t capacity = capacity_ == 0 ? 8 : 2 * capacity_;  // A power of two.
    T* data = std::allocator<T>().allocate(capacity);
    for (size_t i = 0; i < size_; ++i) {
      T* old = Slot(i);
      ::new (static_cast<void*>(data + i)) T(std::move(*old));
      old->~T();
    }
    if (data_ != nullptr) std::allocator<T>().deallocate(data_, capacity_);
    data_ = data;
    capacity_ = capacity;
    head_ = 0;
  }

  T* data_ = nullptr;
  size_t capacity_ = 0;  // 0 or a power of two.
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_RING_QUEUE_H_
