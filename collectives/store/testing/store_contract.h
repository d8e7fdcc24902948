// The Store contract (store.h), one set of tests that every implementation
// runs: a test file defines how to make its store and instantiates them.
//
//   StoreFixture MakeMine() { return {std::make_shared<MyStore>(), nullptr}; }
//   INSTANTIATE_TEST_SUITE_P(Mine, StoreContractTest, ::testing::Values(&MakeMine));
#ifndef LOCKSTEP_COLLECTIVES_STORE_TESTING_STORE_CONTRACT_H_
#define LOCKSTEP_COLLECTIVES_STORE_TESTING_STORE_CONTRACT_H_

#include <memory>

#include "collectives/store/store.h"
#include "gtest/gtest.h"

namespace lockstep {

struct StoreFixture {
  std::shared_ptr<Store> store;
  std::shared_ptr<void> keep_alive;  // Whatever the store needs to outlive it.
};

class StoreContractTest : public ::testing::TestWithParam<StoreFixture (*)()> {};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_TESTING_STORE_CONTRACT_H_
