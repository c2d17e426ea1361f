#pragma once
// Handing freed heap memory back to the kernel, whichever allocator the binary links.

namespace fencing {

// Returns the allocator's free pages to the kernel, so RSS falls after a burst of connections.
// Call it on the thread whose frees are to be returned (its thread cache goes first).
// tcmalloc (the proxy binary links it) releases whole free spans; glibc malloc (tests,
// sanitizer builds) trims what its fragmented arenas allow.
void ReleaseFreeMemory();

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
