#pragma once
// A watch: its answer is a chunked body of one JSON object per message, {"result": WatchResponse}
// or {"error": status}, for as long as the watch lasts. The transport starts it (transport.h:
// deadline, endpoints, auth, the "created" message, a connection of its own with keep-alive
// probes) and hands the connection over; from then on the watch has no deadline and lasts until
// etcd or the connection ends it, or End (Cancel, Stop).
//
// What each message means (every one through Classify first, codec.h):
//   - an error message, a message that is not JSON, or the connection or the body ending: the
//     watch ends, kError, with the endpoint and the cause;
//   - compact_revision > 0: start_revision was compacted; the watch ends, kCompacted;
//   - canceled: etcd ended the watch; kError with its cancel_reason;
//   - anything else ("created", a progress notification, events): on_events(header.revision,
//     events), events possibly none.

#include "etcd/codec.h"
#include "etcd/connection.h"
#include "etcd/kv.h"
#include "etcd/transport.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/json/object.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

namespace fencing::etcd {

// Splits a stream's body into its messages, each one JSON object's text, wherever the chunks cut
// it (pure). Only the object's extent is found here (braces and brackets outside strings);
// whether it is valid JSON is Classify's to say.
class MessageSplitter {
 public:
  static constexpr size_t kMaxMessageBytes = 16 * 1024 * 1024;
  explicit MessageSplitter(size_t max_message_bytes = kMaxMessageBytes) : max_(max_message_bytes) {}

  // The next bytes of the body. After an error (something between messages that does not start
  // an object, a message over the limit), the rest is ignored.
  void Feed(std::string_view bytes);
  // The oldest complete message not taken yet; false when there is none.
  bool Next(std::string* message);
  // Why the body is not a sequence of JSON objects; empty while it may be.
  const std::string& error() const { return error_; }

 private:
  const size_t max_;
  std::string current_;  // the message being read
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  std::deque<std::string> ready_;
  std::string error_;
};

// A streaming answer read from its connection as it comes.
class StreamReader {
 public:
  StreamReader();
  // After the request was written: the head, then the first message (a 200) or the error body
  // (any other status, up to 16 KiB), as the Answer Classify takes. A failure to read them is the
  // Answer's transport_error.
  boost::asio::awaitable<Answer> Open(Connection& conn);
  // The next message's text into *message. Empty, or why there is none: the connection closed,
  // etcd ended the response, or the body is not a sequence of JSON objects.
  boost::asio::awaitable<std::string> NextMessage(Connection& conn, std::string* message);

 private:
  boost::asio::awaitable<boost::beast::error_code> ReadChunk(Connection& conn, std::string_view* data);

  boost::beast::http::response_parser<boost::beast::http::buffer_body> parser_;
  MessageSplitter splitter_;
  std::array<char, 16 * 1024> buffer_;
};

// One watch, on the transport's thread.
class Watch : public std::enable_shared_from_this<Watch> {
 public:
  // on_events and on_end run on the transport's thread; on_end exactly once, nothing after it.
  Watch(boost::asio::io_context& ioc, Transport& transport, WatchEvents on_events, WatchEnded on_end);
  // Asks the transport to start it, then reads on until it ends.
  void Start(const WatchOptions& options);
  // on_end(end) now unless it has ended already; its start is cancelled or its connection closed.
  void End(WatchEnd end);

 private:
  boost::asio::awaitable<Answer> Open(Connection& conn);
  void Started(Reply reply);
  boost::asio::awaitable<void> ReadOn(std::shared_ptr<Watch> self);
  void Handle(const boost::json::object& result);
  std::string Where() const { return "etcd watch on " + endpoint_ + ": "; }

  boost::asio::io_context& ioc_;
  Transport& transport_;
  WatchEvents on_events_;
  WatchEnded on_end_;
  bool ended_ = false;
  uint64_t start_ = 0;  // the transport's request while it starts
  std::unique_ptr<StreamReader> reader_;
  std::shared_ptr<Connection> conn_;
  std::string endpoint_;
};

}  // namespace fencing::etcd
