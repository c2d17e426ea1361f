#include "common/memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>

// Defined by tcmalloc when it is linked; weak, so a binary without it still links and falls back
// to glibc's trim.
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));
extern "C" void MallocExtension_MarkThreadIdle(void) __attribute__((weak));

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

void ApplyAllocatorSettings(char** argv) {
  if (MallocExtension_ReleaseFreeMemory == nullptr) return;  // not tcmalloc: nothing to set
  if (std::getenv(kTransferNumObjVar) != nullptr) return;  // set by the operator, or by us already
  if (::setenv(kTransferNumObjVar, kTransferNumObj, 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Only on failure (no /proc, say): tcmalloc's default batches, more resident memory when idle.
}

}  // namespace fencing
