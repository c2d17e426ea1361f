#pragma once
// The backend's response as the exchange reads it: Beast's basic_parser for the syntax and the
// body's framing (Content-Length, chunked, until close), as Beast documents for a parser of one's
// own, with two differences from http::response_parser<http::buffer_body>:
//  - the head's fields go into HeadFields (one flat copy), not into http::fields (an allocation
//    and a case-insensitive tree insert per field);
//  - the body is copied into the caller's buffer (the relay buffer), as buffer_body does.

#include "http/head_fields.h"

#include <boost/beast/http/basic_parser.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fencing {

class ResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  unsigned status() const { return status_; }
  std::string_view reason() const { return fields_.Text(reason_); }
  unsigned version() const { return version_; }
  const HeadFields& fields() const { return fields_; }

  // Where the next body bytes go. Once it is full, the parser stops with http::error::need_buffer.
  void SetBodyBuffer(char* data, size_t size) {
    body_ = data;
    room_ = size;
  }
  size_t room() const { return room_; }  // what the body buffer has left

 private:
  // Beast's virtual functions take its own string_view (boost::core::string_view).
  using BeastView = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb, BeastView, BeastView, int, boost::system::error_code&) override {}
  void on_response_impl(int code, BeastView reason, int version, boost::system::error_code& ec) override;
  void on_field_impl(boost::beast::http::field id, BeastView name, BeastView value,
                     boost::system::error_code& ec) override;
  void on_header_impl(boost::system::error_code&) override {}
  void on_body_init_impl(const boost::optional<uint64_t>&, boost::system::error_code&) override {}
  size_t on_body_impl(BeastView body, boost::system::error_code& ec) override { return TakeBody(body, ec); }
  void on_chunk_header_impl(uint64_t, BeastView, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(uint64_t, BeastView body, boost::system::error_code& ec) override {
    return TakeBody(body, ec);
  }
  void on_finish_impl(boost::system::error_code&) override {}
  size_t TakeBody(std::string_view body, boost::system::error_code& ec);

  HeadFields fields_;
  HeadFields::Span reason_;
  unsigned status_ = 0;
  unsigned version_ = 11;
  char* body_ = nullptr;
  size_t room_ = 0;
};

}  // namespace fencing
