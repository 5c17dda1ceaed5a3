// Every kernel has emulated coverage: the __global__ functions of cuda/*.cu
// are exactly the kernels tests/cuda_emu/kernel_tests.txt lists, and each
// listed test, run with the runner's launch log on, launches its kernel
// (cuda/emu/simt.cc, TPSERVE_EMU_LAUNCH_LOG) and passes. A kernel added
// without an emulated test fails here, naming the file to edit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tpserve {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string file, kernel, binary, test;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// kernel name -> file name, from the __global__ definitions of cuda/*.cu.
std::map<std::string, std::string> KernelsInSources() {
  std::map<std::string, std::string> kernels;
  const std::regex global(R"(__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\()");
  for (const auto& e : fs::directory_iterator(fs::path(TPSERVE_SOURCE_DIR) / "cuda")) {
    if (e.path().extension() != ".cu") continue;
    const std::string text = ReadFile(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it) {
      kernels[(*it)[1]] = e.path().filename().string();
    }
  }
  return kernels;
}

std::vector<Entry> ListedKernels() {
  std::vector<Entry> entries;
  std::istringstream in(ReadFile(fs::path(TPSERVE_SOURCE_DIR) / "tests/cuda_emu/kernel_tests.txt"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Entry e;
    fields >> e.file >> e.kernel >> e.binary >> e.test;
    entries.push_back(e);
  }
  return entries;
}

TEST(KernelCoverage, EveryKernelOfCudaIsListedWithAnEmulatedTest) {
  const std::map<std::string, std::string> kernels = KernelsInSources();
  ASSERT_GE(kernels.size(), 14u) << "the kernel scan of cuda/*.cu found too few __global__ functions";
  std::map<std::string, std::string> listed;
  for (const Entry& e : ListedKernels()) listed[e.kernel] = e.file;
  for (const auto& [kernel, file] : kernels) {
    EXPECT_TRUE(listed.count(kernel))
        << "kernel " << kernel << " (cuda/" << file << ") has no emulated test: add a line to "
        << "tests/cuda_emu/kernel_tests.txt naming a cuda-emu test that launches it";
    if (listed.count(kernel)) {
      EXPECT_EQ(listed[kernel], file) << kernel << ": wrong file in kernel_tests.txt";
    }
  }
  for (const auto& [kernel, file] : listed) {
    EXPECT_TRUE(kernels.count(kernel)) << "tests/cuda_emu/kernel_tests.txt lists " << kernel << " (" << file
                                       << "), which no longer is a kernel of cuda/: remove the line";
  }
}

TEST(KernelCoverage, EachListedTestLaunchesItsKernelAndPasses) {
  std::map<std::string, std::set<std::string>> tests_of;    // binary -> tests
  std::map<std::string, std::set<std::string>> kernels_of;  // binary -> kernels its tests must launch
  for (const Entry& e : ListedKernels()) {
    tests_of[e.binary].insert(e.test);
    kernels_of[e.binary].insert(e.kernel);
  }
  const fs::path dir = fs::path(TPSERVE_BINARY_DIR) / "tests/cuda_emu";
  for (const auto& [binary, tests] : tests_of) {
    std::string filter;
    for (const std::string& t : tests) filter += (filter.empty() ? "" : ":") + t;
    const fs::path log = fs::temp_directory_path() / ("tpserve_emu_launches_" + binary + "_" +
                                                      std::to_string(::getpid()));
    fs::remove(log);
    const std::string cmd = "TPSERVE_EMU_LAUNCH_LOG='" + log.string() + "' '" + (dir / binary).string() +
                            "' --gtest_filter='" + filter + "' > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::set<std::string> launched;
    std::istringstream in(ReadFile(log));
    for (std::string name; std::getline(in, name);) launched.insert(name.substr(0, name.find('<')));
    fs::remove(log);
    for (const std::string& kernel : kernels_of[binary]) {
      EXPECT_TRUE(launched.count(kernel)) << binary << " --gtest_filter=" << filter << " did not launch " << kernel
                                          << ": fix its line in tests/cuda_emu/kernel_tests.txt";
    }
  }
}

}  // namespace
}  // namespace tpserve
