#pragma once
// One verification on a worker thread: asks the service who holds `lock`, waits for the answer
// on the worker's executor (never blocking it) for at most the service's timeout, judges the
// answer against `token` (lock_services.h) and records it (metrics, /fences).

#include "common/io.h"
#include "lockservice/lock_services.h"

#include <cstdint>
#include <string>

namespace fencing {

io::Awaitable<Verification> VerifyRaise(LockServiceEntry& service, std::string lock, uint64_t token);

}  // namespace fencing
