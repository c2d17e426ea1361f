// Writes the fuzz_state_log seed corpus with the proxy's own state code, so the seeds are files
// the proxy really produces (and real damage to them). Usage: state_seeds OUTPUT_DIR
// Regenerate with: build-fuzz/tests/fuzz/state_seeds tests/fuzz/corpus/fuzz_state_log

#include "state/state_log.h"
#include "state/state_store.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace fencing;
namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

bool Make(const fs::path& p, const std::vector<std::vector<FenceRecord>>& batches) {
  fs::remove(p);
  std::unique_ptr<StateStore> store;
  Status s = StateStore::Open(p.string(), OpenOptions{}, &store);
  for (const auto& batch : batches) {
    if (s.ok()) s = store->AppendAndSync(batch);
  }
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);
  const std::string name64(64, 'z');
  bool ok = Make(out / "header-only", {}) &&
            Make(out / "appends", {{{"orders", 1}, {"orders", 5}}, {{"notes", 3}, {"orders", 4}}}) &&
            Make(out / "max-token-and-long-name",
                 {{{name64, 18446744073709551615ull}, {"a", 0}, {"with-dash_and_underscore", 7}}});
  if (!ok) return 1;

  // Snapshot, as compaction and `state set` write it.
  fs::remove(out / "snapshot");
  ok = WriteSnapshot((out / "snapshot").string(), FenceMaxima{{"orders", 42}, {"notes", 9}}, nullptr).ok();
  if (!ok) return 1;

  // Keys: raises, a key below the floor, a forget and the same key again, then a snapshot of
  // such a state (one SET_MAX per fence, one KEY_MAX per key), and the longest key record.
  using Kind = FenceRecord::Kind;
  ok = Make(out / "keys", {{{"objects", 5}, {"objects", 100, "a"}, {"objects", 90, "b"}, {"objects", 1, "low"}},
                           {{"objects", 90, "b", Kind::kForgetKey}, {"objects", 7, "b"}, {"tenants", 3, "t-1.x_y~z"}},
                           {{"tenants", 3, "t-1.x_y~z", Kind::kForgetKey}}}) &&
       Make(out / "longest-key-record", {{{name64, 18446744073709551615ull, std::string(128, 'K')}}});
  if (!ok) return 1;
  fs::remove(out / "keys-snapshot");
  FenceKeyMaxima keys;
  keys["objects"]["a"] = 100;
  keys["objects"]["low"] = 1;
  keys["only-keys"]["k"] = 4;
  ok = WriteSnapshot((out / "keys-snapshot").string(), FenceMaxima{{"objects", 50}}, keys, nullptr).ok();
  if (!ok) return 1;

  // Version 1, as older builds wrote it: still read. And a key record under a version-1 header,
  // which no build writes: damage.
  std::string v1 = EncodeHeader(1);
  EncodeRecord(FenceRecord{"orders", 9}, &v1);
  EncodeRecord(FenceRecord{"notes", 2}, &v1);
  Write(out / "version-1", v1);
  std::string v1_keyed = v1;
  EncodeRecord(FenceRecord{"orders", 10, "k"}, &v1_keyed);
  Write(out / "version-1-with-a-key-record", v1_keyed);

  // Damage: a torn last record (truncated), damage followed by more than a record (corrupt),
  // a header cut short at creation, a foreign file, a future version.
  const std::string appends = Read(out / "appends");
  Write(out / "torn-tail", appends.substr(0, appends.size() - 5));
  std::string corrupt = Read(out / "max-token-and-long-name");
  corrupt[kHeaderSize + 2] ^= 0x40;
  Write(out / "corrupt-first-record", corrupt);
  Write(out / "torn-creation", EncodeHeader().substr(0, 7));
  Write(out / "bad-magic", "FENCELOX" + appends.substr(8));
  const std::string keyed = Read(out / "keys");
  Write(out / "torn-key-tail", keyed.substr(0, keyed.size() - 9));
  std::string version = appends;
  version[8] = 3;
  Write(out / "future-version", version);
  return 0;
}
