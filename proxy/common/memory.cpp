#include "common/memory.h"

#include <malloc.h>

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

}  // namespace fencing
