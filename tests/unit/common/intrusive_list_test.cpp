// The intrusive list a worker keeps its connections in: order, O(1) unlink from anywhere
// (first, middle, last, the only one), unlinking the visited element during ForEach, and
// elements left linked when the list goes.

#include "common/intrusive_list.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace fencing {
namespace {

struct Item : IntrusiveListNode<Item> {
  explicit Item(int v) : value(v) {}
  int value;
};

std::vector<int> Values(IntrusiveList<Item>& list) {
  std::vector<int> values;
  list.ForEach([&](Item* item) { values.push_back(item->value); });
  return values;
}

TEST(IntrusiveListTest, KeepsLinkOrder) {
  IntrusiveList<Item> list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(Values(list), std::vector<int>{});
  Item a(1), b(2), c(3);
  list.PushBack(&a);
  list.PushBack(&b);
  list.PushBack(&c);
  EXPECT_FALSE(list.empty());
  EXPECT_TRUE(a.linked() && b.linked() && c.linked());
  EXPECT_EQ(Values(list), (std::vector<int>{1, 2, 3}));
  a.Unlink();
  b.Unlink();
  c.Unlink();
  EXPECT_TRUE(list.empty());
}

TEST(IntrusiveListTest, UnlinksFromAnyPosition) {
  IntrusiveList<Item> list;
  Item a(1), b(2), c(3), d(4);
  for (Item* item : {&a, &b, &c, &d}) list.PushBack(item);
  b.Unlink();  // middle
  EXPECT_FALSE(b.linked());
  EXPECT_EQ(Values(list), (std::vector<int>{1, 3, 4}));
  a.Unlink();  // first
  EXPECT_EQ(Values(list), (std::vector<int>{3, 4}));
  d.Unlink();  // last
  EXPECT_EQ(Values(list), (std::vector<int>{3}));
  b.Unlink();  // not linked: nothing
  EXPECT_EQ(Values(list), (std::vector<int>{3}));
  c.Unlink();  // the only one
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(Values(list), std::vector<int>{});
  list.PushBack(&b);  // relinked after an unlink
  list.PushBack(&a);
  EXPECT_EQ(Values(list), (std::vector<int>{2, 1}));
  a.Unlink();
  b.Unlink();
}

TEST(IntrusiveListTest, ForEachMayUnlinkTheVisitedElement) {
  // As a destroyed session unregisters: the walk goes on with the next one.
  IntrusiveList<Item> list;
  std::vector<std::unique_ptr<Item>> items;
  for (int i = 0; i < 6; ++i) {
    items.push_back(std::make_unique<Item>(i));
    list.PushBack(items.back().get());
  }
  std::vector<int> visited;
  list.ForEach([&](Item* item) {
    visited.push_back(item->value);
    if (item->value % 2 == 0) item->Unlink();
  });
  EXPECT_EQ(visited, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Values(list), (std::vector<int>{1, 3, 5}));
  for (auto& item : items) item->Unlink();
  EXPECT_TRUE(list.empty());
}

TEST(IntrusiveListTest, ListGoneFirstDetachesItsElements) {
  Item a(1), b(2);
  {
    IntrusiveList<Item> list;
    list.PushBack(&a);
    list.PushBack(&b);
  }
  EXPECT_FALSE(a.linked());
  EXPECT_FALSE(b.linked());
  a.Unlink();  // no list left to touch
  b.Unlink();
}

}  // namespace
}  // namespace fencing
