#include "interop/torch/c10d/torch_store.h"

#include <torch/csrc/distributed/c10d/exception.h>

#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

std::vector<uint8_t> Bytes(absl::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string String(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// What `call` threw, as a Status: "TorchStore.<what>: <message>".
absl::Status Caught(const std::string& what) {
  try {
    throw;
  } catch (const ::c10d::TimeoutError& e) {
    return absl::DeadlineExceededError(absl::StrCat("TorchStore.", what, ": ", e.what()));
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    // 1.13's stores say "Timeout"/"timed out" in a plain c10::Error, and an
    // unimplemented call is an internal assert saying so.
    if (absl::StrContains(message, "imeout") || absl::StrContains(message, "timed out")) {
      return absl::DeadlineExceededError(absl::StrCat("TorchStore.", what, ": ", message));
    }
    if (absl::StrContains(message, "Not implemented") || absl::StrContains(message, "not implemented")) {
      return absl::UnimplementedError(absl::StrCat("TorchStore.", what, ": this PyTorch store lacks it: ", message));
    }
    return absl::UnavailableError(absl::StrCat("TorchStore.", what, ": ", message));
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (absl::StrContains(message, "imeout")) {
      return absl::DeadlineExceededError(absl::StrCat("TorchStore.", what, ": ", message));
    }
    return absl::UnavailableError(absl::StrCat("TorchStore.", what, ": ", message));
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {}

absl::Status TorchStore::Set(absl::string_view key, absl::string_view value) {
  try {
    store_->set(std::string(key), Bytes(value));
    return absl::OkStatus();
  } catch (...) {
    return Caught(absl::StrCat("Set('", key, "')"));
  }
}

absl::StatusOr<std::string> TorchStore::Get(absl::string_view key, Milliseconds timeout) {
  try {
    // c10d's get waits with the store's own timeout: wait with ours first.
    store_->wait({std::string(key)}, timeout);
    return String(store_->get(std::string(key)));
  } catch (...) {
    return Caught(absl::StrCat("Get('", key, "', ", timeout.count(), " ms)"));
  }
}

absl::StatusOr<int64_t> TorchStore::Add(absl::string_view key, int64_t delta) {
  try {
    return store_->add(std::string(key), delta);
  } catch (...) {
    return Caught(absl::StrCat("Add('", key, "')"));
  }
}

absl::StatusOr<std::string> TorchStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                   absl::string_view desired) {
  try {
    return String(store_->compareSet(std::string(key), Bytes(expected), Bytes(desired)));
  } catch (...) {
    return Caught(absl::StrCat("CompareSet('", key, "')"));
  }
}

absl::Status TorchStore::Wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
    return absl::OkStatus();
  } catch (...) {
    return Caught(absl::StrCat("Wait('", absl::StrJoin(keys, "', '"), "', ", timeout.count(), " ms)"));
  }
}

absl::StatusOr<bool> TorchStore::Check(const std::vector<std::string>& keys) {
  try {
    return store_->check(keys);
  } catch (...) {
    return Caught(absl::StrCat("Check('", absl::StrJoin(keys, "', '"), "')"));
  }
}

absl::StatusOr<bool> TorchStore::DeleteKey(absl::string_view key) {
  try {
    return store_->deleteKey(std::string(key));
  } catch (...) {
    return Caught(absl::StrCat("DeleteKey('", key, "')"));
  }
}

absl::StatusOr<int64_t> TorchStore::NumKeys() {
  try {
    return store_->getNumKeys();
  } catch (...) {
    return Caught("NumKeys()");
  }
}

}  // namespace lockstep
