#pragma once
// An allocator that takes whole pages from the kernel (mmap) and gives them back on free
// (munmap). For per-connection read buffers: thousands of idle connections free theirs, and
// with malloc those holes sit between live objects, so the process's RSS never falls; with
// pages of their own, freeing a buffer lowers RSS at once. One mmap per allocation: use it for
// buffers that live across many requests, never for per-request allocations.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <new>

namespace fencing {

template <typename T>
struct PageAllocator {
  using value_type = T;

  PageAllocator() noexcept = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    void* p = ::mmap(nullptr, Round(n * sizeof(T)), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept { ::munmap(p, Round(n * sizeof(T))); }

  template <typename U>
  bool operator==(const PageAllocator<U>&) const noexcept {
    return true;
  }

 private:
  static std::size_t Round(std::size_t bytes) {
    static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
};

}  // namespace fencing
