// End to end, real processes on two "hosts" (issue 30 item 4): two network
// namespaces joined by a veth pair, each with its own address, its own host
// name (a UTS namespace per process tree) and only its own loopback. The
// coordinator runs in the first (--tp 2, --worker-listen on its veth address);
// one tpserve-launch --nnodes 2 --node-rank R --nproc-per-node 1 per namespace
// starts a worker that dials it, so the steps and the ranks' gloo traffic go
// across the veth. The worker port is off loopback, so it takes the cluster
// secret (--cluster-secret-file on both sides); one test adds TLS on it. The public API listens on a
// unix socket (a path, which no network namespace hides) so the test reaches
// it from outside both.
//
// Needs root, iproute2's `ip` and util-linux's `unshare`; skipped, saying why,
// where a namespace cannot be made. Names are unique per run and the
// namespaces are deleted in TearDown.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

// The first of `paths` that can be run; "" when none can.
std::string FindProgram(std::initializer_list<const char*> paths) {
  for (const char* path : paths) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

std::string FindIp() { return FindProgram({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}); }

// Two network namespaces, "hosts" 0 and 1, joined by a veth pair:
// host h has address 10.77.0.(h+1)/24 on its end, and lo up.
class TwoHosts {
 public:
  // "" when both are up, else why not (the test skips with it).
  std::string Make(const std::string& log) {
    if (geteuid() != 0) return "network namespaces need root";
    ip_ = FindIp();
    if (ip_.empty()) return "iproute2's ip is not installed";
    if (RunCommand({"unshare", "--uts", "--", "true"}, log, absl::Seconds(30)) != 0) {
      return absl::StrCat("`unshare --uts` failed (util-linux missing, or no UTS namespaces; see ", log, ")");
    }
    const std::string tag = absl::StrCat(getpid(), "x", counter_++);
    for (int h = 0; h < 2; ++h) {
      names_[h] = absl::StrCat("tpserve-", tag, "-h", h);
      if (Ip({"netns", "add", names_[h]}, log) != 0) {
        names_[h].clear();
        return absl::StrCat("`ip netns add` failed (see ", log, ")");
      }
      // `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over /etc/hosts:
      // each host knows both by name, as a cluster's DNS or hosts file would.
      std::error_code ec;
      std::filesystem::create_directories("/etc/netns/" + names_[h], ec);
      std::ofstream("/etc/netns/" + names_[h] + "/hosts")
          << "127.0.0.1 localhost\n" << Address(0) << " " << Name(0) << "\n" << Address(1) << " " << Name(1) << "\n";
    }
    const std::string veth[2] = {absl::StrCat("tpv", tag, "a"), absl::StrCat("tpv", tag, "b")};
    if (Ip({"link", "add", veth[0], "netns", names_[0], "type", "veth", "peer", "name", veth[1], "netns", names_[1]},
           log) != 0) {
      return absl::StrCat("`ip link add ... type veth` failed (see ", log, ")");
    }
    for (int h = 0; h < 2; ++h) {
      if (Ip({"-n", names_[h], "addr", "add", absl::StrCat(Address(h), "/24"), "dev", veth[h]}, log) != 0 ||
          Ip({"-n", names_[h], "link", "set", veth[h], "up"}, log) != 0 ||
          Ip({"-n", names_[h], "link", "set", "lo", "up"}, log) != 0) {
        return absl::StrCat("could not give host ", h, " its address (see ", log, ")");
      }
    }
    return "";
  }

  // Deletes the namespaces (the veth pair goes with them).
  void Remove(const std::string& log) {
    for (std::string& name : names_) {
      if (name.empty()) continue;
      EXPECT_EQ(Ip({"netns", "del", name}, log), 0) << "could not delete namespace " << name << ", see " << log;
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + name, ec);
      name.clear();
    }
  }

  // The processes in host h's network namespace, as `ip netns pids` finds
  // them: those whose /proc/PID/ns/net is the namespace's file.
  std::vector<pid_t> Pids(int host) const {
    struct stat ns {};
    std::vector<pid_t> pids;
    if (stat(("/run/netns/" + names_[host]).c_str(), &ns) != 0) return pids;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      int pid = 0;
      struct stat net {};
      if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
      if (stat((entry.path() / "ns" / "net").c_str(), &net) != 0) continue;
      if (net.st_dev == ns.st_dev && net.st_ino == ns.st_ino) pids.push_back(pid);
    }
    return pids;
  }

  // Host h dies: SIGKILL to every process in its namespace, until none is
  // left (a zombie still counts until its parent reaps it, so reaped ones
  // only); returns those killed.
  std::vector<pid_t> KillEveryProcess(int host) const {
    std::vector<pid_t> killed;
    for (int round = 0; round < 50; ++round) {
      const std::vector<pid_t> pids = Pids(host);
      if (pids.empty()) break;
      for (pid_t pid : pids) {
        if (kill(pid, SIGKILL) == 0 && std::find(killed.begin(), killed.end(), pid) == killed.end()) {
          killed.push_back(pid);
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return killed;
  }

  static std::string Address(int host) { return absl::StrCat("10.77.0.", host + 1); }
  static std::string Subnet() { return "10.77.0.0/24"; }
  const std::string& Namespace(int host) const { return names_[host]; }
  // Host h's name, in both hosts' /etc/hosts (and nowhere else).
  static std::string Name(int host) { return absl::StrCat("tpserve-host", host); }

  // argv run inside host h's network namespace, under host h's name (a UTS
  // namespace of its own; the same process, exec'd through). The coordinator
  // tells workers on its host by name: these are not, so steps go over gRPC
  // across the veth, not through shared memory.
  std::vector<std::string> In(int host, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip_, "netns", "exec", names_[host], "unshare", "--uts", "--", "sh", "-c",
                               "hostname \"$0\" && exec \"$@\"", Name(host)});
    return argv;
  }

 private:
  int Ip(std::vector<std::string> args, const std::string& log) const {
    args.insert(args.begin(), ip_);
    return RunCommand(args, log, absl::Seconds(30));
  }

  static inline int counter_ = 0;
  std::string ip_;
  std::string names_[2];
};

class TwoHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = hosts_.Make(dir_.path() + "/ip.log");
    if (!why.empty()) GTEST_SKIP() << "two-host test skipped: " << why;
    model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "30", "--max-pos", "4096"});
    // A worker port off loopback admits only workers that prove the secret.
    secret_ = dir_.path() + "/cluster-secret";
    std::ofstream(secret_) << "two-hosts-cluster-secret-0123456789\n";
    chmod(secret_.c_str(), 0600);
  }
  void TearDown() override { hosts_.Remove(dir_.path() + "/ip.log"); }

  // The coordinator on host 0, its API on a unix socket, workers dialing its
  // veth address; returns the address the workers are to dial ("" on failure).
  // `extra`: more of the coordinator's flags (TLS on the worker port).
  std::string StartCoordinatorOnHost0(int tp = 2, const std::vector<std::string>& extra = {}) {
    api_ = "unix:" + dir_.path() + "/api.sock";
    std::vector<std::string> argv = {BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp",
                                     std::to_string(tp), "--listen", api_, "--worker-listen",
                                     TwoHosts::Address(0) + ":0", "--worker-timeout", "60s", "--drain-timeout", "1s",
                                     "--cluster-secret-file", secret_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(hosts_.In(0, argv), dir_.path() + "/coordinator.log");
    return AwaitLine(*coordinator_, "tpserve-coordinator: workers connect to ");
  }

  // tpserve-launch --nnodes 2 --node-rank `node` on `host`, one worker
  // dialing `coordinator` (an address or host 0's name). No --comm-host: each
  // rank's gloo binds its host's address toward the coordinator (its veth
  // end), which the other rank can reach.
  // `extra`: more of the workers' flags (TLS).
  std::unique_ptr<Process> Launch(int host, const std::string& coordinator, int node, int nproc = 1,
                                  const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinaryPath("launcher/tpserve-launch"), "--nnodes", "2", "--node-rank",
                                     std::to_string(node), "--nproc-per-node", std::to_string(nproc), "--master-addr",
                                     TwoHosts::Address(0), "--", BinaryPath("tools/worker/tpserve-worker"),
                                     "--coordinator", coordinator, "--cluster-secret-file", secret_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(hosts_.In(host, argv),
                                     absl::StrCat(dir_.path(), "/launch", host, "-", launches_++, ".log"));
  }

  std::unique_ptr<v1::Generation::Stub> Stub() const {
    return v1::Generation::NewStub(grpc::CreateChannel(api_, grpc::InsecureChannelCredentials()));
  }

  static v1::GenerateRequest Request(int max_tokens) {
    v1::GenerateRequest r = Greedy(max_tokens);
    r.set_prompt("two hosts, one model");
    return r;
  }

  TempDir dir_;
  TwoHosts hosts_;
  std::string model_, api_, secret_;
  std::unique_ptr<Process> coordinator_;
  int launches_ = 0;
};

