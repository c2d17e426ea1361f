#include "h2/connection.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <utility>

namespace fencing::h2 {
namespace {

// nghttp2's rapid-reset numbers, used for our own misbehaviour budget too (connection.h).
constexpr uint64_t kResetBurst = 1000;
constexpr uint64_t kResetRate = 33;  // per second
constexpr size_t kMaxContinuations = 8;
constexpr size_t kMaxSettingsEntries = 32;
constexpr size_t kMaxOutboundAcks = 1000;
constexpr size_t kDeflateTableBytes = 4096;
// RFC 9113 4.2 and 6.9.1's bounds for what we advertise.
constexpr uint32_t kMinFrameSize = 16384;
constexpr uint32_t kMaxFrameSize = (1u << 24) - 1;
constexpr uint32_t kMaxWindow = (1u << 31) - 1;
// A stream's data queue is compacted once this much of its front has been framed.
constexpr size_t kCompactAfter = 64 * 1024;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string_view View(nghttp2_rcbuf* buf) {
  nghttp2_vec v = nghttp2_rcbuf_get_buf(buf);
  return {reinterpret_cast<const char*>(v.base), v.len};
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

enum class FieldsKind { kRequest, kResponse, kTrailers };

// The fields a peer with nghttp2's (or any RFC 9113) checks would refuse, refused here instead,
// so a caller's mistake is a false return, not a stream reset by the peer.
bool CheckFields(std::span<const Header> fields, FieldsKind kind) {
  static constexpr std::string_view kRequestPseudo[] = {":method", ":scheme", ":authority", ":path", ":protocol"};
  static constexpr std::string_view kConnectionSpecific[] = {"connection", "keep-alive", "proxy-connection",
                                                             "transfer-encoding", "upgrade"};
  unsigned pseudo_seen = 0;  // bit per pseudo-header: each at most once
  bool regular_seen = false;
  for (const Header& f : fields) {
    if (f.name.empty()) return false;
    if (!nghttp2_check_header_value_rfc9113(Bytes(f.value), f.value.size())) return false;
    if (f.name[0] == ':') {
      if (regular_seen || kind == FieldsKind::kTrailers) return false;
      unsigned bit = 0;
      if (kind == FieldsKind::kResponse) {
        if (f.name != ":status") return false;
        bool three_digits = f.value.size() == 3 && std::all_of(f.value.begin(), f.value.end(),
                                                               [](char c) { return c >= '0' && c <= '9'; });
        if (!three_digits || f.value[0] == '0' || f.value == "101") return false;  // no 101 in HTTP/2
        bit = 1;
      } else {
        auto it = std::find(std::begin(kRequestPseudo), std::end(kRequestPseudo), f.name);
        if (it == std::end(kRequestPseudo)) return false;
        bit = 1u << (it - std::begin(kRequestPseudo));
      }
      if (pseudo_seen & bit) return false;
      pseudo_seen |= bit;
      continue;
    }
    regular_seen = true;
    if (!nghttp2_check_header_name(Bytes(f.name), f.name.size())) return false;  // also: lowercase only
    if (std::find(std::begin(kConnectionSpecific), std::end(kConnectionSpecific), f.name) !=
        std::end(kConnectionSpecific)) {
      return false;
    }
    if (f.name == "te" && f.value != "trailers") return false;
  }
  if (kind == FieldsKind::kResponse && pseudo_seen != 1) return false;        // :status
  if (kind == FieldsKind::kRequest && (pseudo_seen & 1) == 0) return false;   // :method
  return true;
}

bool Informational(std::span<const Header> fields) {
  for (const Header& f : fields) {
    if (f.name == ":status") return !f.value.empty() && f.value[0] == '1';
  }
  return false;
}

// nghttp2 copies the fields when a frame is submitted, so these point into the caller's.
std::vector<nghttp2_nv> ToNv(std::span<const Header> fields) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const Header& f : fields) {
    // Credentials are never put in the peer's HPACK table (RFC 7541 7.1.3).
    bool sensitive = f.name == "authorization" || f.name == "proxy-authorization";
    nva.push_back({const_cast<uint8_t*>(Bytes(f.name)), const_cast<uint8_t*>(Bytes(f.value)), f.name.size(),
                   f.value.size(), static_cast<uint8_t>(sensitive ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE)});
  }
  return nva;
}

}  // namespace

