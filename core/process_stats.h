// What a process costs the machine beyond its memory peak (core/peak_rss.h):
// how long ago it started, and how many descriptors it holds. The scale
// lab's set-up time is "process start to the end of the first collective"
// and its connection count "descriptors per rank".
//
//   const double age = ProcessAgeSeconds();  // since exec; -1 if unknown
//   const int fds = OpenDescriptorCount();   // -1 if /proc is unreadable
#ifndef LOCKSTEP_CORE_PROCESS_STATS_H_
#define LOCKSTEP_CORE_PROCESS_STATS_H_

namespace lockstep {

// Seconds since this process started (the kernel's start time in
// /proc/self/stat against CLOCK_BOOTTIME: to its clock tick, 10 ms at
// USER_HZ 100). -1 when /proc cannot be read.
double ProcessAgeSeconds();

// Descriptors open in this process now (/proc/self/fd), the one used to
// count them excluded. -1 when /proc cannot be read.
int OpenDescriptorCount();

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_PROCESS_STATS_H_
