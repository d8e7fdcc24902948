// The 32-bit Mersenne Twister (MT19937), seeded as PyTorch's CPU generator is.
//
//   Mt19937 gen(seed);        // init_genrand(seed & 0xffffffff)
//   uint32_t r = gen.Next32();
//
// torch.Generator().manual_seed(s) keeps s as 64 bits but seeds its mt19937
// with the low 32 bits, which is what this constructor does; the output then
// matches Matsumoto and Nishimura's reference (mt19937ar.c) and
// std::mt19937, e.g. the 10,000th output for seed 5489 is 4123659995.
#ifndef LOCKSTEP_CORE_MT19937_H_
#define LOCKSTEP_CORE_MT19937_H_

#include <array>
#include <cstdint>

namespace lockstep {

class Mt19937 {
 public:
  explicit Mt19937(uint64_t seed = 5489);

  uint32_t Next32();

 private:
  void Twist();

  static constexpr int kN = 624;
  std::array<uint32_t, kN> state_;
  int next_ = kN;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_MT19937_H_