struct Connection::Stream {
  explicit Stream(int32_t id) : id(id) {}
  const int32_t id;

  // The header block being read (head or trailers) and its size as RFC 9113 counts it.
  Headers fields;
  size_t field_bytes = 0;
  bool too_large = false;  // this block went over the limit: its fields are dropped

  bool local = false;          // we opened it (client)
  bool announced = false;      // the caller knows it: took its head, or opened it
  bool final_head = false;     // the (final) head came: the next header block is trailers
  bool remote_ended = false;   // the peer's END_STREAM
  bool local_ended = false;    // our END_STREAM went out
  bool reset_by_caller = false;  // ResetStream: the caller hears nothing more
  bool reset_by_us = false;    // our NO_ERROR reset after a complete response (server)
  bool discard = false;        // the peer's further fields and data are dropped (data consumed)
  size_t queued_events = 0;    // its events not yet taken
  uint64_t unconsumed = 0;     // its data given out (or queued) and not yet Consumed

  // Our side.
  bool head_submitted = false;
  bool provider = false;   // our head left the stream open: data and trailers may follow
  bool out_end = false;    // the caller has ended our side (data end_stream, or trailers)
  bool deferred = false;   // nghttp2 is waiting for more data (resume when some comes)
  bool has_trailers = false;
  Headers trailers;
  std::string out;         // queued data; [out_sent, size) not yet framed
  size_t out_sent = 0;
};

struct Connection::Callbacks {
  static Connection& Self(void* user) { return *static_cast<Connection*>(user); }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Connection& c = Self(user);
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    int32_t id = frame->hd.stream_id;
    Stream* s = c.Find(id);
    if (!s) {
      if (c.role_ != Role::kServer || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
      s = c.streams_.emplace(id, std::make_unique<Stream>(id)).first->second.get();
    }
    s->fields.clear();
    s->field_bytes = 0;
    s->too_large = false;
    return 0;
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, nghttp2_rcbuf* name, nghttp2_rcbuf* value,
                      uint8_t /*flags*/, void* user) {
    Connection& c = Self(user);
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    Stream* s = c.Find(frame->hd.stream_id);
    if (!s || s->too_large || s->discard || s->reset_by_caller) return 0;
    std::string_view n = View(name), v = View(value);
    s->field_bytes += n.size() + v.size() + 32;
    if (s->field_bytes > c.settings_.max_header_list_bytes) {
      s->too_large = true;
      Headers().swap(s->fields);  // the memory goes now, not at the end of the block
      return 0;
    }
    s->fields.push_back({std::string(n), std::string(v)});
    return 0;
  }

