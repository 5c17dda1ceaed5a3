// A rank for the launcher tests: reads its place with comm/rank_env.h, as a
// worker does, and writes it to DIR/rankenv<rank>:
//   "<rank> <world> <local_rank> <local_world> <master_addr> <master_port> <source>\n"
// Usage: launcher_rank_env_child DIR. Exit 1 (with the reason) when ReadRankEnv fails.
#include <fstream>
#include <iostream>

#include "comm/rank_env.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: launcher_rank_env_child DIR\n";
    return 2;
  }
  absl::StatusOr<tpserve::RankEnv> env = tpserve::ReadRankEnv();
  if (!env.ok()) {
    std::cerr << env.status() << "\n";
    return 1;
  }
  const std::string file = std::string(argv[1]) + "/rankenv" + std::to_string(env->rank);
  std::ofstream(file + ".tmp") << env->rank << " " << env->world_size << " " << env->local_rank << " "
                               << env->local_world_size << " " << env->master_addr << " " << env->master_port
                               << " " << env->source << "\n";
  std::rename((file + ".tmp").c_str(), file.c_str());
  return 0;
}
