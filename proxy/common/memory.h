#pragma once
// Handing freed heap memory back to the kernel, whichever allocator the binary links.

namespace fencing {

// Returns the allocator's free pages to the kernel, so RSS falls after a burst of connections.
// Call it on the thread whose frees are to be returned (its thread cache goes first).
// tcmalloc (the proxy binary links it) releases whole free spans; glibc malloc (tests,
// sanitizer builds) trims what its fragmented arenas allow.
void ReleaseFreeMemory();

}  // namespace fencing