  // A field nghttp2 would silently drop (a bad name character, ...): RFC 9113 8.2.1 calls the
  // message malformed, so its stream is reset (PROTOCOL_ERROR) instead.
  static int OnInvalidHeader(nghttp2_session*, const nghttp2_frame*, nghttp2_rcbuf*, nghttp2_rcbuf*, uint8_t,
                             void*) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Connection& c = Self(user);
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        OnHeadersDone(c, frame);
        break;
      case NGHTTP2_DATA: {
        size_t payload = frame->hd.length - std::min<size_t>(frame->hd.length, frame->data.padlen);
        bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
        if (payload == 0 && !end && !c.Spend()) {
          c.stop_code_ = kEnhanceYourCalm;
          c.stop_reason_ = "too many empty DATA frames";
          return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (end) EndRemote(c, frame->hd.stream_id);
        break;
      }
      case NGHTTP2_GOAWAY: {
        Event e;
        e.kind = Event::Kind::kGoAway;
        e.error_code = frame->goaway.error_code;
        e.last_stream = frame->goaway.last_stream_id;
        c.Push(std::move(e));
        break;
      }
      default:
        break;
    }
    return 0;
  }

  static void OnHeadersDone(Connection& c, const nghttp2_frame* frame) {
    Stream* s = c.Find(frame->hd.stream_id);
    if (!s) return;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (s->reset_by_caller) {
      s->fields.clear();
    } else if (s->too_large) {
      s->too_large = false;
      s->discard = true;
      Event e;
      e.kind = Event::Kind::kHeadTooLarge;
      e.stream = s->id;
      c.Push(std::move(e));
    } else if (s->discard) {
      s->fields.clear();
    } else {
      Event e;
      e.stream = s->id;
      if (!s->final_head) {
        e.kind = Event::Kind::kHead;
        e.end_stream = end;
        if (!(c.role_ == Role::kClient && Informational(s->fields))) s->final_head = true;
      } else {
        e.kind = Event::Kind::kTrailers;
      }
      e.fields = std::move(s->fields);
      s->fields.clear();
      c.Push(std::move(e));
    }
    if (end) EndRemote(c, s->id);
  }

  static void EndRemote(Connection& c, int32_t id) {
    Stream* s = c.Find(id);
    if (!s || s->remote_ended) return;
    s->remote_ended = true;
    if (s->reset_by_caller) return;
    Event e;
    e.kind = Event::Kind::kEnd;
    e.stream = id;
    c.Push(std::move(e));
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data, size_t len,
                         void* user) {
    Connection& c = Self(user);
    Stream* s = c.Find(id);
    if (!s || s->discard || s->reset_by_caller) {
      nghttp2_session_consume(session, id, len);  // nobody will pass it on: the window comes back now
      return 0;
    }
    c.PushData(*s, data, len);
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, int32_t id, uint32_t error_code, void* user) {
    Self(user).Close(id, error_code);
    return 0;
  }

  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Connection& c = Self(user);
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
      case NGHTTP2_DATA:
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
          Stream* s = c.Find(frame->hd.stream_id);
          if (!s) break;
          s->local_ended = true;
          // Our response is complete: nothing more of the request can matter, so the client
          // is told to stop sending it (RFC 9113 8.1), once this frame is out.
          if (c.role_ == Role::kServer && !s->remote_ended && !s->reset_by_caller) c.to_reset_.push_back(s->id);
        }
        break;
      case NGHTTP2_RST_STREAM: {
        Stream* s = c.Find(frame->hd.stream_id);
        bool ours = s && (s->reset_by_caller || s->reset_by_us);
        if (!ours && !c.Spend()) c.budget_spent_ = true;  // a reset the peer made us send
        break;
      }
      case NGHTTP2_GOAWAY:
        if (frame->goaway.error_code != kNoError) {
          c.final_goaway_sent_ = true;
          if (!c.failed_) {
            std::string reason(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                               frame->goaway.opaque_data_len);
            c.failed_ = true;
            c.failure_ = Status::Error("HTTP/2 connection error " + ErrorCodeName(frame->goaway.error_code) +
                                       (reason.empty() ? "" : ": " + reason));
          }
        }
        break;
      default:
        break;
    }
    return 0;
  }

  // A request HEADERS that never went out (a GOAWAY came, the session is ending): the stream
  // never existed for the peer, so the caller may send it again elsewhere.
  static int OnFrameNotSend(nghttp2_session*, const nghttp2_frame* frame, int, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      Self(user).Close(frame->hd.stream_id, kRefusedStream);
    }
    return 0;
  }

  static ssize_t OnRead(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                        nghttp2_data_source*, void* user) {
    Connection& c = Self(user);
    Stream* s = c.Find(id);
    if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = std::min(s->out.size() - s->out_sent, length);
    if (n == 0 && !s->out_end) {
      s->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    std::memcpy(buf, s->out.data() + s->out_sent, n);
    s->out_sent += n;
    if (s->out_sent == s->out.size()) {
      s->out.clear();
      s->out_sent = 0;
    } else if (s->out_sent >= kCompactAfter && s->out_sent * 2 >= s->out.size()) {
      s->out.erase(0, s->out_sent);
      s->out_sent = 0;
    }
    if (s->out_end && s->out.empty()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (s->has_trailers) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        std::vector<nghttp2_nv> nva = ToNv(s->trailers);
        if (nghttp2_submit_trailer(session, id, nva.data(), nva.size()) != 0) {
          return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        s->has_trailers = false;
        Headers().swap(s->trailers);
      }
    }
    return static_cast<ssize_t>(n);
  }
};