TEST_F(TwoHostsTest, GreedyTokensAcrossTheVethEqualOneHost) {  // tp 4: two ranks on each host
  GenerateOutcome reference;
  {
    Coordinator one = StartCoordinator(model_, 4, dir_.path() + "/one-host.log");
    ASSERT_TRUE(one.stub);
    reference = Generate(*one.stub, Request(48));
    ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
    ASSERT_EQ(reference.tokens.size(), 48u);
  }
  const std::string workers = StartCoordinatorOnHost0(4);
  ASSERT_EQ(workers.rfind(TwoHosts::Address(0) + ":", 0), 0u) << workers;
  // tp 4, two ranks per host (--nproc-per-node 2 under --nnodes 2), ranks 0-1
  // on host 1. Each rank's gloo binds its veth address (the default
  // --comm-host). Not shown here: that the old loopback default fails. By hand
  // (tp 2 and tp 4, host 1's ranks on 127.0.0.1) gloo still met, as in each of
  // those runs the side bound to loopback was the one that dialled.
  std::unique_ptr<Process> host0 = Launch(0, workers, 1, 2), host1 = Launch(1, workers, 0, 2);
  AwaitLine(*coordinator_, "tpserve-coordinator: ready");
  EXPECT_EQ(AwaitLine(*coordinator_, "tpserve-coordinator: worker transport: "),
            "gRPC streams (shared memory unavailable: worker rank 0 runs on tpserve-host1, not on this host "
            "(tpserve-host0))")
      << "the steps cross the veth";
  auto stub = Stub();
  const GenerateOutcome across = Generate(*stub, Request(48));
  ASSERT_TRUE(across.status.ok()) << across.status.error_message();
  EXPECT_EQ(across.tokens, reference.tokens) << "tp 4 across two hosts equals tp 4 on one, token for token";
}

// The workers dial host 0 by its name (resolved through each namespace's own
// /etc/hosts); the name is known only inside the namespaces, so it is their
// resolver, not the test's, that finds it.
TEST_F(TwoHostsTest, WorkersDialTheCoordinatorByHostName) {
  const std::string workers = StartCoordinatorOnHost0();
  const size_t colon = workers.rfind(':');
  ASSERT_NE(colon, std::string::npos) << workers;
  const std::string by_name = TwoHosts::Name(0) + workers.substr(colon);
  std::unique_ptr<Process> host0 = Launch(0, by_name, 0), host1 = Launch(1, by_name, 1);
  AwaitLine(*coordinator_, "tpserve-coordinator: ready");
  auto stub = Stub();
  const GenerateOutcome out = Generate(*stub, Request(16));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 16u);
}

