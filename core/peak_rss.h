// The peak resident set size of this process: the training loop reports it
// per rank after every epoch ("peak_rss_bytes" in its metrics).
//
//   const int64_t peak = PeakRssBytes();  // bytes; 0 if getrusage fails
//
// It is the high-water mark since the process started (getrusage's
// ru_maxrss), so it never goes down; memory freed since still counts.
#ifndef LOCKSTEP_CORE_PEAK_RSS_H_
#define LOCKSTEP_CORE_PEAK_RSS_H_

#include <cstdint>

namespace lockstep {

// Peak resident set size of this process (getrusage), bytes.
int64_t PeakRssBytes();

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_PEAK_RSS_H_
