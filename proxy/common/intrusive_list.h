#pragma once
// A doubly linked list whose links live in the elements (each derives from IntrusiveListNode):
// linking and unlinking allocate nothing and take O(1), and an element unlinks without knowing
// its list. A worker keeps its connections in one (std::set cost a 48-byte tree node per
// connection and a rebalance per accept and per close). Neither the list nor the node owns
// anything; one thread touches a list.

#include <cassert>

namespace fencing {

template <typename T>
class IntrusiveList;

// T derives from IntrusiveListNode<T>. A node is in at most one list, and must be unlinked
// before it is destroyed.
template <typename T>
class IntrusiveListNode {
 public:
  IntrusiveListNode() = default;
  IntrusiveListNode(const IntrusiveListNode&) = delete;
  IntrusiveListNode& operator=(const IntrusiveListNode&) = delete;

  bool linked() const { return next_ != nullptr; }
  // Takes the node out of its list; nothing if it is in none.
  void Unlink() {
    if (!next_) return;
    prev_->next_ = next_;
    next_->prev_ = prev_;
    prev_ = next_ = nullptr;
  }

 private:
  friend class IntrusiveList<T>;
  IntrusiveListNode* prev_ = nullptr;
  IntrusiveListNode* next_ = nullptr;  // null: in no list
};

// Circular, around a sentinel node of its own: no branch for the ends. Not movable (the
// elements point at the sentinel).
template <typename T>
class IntrusiveList {
 public:
  IntrusiveList() { head_.prev_ = head_.next_ = &head_; }
  // Elements still linked are detached: their Unlink does nothing then.
  ~IntrusiveList() {
    for (IntrusiveListNode<T>* node = head_.next_; node != &head_;) {
      IntrusiveListNode<T>* next = node->next_;
      node->prev_ = node->next_ = nullptr;
      node = next;
    }
  }
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_.next_ == &head_; }

  // Links an unlinked element at the end.
  void PushBack(T* element) {
    IntrusiveListNode<T>* node = element;
    assert(!node->linked());
    node->prev_ = head_.prev_;
    node->next_ = &head_;
    head_.prev_->next_ = node;
    head_.prev_ = node;
  }

  // Calls f(T*) on every element, first linked first. f may unlink the element it was given
  // (not others).
  template <typename F>
  void ForEach(F&& f) {
    for (IntrusiveListNode<T>* node = head_.next_; node != &head_;) {
      IntrusiveListNode<T>* next = node->next_;
      f(static_cast<T*>(node));
      node = next;
    }
  }

 private:
  IntrusiveListNode<T> head_;  // the sentinel: never an element
};

}  // namespace fencing
