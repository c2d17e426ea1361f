#include "etcd/watch_stream.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/json/serialize.hpp>

#include <cstdio>
#include <utility>

namespace fencing::etcd {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

// ------------------------------------------------------------------------------ MessageSplitter

void MessageSplitter::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!error_.empty()) return;
    if (depth_ == 0 && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) continue;  // between messages
    if (depth_ == 0 && c != '{') {
      char shown[8];
      std::snprintf(shown, sizeof shown, "0x%02x", unsigned(static_cast<unsigned char>(c)));
      error_ = std::string("a message that is not a JSON object (it starts with byte ") + shown + ")";
      return;
    }
    if (current_.size() >= max_) {
      error_ = "a message over " + std::to_string(max_) + " bytes";
      return;
    }
    current_ += c;
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      ready_.push_back(std::move(current_));
      current_.clear();
    }
  }
}

bool MessageSplitter::Next(std::string* message) {
  if (ready_.empty()) return false;
  *message = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

// ------------------------------------------------------------------------------ StreamReader

StreamReader::StreamReader() { parser_.body_limit(boost::none); }  // a watch's body lasts as long as the watch

// One read of the body into buffer_; *data: what it read. A full buffer is no error (the caller
// takes it and reads on).
net::awaitable<beast::error_code> StreamReader::ReadChunk(Connection& conn, std::string_view* data) {
  auto& body = parser_.get().body();
  body.data = buffer_.data();
  body.size = buffer_.size();
  beast::error_code ec = co_await conn.ReadSome(parser_);
  if (ec == http::error::need_buffer) ec = {};
  *data = std::string_view(buffer_.data(), buffer_.size() - body.size);
  co_return ec;
}

net::awaitable<Answer> StreamReader::Open(Connection& conn) {
  Answer answer{"", 0, "", true};
  beast::error_code ec = co_await conn.ReadHeader(parser_);
  if (ec) {
    answer.transport_error = "receive: " + Describe(ec);
    co_return answer;
  }
  answer.http_status = parser_.get().result_int();
  if (answer.http_status == 200) {
    std::string failure = co_await NextMessage(conn, &answer.body);
    if (!failure.empty()) answer.transport_error = std::move(failure);
    co_return answer;
  }
  // An error body is small; what could be read of it is enough (the status alone may decide).
  while (!parser_.is_done() && answer.body.size() < buffer_.size()) {
    std::string_view data;
    ec = co_await ReadChunk(conn, &data);
    answer.body.append(data);
    if (ec) break;
  }
  co_return answer;
}

net::awaitable<std::string> StreamReader::NextMessage(Connection& conn, std::string* message) {
  std::string failure;
  while (failure.empty() && !splitter_.Next(message)) {
    if (!splitter_.error().empty()) {
      failure = splitter_.error();
    } else if (parser_.is_done()) {
      failure = "etcd ended the watch's response";
    } else {
      std::string_view data;
      beast::error_code ec = co_await ReadChunk(conn, &data);
      splitter_.Feed(data);
      if (ec) failure = ClosedByPeer(ec) ? "the connection closed (" + Describe(ec) + ")" : "receive: " + Describe(ec);
    }
  }
  co_return failure;
}

// ------------------------------------------------------------------------------ Watch

namespace {
WatchEnd Failed(std::string error) { return WatchEnd{WatchEnd::Reason::kError, 0, std::move(error)}; }
}  // namespace

Watch::Watch(net::io_context& ioc, Transport& transport, WatchEvents on_events, WatchEnded on_end)
    : ioc_(ioc), transport_(transport), on_events_(std::move(on_events)), on_end_(std::move(on_end)) {}

void Watch::Start(const WatchOptions& options) {
  // The whole create_request in one body with a Content-Length: etcd 3.4's gateway reads the
  // first message only from a complete body. The end of the request body does not end the watch
  // (etcd stops reading, not watching).
  Request request{"/v3/watch", json::serialize(WatchCreateJson(options)), true,
                  [self = shared_from_this()](Connection& conn) { return self->Open(conn); }};
  start_ = transport_.Start(std::move(request), [self = shared_from_this()](Reply reply) { self->Started(std::move(reply)); });
}

net::awaitable<Answer> Watch::Open(Connection& conn) {
  reader_ = std::make_unique<StreamReader>();  // a fresh one for each endpoint tried
  co_return co_await reader_->Open(conn);
}

void Watch::Started(Reply reply) {
  start_ = 0;
  if (ended_) return;
  if (!reply.status.ok()) {
    End(Failed("etcd watch: " + reply.status.error));
    return;
  }
  conn_ = std::move(reply.connection);
  endpoint_ = std::move(reply.endpoint);
  Handle(reply.response);  // the first message: "created" (or the end already)
  if (!ended_) net::co_spawn(ioc_, ReadOn(shared_from_this()), net::detached);
}

net::awaitable<void> Watch::ReadOn(std::shared_ptr<Watch> self) {
  (void)self;  // keeps the watch alive while it reads
  while (!ended_) {
    std::string message;
    std::string failure = co_await reader_->NextMessage(*conn_, &message);
    if (ended_) break;
    if (!failure.empty()) {
      End(Failed(Where() + failure));
      break;
    }
    Verdict v = Classify(Answer{"", 200, std::move(message), true});
    if (!v.status.ok()) {
      End(Failed(Where() + v.status.error));
      break;
    }
    Handle(v.response);
  }
}

void Watch::Handle(const json::object& result) {
  WatchResponse r;
  std::string error;
  if (!ReadWatchResponse(result, &r, &error)) {
    End(Failed(Where() + error));
  } else if (r.compact_revision > 0) {
    End(WatchEnd{WatchEnd::Reason::kCompacted, r.compact_revision, ""});
  } else if (r.canceled) {
    End(Failed(Where() + "etcd canceled the watch" + (r.cancel_reason.empty() ? "" : ": " + r.cancel_reason)));
  } else {
    on_events_(r.revision, std::move(r.events));
  }
}

void Watch::End(WatchEnd end) {
  if (ended_) return;
  ended_ = true;
  if (start_ != 0) transport_.Cancel(std::exchange(start_, 0), "the watch ended");  // Started sees ended_
  if (conn_) conn_->Close();  // ends the read; ReadOn then sees ended_
  WatchEnded on_end = std::move(on_end_);
  on_end(std::move(end));  // last: it may drop the caller's reference to this watch
}

}  // namespace fencing::etcd