// The worker port across the veth under TLS and the cluster secret at once:
// the coordinator's certificate names host 0 (its address and its name), the
// workers dial it by name and present a client certificate of the cluster's
// CA. A worker on host 1 that speaks plain text, or that proves another
// secret over TLS, is turned away saying why; then one launcher per host
// (TLS, the secret) forms the group and it serves.
TEST_F(TwoHostsTest, TlsAndTheClusterSecretGuardTheWorkerPortAcrossHosts) {
  ASSERT_TRUE(MakeTestCertificates(dir_.path(), TwoHosts::Name(0),
                                   absl::StrCat("IP:", TwoHosts::Address(0), ",DNS:", TwoHosts::Name(0))))
      << "openssl could not make test certificates";
  const auto file = [this](const std::string& name) { return dir_.path() + "/" + name; };
  const std::string workers =
      StartCoordinatorOnHost0(2, {"--worker-tls-cert", file("server.pem"), "--worker-tls-key", file("server.key"),
                                  "--worker-tls-ca", file("ca.pem")});
  const size_t colon = workers.rfind(':');
  ASSERT_NE(colon, std::string::npos) << workers;
  const std::string by_name = TwoHosts::Name(0) + workers.substr(colon);
  const std::vector<std::string> tls = {"--tls-ca", file("ca.pem"), "--tls-cert", file("worker.pem"), "--tls-key",
                                        file("worker.key")};
  const std::string other_secret = file("other-secret");
  std::ofstream(other_secret) << "another-cluster-secret-0123456789\n";
  chmod(other_secret.c_str(), 0600);
  auto lone_worker = [&](const std::string& name, std::vector<std::string> flags) {
    std::vector<std::string> argv = {BinaryPath("tools/worker/tpserve-worker"), "--coordinator", by_name, "--rank", "1",
                                     "--world-size", "2", "--local-rank", "0", "--connect-timeout", "10s"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<Process>(hosts_.In(1, argv), file(name + ".log"));
  };
  std::vector<std::string> wrong_secret = tls;
  wrong_secret.insert(wrong_secret.end(), {"--cluster-secret-file", other_secret});
  std::unique_ptr<Process> plain = lone_worker("plain", {"--cluster-secret-file", secret_});
  std::unique_ptr<Process> forger = lone_worker("forger", wrong_secret);
  EXPECT_EQ(plain->Wait(absl::Seconds(60)), 1) << plain->Log();
  EXPECT_NE(plain->Log().find("expects a TLS handshake on its worker port"), std::string::npos) << plain->Log();
  EXPECT_EQ(forger->Wait(absl::Seconds(60)), 1) << forger->Log();
  EXPECT_NE(forger->Log().find("proved a different cluster secret"), std::string::npos) << forger->Log();

  std::unique_ptr<Process> host0 = Launch(0, by_name, 0, 1, tls), host1 = Launch(1, by_name, 1, 1, tls);
  AwaitLine(*coordinator_, "tpserve-coordinator: ready");
  auto stub = Stub();
  const GenerateOutcome out = Generate(*stub, Request(16));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 16u);
  EXPECT_NE(coordinator_->Log().find("refused a worker"), std::string::npos) << coordinator_->Log();
}

// mpirun with a host list, one slot on each host, started on host 0: Open
// MPI starts its daemon on host 1 through its ssh agent, here
// netns_ssh_agent.sh, which enters host 1's namespace as ssh would reach
// host 1; each rank reads its rank from Open MPI's environment and dials the
// coordinator by name. Rank 0 runs on host 0, rank 1 on host 1, and tp 2
// across them gives one host's greedy tokens.
TEST_F(TwoHostsTest, MpirunWithAHostListPlacesOneRankOnEachHost) {
  const std::string mpirun = FindProgram({"/usr/bin/mpirun", "/usr/local/bin/mpirun"});
  if (mpirun.empty()) GTEST_SKIP() << "mpirun across hosts skipped: no mpirun (Debian's openmpi-bin)";
  GenerateOutcome reference;
  {
    Coordinator one = StartCoordinator(model_, 2, dir_.path() + "/one-host.log");
    ASSERT_TRUE(one.stub);
    reference = Generate(*one.stub, Request(24));
    ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  }
  const std::string workers = StartCoordinatorOnHost0();
  const size_t colon = workers.rfind(':');
  ASSERT_NE(colon, std::string::npos) << workers;
  const std::string agent_log = dir_.path() + "/agent.log";
  Process mpi(hosts_.In(0, {"env",
                            absl::StrCat("TPSERVE_NETNS_HOSTS=", TwoHosts::Name(0), "=", hosts_.Namespace(0), " ",
                                         TwoHosts::Name(1), "=", hosts_.Namespace(1)),
                            "TPSERVE_NETNS_AGENT_LOG=" + agent_log, mpirun, "--allow-run-as-root", "-np", "2",
                            "--host", absl::StrCat(TwoHosts::Name(0), ":1,", TwoHosts::Name(1), ":1"), "--mca",
                            "plm_rsh_agent", TPSERVE_NETNS_SSH_AGENT, "--mca", "oob_tcp_if_include",
                            TwoHosts::Subnet(), "--bind-to", "none", BinaryPath("tools/worker/tpserve-worker"),
                            "--coordinator", TwoHosts::Name(0) + workers.substr(colon), "--cluster-secret-file",
                            secret_}),
              dir_.path() + "/mpirun.log");
  AwaitLine(*coordinator_, "tpserve-coordinator: ready");
  const std::string log = coordinator_->Log();
  EXPECT_NE(log.find("worker connected: rank 0: " + TwoHosts::Name(0) + " "), std::string::npos) << log;
  EXPECT_NE(log.find("worker connected: rank 1: " + TwoHosts::Name(1) + " "), std::string::npos) << log;
  std::ifstream agent(agent_log);
  const std::string calls((std::istreambuf_iterator<char>(agent)), std::istreambuf_iterator<char>());
  EXPECT_NE(calls.find(TwoHosts::Name(1) + " "), std::string::npos) << "mpirun reached host 1 through the agent: "
                                                                     << calls;
  EXPECT_EQ(calls.find(TwoHosts::Name(0) + " "), std::string::npos) << "host 0 is mpirun's own: " << calls;
  auto stub = Stub();
  const GenerateOutcome across = Generate(*stub, Request(24));
  ASSERT_TRUE(across.status.ok()) << across.status.error_message() << "\n" << mpi.Log();
  EXPECT_EQ(across.tokens, reference.tokens) << "tp 2 by mpirun across two hosts equals tp 2 on one";
}