std::string ErrorCodeName(uint32_t code) {
  switch (code) {
#define FENCING_H2_ERROR_NAME(constant, value, name) \
  case value:                                        \
    return name;
    FENCING_H2_ERROR_CODES(FENCING_H2_ERROR_NAME)
#undef FENCING_H2_ERROR_NAME
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  bool digits = false;
  for (int shift = 28; shift >= 0; shift -= 4) {
    unsigned d = (code >> shift) & 0xf;
    if (d == 0 && !digits) continue;
    digits = true;
    out += kHex[d];
  }
  return out;
}

std::string_view EventKindName(Event::Kind kind) {
  switch (kind) {
#define FENCING_H2_EVENT_NAME(kind, name) \
  case Event::Kind::kind:                 \
    return name;
    FENCING_H2_EVENTS(FENCING_H2_EVENT_NAME)
#undef FENCING_H2_EVENT_NAME
  }
  return "?";
}

Connection::Connection(Role role, const Settings& settings) : role_(role), settings_(settings) {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) throw std::bad_alloc();
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback2(callbacks, &Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_invalid_header_callback2(callbacks, &Callbacks::OnInvalidHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Callbacks::OnFrameSend);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, &Callbacks::OnFrameNotSend);

  nghttp2_option* option = nullptr;
  if (nghttp2_option_new(&option) != 0) {
    nghttp2_session_callbacks_del(callbacks);
    throw std::bad_alloc();
  }
  nghttp2_option_set_no_auto_window_update(option, 1);  // windows come back through Consume only
  nghttp2_option_set_no_closed_streams(option, 1);
  nghttp2_option_set_max_deflate_dynamic_table_size(option, kDeflateTableBytes);
  nghttp2_option_set_max_outbound_ack(option, kMaxOutboundAcks);
  nghttp2_option_set_max_settings(option, kMaxSettingsEntries);
  nghttp2_option_set_stream_reset_rate_limit(option, kResetBurst, kResetRate);
  nghttp2_option_set_max_continuations(option, kMaxContinuations);
  // nghttp2's HTTP messaging checks stay on (nghttp2_option_set_no_http_messaging is not called).

  int rv = role == Role::kServer ? nghttp2_session_server_new2(&session_, callbacks, this, option)
                                 : nghttp2_session_client_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  if (rv != 0) throw std::bad_alloc();

  uint32_t window = std::min(settings.initial_window_size, kMaxWindow);
  uint32_t frame = std::clamp(settings.max_frame_size, kMinFrameSize, kMaxFrameSize);
  nghttp2_settings_entry entries[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, settings.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, frame},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, settings.max_header_list_bytes},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},  // a client refuses pushes; a server may only say 0
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, entries, std::size(entries));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<int32_t>(std::min(settings.connection_window_size, kMaxWindow)));
  budget_ = kResetBurst;
  budget_time_ = NowSeconds();
}

Connection::~Connection() { nghttp2_session_del(session_); }

