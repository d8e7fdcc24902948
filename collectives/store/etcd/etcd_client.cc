#include "collectives/store/etcd/etcd_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

using std::chrono::milliseconds;

// libcurl wants one global initialization before any handle; it is
// thread-safe in Debian 12's 7.88, once is enough.
void InitCurl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct EasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;

struct HeaderListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using HeaderList = std::unique_ptr<curl_slist, HeaderListDeleter>;

struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
using Multi = std::unique_ptr<CURLM, MultiDeleter>;

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// etcd's error object ({"error": "...", "code": N, "message": "..."}) as a
// Status; OK when `answer` is none.
absl::Status EtcdError(const nlohmann::json& answer, absl::string_view what, const std::string& where) {
  if (!answer.is_object() || !answer.contains("error")) return absl::OkStatus();
  const nlohmann::json& e = answer["error"];
  std::string message;
  int code = 2;  // UNKNOWN
  if (e.is_string()) {
    message = e.get<std::string>();
    if (answer.contains("code") && answer["code"].is_number_integer()) code = answer["code"].get<int>();
  } else if (e.is_object()) {  // Inside a stream: {"error": {"grpc_code": N, "message": ...}}
    if (e.contains("message") && e["message"].is_string()) message = e["message"].get<std::string>();
    if (e.contains("grpc_code") && e["grpc_code"].is_number_integer()) code = e["grpc_code"].get<int>();
    if (e.contains("code") && e["code"].is_number_integer()) code = e["code"].get<int>();
  }
  if (code <= 0 || code > 16) code = 2;
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat("etcd at ", where, " refused ", what, ": ", message));
}

// Failures before the request can have reached etcd: only these are tried
// on the next endpoint. A request that may have been applied (the answer
// was lost) is not sent again: a compare-and-swap retried by Add would then
// count twice.
bool ConnectFailure(CURLcode c) {
  return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_COULDNT_RESOLVE_PROXY;
}

bool TlsFailure(CURLcode c) {
  return c == CURLE_SSL_CONNECT_ERROR || c == CURLE_PEER_FAILED_VERIFICATION || c == CURLE_SSL_CERTPROBLEM ||
         c == CURLE_SSL_CIPHER || c == CURLE_SSL_CACERT_BADFILE || c == CURLE_SSL_ISSUER_ERROR ||
         c == CURLE_SSL_CRL_BADFILE || c == CURLE_USE_SSL_FAILED;
}

absl::Status TransportError(CURLcode c, const char* detail, absl::string_view what, const std::string& url,
                            milliseconds timeout) {
  const std::string text = detail[0] != '\0' ? std::string(detail) : std::string(curl_easy_strerror(c));
  if (c == CURLE_OPERATION_TIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat("etcd at ", url, " did not answer ", what, " within ", timeout.count(), " ms (", text, ")"));
  }
  // With TLS 1.3 a server that refuses the client's certificate says so
  // after the handshake: the client sees the connection dropped.
  const bool https = url.rfind("https://", 0) == 0;
  if (https && (c == CURLE_SEND_ERROR || c == CURLE_RECV_ERROR || c == CURLE_GOT_NOTHING)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "etcd at ", url, " dropped the TLS connection for ", what, " (", text,
        "): it probably refused this client's certificate or has none; check rdzv_conf protocol, cacert, cert "
        "and key against the server's --trusted-ca-file, --cert-file and --client-cert-auth"));
  }
  if (TlsFailure(c)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the TLS handshake with etcd at ", url, " failed for ", what, " (", text,
                     "); check rdzv_conf protocol, cacert, cert and key against the server's --trusted-ca-file, "
                     "--cert-file and --client-cert-auth"));
  }
  return absl::UnavailableError(absl::StrCat("cannot reach etcd at ", url, " for ", what, " (", text,
                                             "); is etcd running there and is the endpoint right?"));
}

