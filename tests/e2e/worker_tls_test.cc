// End to end, real processes: a worker whose TLS handshake with the
// coordinator fails says why (worker_service/dial_diagnosis.h), instead of
// only "the coordinator did not answer": an untrusted or misnamed coordinator
// certificate, a missing or unsigned client certificate, plain text against
// a TLS worker port, TLS against a plain one. Then a worker with the right
// files joins, so the coordinator was not the problem.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

struct Case {
  std::string name;
  std::vector<std::string> flags;  // the worker's TLS flags (x.pem, x.key: files of the test's folder)
  std::vector<std::string> says;   // what its last line must hold
};

class WorkerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModel(dir_.path(), "qwen3");
    ASSERT_TRUE(MakeTestCertificates(dir_.path())) << "openssl could not make test certificates";
  }

  // A coordinator for one worker that it never spawns, with `extra` flags;
  // its worker address.
  std::string StartCoordinator(const std::string& log, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "1",
                                     "--listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0",
                                     "--worker-timeout", "120s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinators_.push_back(std::make_unique<Process>(argv, log));
    return AwaitLine(*coordinators_.back(), "tpserve-coordinator: workers connect to ", absl::Seconds(60));
  }

  // Starts every case's worker at once, then checks each one's exit and last line.
  void ExpectFailures(const std::string& address, const std::vector<Case>& cases) {
    std::vector<std::unique_ptr<Process>> workers;
    for (const Case& c : cases) {
      std::vector<std::string> flags = {"--connect-timeout", "3s"};
      for (const std::string& f : c.flags) flags.push_back(f.ends_with(".pem") || f.ends_with(".key") ? path(f) : f);
      workers.push_back(StartWorker(address, 0, 1, path(c.name + ".log"), flags));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(workers[i]->Wait(absl::Seconds(30)), 1) << cases[i].name << ":\n" << workers[i]->Log();
      const std::string log = workers[i]->Log();
      EXPECT_EQ(log.find("did not answer"), std::string::npos) << cases[i].name << ":\n" << log;
      for (const std::string& s : cases[i].says) {
        EXPECT_NE(log.find(s), std::string::npos) << cases[i].name << ": no \"" << s << "\" in:\n" << log;
      }
    }
  }

  std::string path(const std::string& file) const { return dir_.path() + "/" + file; }

  TempDir dir_;
  std::string model_;
  std::vector<std::unique_ptr<Process>> coordinators_;
};

TEST_F(WorkerTlsTest, AFailedHandshakeIsNamedWithItsCause) {
  const std::string tls = StartCoordinator(path("coordinator.log"),
                                           {"--worker-tls-cert", path("server.pem"), "--worker-tls-key",
                                            path("server.key"), "--worker-tls-ca", path("ca.pem")});
  ASSERT_FALSE(tls.empty());
  const std::string handshake = "the TLS handshake with the coordinator at " + tls + " failed: ";
  ExpectFailures(
      tls,
      {{"untrusted", {"--tls-ca", "stranger.pem", "--tls-cert", "worker.pem", "--tls-key", "worker.key"},
        {handshake, "does not verify against --tls-ca", "stranger.pem"}},
       {"misnamed",
        {"--tls-ca", "ca.pem", "--tls-cert", "worker.pem", "--tls-key", "worker.key", "--tls-server-name",
         "head.example"},
        {handshake, "certificate is for IP:127.0.0.1, DNS:localhost, not head.example", "--tls-server-name"}},
       {"no_client_cert", {"--tls-ca", "ca.pem"},
        {handshake, "refused this worker's client certificate", "/CN=test cluster CA", "give --tls-cert and --tls-key"}},
       {"unsigned_client_cert", {"--tls-ca", "ca.pem", "--tls-cert", "stranger.pem", "--tls-key", "stranger.key"},
        {handshake, "refused this worker's client certificate", "stranger.pem is not signed by it"}},
       {"plain_text", {}, {"expects a TLS handshake on its worker port", "dialled in plain text", "--tls-ca"}}});

  // The right files: the worker joins and the coordinator serves.
  auto good = StartWorker(tls, 0, 1, path("good.log"),
                          {"--tls-ca", path("ca.pem"), "--tls-cert", path("worker.pem"), "--tls-key",
                           path("worker.key")});
  AwaitLine(*coordinators_.back(), "tpserve-coordinator: ready", absl::Seconds(60));  // fails the test if not
  EXPECT_EQ(good->Log().find("TLS handshake"), std::string::npos) << good->Log();
}

TEST_F(WorkerTlsTest, TlsAgainstAPlainTextPortIsNamed) {
  const std::string plain = StartCoordinator(path("plain.log"), {});
  ASSERT_FALSE(plain.empty());
  ExpectFailures(plain, {{"tls_to_plain", {"--tls-ca", "ca.pem"},
                          {"the TLS handshake with the coordinator at " + plain + " failed: ",
                           "its worker port does not speak TLS"}}});
}

}  // namespace
}  // namespace tpserve::e2e