Connection::Stream* Connection::Find(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

const Connection::Stream* Connection::Find(int32_t id) const {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void Connection::Push(Event event) {
  if (event.stream != 0) {
    if (Stream* s = Find(event.stream)) ++s->queued_events;
  }
  Pending p;
  p.event = std::move(event);
  events_.push_back(std::move(p));
}

void Connection::PushData(Stream& stream, const uint8_t* data, size_t size) {
  stream.unconsumed += size;
  unconsumed_ += size;
  if (!events_.empty()) {
    Pending& last = events_.back();
    if (last.event.kind == Event::Kind::kData && last.event.stream == stream.id &&
        last.offset + last.size == received_.size()) {
      received_.append(reinterpret_cast<const char*>(data), size);
      last.size += size;
      return;
    }
  }
  Pending p;
  p.event.kind = Event::Kind::kData;
  p.event.stream = stream.id;
  p.offset = received_.size();
  p.size = size;
  received_.append(reinterpret_cast<const char*>(data), size);
  events_.push_back(std::move(p));
  ++stream.queued_events;
}

void Connection::Purge(Stream& stream) {
  // Newest first: a stream reset right after it opened has its events at the back.
  for (auto it = events_.end(); stream.queued_events > 0 && it != events_.begin();) {
    --it;
    if (it->event.stream != stream.id) continue;
    if (it->event.kind == Event::Kind::kData) {
      uint64_t n = std::min<uint64_t>(it->size, stream.unconsumed);
      stream.unconsumed -= n;
      unconsumed_ -= std::min(n, unconsumed_);
      nghttp2_session_consume(session_, stream.id, it->size);
    }
    --stream.queued_events;
    it = events_.erase(it);
  }
}

void Connection::Close(int32_t id, uint32_t error_code) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = *it->second;
  bool finished = s.remote_ended && s.local_ended;
  if (!s.reset_by_caller && !finished) {
    // Cut short: a request whose answer nobody waits for, or a response the peer did not
    // finish, is no use to anyone, so its undrained events go (a request reset before the caller
    // took its head is never heard of). A complete response is still delivered, then the reset.
    if (role_ == Role::kServer || !s.remote_ended) Purge(s);
    if (s.announced || s.queued_events > 0) {
      Pending p;
      p.event.kind = Event::Kind::kReset;
      p.event.stream = id;
      p.event.error_code = error_code;
      events_.push_back(std::move(p));
    }
  }
  if (s.local) --local_open_;
  streams_.erase(it);
}

bool Connection::Spend() {
  double now = NowSeconds();
  budget_ = std::min<double>(kResetBurst, budget_ + (now - budget_time_) * kResetRate);
  budget_time_ = now;
  if (budget_ < 1) return false;
  budget_ -= 1;
  return true;
}

void Connection::Fail(uint32_t error_code, std::string reason) {
  if (failed_) return;
  failed_ = true;
  failure_ = Status::Error("HTTP/2 connection error " + ErrorCodeName(error_code) + ": " + reason);
  nghttp2_session_terminate_session(session_, error_code);
}

void Connection::HandleFatal(long rv) {
  switch (rv) {
    case NGHTTP2_ERR_BAD_CLIENT_MAGIC:
      Fail(kProtocolError, "not an HTTP/2 connection preface");
      break;
    case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS:
      Fail(kEnhanceYourCalm, "more than " + std::to_string(kMaxContinuations) + " CONTINUATION frames");
      break;
    case NGHTTP2_ERR_FLOODED:
      // The peer sends faster than it reads our acknowledgements: it gets nothing more.
      failed_ = true;
      failure_ = Status::Error("HTTP/2 connection dropped: the peer does not read (SETTINGS or PING flood)");
      dead_ = true;
      out_.clear();
      break;
    case NGHTTP2_ERR_CALLBACK_FAILURE:
      if (stop_code_ != 0) {
        Fail(stop_code_, stop_reason_);
        break;
      }
      [[fallthrough]];
    default:
      Fail(kInternalError, nghttp2_strerror(static_cast<int>(rv)));
      break;
  }
}

Status Connection::Receive(const uint8_t* data, size_t size) {
  if (failed_) return failure_;
  if (events_.empty()) received_.clear();
  ssize_t rv = nghttp2_session_mem_recv(session_, data, size);
  if (rv < 0) HandleFatal(rv);
  // Frame now what the input asked for (acknowledgements, window updates, resets, a GOAWAY), so
  // a connection error is known here, not only once the output is taken.
  Flush();
  return failed_ ? failure_ : Status::Ok();
}

bool Connection::NextEvent(Event* event) {
  if (events_.empty()) return false;
  Pending& p = events_.front();
  *event = std::move(p.event);
  if (event->kind == Event::Kind::kData) event->data = std::string_view(received_).substr(p.offset, p.size);
  if (event->stream != 0) {
    if (Stream* s = Find(event->stream)) {
      if (s->queued_events > 0) --s->queued_events;
      if (event->kind == Event::Kind::kHead || event->kind == Event::Kind::kHeadTooLarge) s->announced = true;
    }
  }
  events_.pop_front();
  return true;
}

void Connection::Flush() {
  while (!dead_ && !final_goaway_sent_ && out_.size() < kOutputChunk) {
    const uint8_t* bytes = nullptr;
    ssize_t n = nghttp2_session_mem_send(session_, &bytes);
    if (n < 0) {
      failed_ = true;
      failure_ = Status::Error(std::string("HTTP/2 connection failed: ") + nghttp2_strerror(static_cast<int>(n)));
      dead_ = true;
      return;
    }
    if (n > 0) out_.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
    bool more = false;
    for (int32_t id : to_reset_) {
      Stream* s = Find(id);
      if (!s || s->remote_ended || s->reset_by_caller || s->reset_by_us) continue;
      s->reset_by_us = true;
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, kNoError);
      more = true;
    }
    to_reset_.clear();
    if (budget_spent_) {
      budget_spent_ = false;
      Fail(kEnhanceYourCalm, "too many streams reset for the peer's errors");
      more = true;
    }
    if (n == 0 && !more) break;
  }
}