// The per-request state of a stream: bytes not yet a whole line.
struct StreamState {
  std::string pending;
  const std::function<bool(const nlohmann::json&)>* on_message = nullptr;
  bool stopped = false;  // on_message said stop.
  absl::Status error;    // A message that was an error or not JSON.
  std::string where;
  std::string what;
};

size_t OnStreamBytes(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<StreamState*>(user);
  s->pending.append(data, size * n);
  size_t start = 0;
  for (;;) {
    const size_t nl = s->pending.find('\n', start);
    if (nl == std::string::npos) break;
    const std::string line = s->pending.substr(start, nl - start);
    start = nl + 1;
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    nlohmann::json message = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (message.is_discarded()) {
      s->error = absl::DataLossError(absl::StrCat("etcd at ", s->where, " sent a stream message for ", s->what,
                                                  " that is not JSON: ", line.substr(0, 200)));
      return 0;
    }
    absl::Status e = EtcdError(message, s->what, s->where);
    if (!e.ok()) {
      s->error = e;
      return 0;
    }
    const nlohmann::json& result = message.contains("result") ? message["result"] : message;
    if (!(*s->on_message)(result)) {
      s->stopped = true;
      return 0;  // Ends the transfer (CURLE_WRITE_ERROR, expected).
    }
  }
  s->pending.erase(0, start);
  return size * n;
}

}  // namespace

EtcdClient::EtcdClient(EtcdClientOptions options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("EtcdClient: no endpoint given (host:port, e.g. 10.0.0.1:2379)");
  }
  if (options.protocol != "http" && options.protocol != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat("EtcdClient: protocol '", options.protocol, "' is neither http nor https"));
  }
  if (options.client_cert.empty() != options.client_key.empty()) {
    return absl::InvalidArgumentError("EtcdClient: a client certificate needs its key and a key its certificate");
  }
  for (std::string& e : options.endpoints) {
    if (!absl::StartsWith(e, "http://") && !absl::StartsWith(e, "https://")) e = options.protocol + "://" + e;
    while (!e.empty() && e.back() == '/') e.pop_back();
  }
  InitCurl();
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

std::string EtcdClient::where() const { return absl::StrJoin(options_.endpoints, ", "); }

std::string EtcdClient::Url(size_t endpoint, absl::string_view path) const {
  return absl::StrCat(options_.endpoints[endpoint % options_.endpoints.size()], path);
}

std::string EtcdClient::Encode(absl::string_view bytes) { return absl::Base64Escape(bytes); }

absl::StatusOr<std::string> EtcdClient::Decode(const nlohmann::json& field) {
  if (field.is_null()) return std::string();
  if (!field.is_string()) return absl::DataLossError("etcd sent a key or value that is not a base64 string");
  std::string out;
  if (!absl::Base64Unescape(field.get<std::string>(), &out)) {
    return absl::DataLossError("etcd sent a key or value that is not valid base64");
  }
  return out;
}

int64_t EtcdClient::Int(const nlohmann::json& object, const char* field) {
  if (!object.is_object() || !object.contains(field)) return 0;
  const nlohmann::json& v = object[field];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

namespace {

void Configure(CURL* c, const EtcdClientOptions& o, const std::string& url, const std::string& body,
               curl_slist* headers) {
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
  // Never read a proxy from the environment: rendezvous goes straight to etcd.
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (!o.ca_cert.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, o.ca_cert.c_str());
  if (!o.client_cert.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, o.client_cert.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, o.client_key.c_str());
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> EtcdClient::Call(absl::string_view path, const nlohmann::json& request,
                                                milliseconds timeout) const {
  const std::string body = request.dump();
  HeaderList headers(curl_slist_append(nullptr, "Content-Type: application/json"));
  const size_t n = options_.endpoints.size();
  const size_t first = preferred_.load(std::memory_order_relaxed);
  absl::Status last;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (first + i) % n;
    const std::string url = Url(e, path);
    Easy c(curl_easy_init());
    if (!c) return absl::ResourceExhaustedError("EtcdClient: curl_easy_init failed (out of memory?)");
    std::string answer;
    char detail[CURL_ERROR_SIZE] = {0};
    Configure(c.get(), options_, url, body, headers.get());
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, timeout.count())));
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, &AppendBody);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, detail);
    const CURLcode rc = curl_easy_perform(c.get());
    if (rc != CURLE_OK) {
      last = TransportError(rc, detail, path, url, timeout);
      if (ConnectFailure(rc)) continue;  // Another endpoint may answer.
      return last;
    }
    preferred_.store(e, std::memory_order_relaxed);
    long http = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &http);
    nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return absl::DataLossError(absl::StrCat("etcd at ", url, " answered ", path, " with HTTP ", http,
                                              " and a body that is not JSON: ", answer.substr(0, 200),
                                              "; is this an etcd >= 3.4 client port?"));
    }
    absl::Status e_status = EtcdError(parsed, path, url);
    if (!e_status.ok()) return e_status;
    if (http != 200) {
      return absl::UnknownError(
          absl::StrCat("etcd at ", url, " answered ", path, " with HTTP ", http, ": ", answer.substr(0, 200)));
    }
    return parsed;
  }
  return last;
}