// Host 1 dies mid-stream: every process in its namespace (its launcher and
// its worker) is killed at once while a request streams. The stream ends
// UNAVAILABLE naming rank 1 and host 1 within seconds; host 0's rank, the
// group's survivor, is sent away (its launcher exits); new requests are told
// to start a new group; once both hosts' launchers are back the coordinator
// serves again, the same greedy tokens as before (README, "A host that dies
// mid-stream").
TEST_F(TwoHostsTest, AHostThatDiesMidStreamFailsTheStreamNamingItAndTheGroupRecoversWhenItReturns) {
  const std::string workers = StartCoordinatorOnHost0();
  ASSERT_FALSE(workers.empty());
  std::unique_ptr<Process> host0 = Launch(0, workers, 0), host1 = Launch(1, workers, 1);
  AwaitLine(*coordinator_, "tpserve-coordinator: ready");
  auto stub = Stub();
  const GenerateOutcome before = Generate(*stub, Request(16));
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(90)));
  auto stream = stub->Generate(&context, Request(4000));
  v1::GenerateResponse response;
  ASSERT_TRUE(stream->Read(&response)) << "the stream starts";
  const size_t mark = coordinator_->Log().size();
  const std::vector<pid_t> killed_pids = hosts_.KillEveryProcess(1);
  const absl::Time killed = absl::Now();
  EXPECT_NE(std::find(killed_pids.begin(), killed_pids.end(), host1->pid()), killed_pids.end())
      << "host 1's launcher was among its processes";
  EXPECT_GE(killed_pids.size(), 2u) << "its launcher and its worker";
  EXPECT_TRUE(hosts_.Pids(1).empty()) << "nothing of host 1 is left";
  {
    WaitingFor waiting("the stream to end after host 1's processes were killed");
    while (stream->Read(&response)) {
    }
  }
  const grpc::Status lost = stream->Finish();
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE) << lost.error_message();
  EXPECT_NE(lost.error_message().find("worker rank 1 (" + TwoHosts::Name(1) + ", pid "), std::string::npos)
      << lost.error_message();
  // Well before the 90 s deadline: a lost host is noticed, not waited out.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(30));
  EXPECT_NE(host0->Wait(absl::Seconds(30)), -1) << "host 0's rank, the survivor, is sent away and its launcher exits";

  const GenerateOutcome waiting = Generate(*stub, Request(4), absl::Seconds(20));
  EXPECT_EQ(waiting.status.error_code(), grpc::StatusCode::UNAVAILABLE) << waiting.status.error_message();
  EXPECT_NE(waiting.status.error_message().find("start a new group of 2 workers"), std::string::npos)
      << waiting.status.error_message();

  host0 = Launch(0, workers, 0);
  host1 = Launch(1, workers, 1);
  AwaitLine(*coordinator_, "tpserve-coordinator: ready (recovered", absl::Seconds(90), mark);
  const GenerateOutcome after = Generate(*stub, Request(16));
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, before.tokens) << "the new group across both hosts gives the old one's tokens";
}

}  // namespace
}  // namespace tpserve::e2e