void Connection::Attach(Stream& stream, bool end_stream) {
  stream.head_submitted = true;
  stream.provider = !end_stream;
  stream.out_end = end_stream;
}

bool Connection::SubmitResponse(int32_t stream, std::span<const Header> headers, bool end_stream) {
  if (role_ != Role::kServer || failed_) return false;
  Stream* s = Find(stream);
  if (!s || !s->announced || s->reset_by_caller || s->head_submitted) return false;
  if (!CheckFields(headers, FieldsKind::kResponse)) return false;
  std::vector<nghttp2_nv> nva = ToNv(headers);
  if (Informational(headers)) {
    if (end_stream) return false;
    return nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, stream, nullptr, nva.data(), nva.size(), nullptr) == 0;
  }
  nghttp2_data_provider provider{};
  provider.read_callback = &Callbacks::OnRead;
  if (nghttp2_submit_response(session_, stream, nva.data(), nva.size(), end_stream ? nullptr : &provider) != 0) {
    return false;
  }
  Attach(*s, end_stream);
  return true;
}

int32_t Connection::SubmitRequest(std::span<const Header> headers, bool end_stream) {
  if (role_ != Role::kClient || failed_ || StreamsAvailable() == 0) return kNoStream;
  if (!CheckFields(headers, FieldsKind::kRequest)) return kNoStream;
  std::vector<nghttp2_nv> nva = ToNv(headers);
  nghttp2_data_provider provider{};
  provider.read_callback = &Callbacks::OnRead;
  int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), end_stream ? nullptr : &provider,
                                      nullptr);
  if (id < 0) return kNoStream;
  Stream& s = *streams_.emplace(id, std::make_unique<Stream>(id)).first->second;
  s.local = true;
  s.announced = true;
  ++local_open_;
  Attach(s, end_stream);
  return id;
}