absl::Status EtcdClient::Stream(absl::string_view path, const nlohmann::json& request, milliseconds timeout,
                                const std::function<bool(const nlohmann::json&)>& on_message,
                                const std::atomic<bool>* cancel) const {
  const std::string body = request.dump();
  HeaderList headers(curl_slist_append(nullptr, "Content-Type: application/json"));
  const size_t n = options_.endpoints.size();
  const size_t first = preferred_.load(std::memory_order_relaxed);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status last;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (first + i) % n;
    const std::string url = Url(e, path);
    Easy c(curl_easy_init());
    Multi m(curl_multi_init());
    if (!c || !m) return absl::ResourceExhaustedError("EtcdClient: curl init failed (out of memory?)");
    StreamState state;
    state.on_message = &on_message;
    state.where = url;
    state.what = std::string(path);
    char detail[CURL_ERROR_SIZE] = {0};
    Configure(c.get(), options_, url, body, headers.get());
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, &OnStreamBytes);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &state);
    curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, detail);
    curl_multi_add_handle(m.get(), c.get());
    CURLcode rc = CURLE_OK;
    bool finished = false;
    bool timed_out = false;
    bool cancelled = false;
    while (!finished) {
      int running = 0;
      curl_multi_perform(m.get(), &running);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(m.get(), &queued)) {
        if (msg->msg == CURLMSG_DONE) {
          rc = msg->data.result;
          finished = true;
        }
      }
      if (finished) break;
      if (cancel != nullptr && cancel->load()) {
        cancelled = true;
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        timed_out = true;
        break;
      }
      // Wake at least every 50 ms to look at `cancel`; etcd's messages wake
      // it at once.
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - now).count();
      curl_multi_poll(m.get(), nullptr, 0, static_cast<int>(std::min<int64_t>(50, left + 1)), nullptr);
    }
    curl_multi_remove_handle(m.get(), c.get());
    if (cancelled)
      return absl::CancelledError(absl::StrCat("the ", path, " stream to etcd at ", url, " was cancelled"));
    if (timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat("the ", path, " stream to etcd at ", url, " reached its deadline of ", timeout.count(), " ms"));
    }
    if (state.stopped) {
      preferred_.store(e, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (!state.error.ok()) return state.error;
    if (rc != CURLE_OK) {
      last = TransportError(rc, detail, path, url, timeout);
      if (ConnectFailure(rc)) continue;
      return last;
    }
    // The server ended the stream; what it sent last may be an error body.
    if (!state.pending.empty()) {
      nlohmann::json tail = nlohmann::json::parse(state.pending, nullptr, false);
      absl::Status e_status = EtcdError(tail, path, url);
      if (!e_status.ok()) return e_status;
    }
    return absl::UnavailableError(absl::StrCat("etcd at ", url, " closed the ", path, " stream"));
  }
  return last;
}

}  // namespace lockstep
