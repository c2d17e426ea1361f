// The access line's format (parsed back as JSON: every field, its order, escaping, the
// timestamp) and the worker buffer's hand-over rule.

#include "common/access_log.h"

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace fencing {
namespace {

using std::chrono::system_clock;

// 2026-12-02T11:30:05.042Z
system_clock::time_point Noon() {
  return system_clock::time_point(std::chrono::seconds(1796211005)) + std::chrono::milliseconds(42);
}

AccessEntry FullEntry() {
  AccessEntry e;
  e.method = "PUT";
  e.path = "/orders/17?x=1";
  e.client = "10.1.2.3";
  e.status = 409;
  e.route = "orders";
  e.decision = "rejected_stale";
  e.token = 7;
  e.max_token = 18446744073709551615ull;
  e.upstream_status = 0;
  e.upstream_attempts = 0;
  e.bytes_in = 0;
  e.bytes_out = 123456789;
  e.duration_us = 153;
  return e;
}

std::vector<std::string> Keys(const boost::json::object& o) {
  std::vector<std::string> keys;
  for (const auto& kv : o) keys.emplace_back(kv.key());
  return keys;
}

TEST(AccessLineTest, EveryFieldInOrderAsJson) {
  std::string out;
  AppendAccessLine(out, FullEntry(), Noon());
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line";
  auto line = boost::json::parse(out).as_object();
  EXPECT_EQ(Keys(line), (std::vector<std::string>{"ts", "level", "msg", "method", "path", "client", "status", "route",
                                                    "decision", "token", "max_token", "upstream_attempts", "bytes_in",
                                                    "bytes_out", "duration_s"}));
  EXPECT_EQ(line["ts"].as_string(), "2026-12-02T11:30:05.042Z");
  EXPECT_EQ(line["level"].as_string(), "info");
  EXPECT_EQ(line["msg"].as_string(), "access");
  EXPECT_EQ(line["method"].as_string(), "PUT");
  EXPECT_EQ(line["path"].as_string(), "/orders/17?x=1");
  EXPECT_EQ(line["client"].as_string(), "10.1.2.3");
  EXPECT_EQ(line["status"].to_number<int64_t>(), 409);
  EXPECT_EQ(line["route"].as_string(), "orders");
  EXPECT_EQ(line["decision"].as_string(), "rejected_stale");
  EXPECT_EQ(line["token"].to_number<uint64_t>(), 7u);
  EXPECT_EQ(line["max_token"].to_number<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(line["bytes_out"].to_number<uint64_t>(), 123456789u);
  EXPECT_NEAR(line["duration_s"].to_number<double>(), 0.000153, 1e-7);
}

TEST(AccessLineTest, OptionalFieldsOnlyWhenPresent) {
  AccessEntry e;  // no head parsed, no route, no token: a refused request
  e.client = "::1";
  e.status = 400;
  e.decision = "rejected_request";
  e.upstream_status = 502;
  e.upstream_attempts = 2;
  std::string out;
  AppendAccessLine(out, e, Noon());
  auto line = boost::json::parse(out).as_object();
  EXPECT_EQ(Keys(line), (std::vector<std::string>{"ts", "level", "msg", "client", "status", "decision", "upstream_status",
                                                    "upstream_attempts", "bytes_in", "bytes_out", "duration_s"}));
  EXPECT_EQ(line["upstream_status"].to_number<int64_t>(), 502);
  EXPECT_EQ(line["upstream_attempts"].to_number<int64_t>(), 2);
}

// A client with a certificate identity: "identity" after "client"; without one, no such key.
TEST(AccessLineTest, TheClientsIdentityAfterTheClient) {
  AccessEntry e = FullEntry();
  e.identity = "spiffe://cluster.local/ns/shop/sa/writer, dns:batch.shop.svc";
  std::string out;
  AppendAccessLine(out, e, Noon());
  ASSERT_LE(out.size(), AccessLineBound(e));
  auto line = boost::json::parse(out).as_object();
  const std::vector<std::string> keys = Keys(line);
  ASSERT_GE(keys.size(), 7u);
  EXPECT_EQ(keys[5], "client");
  EXPECT_EQ(keys[6], "identity");
  EXPECT_EQ(line["identity"].as_string(), "spiffe://cluster.local/ns/shop/sa/writer, dns:batch.shop.svc");
  std::string plain;
  AppendAccessLine(plain, FullEntry(), Noon());
  EXPECT_EQ(plain.find("identity"), std::string::npos);
}

TEST(AccessLineTest, StringsAreEscaped) {
  AccessEntry e = FullEntry();
  const std::string route = std::string("a\"b\\c\nd\te") + '\x01' + '\x7f' + "\xc3\xa9";
  e.route = route;
  e.path = "/\"quoted\"";
  std::string out;
  AppendAccessLine(out, e, Noon());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "a newline in a field must not split the line";
  auto line = boost::json::parse(out).as_object();
  EXPECT_EQ(line["route"].as_string(), route);
  EXPECT_EQ(line["path"].as_string(), "/\"quoted\"");
}

TEST(AccessLineTest, TimestampFollowsTheClockAcrossSeconds) {
  std::string a, b;
  AppendAccessLine(a, FullEntry(), Noon());
  AppendAccessLine(b, FullEntry(), Noon() + std::chrono::milliseconds(1958));  // next second, cached prefix renewed
  EXPECT_EQ(boost::json::parse(a).as_object()["ts"].as_string(), "2026-12-02T11:30:05.042Z");
  EXPECT_EQ(boost::json::parse(b).as_object()["ts"].as_string(), "2026-12-02T11:30:07.000Z");
}

TEST(AccessLineTest, DurationInSecondsWithSixDecimals) {
  AccessEntry e = FullEntry();
  for (auto [micros, text] : {std::pair<uint64_t, std::string>{0, "0.000000"}, {153, "0.000153"},
                              {1000000, "1.000000"}, {61234567, "61.234567"}}) {
    e.duration_us = micros;
    std::string out;
    AppendAccessLine(out, e, Noon());
    EXPECT_NE(out.find("\"duration_s\":" + text + "}"), std::string::npos) << out;
  }
}

TEST(AccessLineTest, TheBoundHoldsForTheWorstStrings) {
  AccessEntry e = FullEntry();
  const std::string worst(300, '\x01');  // six bytes out for each
  e.method = e.path = e.route = e.client = e.decision = worst;
  e.token = e.max_token = std::numeric_limits<uint64_t>::max();
  e.upstream_status = 599;
  e.bytes_in = e.bytes_out = e.duration_us = std::numeric_limits<uint64_t>::max();
  std::string out;
  AppendAccessLine(out, e, Noon());
  EXPECT_LE(out.size(), AccessLineBound(e));
  EXPECT_EQ(boost::json::parse(out).as_object()["path"].as_string(), worst);
}

TEST(AccessLogBufferTest, HoldsLinesUntilFullOrFlushed) {
  AccessLogBuffer buffer;
  const AccessEntry e = FullEntry();
  EXPECT_EQ(buffer.Append(e), 0u);
  const size_t one = buffer.buffered_bytes();
  ASSERT_GT(one, 100u);
  EXPECT_EQ(buffer.Append(e), 0u);
  EXPECT_EQ(buffer.buffered_bytes(), 2 * one) << "below kFlushBytes the lines wait for the tick";
  // Filling it hands the batch over once it nears kFlushBytes (the next line might not fit).
  size_t before = buffer.buffered_bytes();
  while (buffer.Append(e) == 0 && buffer.buffered_bytes() > before && before < 4 * AccessLogBuffer::kFlushBytes) {
    before = buffer.buffered_bytes();
  }
  EXPECT_LT(buffer.buffered_bytes(), before) << "handed over";
  EXPECT_LE(before, AccessLogBuffer::kFlushBytes + one);
  EXPECT_GE(before + AccessLineBound(e), AccessLogBuffer::kFlushBytes) << "the batch is filled first";
  buffer.Append(e);
  EXPECT_EQ(buffer.Flush(), 0u);
  EXPECT_EQ(buffer.buffered_bytes(), 0u);
  EXPECT_EQ(buffer.Flush(), 0u) << "nothing to hand over";
  FlushAccessLog();
}

// stderr is a pipe nobody reads: the log thread blocks in write(2), the backlog fills, and
// further batches are refused at once (a caller that blocked would hang this test).
TEST(AccessLogWriterTest, ASlowReaderDropsBatchesInsteadOfBlockingTheCaller) {
  FlushAccessLog();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(::dup2(fds[1], STDERR_FILENO), STDERR_FILENO);
  const size_t batch_size = 64 * 1024;
  size_t accepted = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    AccessBatch batch{std::unique_ptr<char[]>(new char[batch_size]), batch_size};
    std::memset(batch.data.get(), 'x', batch_size);
    batch.data[batch_size - 1] = '\n';
    (HandAccessBatch(std::move(batch)) ? accepted : refused)++;
  }
  // Now read it all: every accepted batch arrives, whole.
  size_t received = 0;
  std::thread reader([&] {
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(fds[0], chunk, sizeof chunk);
      if (n <= 0) break;
      received += static_cast<size_t>(n);
    }
  });
  FlushAccessLog();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_GT(refused, 0u);
  EXPECT_LE(accepted * batch_size, kMaxQueuedBytes + 2 * batch_size) << "the backlog is bounded";
  EXPECT_GE(accepted * batch_size, kMaxQueuedBytes - batch_size) << "the backlog is used before refusing";
  EXPECT_EQ(received, accepted * batch_size);
}

}  // namespace
}  // namespace fencing
