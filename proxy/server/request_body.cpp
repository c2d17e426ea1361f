#include "server/request_body.h"

#include <algorithm>
#include <cstring>

namespace fencing {

namespace {
constexpr size_t kReadSize = 16 * 1024;
}  // namespace

Problem RequestBody::problem() const {
  if (decoder_.status() == BodyDecoder::Status::kTooLarge) {
    return MakeProblem(ProblemType::kBodyTooLarge, "the request body exceeds limits.max_body_bytes");
  }
  return MakeProblem(ProblemType::kMalformedBody,
                     std::string("the request body is refused because it has ") + decoder_.reason());
}

bool RequestBody::MakeRoom(size_t keep) {
  if (size_ < capacity_) return true;
  const size_t limit = capacity_limit(keep);
  if (capacity_ >= limit) return false;
  // Grow: to the known rest of a Content-Length body at once, else doubling.
  size_t want = std::max(capacity_ * 2, size_ + static_cast<size_t>(std::min<uint64_t>(decoder_.remaining_known(), limit)));
  want = std::min(want, limit);
  auto grown = std::unique_ptr<char[]>(new char[want]);
  std::memcpy(grown.get(), data_, size_);
  own_ = std::move(grown);
  data_ = own_.get();
  capacity_ = want;
  return true;
}

void RequestBody::Feed(ClientBuffer& in, size_t keep) {
  in.consume(Feed(std::string_view(static_cast<const char*>(in.data().data()), in.size()), keep));
}

size_t RequestBody::Feed(std::string_view in, size_t keep) {
  size_t used = 0;
  while (used < in.size() && decoder_.status() == BodyDecoder::Status::kNeedMore && MakeRoom(keep)) {
    BodyDecoder::Step step = decoder_.Decode(in.substr(used), data_ + size_, capacity_ - size_);
    used += step.consumed;
    size_ += step.produced;
    if (step.consumed == 0 && step.produced == 0) break;
  }
  return used;
}

io::Awaitable<boost::system::error_code> RequestBody::Read(tls::ServerStream& client, ClientBuffer& in, size_t keep) {
  for (;;) {
    Feed(in, keep);
    if (decoder_.status() != BodyDecoder::Status::kNeedMore || full(keep)) co_return boost::system::error_code{};
    auto [ec, n] = co_await client.async_read_some(in.prepare(kReadSize), io::kTuple);
    if (ec) co_return ec;
    in.commit(n);
  }
}

}  // namespace fencing
