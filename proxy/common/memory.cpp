#include "common/memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

// Defined by tcmalloc when it is linked; weak, so a binary without it still links and falls back
// to glibc's trim.
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));
extern "C" void MallocExtension_MarkThreadIdle(void) __attribute__((weak));
extern "C" void MallocExtension_ReleaseToSystem(size_t num_bytes) __attribute__((weak));
extern "C" int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));

namespace fencing {

void ReleaseFreeMemory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) {
    // The calling thread's cache first (it holds up to megabytes of freed objects), then every
    // span left wholly free.
    if (MallocExtension_MarkThreadIdle != nullptr) MallocExtension_MarkThreadIdle();
    MallocExtension_ReleaseFreeMemory();
  } else {
    ::malloc_trim(0);
  }
}

namespace {

size_t TcmallocProperty(const char* name) {
  size_t value = 0;
  if (MallocExtension_GetNumericProperty == nullptr || !MallocExtension_GetNumericProperty(name, &value)) return 0;
  return value;
}

}  // namespace

void MarkThreadMemoryIdle() {
  if (MallocExtension_MarkThreadIdle != nullptr) MallocExtension_MarkThreadIdle();
}

size_t ReleaseFreeMemoryGradually() {
  if (MallocExtension_ReleaseToSystem == nullptr || MallocExtension_GetNumericProperty == nullptr) {
    ReleaseFreeMemory();
    return 0;
  }
  if (MallocExtension_MarkThreadIdle != nullptr) MallocExtension_MarkThreadIdle();
  const size_t unmapped_before = TcmallocProperty("tcmalloc.pageheap_unmapped_bytes");
  // tcmalloc releases whole spans, so one call may release far more than asked and the next
  // ones then release nothing until that is made up: stop when nothing is free any more, or
  // after as many calls as the free bytes (and one span's overshoot) could need.
  const size_t free_at_start = TcmallocProperty("tcmalloc.pageheap_free_bytes");
  const size_t max_slices = 2 * (free_at_start / kReleaseSliceBytes) + 64;
  for (size_t slice = 0; slice < max_slices; ++slice) {
    if (TcmallocProperty("tcmalloc.pageheap_free_bytes") == 0) break;
    MallocExtension_ReleaseToSystem(kReleaseSliceBytes);
  }
  const size_t unmapped_after = TcmallocProperty("tcmalloc.pageheap_unmapped_bytes");
  return unmapped_after > unmapped_before ? unmapped_after - unmapped_before : 0;
}

MemoryStats ReadMemoryStats() {
  MemoryStats stats;
  if (FILE* f = std::fopen("/proc/self/statm", "re")) {
    unsigned long size = 0;
    unsigned long resident = 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) == 2) {
      stats.resident = static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    }
    std::fclose(f);
  }
  if (MallocExtension_GetNumericProperty != nullptr) {
    stats.allocated = TcmallocProperty("generic.current_allocated_bytes");
    const size_t heap = TcmallocProperty("generic.heap_size");
    const size_t unmapped = TcmallocProperty("tcmalloc.pageheap_unmapped_bytes");
    stats.allocator_held = heap > unmapped ? heap - unmapped : 0;
    stats.allocator_free = TcmallocProperty("tcmalloc.pageheap_free_bytes");
    stats.allocator_cached = TcmallocProperty("tcmalloc.central_cache_free_bytes") +
                             TcmallocProperty("tcmalloc.transfer_cache_free_bytes") +
                             TcmallocProperty("tcmalloc.thread_cache_free_bytes");
  } else {
    const struct mallinfo2 info = ::mallinfo2();
    stats.allocated = info.uordblks + info.hblkhd;
    stats.allocator_held = info.arena + info.hblkhd;
    stats.allocator_free = info.fordblks;
  }
  return stats;
}

void ApplyAllocatorSettings(char** argv) {
  if (MallocExtension_ReleaseFreeMemory == nullptr) return;  // not tcmalloc: nothing to set
  if (std::getenv(kTransferNumObjVar) != nullptr) return;  // set by the operator, or by us already
  if (::setenv(kTransferNumObjVar, kTransferNumObj, 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Only on failure (no /proc, say): tcmalloc's default batches, more resident memory when idle.
}

}  // namespace fencing