bool Connection::SubmitData(int32_t stream, std::string_view bytes, bool end_stream) {
  Stream* s = Find(stream);
  if (failed_ || !s || !s->provider || s->out_end || s->reset_by_caller) return false;
  s->out.append(bytes);
  s->out_end = end_stream;
  if (s->deferred && (!bytes.empty() || end_stream)) {
    s->deferred = false;
    nghttp2_session_resume_data(session_, stream);
  }
  return true;
}

bool Connection::SubmitTrailers(int32_t stream, std::span<const Header> trailers) {
  Stream* s = Find(stream);
  if (failed_ || !s || !s->provider || s->out_end || s->reset_by_caller) return false;
  if (!CheckFields(trailers, FieldsKind::kTrailers)) return false;
  s->trailers.assign(trailers.begin(), trailers.end());
  s->has_trailers = true;
  s->out_end = true;
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(session_, stream);
  }
  return true;
}

void Connection::ResetStream(int32_t stream, uint32_t error_code) {
  Stream* s = Find(stream);
  if (failed_ || !s || s->reset_by_caller) return;
  s->reset_by_caller = true;
  s->discard = true;
  Purge(*s);
  std::string().swap(s->out);
  s->out_sent = 0;
  Headers().swap(s->trailers);
  s->has_trailers = false;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, error_code);
}

void Connection::GoAway(uint32_t error_code) {
  if (failed_) return;
  if (error_code != kNoError) {
    Fail(error_code, "GOAWAY sent");
    return;
  }
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_), kNoError,
                        nullptr, 0);
}

size_t Connection::Queued(int32_t stream) const {
  const Stream* s = Find(stream);
  return s ? s->out.size() - s->out_sent : 0;
}

size_t Connection::StreamsAvailable() const {
  if (role_ != Role::kClient || failed_ || !nghttp2_session_check_request_allowed(session_)) return 0;
  if (nghttp2_session_get_next_stream_id(session_) > static_cast<uint32_t>(kMaxWindow)) return 0;  // ids used up
  uint32_t limit = nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return limit > local_open_ ? limit - local_open_ : 0;
}

void Connection::Consume(int32_t stream, size_t n) {
  if (Stream* s = Find(stream)) {
    n = static_cast<size_t>(std::min<uint64_t>(n, s->unconsumed));
    s->unconsumed -= n;
  }
  n = static_cast<size_t>(std::min<uint64_t>(n, unconsumed_));
  if (n == 0) return;
  unconsumed_ -= n;
  nghttp2_session_consume(session_, stream, n);
}

bool Connection::WantWrite() const {
  if (dead_) return false;
  return !out_.empty() || (!final_goaway_sent_ && nghttp2_session_want_write(session_));
}

size_t Connection::TakeOutput(std::string* out) {
  if (dead_) return 0;
  Flush();
  size_t n = out_.size();
  if (out->empty()) {
    out->swap(out_);
  } else {
    out->append(out_);
  }
  out_.clear();
  return n;
}

bool Connection::Done() const {
  if (dead_) return true;
  if (!out_.empty()) return false;
  if (final_goaway_sent_) return true;
  bool want_write = nghttp2_session_want_write(session_);
  if (failed_ && !want_write) return true;
  return !want_write && !nghttp2_session_want_read(session_);
}

std::string GrpcPercentEncode(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (unsigned char c : message) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

Headers GrpcTrailersOnly(int grpc_status, std::string_view message, std::span<const Header> extra) {
  Headers fields = {{":status", "200"}, {"content-type", "application/grpc"},
                    {"grpc-status", std::to_string(grpc_status)}};
  if (!message.empty()) fields.push_back({"grpc-message", GrpcPercentEncode(message)});
  fields.insert(fields.end(), extra.begin(), extra.end());
  return fields;
}

}  // namespace fencing::h2
