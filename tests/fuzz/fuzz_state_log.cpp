// The state-log reader on arbitrary bytes, twice: in memory (CheckHeader + ReplayRecords) and
// through StateStore::Open read-only on a temp file, as `state show` reads it. Oracles: no
// crash; the replay's verdict is consistent (valid_end inside the file, a torn tail shorter
// than one maximal record, damage with a whole record or more after it); every fence name is
// valid, and so is every key, whose fence exists; a version-1 file has no keys; the store
// (which replays in slices) opens exactly when the reader says the file is usable, with the same
// maxima and keys; and re-encoding the maxima and keys as a snapshot replays to the same.

#include "common/log.h"
#include "fuzz_check.h"
#include "state/state_log.h"
#include "state/state_store.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

namespace {

using namespace fencing;

// One temp file per process, rewritten for every input (libFuzzer -jobs runs separate processes).
const std::string& TempPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string templ = std::string(dir && *dir ? dir : "/tmp") + "/fp-fuzz-state-XXXXXX";
    int fd = ::mkstemp(templ.data());
    FUZZ_CHECK(fd >= 0, "cannot create the temp state file");
    ::close(fd);
    std::atexit([] { ::unlink(TempPath().c_str()); });
    return templ;
  }();
  return path;
}

void WriteTemp(std::string_view bytes) {
  int fd = ::open(TempPath().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "cannot open the temp state file");
  FUZZ_CHECK(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()), "short write");
  ::close(fd);
}

void CheckMaxima(const FenceMaxima& maxima, const FenceKeyMaxima& keys) {
  for (const auto& [fence, token] : maxima) {
    FUZZ_CHECK(IsValidFenceName(fence), "a replayed fence name is not valid");
  }
  for (const auto& [fence, fence_keys] : keys) {
    FUZZ_CHECK(maxima.count(fence) == 1, "a key of a fence that does not exist");
    FUZZ_CHECK(!fence_keys.empty(), "a fence listed with no keys");
    for (const auto& entry : fence_keys) FUZZ_CHECK(IsValidFenceKey(entry.first), "a replayed key is not valid");
  }
}

uint64_t KeyCount(const FenceKeyMaxima& keys) {
  uint64_t n = 0;
  for (const auto& entry : keys) n += entry.second.size();
  return n;
}

}  // namespace

// The store warns on every torn tail; at fuzzing rates that is noise and most of the time spent.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SetLogLevel(LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file = fuzz::AsView(data, size);

  std::string reason;
  const HeaderCheck header = CheckHeader(file, &reason);
  bool usable = false;  // a short or empty file is refused (creation is atomic)
  ReplayResult replay;
  if (header == HeaderCheck::kInvalid) FUZZ_CHECK(!reason.empty(), "an invalid header without a reason");
  if (size < kHeaderSize) FUZZ_CHECK(header == HeaderCheck::kInvalid, "a file shorter than the header accepted");
  if (header == HeaderCheck::kValid) {
    FUZZ_CHECK(size >= kHeaderSize, "a valid header shorter than a header");
    replay = ReplayRecords(file);
    FUZZ_CHECK(replay.valid_end >= kHeaderSize && replay.valid_end <= size, "valid_end outside the file");
    FUZZ_CHECK(!(replay.torn_tail && replay.corrupt), "both torn and corrupt");
    if (replay.torn_tail) {
      FUZZ_CHECK(size - replay.valid_end < kMaxRecordSize, "a torn tail of a whole record or more");
      FUZZ_CHECK(size > replay.valid_end, "a torn tail of no bytes");
    } else if (replay.corrupt) {
      FUZZ_CHECK(size - replay.valid_end >= kMaxRecordSize, "corruption with less than a record after it");
    } else {
      FUZZ_CHECK(replay.valid_end == size, "a clean replay that stopped early");
    }
    if (replay.torn_tail || replay.corrupt) FUZZ_CHECK(!replay.reason.empty(), "damage without a reason");
    FUZZ_CHECK(replay.maxima.size() <= replay.records, "more fences than records");
    FUZZ_CHECK(KeyCount(replay.key_maxima) <= replay.records, "more keys than records");
    FUZZ_CHECK(replay.version == HeaderVersion(file), "replay read another version than the header's");
    if (replay.version == 1) FUZZ_CHECK(replay.key_maxima.empty(), "keys in a version-1 file");
    CheckMaxima(replay.maxima, replay.key_maxima);
    usable = !replay.corrupt;

    // Round trip: the state written as a snapshot replays to itself, cleanly.
    std::string snapshot;
    uint64_t key_bytes = 0;
    EncodeSnapshot(
        replay.maxima, replay.key_maxima,
        [&](std::string_view piece) {
          snapshot.append(piece);
          return true;
        },
        &key_bytes);
    FUZZ_CHECK(snapshot.size() == SnapshotFenceBytes(replay.maxima) + key_bytes, "a snapshot of another size");
    FUZZ_CHECK(key_bytes == SnapshotKeyBytes(replay.key_maxima), "a snapshot's key bytes miscounted");
    std::string again_reason;
    FUZZ_CHECK(CheckHeader(snapshot, &again_reason) == HeaderCheck::kValid, "an encoded header is not valid");
    const ReplayResult again = ReplayRecords(snapshot);
    FUZZ_CHECK(!again.torn_tail && !again.corrupt && again.valid_end == snapshot.size(),
               "an encoded snapshot does not replay cleanly");
    FUZZ_CHECK(again.maxima == replay.maxima, "an encoded snapshot replays to other maxima");
    FUZZ_CHECK(again.key_maxima == replay.key_maxima, "an encoded snapshot replays to other keys");
  }

  // The store, read-only and unlocked as `state show` opens it: never writes, never truncates.
  WriteTemp(file);
  OpenOptions options;
  options.create_if_missing = false;
  options.lock = false;
  options.read_only = true;
  std::unique_ptr<StateStore> store;
  const Status opened = StateStore::Open(TempPath(), options, &store);
  FUZZ_CHECK(opened.ok() == usable, "the store and the reader disagree on whether the file is usable");
  if (opened.ok()) {
    FUZZ_CHECK(store != nullptr, "Open succeeded without a store");
    FUZZ_CHECK(store->torn_tail_bytes() < kMaxRecordSize, "torn_tail_bytes of a whole record or more");
    CheckMaxima(store->maxima(), store->key_maxima());
    FUZZ_CHECK(store->maxima() == replay.maxima, "the store replayed other maxima than the reader");
    FUZZ_CHECK(store->key_maxima() == replay.key_maxima, "the store replayed other keys than the reader");
    if (header == HeaderCheck::kValid) {
      FUZZ_CHECK(store->torn_tail_bytes() == size - replay.valid_end, "the store reports another torn tail");
    }
  } else {
    FUZZ_CHECK(!opened.message().empty(), "a refused open without a message");
  }
  return 0;
}
