#pragma once
// Handing freed heap memory back to the kernel, whichever allocator the binary links.

#include <cstddef>

namespace fencing {

// Returns the allocator's free pages to the kernel, so RSS falls after a burst of connections.
// Call it on the thread whose frees are to be returned (its thread cache goes first).
// tcmalloc (the proxy binary links it) releases whole free spans; glibc malloc (tests,
// sanitizer builds) trims what its fragmented arenas allow.
void ReleaseFreeMemory();

// Hands the calling thread's cache of freed objects back to the allocator's shared lists (tcmalloc;
// nothing with glibc), so that ReleaseFreeMemoryGradually on another thread can return them.
void MarkThreadMemoryIdle();

// The same, in slices (tcmalloc: kReleaseSliceBytes a call, each under the page heap's lock, so
// that no thread that needs a new span meanwhile waits long); for after a large free (a
// compaction's copy of the keys, a burst of forgotten keys). Call it off the request and state
// writer threads: it takes as long as the kernel needs to drop the pages. Returns the bytes the
// allocator returned to the kernel (0 where it cannot tell).
inline constexpr size_t kReleaseSliceBytes = 4 << 20;
size_t ReleaseFreeMemoryGradually();

// What the process holds, as the metrics show it: resident bytes (/proc/self/statm), and the
// allocator's bytes in use by the program and held from the kernel (tcmalloc's
// generic.current_allocated_bytes and generic.heap_size minus what it released; glibc's
// mallinfo2 in-use and arena bytes); of the held bytes not in use, those in whole free pages
// (what a release returns) and those in the allocator's caches of small objects. 0 where unknown.
struct MemoryStats {
  size_t resident = 0;
  size_t allocated = 0;
  size_t allocator_held = 0;
  size_t allocator_free = 0;
  size_t allocator_cached = 0;
};
MemoryStats ReadMemoryStats();

// tcmalloc's transfer cache (the batches of freed objects it keeps between the threads' caches
// and its spans) holds what a burst freed: the coroutine frames of 2,000 keep-alive connections
// that were waiting for a next request stay resident after the connections go idle, 0.8 KiB per
// connection that ReleaseFreeMemory cannot return. A small batch (kTransferNumObj) lets them go
// back to free spans. tcmalloc reads the setting from the environment the process was started
// with (/proc/self/environ), before main, so when tcmalloc is linked and the operator has not set
// kTransferNumObjVar, this sets it and re-executes the binary (same PID, same arguments). It
// returns when nothing was to be done, or when the re-exec failed (the proxy then runs with
// tcmalloc's default). Call it before the proxy starts any thread.
inline constexpr const char* kTransferNumObjVar = "TCMALLOC_TRANSFER_NUM_OBJ";
inline constexpr const char* kTransferNumObj = "4";
void ApplyAllocatorSettings(char** argv);

}  // namespace fencing
